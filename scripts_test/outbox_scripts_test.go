package scripts_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
)

// Table tests of the outbox scripts, driven by EVALSHA (EVALSHA_RO for a
// read-only script) straight through rueidis: seed a raw hash, run the script,
// then compare the reply and the raw key (HGETALL, PTTL) with the case's. Every
// error case checks that nothing changed.

// outboxEpochMark stands, in a case's wanted reply or hash, for the _epoch the script
// stamped: a new hash gets the server's time in microseconds. The test checks
// it is near now and that the reply carries the same value as the hash.
const outboxEpochMark = "<epoch>"

// outboxEpochInt is outboxEpochMark where the reply carries it as an integer
// (append_many.lua's first element).
const outboxEpochInt = "<epoch as an integer>"

// outboxOldEpoch is the _epoch of the seeded hashes.
const outboxOldEpoch = "1700000000000000"

// outboxOldEpochInt is outboxOldEpoch as replies carry it: an integer.
const outboxOldEpochInt = int64(1700000000000000)

// outboxRidMark stands, in a seeded or wanted hash, for the server's
// replication ID (INFO replication master_replid): append.lua keeps the epoch
// of a hash whose _rid is the server's, and mints a new one otherwise.
const outboxRidMark = "<rid>"

// outboxOtherRid is a replication ID that no server has.
const outboxOtherRid = "0123456789abcdef0123456789abcdef01234567"

// outboxNoKey as a case's after means: the key must not exist.
var outboxNoKey map[string]string

// outboxCase is one script run.
type outboxCase struct {
	name string
	seed map[string]string // the hash before; nil: no key
	ttl  int64             // the seeded key's PTTL in ms; 0: none
	args []string
	// want is the reply: int64, string, []any of those, or outboxErr("BADARG").
	want any
	// after is the hash afterwards (outboxNoKey: absent). Ignored for an error reply,
	// after which the key must be exactly as seeded.
	after map[string]string
	// afterTTL is the PTTL afterwards in ms: -1 none; a positive value is a
	// ceiling, and the PTTL must be within 5s below it. Ignored for an error
	// reply (the seeded TTL must be kept).
	afterTTL int64
}

// outboxErr is a wanted error reply, by its first word.
type outboxErr string

// outboxHash builds a seeded outbox hash: _seq, _gen, _epoch (outboxOldEpoch),
// _rid (the server's, outboxRidMark), then id, value pairs.
func outboxHash(seq, gen string, pairs ...string) map[string]string {
	h := map[string]string{"_seq": seq, "_gen": gen, "_epoch": outboxOldEpoch, "_rid": outboxRidMark}
	for i := 0; i+1 < len(pairs); i += 2 {
		h[pairs[i]] = pairs[i+1]
	}
	return h
}

// outboxWith returns a copy of h with the pairs set; a value "-" deletes the field.
func outboxWith(h map[string]string, pairs ...string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "-" {
			delete(out, pairs[i])
		} else {
			out[pairs[i]] = pairs[i+1]
		}
	}
	return out
}

// runOutboxCases runs cases for script name on standalone Redis and on a
// one-node cluster.
func runOutboxCases(t *testing.T, name string, cases []outboxCase) {
	t.Helper()
	s, ok := redisonce.Get(name)
	if !ok {
		t.Fatalf("no script %q", name)
	}
	for _, topo := range []struct {
		name string
		url  func(*testing.T) string
	}{{"standalone", standaloneURL}, {"cluster", clusterURL}} {
		t.Run(topo.name, func(t *testing.T) {
			c := newClient(t, topo.url(t))
			outboxLoadScript(t, c, s)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) { runOutboxCase(t, c, s, tc) })
			}
		})
	}
}

// outboxLoadScript runs SCRIPT LOAD on every node, so EVALSHA finds the script.
func outboxLoadScript(t testing.TB, c rueidis.Client, s redisonce.Script) {
	t.Helper()
	for addr, n := range c.Nodes() {
		sha, err := n.Do(context.Background(), n.B().ScriptLoad().Script(s.Source).Build()).ToString()
		if err != nil {
			t.Fatalf("SCRIPT LOAD %s on %s: %v", s.Name, addr, err)
		}
		if sha != s.SHA1 {
			t.Fatalf("SCRIPT LOAD %s on %s = %s, SHA1SUMS says %s", s.Name, addr, sha, s.SHA1)
		}
	}
}

// outboxRaw is the key's raw state: its hash (nil when absent) and PTTL.
func outboxRaw(t *testing.T, c rueidis.Client, key string) (map[string]string, int64) {
	t.Helper()
	ctx := context.Background()
	n, err := c.Do(ctx, c.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("EXISTS: %v", err)
	}
	pttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	if n == 0 {
		return nil, pttl
	}
	h, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatalf("HGETALL: %v", err)
	}
	return h, pttl
}

// outboxSeed writes h (and a PTTL when ttl > 0) under key, replacing what was there.
func outboxSeed(t *testing.T, c rueidis.Client, key string, h map[string]string, ttl int64) {
	t.Helper()
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Del().Key(key).Build()).Error(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if h == nil {
		return
	}
	cmd := c.B().Hset().Key(key).FieldValue()
	for k, v := range h {
		cmd = cmd.FieldValue(k, v)
	}
	if err := c.Do(ctx, cmd.Build()).Error(); err != nil {
		t.Fatalf("HSET: %v", err)
	}
	if ttl > 0 {
		if err := c.Do(ctx, c.B().Pexpire().Key(key).Milliseconds(ttl).Build()).Error(); err != nil {
			t.Fatalf("PEXPIRE: %v", err)
		}
	}
}

// outboxEval runs s on key with EVALSHA (EVALSHA_RO for a read-only script).
func outboxEval(c rueidis.Client, s redisonce.Script, key string, args ...string) rueidis.RedisResult {
	ctx := context.Background()
	if s.ReadOnly {
		return c.Do(ctx, c.B().EvalshaRo().Sha1(s.SHA1).Numkeys(1).Key(key).Arg(args...).Build())
	}
	return c.Do(ctx, c.B().Evalsha().Sha1(s.SHA1).Numkeys(1).Key(key).Arg(args...).Build())
}

// outboxReply turns a reply into int64, string, []any or outboxErr.
func outboxReply(r rueidis.RedisResult) any {
	if err := r.Error(); err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok {
			code, _, _ := strings.Cut(re.Error(), " ")
			return outboxErr(code)
		}
		return err
	}
	v, err := r.ToAny()
	if err != nil {
		return err
	}
	return v
}

// outboxRid returns the replication ID of the server behind c (one node).
func outboxRid(t *testing.T, c rueidis.Client) string {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("replication").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO replication: %v", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_replid:"); ok {
			return v
		}
	}
	t.Fatalf("no master_replid in INFO replication:\n%s", info)
	return ""
}

// outboxResolveRid replaces outboxRidMark in h's _rid with rid.
func outboxResolveRid(h map[string]string, rid string) map[string]string {
	if h == nil || h["_rid"] != outboxRidMark {
		return h
	}
	return outboxWith(h, "_rid", rid)
}

func runOutboxCase(t *testing.T, c rueidis.Client, s redisonce.Script, tc outboxCase) {
	key := "outbox-scripts:" + t.Name()
	rid := outboxRid(t, c)
	tc.seed, tc.after = outboxResolveRid(tc.seed, rid), outboxResolveRid(tc.after, rid)
	outboxSeed(t, c, key, tc.seed, tc.ttl)
	before, beforeTTL := outboxRaw(t, c, key)

	got := outboxReply(outboxEval(c, s, key, tc.args...))
	after, afterTTL := outboxRaw(t, c, key)
	if arr, ok := got.([]any); ok && s.Name == "unacked" {
		got = outboxSortPairs(arr)
	}

	if code, isErr := tc.want.(outboxErr); isErr {
		if got != code {
			t.Errorf("reply = %v, want error %s", outboxShort(got), code)
		}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("an error reply changed the hash (-before +after):\n%s", outboxShort(diff))
		}
		if afterTTL > beforeTTL || (beforeTTL > 0) != (afterTTL > 0) {
			t.Errorf("an error reply changed the PTTL from %d to %d", beforeTTL, afterTTL)
		}
		return
	}

	// Resolve the epoch placeholder from the stored hash.
	want, wantAfter := tc.want, tc.after
	if e, ok := after["_epoch"]; ok && wantAfter != nil && wantAfter["_epoch"] == outboxEpochMark {
		outboxFreshEpoch(t, e)
		wantAfter = outboxWith(wantAfter, "_epoch", e)
		want = outboxReplaceEpoch(want, e)
	}
	if arr, ok := want.([]any); ok && s.Name == "unacked" {
		want = outboxSortPairs(arr)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", outboxShort(diff))
	}
	if diff := cmp.Diff(wantAfter, after); diff != "" {
		t.Errorf("hash afterwards (-want +got):\n%s", outboxShort(diff))
	}
	switch {
	case wantAfter == nil:
		if afterTTL != -2 {
			t.Errorf("PTTL = %d, want -2 (no key)", afterTTL)
		}
	case tc.afterTTL == -1:
		if afterTTL != -1 {
			t.Errorf("PTTL = %d, want -1 (no expiry)", afterTTL)
		}
	default:
		if afterTTL > tc.afterTTL || afterTTL < tc.afterTTL-5000 {
			t.Errorf("PTTL = %d, want within 5s below %d", afterTTL, tc.afterTTL)
		}
	}
}

// outboxFreshEpoch wants a stamp of the server's clock now, in microseconds.
func outboxFreshEpoch(t *testing.T, e string) {
	t.Helper()
	us, err := strconv.ParseInt(e, 10, 64)
	if err != nil || len(e) != 16 {
		t.Fatalf("_epoch = %q, want 16 decimal digits (microseconds)", e)
	}
	if d := time.Since(time.UnixMicro(us)); d < -time.Minute || d > time.Minute {
		t.Errorf("_epoch %s is %v away from now", e, d)
	}
}

// outboxReplaceEpoch substitutes e for outboxEpochMark in a wanted reply: as an integer in
// an append reply's array, as a string elsewhere.
func outboxReplaceEpoch(want any, e string) any {
	arr, ok := want.([]any)
	if !ok {
		return want
	}
	out := append([]any(nil), arr...)
	for i, v := range out {
		if v == outboxEpochInt {
			n, _ := strconv.ParseInt(e, 10, 64)
			out[i] = n
		}
		if v == outboxEpochMark {
			if i == 1 && len(out) == 3 { // append.lua: {seq, epoch, created}
				n, _ := strconv.ParseInt(e, 10, 64)
				out[i] = n
			} else {
				out[i] = e
			}
		}
	}
	return out
}

// outboxShort keeps failure output readable when a case moves megabytes.
func outboxShort(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 2000 {
		return s[:2000] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

var (
	outboxU53   = "9007199254740992"     // 2^53
	outboxU53p1 = "9007199254740993"     // 2^53+1: the same float64 as 2^53
	outboxU64m2 = "18446744073709551614" // 2^64-2
	outboxU64m1 = "18446744073709551615" // 2^64-1: the same float64 as 2^64-2
	outboxU64   = "18446744073709551616" // 2^64: out of range
)

func TestOutboxScriptAppend(t *testing.T) {
	two := outboxHash("7", "3", "a", "6:x", "b", "7:y")
	big := strings.Repeat("\x00:", 2<<20) // 4 MiB, the limit
	runOutboxCases(t, "append", []outboxCase{
		{name: "new connection", args: []string{"m1", "hello", "0", "0"},
			want:  []any{int64(1), outboxEpochMark, int64(1)},
			after: map[string]string{"_seq": "1", "_gen": "0", "_epoch": outboxEpochMark, "_rid": outboxRidMark, "m1": "1:hello"}, afterTTL: -1},
		{name: "new connection with ttl", args: []string{"m1", "hello", "5000", "0"},
			want:  []any{int64(1), outboxEpochMark, int64(1)},
			after: map[string]string{"_seq": "1", "_gen": "0", "_epoch": outboxEpochMark, "_rid": outboxRidMark, "m1": "1:hello"}, afterTTL: 5000},
		{name: "next seq", seed: two, args: []string{"m8", "p", "0", "0"},
			want: []any{int64(8), int64(1700000000000000), int64(1)}, after: outboxWith(two, "m8", "8:p", "_seq", "8"), afterTTL: -1},
		{name: "seq continues on a drained hash", seed: outboxHash("41", "2"), args: []string{"m", "p", "0", "0"},
			want: []any{int64(42), int64(1700000000000000), int64(1)}, after: outboxWith(outboxHash("42", "2"), "m", "42:p"), afterTTL: -1},
		{name: "retry returns the existing seq", seed: two, args: []string{"a", "other", "0", "0"},
			want: []any{int64(6), int64(1700000000000000), int64(0)}, after: two, afterTTL: -1},
		{name: "retry re-arms the ttl", seed: two, ttl: 1000, args: []string{"a", "x", "60000", "0"},
			want: []any{int64(6), int64(1700000000000000), int64(0)}, after: two, afterTTL: 60000},
		{name: "append re-arms the ttl", seed: two, ttl: 1000, args: []string{"c", "z", "60000", "0"},
			want: []any{int64(8), int64(1700000000000000), int64(1)}, after: outboxWith(two, "c", "8:z", "_seq", "8"), afterTTL: 60000},
		{name: "ttl 0 keeps an expiry", seed: two, ttl: 100000, args: []string{"c", "z", "0", "0"},
			want: []any{int64(8), int64(1700000000000000), int64(1)}, after: outboxWith(two, "c", "8:z", "_seq", "8"), afterTTL: 100000},
		{name: "below the limit", seed: two, args: []string{"c", "z", "0", "3"},
			want: []any{int64(8), int64(1700000000000000), int64(1)}, after: outboxWith(two, "c", "8:z", "_seq", "8"), afterTTL: -1},
		{name: "full", seed: two, args: []string{"c", "z", "0", "2"}, want: outboxErr("FULL")},
		{name: "full with a ttl", seed: two, ttl: 100000, args: []string{"c", "z", "60000", "2"}, want: outboxErr("FULL")},
		{name: "retry when full", seed: two, args: []string{"b", "y", "0", "2"},
			want: []any{int64(7), int64(1700000000000000), int64(0)}, after: two, afterTTL: -1},
		{name: "binary payload", seed: two, args: []string{"c:\x00", "a:b\x00\r\n", "0", "0"},
			want: []any{int64(8), int64(1700000000000000), int64(1)}, after: outboxWith(two, "c:\x00", "8:a:b\x00\r\n", "_seq", "8"), afterTTL: -1},
		{name: "empty payload", args: []string{"m", "", "0", "0"},
			want:  []any{int64(1), outboxEpochMark, int64(1)},
			after: map[string]string{"_seq": "1", "_gen": "0", "_epoch": outboxEpochMark, "_rid": outboxRidMark, "m": "1:"}, afterTTL: -1},
		{name: "payload at the limit", args: []string{"m", big, "0", "0"},
			want:  []any{int64(1), outboxEpochMark, int64(1)},
			after: map[string]string{"_seq": "1", "_gen": "0", "_epoch": outboxEpochMark, "_rid": outboxRidMark, "m": "1:" + big}, afterTTL: -1},
		{name: "id of 256 bytes", args: []string{strings.Repeat("i", 256), "p", "0", "0"},
			want:  []any{int64(1), outboxEpochMark, int64(1)},
			after: map[string]string{"_seq": "1", "_gen": "0", "_epoch": outboxEpochMark, "_rid": outboxRidMark, strings.Repeat("i", 256): "1:p"}, afterTTL: -1},

		// A hash that came through a failover or restart (another _rid, or
		// none: written before _rid existed) gets a new epoch; seq goes on.
		{name: "another replication id", seed: outboxWith(two, "_rid", outboxOtherRid), args: []string{"c", "z", "0", "0"},
			want:  []any{int64(8), outboxEpochMark, int64(1)},
			after: outboxWith(two, "c", "8:z", "_seq", "8", "_epoch", outboxEpochMark), afterTTL: -1},
		{name: "no replication id", seed: outboxWith(two, "_rid", "-"), args: []string{"c", "z", "0", "0"},
			want:  []any{int64(8), outboxEpochMark, int64(1)},
			after: outboxWith(two, "c", "8:z", "_seq", "8", "_epoch", outboxEpochMark), afterTTL: -1},
		{name: "retry on another replication id", seed: outboxWith(two, "_rid", outboxOtherRid), args: []string{"a", "x", "0", "0"},
			want:  []any{int64(6), outboxEpochMark, int64(0)},
			after: outboxWith(two, "_epoch", outboxEpochMark), afterTTL: -1},
		{name: "new epoch above an epoch ahead of the clock", seed: outboxWith(two, "_rid", outboxOtherRid, "_epoch", "8999999999999999"),
			args: []string{"c", "z", "0", "0"}, want: []any{int64(8), int64(9000000000000000), int64(1)},
			after: outboxWith(two, "c", "8:z", "_seq", "8", "_epoch", "9000000000000000"), afterTTL: -1},
		{name: "no replication id, below the limit", seed: outboxWith(two, "_rid", "-"), args: []string{"c", "z", "0", "3"},
			want:  []any{int64(8), outboxEpochMark, int64(1)},
			after: outboxWith(two, "c", "8:z", "_seq", "8", "_epoch", outboxEpochMark), afterTTL: -1},
		{name: "no epoch above 2^53-1", seed: outboxWith(two, "_rid", outboxOtherRid, "_epoch", "9007199254740991"),
			args: []string{"c", "z", "0", "0"}, want: outboxErr("FULL")},
		{name: "full on another replication id", seed: outboxWith(two, "_rid", outboxOtherRid), args: []string{"c", "z", "0", "2"}, want: outboxErr("FULL")},
		{name: "full without replication id", seed: outboxWith(two, "_rid", "-"), args: []string{"c", "z", "0", "2"}, want: outboxErr("FULL")},

		{name: "payload over the limit", seed: two, args: []string{"c", big + "x", "0", "0"}, want: outboxErr("BADARG")},
		{name: "payload over the limit, new", args: []string{"c", big + "x", "0", "0"}, want: outboxErr("BADARG")},
		{name: "empty id", seed: two, args: []string{"", "p", "0", "0"}, want: outboxErr("BADARG")},
		{name: "reserved id", seed: two, args: []string{"_seq", "p", "0", "0"}, want: outboxErr("BADARG")},
		{name: "underscore id", args: []string{"_x", "p", "0", "0"}, want: outboxErr("BADARG")},
		{name: "id of 257 bytes", args: []string{strings.Repeat("i", 257), "p", "0", "0"}, want: outboxErr("BADARG")},
		{name: "negative ttl", seed: two, args: []string{"c", "p", "-1", "0"}, want: outboxErr("BADARG")},
		{name: "fractional ttl", args: []string{"c", "p", "1.5", "0"}, want: outboxErr("BADARG")},
		{name: "empty ttl", args: []string{"c", "p", "", "0"}, want: outboxErr("BADARG")},
		{name: "huge ttl", args: []string{"c", "p", "1000000000000000", "0"}, want: outboxErr("BADARG")},
		{name: "negative max", seed: two, args: []string{"c", "p", "0", "-1"}, want: outboxErr("BADARG")},
		{name: "text max", args: []string{"c", "p", "0", "ten"}, want: outboxErr("BADARG")},
		{name: "missing max", args: []string{"c", "p", "0"}, want: outboxErr("BADARG")},
		{name: "no args", args: nil, want: outboxErr("BADARG")},

		{name: "not an outbox hash", seed: map[string]string{"foo": "bar"}, args: []string{"c", "p", "0", "0"}, want: outboxErr("CORRUPT")},
		{name: "no _epoch", seed: outboxWith(two, "_epoch", "-"), args: []string{"c", "p", "0", "0"}, want: outboxErr("CORRUPT")},
		{name: "bad _epoch", seed: outboxWith(two, "_epoch", "yesterday"), args: []string{"c", "p", "0", "0"}, want: outboxErr("CORRUPT")},
		{name: "bad _seq", seed: outboxWith(two, "_seq", "-3"), args: []string{"c", "p", "0", "0"}, want: outboxErr("CORRUPT")},
		{name: "no _gen", seed: outboxWith(two, "_gen", "-"), args: []string{"c", "p", "0", "0"}, want: outboxErr("CORRUPT")},
		{name: "retry of a foreign value", seed: outboxWith(two, "c", "no seq here"), args: []string{"c", "p", "0", "0"}, want: outboxErr("CORRUPT")},
	})
}

func TestOutboxScriptAck(t *testing.T) {
	h := outboxHash("3", "3", "a", "1:x", "b", "2:y", "c", "3:z")
	many := outboxHash("2500", "0")
	manyIDs := []string{"1"}
	for i := range 2500 {
		id := fmt.Sprintf("id%d", i)
		many[id] = fmt.Sprintf("%d:", i+1)
		manyIDs = append(manyIDs, id)
	}
	gen := func(g string) map[string]string { return outboxHash("1", g, "a", "1:x") }
	runOutboxCases(t, "ack", []outboxCase{
		{name: "no such connection", args: []string{"5", "a"}, want: int64(0), after: outboxNoKey},
		{name: "no such connection, max generation", args: []string{outboxU64m1, "a", "b"}, want: int64(0), after: outboxNoKey},
		{name: "equal generation", seed: h, args: []string{"3", "a"}, want: int64(1), after: outboxWith(h, "a", "-"), afterTTL: -1},
		{name: "higher generation raises", seed: h, args: []string{"4", "a", "b", "zz", "a"},
			want: int64(2), after: outboxWith(h, "a", "-", "b", "-", "_gen", "4"), afterTTL: -1},
		{name: "higher generation, no id found", seed: h, args: []string{"10", "zz"}, want: int64(0), after: outboxWith(h, "_gen", "10"), afterTTL: -1},
		{name: "drained keeps reserved fields", seed: gen("0"), args: []string{"0", "a"}, want: int64(1), after: outboxHash("1", "0"), afterTTL: -1},
		{name: "keeps the ttl", seed: h, ttl: 100000, args: []string{"3", "a"}, want: int64(1), after: outboxWith(h, "a", "-"), afterTTL: 100000},
		{name: "2500 ids", seed: many, args: manyIDs, want: int64(2500), after: outboxHash("2500", "1"), afterTTL: -1},
		{name: "2^53+1 above 2^53", seed: gen(outboxU53), args: []string{outboxU53p1, "a"}, want: int64(1), after: outboxHash("1", outboxU53p1), afterTTL: -1},
		{name: "2^64-1 above 2^64-2", seed: gen(outboxU64m2), args: []string{outboxU64m1, "a"}, want: int64(1), after: outboxHash("1", outboxU64m1), afterTTL: -1},
		{name: "10 above 9", seed: gen("9"), args: []string{"10", "a"}, want: int64(1), after: outboxHash("1", "10"), afterTTL: -1},
		{name: "2^64-1 equal", seed: gen(outboxU64m1), args: []string{outboxU64m1, "a"}, want: int64(1), after: outboxHash("1", outboxU64m1), afterTTL: -1},

		{name: "stale", seed: h, args: []string{"2", "a"}, want: outboxErr("STALE_OWNER")},
		{name: "stale, many ids", seed: h, ttl: 100000, args: []string{"0", "a", "b", "c"}, want: outboxErr("STALE_OWNER")},
		{name: "2^53 below 2^53+1", seed: gen(outboxU53p1), args: []string{outboxU53, "a"}, want: outboxErr("STALE_OWNER")},
		{name: "2^64-2 below 2^64-1", seed: gen(outboxU64m1), args: []string{outboxU64m2, "a"}, want: outboxErr("STALE_OWNER")},
		{name: "9 below 10", seed: gen("10"), args: []string{"9", "a"}, want: outboxErr("STALE_OWNER")},

		{name: "generation 2^64", seed: h, args: []string{outboxU64, "a"}, want: outboxErr("BADARG")},
		{name: "generation of 21 digits", seed: h, args: []string{"100000000000000000000", "a"}, want: outboxErr("BADARG")},
		{name: "generation 99999999999999999999", seed: h, args: []string{"99999999999999999999", "a"}, want: outboxErr("BADARG")},
		{name: "negative generation", seed: h, args: []string{"-1", "a"}, want: outboxErr("BADARG")},
		{name: "leading zero", seed: h, args: []string{"04", "a"}, want: outboxErr("BADARG")},
		{name: "fractional generation", seed: h, args: []string{"4.0", "a"}, want: outboxErr("BADARG")},
		{name: "hex generation", seed: h, args: []string{"0x4", "a"}, want: outboxErr("BADARG")},
		{name: "spaced generation", seed: h, args: []string{" 4", "a"}, want: outboxErr("BADARG")},
		{name: "empty generation", seed: h, args: []string{"", "a"}, want: outboxErr("BADARG")},
		{name: "no ids", seed: h, args: []string{"4"}, want: outboxErr("BADARG")},
		{name: "no args", seed: h, args: nil, want: outboxErr("BADARG")},
		{name: "empty id", seed: h, args: []string{"4", "a", ""}, want: outboxErr("BADARG")},
		{name: "reserved id", seed: h, args: []string{"4", "a", "_gen"}, want: outboxErr("BADARG")},
		{name: "id of 257 bytes", seed: h, args: []string{"4", "a", strings.Repeat("i", 257)}, want: outboxErr("BADARG")},
		{name: "bad id, no connection", args: []string{"4", "_seq"}, want: outboxErr("BADARG")},

		{name: "no _gen", seed: outboxWith(h, "_gen", "-"), args: []string{"4", "a"}, want: outboxErr("CORRUPT")},
		{name: "bad _gen", seed: outboxWith(h, "_gen", "four"), args: []string{"4", "a"}, want: outboxErr("CORRUPT")},
		{name: "_gen over 2^64-1", seed: outboxWith(h, "_gen", outboxU64), args: []string{"4", "a"}, want: outboxErr("CORRUPT")},
		{name: "not an outbox hash", seed: map[string]string{"a": "b"}, args: []string{"4", "a"}, want: outboxErr("CORRUPT")},
	})
}

func TestOutboxScriptAdvance(t *testing.T) {
	h := outboxHash("2", "3", "a", "1:x", "b", "2:y")
	gen := func(g string) map[string]string { return outboxHash("1", g, "a", "1:x") }
	runOutboxCases(t, "advance", []outboxCase{
		// A raised fence is never lost: on no connection, a fence-only incarnation.
		{name: "no such connection", args: []string{"5", "0"}, want: int64(1),
			after: map[string]string{"_seq": "0", "_gen": "5", "_epoch": outboxEpochMark, "_rid": outboxRidMark}, afterTTL: -1},
		{name: "no such connection, ttl", args: []string{"5", "60000"}, want: int64(1),
			after: map[string]string{"_seq": "0", "_gen": "5", "_epoch": outboxEpochMark, "_rid": outboxRidMark}, afterTTL: 60000},
		{name: "no such connection, generation 0", args: []string{"0", "60000"}, want: int64(0), after: outboxNoKey},
		{name: "extra argument", seed: h, args: []string{"9", "0", "x"}, want: outboxErr("BADARG")},
		{name: "raise", seed: h, args: []string{"4", "0"}, want: int64(1), after: outboxWith(h, "_gen", "4"), afterTTL: -1},
		{name: "raise re-arms the ttl", seed: h, ttl: 1000, args: []string{"4", "60000"}, want: int64(1), after: outboxWith(h, "_gen", "4"), afterTTL: 60000},
		{name: "raise, ttl 0 keeps the expiry", seed: h, ttl: 100000, args: []string{"4", "0"}, want: int64(1), after: outboxWith(h, "_gen", "4"), afterTTL: 100000},
		{name: "equal", seed: h, args: []string{"3", "60000"}, want: int64(0), after: h, afterTTL: -1},
		{name: "below", seed: h, args: []string{"2", "0"}, want: int64(0), after: h, afterTTL: -1},
		{name: "below does not re-arm", seed: h, ttl: 10000, args: []string{"0", "60000"}, want: int64(0), after: h, afterTTL: 10000},
		{name: "2^53+1 above 2^53", seed: gen(outboxU53), args: []string{outboxU53p1, "0"}, want: int64(1), after: gen(outboxU53p1), afterTTL: -1},
		{name: "2^53 not above 2^53+1", seed: gen(outboxU53p1), args: []string{outboxU53, "0"}, want: int64(0), after: gen(outboxU53p1), afterTTL: -1},
		{name: "2^64-1 above 2^64-2", seed: gen(outboxU64m2), args: []string{outboxU64m1, "0"}, want: int64(1), after: gen(outboxU64m1), afterTTL: -1},
		{name: "2^64-2 not above 2^64-1", seed: gen(outboxU64m1), args: []string{outboxU64m2, "0"}, want: int64(0), after: gen(outboxU64m1), afterTTL: -1},
		{name: "10 above 9", seed: gen("9"), args: []string{"10", "0"}, want: int64(1), after: gen("10"), afterTTL: -1},

		{name: "generation 2^64", seed: h, args: []string{outboxU64, "0"}, want: outboxErr("BADARG")},
		{name: "leading zero", seed: h, args: []string{"07", "0"}, want: outboxErr("BADARG")},
		{name: "negative generation", seed: h, args: []string{"-7", "0"}, want: outboxErr("BADARG")},
		{name: "empty generation", seed: h, args: []string{"", "0"}, want: outboxErr("BADARG")},
		{name: "bad ttl", seed: h, ttl: 100000, args: []string{"9", "soon"}, want: outboxErr("BADARG")},
		{name: "negative ttl", seed: h, args: []string{"9", "-1"}, want: outboxErr("BADARG")},
		{name: "missing ttl", seed: h, args: []string{"9"}, want: outboxErr("BADARG")},
		{name: "no _gen", seed: outboxWith(h, "_gen", "-"), args: []string{"9", "0"}, want: outboxErr("CORRUPT")},
		{name: "bad _gen", seed: outboxWith(h, "_gen", "1e3"), args: []string{"9", "0"}, want: outboxErr("CORRUPT")},
	})
}

func TestOutboxScriptUnacked(t *testing.T) {
	h := outboxHash("5", "7", "b", "2:y", "a", "1:x", "e", "5::\x00:")
	runOutboxCases(t, "unacked", []outboxCase{
		{name: "no such connection", args: nil, want: []any{}, after: outboxNoKey},
		{name: "tail", seed: h, args: nil,
			want: []any{outboxOldEpochInt, "7", "a", "1:x", "b", "2:y", "e", "5::\x00:"}, after: h, afterTTL: -1},
		{name: "drained", seed: outboxHash("5", outboxU64m1), ttl: 100000, args: nil,
			want: []any{outboxOldEpochInt, outboxU64m1}, after: outboxHash("5", outboxU64m1), afterTTL: 100000},
		// Values are passed through unchecked (the reader rejects them: see
		// TestOutboxCorruptState); a per-value check would cost 10-25% more
		// server time on a long tail.
		{name: "foreign value passed through", seed: outboxWith(h, "c", "x:1"), args: nil,
			want:  []any{outboxOldEpochInt, "7", "a", "1:x", "b", "2:y", "c", "x:1", "e", "5::\x00:"},
			after: outboxWith(h, "c", "x:1"), afterTTL: -1},
		{name: "value without a colon passed through", seed: outboxWith(h, "c", "3"), args: nil,
			want:  []any{outboxOldEpochInt, "7", "a", "1:x", "b", "2:y", "c", "3", "e", "5::\x00:"},
			after: outboxWith(h, "c", "3"), afterTTL: -1},
		{name: "foreign underscore field passed through", seed: outboxWith(h, "_x", "9:z"), args: nil,
			want:  []any{outboxOldEpochInt, "7", "_x", "9:z", "a", "1:x", "b", "2:y", "e", "5::\x00:"},
			after: outboxWith(h, "_x", "9:z"), afterTTL: -1},
		{name: "one message", seed: outboxHash("5", "7", "a", "1:x"), args: nil,
			want: []any{outboxOldEpochInt, "7", "a", "1:x"}, after: outboxHash("5", "7", "a", "1:x"), afterTTL: -1},
		{name: "bad _epoch", seed: outboxWith(h, "_epoch", "0"), args: nil, want: outboxErr("CORRUPT")},
		{name: "bad _gen", seed: outboxWith(h, "_gen", "x"), args: nil, want: outboxErr("CORRUPT")},
		{name: "no _epoch", seed: outboxWith(h, "_epoch", "-"), args: nil, want: outboxErr("CORRUPT")},
		{name: "no _gen", seed: outboxWith(h, "_gen", "-"), args: nil, want: outboxErr("CORRUPT")},
		{name: "not an outbox hash", seed: map[string]string{"a": "1:x"}, args: nil, want: outboxErr("CORRUPT")},
	})
}

// outboxSortPairs orders the id/value pairs of an unacked.lua reply by id: the
// script returns them in hash order (the Go side sorts by seq).
func outboxSortPairs(arr []any) []any {
	if len(arr) < 2 {
		return arr
	}
	type pair struct{ id, v any }
	var ps []pair
	for i := 2; i+1 < len(arr); i += 2 {
		ps = append(ps, pair{arr[i], arr[i+1]})
	}
	sort.Slice(ps, func(i, j int) bool { return fmt.Sprint(ps[i].id) < fmt.Sprint(ps[j].id) })
	out := append([]any(nil), arr[:2]...)
	for _, p := range ps {
		out = append(out, p.id, p.v)
	}
	return out
}

func TestOutboxScriptDrop(t *testing.T) {
	h := outboxHash("2", "3", "a", "1:x")
	runOutboxCases(t, "drop", []outboxCase{
		{name: "no such connection", args: nil, want: int64(0), after: outboxNoKey},
		{name: "drop", seed: h, ttl: 100000, args: nil, want: int64(1), after: outboxNoKey},
	})
}
