package scripts_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/recordlayout"
)

// Helpers for per-script table tests: seed raw keys, run a script with EVALSHA
// exactly as a non-Go caller would, and compare the raw keys afterwards.

// rawKey is everything a test checks about one key.
type rawKey struct {
	Type string            // "none", "string", "hash", ...
	Str  string            // a string's value
	Hash map[string]string // a hash's fields
	PTTL int64             // -2 missing, -1 no expiry, else ms left
}

// raw reads key's type, value and PTTL.
func raw(t *testing.T, c rueidis.Client, key string) rawKey {
	t.Helper()
	ctx := context.Background()
	typ, err := c.Do(ctx, c.B().Type().Key(key).Build()).ToString()
	if err != nil {
		t.Fatalf("TYPE %q: %v", key, err)
	}
	k := rawKey{Type: typ}
	switch typ {
	case "string":
		k.Str, err = c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
	case "hash":
		k.Hash, err = c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	}
	if rueidis.IsRedisNil(err) {
		// The key expired between TYPE and GET (a script under test gave
		// it a lease of a few ms): read it again, now gone.
		return raw(t, c, key)
	}
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	if k.PTTL, err = c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64(); err != nil {
		t.Fatalf("PTTL %q: %v", key, err)
	}
	return k
}

// rawRecord is raw, with a layout-1 record string decoded into Hash (its
// nine fields by name, fieldsMap); Hash stays nil for a string that is
// not a record.
func rawRecord(t *testing.T, c rueidis.Client, key string) rawKey {
	t.Helper()
	k := raw(t, c, key)
	if k.Type == "string" {
		if f, err := recordlayout.Decode([]byte(k.Str)); err == nil {
			k.Hash = fieldsMap(f)
		}
	}
	return k
}

// approxTTL compares PTTLs within a second and keeps their kinds apart
// (missing, persistent, expiring).
var approxTTL = cmp.FilterPath(func(p cmp.Path) bool {
	return p.Last().String() == ".PTTL"
}, cmp.Comparer(func(a, b int64) bool {
	if a < 0 || b < 0 {
		return a == b
	}
	d := a - b
	return d > -1000 && d < 1000
}))

// do runs a raw command, failing the test on error.
func do(t *testing.T, c rueidis.Client, args ...string) {
	t.Helper()
	if err := c.Do(context.Background(), c.B().Arbitrary(args...).Build()).Error(); err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
}

// loadScripts SCRIPT LOADs every embedded script on every node of c and checks
// the SHA1 each node answers equals the registry's.
func loadScripts(t *testing.T, c rueidis.Client) {
	t.Helper()
	ctx := context.Background()
	for _, s := range redisonce.All() {
		for addr, n := range c.Nodes() {
			sha, err := n.Do(ctx, n.B().ScriptLoad().Script(s.Source).Build()).ToString()
			if err != nil {
				t.Fatalf("SCRIPT LOAD %s on %s: %v", s.Name, addr, err)
			}
			if sha != s.SHA1 {
				t.Fatalf("SCRIPT LOAD %s: server says %s, SHA1SUMS says %s", s.Name, sha, s.SHA1)
			}
		}
	}
}

// evalsha runs script name on key with args through EVALSHA (EVALSHA_RO for a
// read-only script) and returns the reply rendered by reply.
func evalsha(t *testing.T, c rueidis.Client, name, key string, args ...string) (string, error) {
	t.Helper()
	s, ok := redisonce.Get(name)
	if !ok {
		t.Fatalf("no script %q", name)
	}
	cmd := c.B().Evalsha().Sha1(s.SHA1).Numkeys(1).Key(key).Arg(args...).Build()
	if s.ReadOnly {
		cmd = c.B().EvalshaRo().Sha1(s.SHA1).Numkeys(1).Key(key).Arg(args...).Build()
	}
	m, err := c.Do(context.Background(), cmd).ToMessage()
	if err != nil {
		return "", err
	}
	return reply(m), nil
}

// reply renders a reply compactly: integers as digits, strings quoted, nil as
// "nil", arrays as [a b c].
func reply(m rueidis.RedisMessage) string {
	if m.IsNil() {
		return "nil"
	}
	if n, err := m.AsInt64(); err == nil && m.IsInt64() {
		return fmt.Sprint(n)
	}
	if arr, err := m.ToArray(); err == nil {
		parts := make([]string, len(arr))
		for i, e := range arr {
			parts[i] = reply(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	if s, err := m.ToString(); err == nil {
		return fmt.Sprintf("%q", s)
	}
	return m.String()
}

// errCode returns the first word of a Redis error reply, or "" for nil.
func errCode(err error) string {
	if err == nil {
		return ""
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		code, _, _ := strings.Cut(re.Error(), " ")
		return code
	}
	return err.Error()
}

// keyFor returns a key unique to the test, under prefix.
func keyFor(t *testing.T, prefix string) string {
	return prefix + t.Name() + ":" + fmt.Sprint(time.Now().UnixNano())
}

// fieldsMap is f as a map of its nine field names (status, payload,
// created_ms, updated_ms, expires_ms, lease_ms, fence, fp, token) to their
// decimal strings, and watch "1" when marked: the tests' view of a record,
// which diffs field by field.
func fieldsMap(f recordlayout.Fields) map[string]string {
	m := map[string]string{
		"status": f.Status, "payload": f.Payload,
		"created_ms": strconv.FormatInt(f.CreatedMS, 10), "updated_ms": strconv.FormatInt(f.UpdatedMS, 10),
		"expires_ms": strconv.FormatInt(f.ExpiresMS, 10), "lease_ms": strconv.FormatInt(f.LeaseMS, 10),
		"fence": f.Fence, "fp": f.FP, "token": f.Token,
	}
	if f.Watched {
		m["watch"] = "1"
	}
	return m
}

// fieldsFromMap is the inverse of fieldsMap: an error when a time is not a
// decimal integer.
func fieldsFromMap(m map[string]string) (recordlayout.Fields, error) {
	f := recordlayout.Fields{Status: m["status"], Payload: m["payload"], Fence: m["fence"], FP: m["fp"], Token: m["token"], Watched: m["watch"] != ""}
	for _, t := range []struct {
		name string
		p    *int64
	}{{"created_ms", &f.CreatedMS}, {"updated_ms", &f.UpdatedMS}, {"expires_ms", &f.ExpiresMS}, {"lease_ms", &f.LeaseMS}} {
		n, err := strconv.ParseInt(m[t.name], 10, 64)
		if err != nil {
			return f, fmt.Errorf("%w: %s %q", recordlayout.ErrNotRecord, t.name, m[t.name])
		}
		*t.p = n
	}
	return f, nil
}
