package scripts_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/recordlayout"
)

// Per-script table tests for acquire.lua, get.lua, update.lua, renew.lua and
// delete.lua: seed a raw record, run the script with EVALSHA as a non-Go
// caller would, and check the reply and the raw key afterwards. Every error
// case checks the key did not change at all (bytes and absolute expiry,
// PEXPIRETIME).
//
// Expected values may be "{now}" or "{now+N}" / "{now-N}": the script's TIME in
// ms (plus N), which must lie between the server's TIME read just before and
// just after the call.

// recRaw is everything a records test checks about one key.
type recRaw struct {
	Type string
	Str  string
	// Hash is the record's fields: a record string's decoded (Layout 1), or
	// a hash's fields; nil for a string that is not a record.
	Hash     map[string]string
	Layout   int
	ExpireAt int64 // PEXPIRETIME: -2 missing, -1 no expiry, else ms since the epoch
}

func recReadRaw(t *testing.T, c rueidis.Client, key string) recRaw {
	t.Helper()
	ctx := context.Background()
	typ, err := c.Do(ctx, c.B().Type().Key(key).Build()).ToString()
	if err != nil {
		t.Fatalf("TYPE %q: %v", key, err)
	}
	r := recRaw{Type: typ}
	switch typ {
	case "string":
		r.Str, err = c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
		if f, derr := recordlayout.Decode([]byte(r.Str)); err == nil && derr == nil {
			r.Hash, r.Layout = fieldsMap(f), 1
		}
	case "hash":
		r.Hash, err = c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	}
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	if r.ExpireAt, err = c.Do(ctx, c.B().Pexpiretime().Key(key).Build()).AsInt64(); err != nil {
		t.Fatalf("PEXPIRETIME %q: %v", key, err)
	}
	return r
}

// recServerMS reads the server's TIME in ms (on the node holding key).
func recServerMS(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	// TIME has no key; on a cluster client route it to key's node.
	node := c
	if c.Mode() == rueidis.ClientModeCluster {
		for _, n := range c.Nodes() {
			node = n // the test clusters here have one node
			break
		}
	}
	arr, err := node.Do(context.Background(), node.B().Time().Build()).AsStrSlice()
	if err != nil || len(arr) != 2 {
		t.Fatalf("TIME: %v %v", arr, err)
	}
	sec, _ := strconv.ParseInt(arr[0], 10, 64)
	usec, _ := strconv.ParseInt(arr[1], 10, 64)
	return sec*1000 + usec/1000
}

// recMatch reports whether got matches want, a literal or a {now±N} placeholder
// for a script run between t0 and t1 (server ms).
func recMatch(want, got string, t0, t1 int64) bool {
	rest, ok := strings.CutPrefix(want, "{now")
	if !ok {
		return want == got
	}
	rest = strings.TrimSuffix(rest, "}")
	var off int64
	if rest != "" {
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return false
		}
		off = n
	}
	g, err := strconv.ParseInt(got, 10, 64)
	return err == nil && strconv.FormatInt(g, 10) == got && g >= t0+off && g <= t1+off
}

// recReply renders a reply as a flat list: integers as digits, strings as they
// are, nil as "(nil)".
func recReply(m rueidis.RedisMessage) []string {
	if m.IsNil() {
		return []string{"(nil)"}
	}
	if arr, err := m.ToArray(); err == nil {
		out := make([]string, 0, len(arr))
		for _, e := range arr {
			out = append(out, recReply(e)...)
		}
		return out
	}
	if m.IsInt64() {
		n, _ := m.AsInt64()
		return []string{strconv.FormatInt(n, 10)}
	}
	s, err := m.ToString()
	if err != nil {
		return []string{"<" + m.String() + ">"}
	}
	return []string{s}
}

// recFields is the reply order of a record.
var recFields = []string{"status", "payload", "created_ms", "updated_ms", "expires_ms", "lease_ms", "fence", "fp", "token"}

// recHash is a complete stored record: a pending one owned by "tokA", created
// at 1000 and updated at 2000 (ms since the epoch), no expiry, no lease, fence
// 1, no fingerprint, changed by kv (field, value, ...).
func recHash(kv ...string) map[string]string {
	h := map[string]string{
		"status": "pending", "payload": "", "created_ms": "1000", "updated_ms": "2000",
		"expires_ms": "0", "lease_ms": "0", "fence": "1", "fp": "", "token": "tokA",
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return h
}

// recSeed writes the record h: a "RECORD" pseudo-command that recRunCase
// renders as the SET of the record string; and PEXPIREAT expires_ms when it
// is not "0".
func recSeed(h map[string]string) [][]string {
	cmd := []string{"RECORD", "$K"}
	for _, f := range slices.Sorted(maps.Keys(h)) {
		cmd = append(cmd, f, h[f])
	}
	out := [][]string{cmd}
	if e := h["expires_ms"]; e != "" && e != "0" {
		out = append(out, []string{"PEXPIREAT", "$K", e})
	}
	return out
}

// recSeedHash writes h as a hash: HSET of its fields in sorted order, and
// PEXPIREAT expires_ms when it is not "0" (a key of the wrong type, which
// the scripts answer CORRUPT for).
func recSeedHash(h map[string]string) [][]string {
	cmd := []string{"HSET", "$K"}
	for _, f := range slices.Sorted(maps.Keys(h)) {
		cmd = append(cmd, f, h[f])
	}
	out := [][]string{cmd}
	if e := h["expires_ms"]; e != "" && e != "0" {
		out = append(out, []string{"PEXPIREAT", "$K", e})
	}
	return out
}

// recAsReply is h in reply order, with token shown as given.
func recAsReply(h map[string]string, token string) []string {
	out := make([]string, len(recFields))
	for i, f := range recFields {
		out[i] = h[f]
	}
	out[8] = token
	return out
}

// recCase seeds one key, runs a script on it and checks the reply (or error
// code) and the key afterwards.
type recCase struct {
	name  string
	seed  [][]string // raw commands; "$K" stands for the key
	args  []string
	want  []string          // the reply, flattened (see recReply); when errc is ""
	errc  string            // expected error code; the key must then be unchanged
	after map[string]string // the hash afterwards; nil: the key is absent
	// expireAt is the key's expected PEXPIRETIME: "" means -1 for a hash and
	// -2 for an absent key; else a literal or a {now±N} placeholder.
	expireAt string
}

func runRecCases(t *testing.T, script string, cases []recCase) {
	t.Helper()
	for _, env := range []struct {
		name string
		url  func(*testing.T) string
	}{{"standalone", standaloneURL}, {"cluster", clusterURL}} {
		t.Run(env.name, func(t *testing.T) {
			c := newClient(t, env.url(t))
			loadScripts(t, c)
			s, ok := redisonce.Get(script)
			if !ok {
				t.Fatalf("no script %q", script)
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) { recRunCase(t, c, s, tc) })
			}
		})
	}
}

// recSeedArgs renders a seed command: a RECORD pseudo-command as the SET of
// the record string; others as they are.
func recSeedArgs(t *testing.T, args []string) []string {
	t.Helper()
	if args[0] != "RECORD" {
		return args
	}
	h := map[string]string{}
	for i := 2; i+1 < len(args); i += 2 {
		h[args[i]] = args[i+1]
	}
	f, err := fieldsFromMap(h)
	if err == nil {
		err = f.Valid()
	}
	if err != nil {
		t.Fatalf("seed %v: %v (seed a malformed record with recSeedHash)", h, err)
	}
	return []string{"SET", args[1], string(recordlayout.Encode(f))}
}

// recRunCase runs tc, its RECORD seeds as record strings, and expects a
// record string afterwards.
func recRunCase(t *testing.T, c rueidis.Client, s redisonce.Script, tc recCase) {
	ctx := context.Background()
	key := keyFor(t, "rec:")
	for _, cmd := range tc.seed {
		args := make([]string, len(cmd))
		for i, a := range cmd {
			args[i] = strings.ReplaceAll(a, "$K", key)
		}
		do(t, c, recSeedArgs(t, args)...)
	}
	before := recReadRaw(t, c, key)
	cmd := c.B().Evalsha().Sha1(s.SHA1).Numkeys(1).Key(key).Arg(tc.args...).Build()
	if s.ReadOnly {
		cmd = c.B().EvalshaRo().Sha1(s.SHA1).Numkeys(1).Key(key).Arg(tc.args...).Build()
	}
	t0 := recServerMS(t, c, key)
	m, err := c.Do(ctx, cmd).ToMessage()
	t1 := recServerMS(t, c, key)
	after := recReadRaw(t, c, key)

	if tc.errc != "" {
		if code := errCode(err); code != tc.errc {
			t.Fatalf("error = %v (reply %q), want code %s", err, recReply(m), tc.errc)
		}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("a refused call changed the key (-before +after):\n%s", diff)
		}
		return
	}
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("error = %v, want reply %q", err, tc.want)
	}
	got := recReply(m)
	if len(got) != len(tc.want) {
		t.Errorf("reply = %q, want %q", got, tc.want)
	} else {
		for i := range got {
			if !recMatch(tc.want[i], got[i], t0, t1) {
				t.Errorf("reply[%d] = %q, want %q (script time in [%d, %d]); reply %q", i, got[i], tc.want[i], t0, t1, got)
			}
		}
	}

	if tc.after == nil {
		if after.Type != "none" || after.ExpireAt != -2 {
			t.Errorf("key afterwards = %+v, want absent", after)
		}
		return
	}
	if after.Layout != 1 {
		t.Fatalf("key afterwards is a %s (%q), want a record string", after.Type, after.Str)
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(tc.after)), slices.Sorted(maps.Keys(after.Hash))); diff != "" {
		t.Errorf("hash fields afterwards (-want +got):\n%s", diff)
	}
	for f, w := range tc.after {
		if g, ok := after.Hash[f]; ok && !recMatch(w, g, t0, t1) {
			t.Errorf("field %s = %q, want %q (script time in [%d, %d])", f, g, w, t0, t1)
		}
	}
	wantExp := tc.expireAt
	if wantExp == "" {
		wantExp = "-1"
	}
	if !recMatch(wantExp, strconv.FormatInt(after.ExpireAt, 10), t0, t1) {
		t.Errorf("PEXPIRETIME = %d, want %s", after.ExpireAt, wantExp)
	}
	// The key expires at expires_ms, or at lease_ms while the record is
	// pending with a lease past it (records_expiry_test.go has the rule).
	keyAt := after.Hash["expires_ms"]
	if l := after.Hash["lease_ms"]; keyAt != "0" && after.Hash["status"] == "pending" && len(l) >= len(keyAt) && l > keyAt {
		keyAt = l
	}
	if (keyAt == "0") != (after.ExpireAt == -1) || (keyAt != "0" && keyAt != strconv.FormatInt(after.ExpireAt, 10)) {
		t.Errorf("expires_ms %q, lease_ms %q disagree with PEXPIRETIME %d", after.Hash["expires_ms"], after.Hash["lease_ms"], after.ExpireAt)
	}
}

const (
	recFar  = "4102444800000" // 2100-01-01, a deadline that has not passed
	recPast = "1"             // 1970, one that has
)

func TestScriptAcquire(t *testing.T) {
	long := strings.Repeat("t", 257)
	completed := recHash("status", "completed", "payload", "res\x00ult", "expires_ms", recFar, "fp", "fpA", "token", "tokA")
	live := recHash("lease_ms", recFar, "payload", "progress")
	passed := recHash("lease_ms", recPast, "payload", "progress", "fence", "7", "expires_ms", recFar, "fp", "fpA")
	passedNoFP := recHash("lease_ms", recPast)
	with := func(h map[string]string, kv ...string) map[string]string {
		h = maps.Clone(h)
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	prefixed := func(p string, rest []string) []string { return append([]string{p}, rest...) }
	taken := with(passed, "token", "tokB", "lease_ms", "{now+3000}", "updated_ms", "{now}", "fence", "8")

	cases := []recCase{
		{name: "absent/no ttl, no lease", args: []string{"0", "tokA", "", "0"},
			want:  []string{"1", "pending", "", "{now}", "{now}", "0", "0", "1", "", "tokA"},
			after: recHash("created_ms", "{now}", "updated_ms", "{now}")},
		{name: "absent/ttl, lease, fingerprint", args: []string{"5000", "tokA", "fpA", "2000"},
			want: []string{"1", "pending", "", "{now}", "{now}", "{now+5000}", "{now+2000}", "1", "fpA", "tokA"},
			after: recHash("created_ms", "{now}", "updated_ms", "{now}", "expires_ms", "{now+5000}",
				"lease_ms", "{now+2000}", "fp", "fpA"),
			expireAt: "{now+5000}"},
		{name: "completed is reported without its token", seed: recSeed(completed), args: []string{"0", "tokB", "fpA", "1000"},
			want: prefixed("0", recAsReply(completed, "")), after: completed, expireAt: recFar},
		{name: "completed/no fingerprint given", seed: recSeed(completed), args: []string{"0", "tokB", "", "1000"},
			want: prefixed("0", recAsReply(completed, "")), after: completed, expireAt: recFar},
		{name: "failed with a stale lease is not taken over", seed: recSeed(recHash("status", "failed", "lease_ms", recPast)),
			args:  []string{"0", "tokB", "", "1000"},
			want:  prefixed("0", recAsReply(recHash("status", "failed", "lease_ms", recPast), "")),
			after: recHash("status", "failed", "lease_ms", recPast)},
		{name: "pending/live lease", seed: recSeed(live), args: []string{"0", "tokB", "", "1000"},
			want: prefixed("0", recAsReply(live, "")), after: live},
		{name: "pending/no lease is never taken over", seed: recSeed(recHash()), args: []string{"0", "tokB", "", "1000"},
			want: prefixed("0", recAsReply(recHash(), "")), after: recHash()},
		{name: "pending/lease passed: taken over", seed: recSeed(passed), args: []string{"60000", "tokB", "fpA", "3000"},
			want: prefixed("1", recAsReply(taken, "tokB")), after: taken, expireAt: recFar},
		{name: "takeover without a fingerprint keeps the record's", seed: recSeed(passed), args: []string{"0", "tokB", "", "3000"},
			want: prefixed("1", recAsReply(taken, "tokB")), after: taken, expireAt: recFar},
		{name: "takeover adopts the first fingerprint", seed: recSeed(passedNoFP), args: []string{"0", "tokB", "fpB", "0"},
			want:  prefixed("1", recAsReply(with(passedNoFP, "token", "tokB", "lease_ms", "0", "updated_ms", "{now}", "fence", "2", "fp", "fpB"), "tokB")),
			after: with(passedNoFP, "token", "tokB", "lease_ms", "0", "updated_ms", "{now}", "fence", "2", "fp", "fpB")},
		{name: "takeover/fence past 2^53", seed: recSeed(with(passedNoFP, "fence", "9007199254740993")), args: []string{"0", "tokB", "", "0"},
			want:  prefixed("1", recAsReply(with(passedNoFP, "token", "tokB", "lease_ms", "0", "updated_ms", "{now}", "fence", "9007199254740994"), "tokB")),
			after: with(passedNoFP, "token", "tokB", "lease_ms", "0", "updated_ms", "{now}", "fence", "9007199254740994")},
		{name: "takeover/fence carries", seed: recSeed(with(passedNoFP, "fence", "999999999999999999")), args: []string{"0", "tokB", "", "0"},
			want:  prefixed("1", recAsReply(with(passedNoFP, "token", "tokB", "lease_ms", "0", "updated_ms", "{now}", "fence", "1000000000000000000"), "tokB")),
			after: with(passedNoFP, "token", "tokB", "lease_ms", "0", "updated_ms", "{now}", "fence", "1000000000000000000")},
		// The fence never leaves 19 digits: a record at the largest is not taken over.
		{name: "takeover/fence at its maximum", seed: recSeed(with(passedNoFP, "fence", "9999999999999999999")), args: []string{"0", "tokB", "", "0"},
			want:  prefixed("0", recAsReply(with(passedNoFP, "fence", "9999999999999999999"), "")),
			after: with(passedNoFP, "fence", "9999999999999999999")},
		{name: "corrupt/fence with a leading zero", seed: recSeedHash(with(passedNoFP, "fence", "0100")), args: []string{"0", "tokB", "", "0"}, errc: "CORRUPT"},
		{name: "corrupt/fence of 20 digits", seed: recSeedHash(with(passedNoFP, "fence", "10000000000000000000")), args: []string{"0", "tokB", "", "0"}, errc: "CORRUPT"},
		{name: "takeover/16-digit times", seed: recSeed(with(passedNoFP, "expires_ms", "1000000000000000")), args: []string{"0", "tokB", "", "0"},
			want:  prefixed("1", recAsReply(with(passedNoFP, "expires_ms", "1000000000000000", "token", "tokB", "lease_ms", "0", "updated_ms", "{now}", "fence", "2"), "tokB")),
			after: with(passedNoFP, "expires_ms", "1000000000000000", "token", "tokB", "lease_ms", "0", "updated_ms", "{now}", "fence", "2"), expireAt: "1000000000000000"},

		{name: "fingerprint mismatch/pending", seed: recSeed(passed), args: []string{"0", "tokB", "fpB", "1000"}, errc: "MISMATCH"},
		{name: "fingerprint mismatch/completed", seed: recSeed(completed), args: []string{"0", "tokB", "fpB", "1000"}, errc: "MISMATCH"},
		{name: "bad ttl/negative", args: []string{"-1", "tokA", "", "0"}, errc: "BADARG"},
		{name: "bad ttl/not a number", seed: recSeed(passed), args: []string{"abc", "tokA", "", "0"}, errc: "BADARG"},
		{name: "bad ttl/empty", args: []string{"", "tokA", "", "0"}, errc: "BADARG"},
		{name: "bad ttl/16 digits", args: []string{"1000000000000000", "tokA", "", "0"}, errc: "BADARG"},
		{name: "bad token/empty", seed: recSeed(passed), args: []string{"0", "", "", "0"}, errc: "BADARG"},
		{name: "bad token/long", args: []string{"0", long, "", "0"}, errc: "BADARG"},
		{name: "bad fingerprint/long", seed: recSeed(passed), args: []string{"0", "tokB", long, "0"}, errc: "BADARG"},
		{name: "bad lease", seed: recSeed(passed), args: []string{"0", "tokB", "", "1.5"}, errc: "BADARG"},
		{name: "bad lease/negative", args: []string{"0", "tokB", "", "-1"}, errc: "BADARG"},
		{name: "too few arguments", args: []string{"0", "tokB", ""}, errc: "BADARG"},
		{name: "too many arguments", seed: recSeed(passed), args: []string{"0", "tokB", "", "0", "x"}, errc: "BADARG"},
		{name: "corrupt/a string", seed: [][]string{{"SET", "$K", `{"status":"pending"}`}}, args: []string{"0", "tokB", "", "0"}, errc: "CORRUPT"},
		{name: "corrupt/missing field", seed: [][]string{{"HSET", "$K", "status", "pending"}}, args: []string{"0", "tokB", "", "0"}, errc: "CORRUPT"},
		{name: "corrupt/time field", seed: recSeedHash(recHash("lease_ms", "soon")), args: []string{"0", "tokB", "", "0"}, errc: "CORRUPT"},
		{name: "corrupt/fence too long", seed: recSeedHash(recHash("lease_ms", recPast, "fence", "18446744073709551615")), args: []string{"0", "tokB", "", "0"}, errc: "CORRUPT"},
		{name: "corrupt/empty status", seed: recSeedHash(recHash("status", "")), args: []string{"0", "tokB", "", "0"}, errc: "CORRUPT"},
	}
	runRecCases(t, "acquire", cases)
}

func TestScriptGet(t *testing.T) {
	full := recHash("status", "completed", "payload", "bin\x00\xff", "expires_ms", recFar, "lease_ms", "0", "fence", "3", "fp", "fpA", "token", "secret")
	runRecCases(t, "get", []recCase{
		{name: "absent", want: []string{"(nil)"}},
		{name: "present, token hidden", seed: recSeed(full), want: recAsReply(full, ""), after: full, expireAt: recFar},
		{name: "pending with a lease", seed: recSeed(recHash("lease_ms", recFar)), want: recAsReply(recHash("lease_ms", recFar), ""),
			after: recHash("lease_ms", recFar)},
		{name: "corrupt/a string", seed: [][]string{{"SET", "$K", "x"}}, errc: "CORRUPT"},
		{name: "corrupt/missing field", seed: [][]string{{"HSET", "$K", "status", "completed", "payload", "x"}}, errc: "CORRUPT"},
		{name: "corrupt/fence", seed: recSeedHash(recHash("fence", "-1")), errc: "CORRUPT"},
	})
}

func TestScriptUpdate(t *testing.T) {
	leased := recHash("lease_ms", recFar, "expires_ms", recFar)
	mib := strings.Repeat("p", 1<<20)
	with := func(h map[string]string, kv ...string) map[string]string {
		h = maps.Clone(h)
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	done := with(leased, "status", "completed", "payload", "res", "lease_ms", "0", "updated_ms", "{now}")
	watched := with(leased, "watch", "1")
	cases := []recCase{
		// A record watch.lua marked: the final write drops the flag (and
		// publishes: TestRecordsWaitRaw); a write that keeps it pending
		// keeps the flag for the write that ends it.
		{name: "watched/complete drops the flag", seed: recSeed(watched), args: []string{"tokA", "status", "completed", "payload", "res"},
			want: []string{"1"}, after: done, expireAt: recFar},
		{name: "watched/still pending keeps the flag", seed: recSeed(watched), args: []string{"tokA", "payload", "part"},
			want: []string{"1"}, after: with(watched, "payload", "part", "updated_ms", "{now}"), expireAt: recFar},
		{name: "watched/expired at once", seed: recSeed(watched), args: []string{"tokA", "expires_in_ms", "-1"},
			want: []string{"0"}},
		{name: "unfenced/complete clears the lease", seed: recSeed(leased), args: []string{"", "status", "completed", "payload", "res"},
			want: []string{"1"}, after: done, expireAt: recFar},
		{name: "fenced/owner", seed: recSeed(leased), args: []string{"tokA", "payload", "res", "status", "completed"},
			want: []string{"1"}, after: done, expireAt: recFar},
		{name: "status only", seed: recSeed(leased), args: []string{"tokA", "status", "failed"},
			want:  []string{"1"},
			after: with(leased, "status", "failed", "lease_ms", "0", "updated_ms", "{now}"), expireAt: recFar},
		{name: "custom status", seed: recSeed(leased), args: []string{"", "status", strings.Repeat("s", 64)},
			want:  []string{"1"},
			after: with(leased, "status", strings.Repeat("s", 64), "lease_ms", "0", "updated_ms", "{now}"), expireAt: recFar},
		{name: "payload only keeps the lease", seed: recSeed(leased), args: []string{"tokA", "payload", "a\x00b"},
			want:  []string{"1"},
			after: with(leased, "payload", "a\x00b", "updated_ms", "{now}"), expireAt: recFar},
		{name: "payload of 1 MiB", seed: recSeed(leased), args: []string{"tokA", "payload", mib},
			want:  []string{"1"},
			after: with(leased, "payload", mib, "updated_ms", "{now}"), expireAt: recFar},
		// Times are durations from the server's TIME: 30000 is 30 s
		// from now, never a deadline in 1970.
		{name: "lease moves", seed: recSeed(leased), args: []string{"tokA", "lease_in_ms", "30000"},
			want:  []string{"1"},
			after: with(leased, "lease_ms", "{now+30000}", "updated_ms", "{now}"), expireAt: recFar},
		{name: "lease 0 clears it", seed: recSeed(leased), args: []string{"tokA", "lease_in_ms", "0"},
			want:  []string{"1"},
			after: with(leased, "lease_ms", "0", "updated_ms", "{now}"), expireAt: recFar},
		{name: "lease in the past", seed: recSeed(leased), args: []string{"tokA", "lease_in_ms", "-5000"},
			want:  []string{"1"},
			after: with(leased, "lease_ms", "{now-5000}", "updated_ms", "{now}"), expireAt: recFar},
		{name: "lease ignored when finished", seed: recSeed(leased), args: []string{"tokA", "lease_in_ms", "30000", "status", "completed"},
			want:  []string{"1"},
			after: with(leased, "status", "completed", "lease_ms", "0", "updated_ms", "{now}"), expireAt: recFar},
		{name: "expiry moves", seed: recSeed(recHash()), args: []string{"", "expires_in_ms", "86400000"},
			want:  []string{"1"},
			after: recHash("expires_ms", "{now+86400000}", "updated_ms", "{now}"), expireAt: "{now+86400000}"},
		{name: "expiry with leading zeros", seed: recSeed(recHash()), args: []string{"", "expires_in_ms", "0086400000"},
			want:  []string{"1"},
			after: recHash("expires_ms", "{now+86400000}", "updated_ms", "{now}"), expireAt: "{now+86400000}"},
		{name: "expiry of 15 digits", seed: recSeed(recHash()), args: []string{"", "expires_in_ms", "999999999999999"},
			want:  []string{"1"},
			after: recHash("expires_ms", "{now+999999999999999}", "updated_ms", "{now}"), expireAt: "{now+999999999999999}"},
		{name: "expiry 0 persists", seed: recSeed(leased), args: []string{"tokA", "expires_in_ms", "0"},
			want:  []string{"1"},
			after: with(leased, "expires_ms", "0", "updated_ms", "{now}")},
		{name: "expiry in the past deletes", seed: recSeed(leased), args: []string{"tokA", "expires_in_ms", "-1", "status", "completed"},
			want: []string{"0"}},

		{name: "absent", args: []string{"", "status", "completed"}, errc: "NOT_FOUND"},
		{name: "absent/fenced", args: []string{"tokA", "expires_in_ms", "0"}, errc: "NOT_FOUND"},
		{name: "stale owner", seed: recSeed(leased), args: []string{"tokB", "status", "completed", "payload", "late"}, errc: "STALE_OWNER"},
		{name: "stale owner/expiry", seed: recSeed(leased), args: []string{"tokB", "expires_in_ms", "-1"}, errc: "STALE_OWNER"},
		{name: "no pairs", seed: recSeed(leased), args: []string{"tokA"}, errc: "BADARG"},
		{name: "no arguments", seed: recSeed(leased), errc: "BADARG"},
		{name: "odd pairs", seed: recSeed(leased), args: []string{"tokA", "status", "completed", "payload"}, errc: "BADARG"},
		{name: "unknown field", seed: recSeed(leased), args: []string{"", "token", "mine"}, errc: "BADARG"},
		{name: "unknown field/fence", seed: recSeed(leased), args: []string{"", "status", "completed", "fence", "99"}, errc: "BADARG"},
		{name: "field twice", seed: recSeed(leased), args: []string{"", "status", "completed", "status", "failed"}, errc: "BADARG"},
		{name: "empty status", seed: recSeed(leased), args: []string{"", "status", ""}, errc: "BADARG"},
		{name: "long status", seed: recSeed(leased), args: []string{"", "status", strings.Repeat("s", 65)}, errc: "BADARG"},
		{name: "long payload", seed: recSeed(leased), args: []string{"", "status", "completed", "payload", mib + "x"}, errc: "BADARG"},
		{name: "bad expiry", seed: recSeed(leased), args: []string{"", "expires_in_ms", "--1"}, errc: "BADARG"},
		{name: "expiry of 16 digits", seed: recSeed(leased), args: []string{"", "expires_in_ms", "1000000000000000"}, errc: "BADARG"},
		{name: "bad lease", seed: recSeed(leased), args: []string{"", "lease_in_ms", "soon"}, errc: "BADARG"},
		{name: "absolute expires_ms is refused", seed: recSeed(leased), args: []string{"", "expires_ms", "86400000"}, errc: "BADARG"},
		{name: "absolute lease_ms is refused", seed: recSeed(leased), args: []string{"", "lease_ms", "30000"}, errc: "BADARG"},
		{name: "long token", seed: recSeed(leased), args: []string{strings.Repeat("t", 257), "status", "completed"}, errc: "BADARG"},
		{name: "bad pair after a good one", args: []string{"", "status", "completed", "expires_in_ms", "x"}, errc: "BADARG"},
		{name: "corrupt/a string", seed: [][]string{{"SET", "$K", "x"}}, args: []string{"", "status", "completed"}, errc: "CORRUPT"},
		{name: "corrupt/missing field", seed: [][]string{{"HSET", "$K", "status", "pending", "token", "tokA"}}, args: []string{"tokA", "status", "completed"}, errc: "CORRUPT"},
	}
	runRecCases(t, "update", cases)
}

func TestScriptRenew(t *testing.T) {
	h := recHash("expires_ms", recFar, "lease_ms", "5000")
	renewed := recHash("expires_ms", recFar, "lease_ms", "{now+3000}")
	runRecCases(t, "renew", []recCase{
		{name: "owner", seed: recSeed(h), args: []string{"tokA", "3000"}, want: []string{"1"}, after: renewed, expireAt: recFar},
		{name: "owner, leading zero", seed: recSeed(h), args: []string{"tokA", "03000"}, want: []string{"1"}, after: renewed, expireAt: recFar},
		// A pending record without a lease ("0") gets one: lease_ms grows
		// from 1 to 13 digits (renew.lua's Memory entry says so).
		{name: "owner, no lease yet", seed: recSeed(recHash("expires_ms", recFar, "lease_ms", "0")), args: []string{"tokA", "3000"},
			want: []string{"1"}, after: renewed, expireAt: recFar},
		{name: "absent", args: []string{"tokA", "3000"}, want: []string{"0"}},
		{name: "another owner", seed: recSeed(h), args: []string{"tokB", "3000"}, want: []string{"-1"}, after: h, expireAt: recFar},
		{name: "completed", seed: recSeed(recHash("expires_ms", recFar, "status", "completed")), args: []string{"tokA", "3000"},
			want: []string{"-1"}, after: recHash("expires_ms", recFar, "status", "completed"), expireAt: recFar},
		{name: "a foreign value", seed: [][]string{{"SET", "$K", "x"}}, args: []string{"tokA", "3000"}, errc: "CORRUPT"},
		{name: "a hash without a token", seed: [][]string{{"HSET", "$K", "status", "pending"}}, args: []string{"tokA", "3000"}, errc: "CORRUPT"},
		{name: "empty token", seed: recSeed(h), args: []string{"", "3000"}, errc: "BADARG"},
		{name: "long token", seed: recSeed(h), args: []string{strings.Repeat("t", 257), "3000"}, errc: "BADARG"},
		{name: "zero lease", seed: recSeed(h), args: []string{"tokA", "0"}, errc: "BADARG"},
		{name: "bad lease", seed: recSeed(h), args: []string{"tokA", "soon"}, errc: "BADARG"},
		{name: "one argument", seed: recSeed(h), args: []string{"tokA"}, errc: "BADARG"},
	})
}

// TestScriptWatch: watch.lua marks a pending record (field watch "1") and
// nothing else; an absent key or a record no longer pending is left alone.
func TestScriptWatch(t *testing.T) {
	h := recHash("expires_ms", recFar, "lease_ms", recFar)
	marked := recHash("expires_ms", recFar, "lease_ms", recFar, "watch", "1")
	doneH := recHash("expires_ms", recFar, "status", "completed")
	runRecCases(t, "watch", []recCase{
		{name: "pending", seed: recSeed(h), want: []string{"1"}, after: marked, expireAt: recFar},
		{name: "pending, already watched", seed: recSeed(marked), want: []string{"1"}, after: marked, expireAt: recFar},
		{name: "absent", want: []string{"0"}},
		{name: "completed", seed: recSeed(doneH), want: []string{"0"}, after: doneH, expireAt: recFar},
		{name: "a foreign value", seed: [][]string{{"SET", "$K", "x"}}, errc: "CORRUPT"},
		{name: "an argument", seed: recSeed(h), args: []string{"x"}, errc: "BADARG"},
	})
}

func TestScriptDelete(t *testing.T) {
	h := recHash("expires_ms", recFar)
	runRecCases(t, "delete", []recCase{
		{name: "watched, owner", seed: recSeed(recHash("expires_ms", recFar, "watch", "1")), args: []string{"tokA"}, want: []string{"1"}},
		{name: "absent", args: []string{""}, want: []string{"0"}},
		{name: "absent/fenced", args: []string{"tokA"}, want: []string{"0"}},
		{name: "unconditional", seed: recSeed(h), args: []string{""}, want: []string{"1"}},
		{name: "owner", seed: recSeed(h), args: []string{"tokA"}, want: []string{"1"}},
		{name: "a foreign value, unconditional", seed: [][]string{{"SET", "$K", `{"status":"completed"}`}}, args: []string{""}, want: []string{"1"}},
		{name: "stale owner", seed: recSeed(h), args: []string{"tokB"}, errc: "STALE_OWNER"},
		{name: "a foreign value, fenced", seed: [][]string{{"SET", "$K", "x"}}, args: []string{"tokA"}, errc: "CORRUPT"},
		{name: "a hash without a token, fenced", seed: [][]string{{"HSET", "$K", "status", "pending"}}, args: []string{"tokA"}, errc: "CORRUPT"},
		{name: "long token", seed: recSeed(h), args: []string{strings.Repeat("t", 257)}, errc: "BADARG"},
		{name: "no arguments", seed: recSeed(h), errc: "BADARG"},
		{name: "two arguments", seed: recSeed(h), args: []string{"", "x"}, errc: "BADARG"},
	})
}

// recMalformed are string values that are not layout-1 records: every
// records script answers CORRUPT on them and leaves them alone.
func recMalformed() map[string]string {
	good := recordlayout.Fields{Status: "pending", CreatedMS: 1000, UpdatedMS: 2000, LeaseMS: 1, Fence: "1", Token: "tokA"}
	v := string(recordlayout.Encode(good))
	set := func(off int, b ...byte) string {
		x := []byte(v)
		copy(x[off:], b)
		return string(x)
	}
	with := func(f func(*recordlayout.Fields)) string {
		g := good
		f(&g)
		return string(recordlayout.Encode(g))
	}
	return map[string]string{
		"json":             `{"status":"pending","token":"tokA"}`,
		"another version":  "ro2 " + v[4:],
		"magic only":       recordlayout.Magic,
		"truncated header": v[:30],
		"truncated token":  v[:len(v)-1],
		"NaN lease":        set(recordlayout.LeaseOffset, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1),
		"half a ms":        set(4, 0x3f, 0xe0, 0, 0, 0, 0, 0, 0),
		"negative time":    set(12, 0xc0, 0, 0, 0, 0, 0, 0, 0),
		"time 2^53":        with(func(f *recordlayout.Fields) { f.ExpiresMS = 1 << 53 }),
		"fence 0":          with(func(f *recordlayout.Fields) { f.Fence = "0" }),
		"fence 007":        with(func(f *recordlayout.Fields) { f.Fence = "007" }),
		"fence of 20":      with(func(f *recordlayout.Fields) { f.Fence = "10000000000000000000" }),
		"fence not digits": with(func(f *recordlayout.Fields) { f.Fence = "1e5" }),
		"empty status":     with(func(f *recordlayout.Fields) { f.Status = "" }),
		"status of 65":     with(func(f *recordlayout.Fields) { f.Status = strings.Repeat("s", 65) }),
		"token of 257":     with(func(f *recordlayout.Fields) { f.Token = strings.Repeat("t", 257) }),
	}
}

func TestScriptsRefuseMalformedRecords(t *testing.T) {
	for _, sc := range []struct {
		script string
		args   []string
	}{
		{"acquire", []string{"0", "tokB", "", "1000"}},
		{"get", nil},
		{"update", []string{"tokA", "status", "completed"}},
		{"renew", []string{"tokA", "3000"}},
		{"delete", []string{"tokA"}},
	} {
		var cases []recCase
		for name, v := range recMalformed() {
			cases = append(cases, recCase{name: name, seed: [][]string{{"SET", "$K", v}}, args: sc.args, errc: "CORRUPT"})
		}
		slices.SortFunc(cases, func(a, b recCase) int { return strings.Compare(a.name, b.name) })
		t.Run(sc.script, func(t *testing.T) { runRecCases(t, sc.script, cases) })
	}
}
