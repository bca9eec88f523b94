package scripts_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The scripts' edges: raw keys seeded, a script run by EVALSHA, the
// reply and the raw key compared; every error case leaves the key unchanged.

// edgeRun seeds key with the raw command seed (nil: absent), runs script on it and
// returns the rendered reply, the error code and the key before and after.
func edgeRun(t *testing.T, name string, seed []string, args ...string) (got, code string, before, after rawKey) {
	t.Helper()
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	key := keyFor(t, "edges:")
	if seed != nil {
		do(t, c, append([]string{seed[0], key}, seed[1:]...)...)
	}
	before = raw(t, c, key)
	got, err := evalsha(t, c, name, key, args...)
	return got, errCode(err), before, raw(t, c, key)
}

// Every script that reads or writes a field answers CORRUPT, never Redis's raw
// WRONGTYPE, for a key of the wrong type, and changes nothing.
func TestEdgeWrongTypeIsCorrupt(t *testing.T) {
	str := []string{"SET", "x"}
	hash := []string{"HSET", "f", "v"}
	for _, tc := range []struct {
		name string
		seed []string
		args []string
	}{
		{"claim", hash, []string{"1000", "1"}},
		{"claim", hash, []string{"1000", "~tok"}},
		{"commit", hash, []string{"tok", "1000"}},
		{"release", hash, []string{"tok"}},
		{"extend", hash, []string{"tok", "1000"}},
		{"renew", str, []string{"tok", "1000"}},
		{"complete", str, []string{"tok", "completed", "r"}},
		{"append", str, []string{"m", "p", "0", "0"}},
		{"ack", str, []string{"1", "m"}},
		{"advance", str, []string{"1", "0"}},
		{"unacked", str, nil},
		{"acquire", str, []string{"0", "tok", "", "0"}},
		{"get", str, nil},
		{"update", str, []string{"", "status", "done"}},
		{"delete", str, []string{"tok"}},
		{"watch", str, nil},
		{"coalesce_trigger", str, []string{"tok", "1000", "0", "0", "0", "p"}},
		{"coalesce_take", str, []string{"tok", "1000"}},
		{"coalesce_extend", str, []string{"tok", "1000"}},
		{"coalesce_finish", str, []string{"tok", "1", "done", "0", "1000", "0"}},
	} {
		t.Run(tc.name+"/"+strings.Join(tc.args, ","), func(t *testing.T) {
			got, code, before, after := edgeRun(t, tc.name, tc.seed, tc.args...)
			if code != "CORRUPT" {
				t.Errorf("%s on a %s = %s (error %q), want CORRUPT", tc.name, before.Type, got, code)
			}
			if diff := cmp.Diff(before, after, approxTTL); diff != "" {
				t.Errorf("%s changed the key (-before +after):\n%s", tc.name, diff)
			}
		})
	}
}

// Every script with a fixed ARGV count refuses one argument more with BADARG.
func TestEdgeExtraArgumentsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"claim", []string{"1000", "1", "x"}},
		{"seen", []string{"x"}},
		{"forget", []string{"x"}},
		{"commit", []string{"tok", "1000", "x"}},
		{"release", []string{"tok", "x"}},
		{"extend", []string{"tok", "1000", "x"}},
		{"renew", []string{"tok", "1000", "x"}},
		{"complete", []string{"tok", "completed", "r", "x"}},
		{"append", []string{"m", "p", "0", "0", "x"}},
		{"advance", []string{"1", "0", "x"}},
		{"unacked", []string{"x"}},
		{"drop", []string{"x"}},
		{"acquire", []string{"0", "tok", "", "0", "x"}},
		{"get", []string{"x"}},
		{"delete", []string{"tok", "x"}},
		{"watch", []string{"x"}},
		{"coalesce_trigger", []string{"tok", "1000", "0", "0", "0", "p", "x"}},
		{"coalesce_take", []string{"tok", "1000", "x"}},
		{"coalesce_extend", []string{"tok", "1000", "x"}},
		{"coalesce_finish", []string{"tok", "1", "done", "0", "1000", "0", "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code, before, after := edgeRun(t, tc.name, nil, tc.args...)
			if code != "BADARG" {
				t.Errorf("%s with %d arguments = %s (error %q), want BADARG", tc.name, len(tc.args), got, code)
			}
			if after.Type != "none" || before.Type != "none" {
				t.Errorf("%s created a %s", tc.name, after.Type)
			}
		})
	}
}

// One definition of a well-formed outbox hash: append, ack, advance and
// unacked all answer CORRUPT for the same hashes.
func TestEdgeOutboxWellFormed(t *testing.T) {
	const epoch = "1700000000000000"
	bad := map[string][]string{
		"no _seq":             {"HSET", "_gen", "0", "_epoch", epoch, "m", "1:p"},
		"_gen leading zero":   {"HSET", "_seq", "1", "_gen", "007", "_epoch", epoch, "m", "1:p"},
		"_seq leading zero":   {"HSET", "_seq", "00005", "_gen", "0", "_epoch", epoch, "m", "1:p"},
		"_seq 20 nines":       {"HSET", "_seq", "99999999999999999999", "_gen", "0", "_epoch", epoch, "m", "1:p"},
		"_seq past 2^53":      {"HSET", "_seq", "9007199254740992", "_gen", "0", "_epoch", epoch, "m", "1:p"},
		"_gen past uint64":    {"HSET", "_seq", "1", "_gen", "18446744073709551616", "_epoch", epoch, "m", "1:p"},
		"_epoch leading zero": {"HSET", "_seq", "1", "_gen", "0", "_epoch", "0" + epoch, "m", "1:p"},
		"_epoch zero":         {"HSET", "_seq", "1", "_gen", "0", "_epoch", "0", "m", "1:p"},
	}
	for what, seed := range bad {
		for _, run := range []struct {
			name string
			args []string
		}{
			{"append", []string{"n", "p", "0", "0"}},
			{"ack", []string{"5", "m"}},
			{"advance", []string{"5", "0"}},
			{"unacked", nil},
		} {
			t.Run(what+"/"+run.name, func(t *testing.T) {
				got, code, before, after := edgeRun(t, run.name, seed, run.args...)
				if code != "CORRUPT" {
					t.Errorf("%s on a hash with %s = %s (error %q), want CORRUPT", run.name, what, got, code)
				}
				if diff := cmp.Diff(before, after, approxTTL); diff != "" {
					t.Errorf("%s changed the key (-before +after):\n%s", run.name, diff)
				}
			})
		}
	}
}

// Sequence numbers stay exact past 10^14, and stop (FULL) at 2^53-1; the
// epoch is an integer in append's and unacked's replies alike.
func TestEdgeSeqExact(t *testing.T) {
	const epoch = "1700000000000000"
	c := newClient(t, standaloneURL(t))
	// With the server's replication ID, so the epoch stays (append.lua).
	seed := []string{"HSET", "_seq", "99999999999998", "_gen", "0", "_epoch", epoch, "_rid", outboxRid(t, c)}
	loadScripts(t, c)
	key := keyFor(t, "edges:")
	do(t, c, append([]string{seed[0], key}, seed[1:]...)...)
	for i, want := range []string{"[99999999999999 1700000000000000 1]", "[99999999999999 1700000000000000 0]"} {
		got, err := evalsha(t, c, "append", key, "m", "p", "0", "0")
		if err != nil || got != want {
			t.Errorf("append #%d = %s, %v; want %s", i+1, got, err, want)
		}
	}
	if h := raw(t, c, key).Hash; h["m"] != "99999999999999:p" || h["_seq"] != "99999999999999" {
		t.Errorf("hash after append = %v, want m = \"99999999999999:p\", _seq 99999999999999", h)
	}
	if got, err := evalsha(t, c, "unacked", key); err != nil || got != `[1700000000000000 "0" "m" "99999999999999:p"]` {
		t.Errorf("unacked = %s, %v; want the epoch an integer and the seq exact", got, err)
	}

	do(t, c, "HSET", key, "_seq", "9007199254740991")
	before := raw(t, c, key)
	if got, err := evalsha(t, c, "append", key, "n", "p", "0", "0"); errCode(err) != "FULL" {
		t.Errorf("append at _seq 2^53-1 = %s, %v; want FULL", got, err)
	}
	if diff := cmp.Diff(before, raw(t, c, key), approxTTL); diff != "" {
		t.Errorf("a refused append changed the key (-before +after):\n%s", diff)
	}
	// A retry of a message already there still answers.
	if got, err := evalsha(t, c, "append", key, "m", "p", "0", "0"); err != nil || got != "[99999999999999 1700000000000000 0]" {
		t.Errorf("retry at _seq 2^53-1 = %s, %v", got, err)
	}
}

// The same through the Go store: seqs seeded at 99999999999998 continue exact
// through Append, Unacked and a retry.
func TestEdgeSeqExactStore(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	prefix := uniquePrefix(t)
	s := must.Store(store.NewOutbox(c, store.WithPrefix(prefix)))
	do(t, c, "HSET", prefix+"c", "_seq", "99999999999998", "_gen", "0", "_epoch", "1700000000000000", "_rid", outboxRid(t, c))
	a, err := s.AppendWithID(ctx, "c", "m1", []byte("p1"))
	if err != nil || a.Seq != 99999999999999 || !a.Created || a.Epoch != 1700000000000000 {
		t.Fatalf("AppendWithID = %+v, %v; want seq 99999999999999", a, err)
	}
	a2, err := s.AppendWithID(ctx, "c", "m2", []byte("p2"))
	if err != nil || a2.Seq != 100000000000000 {
		t.Fatalf("second AppendWithID = %+v, %v; want seq 100000000000000", a2, err)
	}
	r, err := s.AppendWithID(ctx, "c", "m1", []byte("p1"))
	if err != nil || r.Seq != 99999999999999 || r.Created {
		t.Errorf("retry = %+v, %v; want seq 99999999999999, not created", r, err)
	}
	msgs, err := s.Unacked(ctx, "c")
	want := []store.Message{{ID: "m1", Seq: 99999999999999, Payload: []byte("p1")}, {ID: "m2", Seq: 100000000000000, Payload: []byte("p2")}}
	if err != nil || !cmp.Equal(want, msgs) {
		t.Errorf("Unacked = %+v, %v; want %+v", msgs, err, want)
	}
	do(t, c, "HSET", prefix+"c", "_seq", "9007199254740991")
	if _, err := s.AppendWithID(ctx, "c", "m3", []byte("p3")); !errors.Is(err, store.ErrOutboxFull) {
		t.Errorf("AppendWithID at _seq 2^53-1 = %v, want ErrOutboxFull", err)
	}
}

// advance.lua on an absent connection creates the fence-only incarnation.
func TestEdgeAdvanceAbsent(t *testing.T) {
	got, code, _, after := edgeRun(t, "advance", nil, "2", "60000")
	if got != "1" || code != "" {
		t.Fatalf("advance on no connection = %s (error %q), want 1", got, code)
	}
	if after.Type != "hash" || after.Hash["_seq"] != "0" || after.Hash["_gen"] != "2" || len(after.Hash) != 4 ||
		len(after.Hash["_epoch"]) != 16 || len(after.Hash["_rid"]) != 40 || after.PTTL <= 55000 || after.PTTL > 60000 {
		t.Errorf("after advance on no connection: %+v, want {_seq 0, _gen 2, _epoch now, _rid the server's} with PTTL 60000", after)
	}
	got, code, _, after = edgeRun(t, "advance", nil, "0", "60000")
	if got != "0" || code != "" || after.Type != "none" {
		t.Errorf("advance to 0 on no connection = %s (error %q), key %s; want 0 and nothing created", got, code, after.Type)
	}
}
