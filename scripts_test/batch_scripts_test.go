package scripts_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// batchCase seeds raw keys, runs a batch script on several keys of one slot
// with EVALSHA, and checks the reply (or error code) and every key afterwards.
type batchCase struct {
	name  string
	seed  [][]string // raw commands; "$1", "$2"... stand for the keys
	keys  []int      // the KEYS, by number: {1, 2, 1} is $1 $2 $1
	args  []string
	want  string // rendered reply, when errc is ""
	errc  string // expected error code; every key must be unchanged
	after map[int]rawKey
}

func runBatchCases(t *testing.T, script string, cases []batchCase) {
	t.Helper()
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	s, _ := redisonce.Get(script)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := keyFor(t, "rawbatch:{") + "}:"
			name := func(i int) string { return fmt.Sprint(base, i) }
			for _, cmd := range tc.seed {
				args := make([]string, len(cmd))
				for i, a := range cmd {
					for n := 1; n <= 4; n++ {
						a = strings.ReplaceAll(a, fmt.Sprint("$", n), name(n))
					}
					args[i] = a
				}
				do(t, c, args...)
			}
			before := map[int]rawKey{}
			for n := 1; n <= 4; n++ {
				before[n] = raw(t, c, name(n))
			}
			keys := make([]string, len(tc.keys))
			for i, n := range tc.keys {
				keys[i] = name(n)
			}
			cmd := c.B().Evalsha().Sha1(s.SHA1).Numkeys(int64(len(keys))).Key(keys...).Arg(tc.args...).Build()
			if s.ReadOnly {
				cmd = c.B().EvalshaRo().Sha1(s.SHA1).Numkeys(int64(len(keys))).Key(keys...).Arg(tc.args...).Build()
			}
			lo := serverFence(t, c)
			m, err := c.Do(context.Background(), cmd).ToMessage()
			hi := serverFence(t, c)
			after := map[int]rawKey{}
			for n := 1; n <= 4; n++ {
				after[n] = raw(t, c, name(n))
			}
			if tc.errc != "" {
				if code := errCode(err); code != tc.errc {
					t.Fatalf("error = %v, want code %s", err, tc.errc)
				}
				if diff := cmp.Diff(before, after, approxTTL); diff != "" {
					t.Errorf("a refused call changed keys (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("error = %v, want reply %s", err, tc.want)
			}
			if got := normFences(batchReply(m), lo, hi); got != tc.want {
				t.Errorf("reply = %s, want %s", got, tc.want)
			}
			want := map[int]rawKey{}
			for n := 1; n <= 4; n++ {
				want[n] = absent
				if k, ok := tc.after[n]; ok {
					want[n] = k
				}
			}
			if diff := cmp.Diff(want, after, approxTTL); diff != "" {
				t.Errorf("keys afterwards (-want +got):\n%s", diff)
			}
		})
	}
}

// batchReply is reply with an error element rendered as ERR:<code>.
func batchReply(m rueidis.RedisMessage) string {
	arr, err := m.ToArray()
	if err != nil {
		return reply(m)
	}
	parts := make([]string, len(arr))
	for i, e := range arr {
		if err := e.Error(); err != nil {
			parts[i] = "ERR:" + errCode(err)
			continue
		}
		parts[i] = reply(e)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func TestScriptClaimMany(t *testing.T) {
	str := func(v string, pttl int64) rawKey { return rawKey{Type: "string", Str: v, PTTL: pttl} }
	seed := [][]string{{"SET", "$2", "1"}, {"SET", "$3", "~tok", "PX", "60000"}}
	seeded := map[int]rawKey{2: done, 3: leased}
	with := func(m map[int]rawKey, n int, k rawKey) map[int]rawKey {
		out := map[int]rawKey{n: k}
		for i, v := range m {
			if i != n {
				out[i] = v
			}
		}
		return out
	}
	runBatchCases(t, "claim_many", []batchCase{
		{name: "one absent", keys: []int{1}, args: []string{"0", "1"}, want: "[1]", after: map[int]rawKey{1: done}},
		{name: "mixed/no ttl", seed: seed, keys: []int{1, 2, 3}, args: []string{"0", "1"}, want: "[1 0 -1]",
			after: with(seeded, 1, done)},
		{name: "mixed/ttl", seed: seed, keys: []int{3, 1, 2}, args: []string{"5000", "1"}, want: "[-1 1 0]",
			after: with(seeded, 1, str("1", 5000))},
		{name: "lease", seed: seed, keys: []int{1, 4}, args: []string{"60000", "~tok"}, want: "[{fence} {fence}]",
			after: with(with(seeded, 1, leased), 4, leased)},
		{name: "duplicates/first wins", keys: []int{1, 1, 2, 1}, args: []string{"0", "1"}, want: "[1 0 1 0]",
			after: map[int]rawKey{1: done, 2: done}},
		{name: "duplicates/lease first wins", keys: []int{1, 1}, args: []string{"60000", "~tok"}, want: "[{fence} -1]",
			after: map[int]rawKey{1: leased}},
		{name: "ttl with a leading zero", keys: []int{1}, args: []string{"05000", "1"}, want: "[1]",
			after: map[int]rawKey{1: str("1", 5000)}},
		{name: "a key of another type fails alone", seed: [][]string{{"HSET", "$2", "f", "v"}}, keys: []int{1, 2, 3},
			args: []string{"0", "1"}, want: "[1 ERR:CORRUPT 1]",
			after: map[int]rawKey{1: done, 2: {Type: "hash", Hash: map[string]string{"f": "v"}, PTTL: -1}, 3: done}},
		{name: "bad ttl", seed: seed, keys: []int{1, 4}, args: []string{"-1", "1"}, errc: "BADARG"},
		{name: "bad ttl/16 digits", keys: []int{1, 4}, args: []string{"1000000000000000", "1"}, errc: "BADARG"},
		{name: "bad value", keys: []int{1, 4}, args: []string{"0", "2"}, errc: "BADARG"},
		{name: "lease without ttl", keys: []int{1, 4}, args: []string{"0", "~tok"}, errc: "BADARG"},
		{name: "missing value", keys: []int{1, 4}, args: []string{"0"}, errc: "BADARG"},
		{name: "extra argument", keys: []int{1, 4}, args: []string{"0", "1", "x"}, errc: "BADARG"},
	})
}

func TestScriptSeenMany(t *testing.T) {
	seed := [][]string{{"SET", "$2", "1"}, {"SET", "$3", "~tok", "PX", "60000"}}
	runBatchCases(t, "seen_many", []batchCase{
		{name: "mixed", seed: seed, keys: []int{1, 2, 3, 2}, want: "[0 1 1 1]", after: map[int]rawKey{2: done, 3: leased}},
		{name: "one", keys: []int{4}, want: "[0]"},
		{name: "an argument", keys: []int{1}, args: []string{"x"}, errc: "BADARG"},
	})
}

func TestScriptAppendMany(t *testing.T) {
	two := outboxHash("7", "3", "a", "6:x", "b", "7:y")
	old := int64(1700000000000000)
	big := strings.Repeat("\x00:", 2<<20) // 4 MiB, the limit
	fresh := map[string]string{"_seq": "2", "_gen": "0", "_epoch": outboxEpochMark, "_rid": outboxRidMark, "m1": "1:hello", "m2": "2:"}
	many := make([]string, 0, 2+2*1001)
	many = append(many, "0", "0")
	for i := range 1001 {
		many = append(many, fmt.Sprint("m", i), "p")
	}
	runOutboxCases(t, "append_many", []outboxCase{
		{name: "new connection", args: []string{"0", "0", "m1", "hello", "m2", ""},
			want: []any{outboxEpochInt, int64(1), int64(1), int64(2), int64(1)}, after: fresh, afterTTL: -1},
		{name: "new connection with ttl", args: []string{"5000", "0", "m1", "hello", "m2", ""},
			want: []any{outboxEpochInt, int64(1), int64(1), int64(2), int64(1)}, after: fresh, afterTTL: 5000},
		{name: "new, retried and duplicate ids", seed: two, args: []string{"0", "0", "c", "pc", "a", "other", "d", "pd", "c", "again"},
			want:  []any{old, int64(8), int64(1), int64(6), int64(0), int64(9), int64(1), int64(8), int64(0)},
			after: outboxWith(two, "c", "8:pc", "d", "9:pd", "_seq", "9"), afterTTL: -1},
		{name: "all retried re-arms the ttl", seed: two, ttl: 1000, args: []string{"60000", "1", "b", "", "a", "", "b", ""},
			want: []any{old, int64(7), int64(0), int64(6), int64(0), int64(7), int64(0)}, after: two, afterTTL: 60000},
		{name: "ttl 0 keeps an expiry", seed: two, ttl: 100000, args: []string{"0", "0", "c", "z"},
			want: []any{old, int64(8), int64(1)}, after: outboxWith(two, "c", "8:z", "_seq", "8"), afterTTL: 100000},
		{name: "exactly fits", seed: two, args: []string{"0", "4", "c", "1", "a", "", "d", "2", "c", ""},
			want:  []any{old, int64(8), int64(1), int64(6), int64(0), int64(9), int64(1), int64(8), int64(0)},
			after: outboxWith(two, "c", "8:1", "d", "9:2", "_seq", "9"), afterTTL: -1},
		{name: "one too many: none appended", seed: two, args: []string{"0", "3", "c", "1", "d", "2"}, want: outboxErr("FULL")},
		{name: "new connection over the limit", args: []string{"0", "1", "c", "1", "d", "2"}, want: outboxErr("FULL")},
		{name: "payload at the limit", args: []string{"0", "0", "m", big},
			want:  []any{outboxEpochInt, int64(1), int64(1)},
			after: map[string]string{"_seq": "1", "_gen": "0", "_epoch": outboxEpochMark, "_rid": outboxRidMark, "m": "1:" + big}, afterTTL: -1},

		// As append.lua: a hash that came through a failover or restart
		// (another _rid, or none: written before _rid existed) gets a new
		// epoch before anything else, also when every id is a retry; seq
		// goes on. The limit counts messages only, with or without _rid.
		{name: "another replication id", seed: outboxWith(two, "_rid", outboxOtherRid), args: []string{"0", "0", "c", "z", "d", "w"},
			want:  []any{outboxEpochInt, int64(8), int64(1), int64(9), int64(1)},
			after: outboxWith(two, "c", "8:z", "d", "9:w", "_seq", "9", "_epoch", outboxEpochMark), afterTTL: -1},
		{name: "no replication id", seed: outboxWith(two, "_rid", "-"), args: []string{"0", "0", "c", "z"},
			want:  []any{outboxEpochInt, int64(8), int64(1)},
			after: outboxWith(two, "c", "8:z", "_seq", "8", "_epoch", outboxEpochMark), afterTTL: -1},
		{name: "retries on another replication id", seed: outboxWith(two, "_rid", outboxOtherRid), ttl: 1000, args: []string{"60000", "0", "b", "", "a", "x"},
			want:  []any{outboxEpochInt, int64(7), int64(0), int64(6), int64(0)},
			after: outboxWith(two, "_epoch", outboxEpochMark), afterTTL: 60000},
		{name: "new and retried on another replication id", seed: outboxWith(two, "_rid", outboxOtherRid), args: []string{"0", "0", "a", "x", "c", "z"},
			want:  []any{outboxEpochInt, int64(6), int64(0), int64(8), int64(1)},
			after: outboxWith(two, "c", "8:z", "_seq", "8", "_epoch", outboxEpochMark), afterTTL: -1},
		{name: "new epoch above an epoch ahead of the clock", seed: outboxWith(two, "_rid", outboxOtherRid, "_epoch", "8999999999999999"),
			args: []string{"0", "0", "c", "z"}, want: []any{int64(9000000000000000), int64(8), int64(1)},
			after: outboxWith(two, "c", "8:z", "_seq", "8", "_epoch", "9000000000000000"), afterTTL: -1},
		{name: "a fence-only hash keeps its epoch", seed: outboxHash("0", "5"), args: []string{"0", "0", "c", "z"},
			want:  []any{outboxOldEpochInt, int64(1), int64(1)},
			after: outboxWith(outboxHash("0", "5"), "c", "1:z", "_seq", "1"), afterTTL: -1},
		{name: "no replication id, exactly fits", seed: outboxWith(two, "_rid", "-"), args: []string{"0", "4", "c", "z", "d", "w"},
			want:  []any{outboxEpochInt, int64(8), int64(1), int64(9), int64(1)},
			after: outboxWith(two, "c", "8:z", "d", "9:w", "_seq", "9", "_epoch", outboxEpochMark), afterTTL: -1},
		{name: "no epoch above 2^53-1", seed: outboxWith(two, "_rid", outboxOtherRid, "_epoch", "9007199254740991"),
			args: []string{"0", "0", "c", "z"}, want: outboxErr("FULL")},
		{name: "no epoch above 2^53-1, retries only", seed: outboxWith(two, "_rid", outboxOtherRid, "_epoch", "9007199254740991"),
			args: []string{"0", "0", "a", "x"}, want: outboxErr("FULL")},
		{name: "full on another replication id", seed: outboxWith(two, "_rid", outboxOtherRid), args: []string{"0", "3", "c", "z", "d", "w"}, want: outboxErr("FULL")},
		{name: "full without replication id", seed: outboxWith(two, "_rid", "-"), args: []string{"0", "3", "c", "z", "d", "w"}, want: outboxErr("FULL")},
		{name: "corrupt value on another replication id", seed: outboxWith(two, "_rid", outboxOtherRid, "c", "junk"), args: []string{"0", "0", "c", "z"}, want: outboxErr("CORRUPT")},

		{name: "payload over the limit, second", seed: two, args: []string{"0", "0", "c", "p", "d", big + "x"}, want: outboxErr("BADARG")},
		{name: "reserved id, second", seed: two, args: []string{"0", "0", "c", "p", "_seq", "p"}, want: outboxErr("BADARG")},
		{name: "empty id", args: []string{"0", "0", "", "p"}, want: outboxErr("BADARG")},
		{name: "id of 257 bytes", args: []string{"0", "0", strings.Repeat("i", 257), "p"}, want: outboxErr("BADARG")},
		{name: "odd pairs", seed: two, args: []string{"0", "0", "c", "p", "d"}, want: outboxErr("BADARG")},
		{name: "no messages", seed: two, args: []string{"0", "0"}, want: outboxErr("BADARG")},
		{name: "1001 messages", args: many, want: outboxErr("BADARG")},
		{name: "negative ttl", seed: two, args: []string{"-1", "0", "c", "p"}, want: outboxErr("BADARG")},
		{name: "text max", seed: two, args: []string{"0", "ten", "c", "p"}, want: outboxErr("BADARG")},
		{name: "not an outbox hash", seed: map[string]string{"foo": "bar"}, args: []string{"0", "0", "c", "p"}, want: outboxErr("CORRUPT")},
		{name: "seq would pass 2^53-1", seed: outboxHash("9007199254740990", "0"), args: []string{"0", "0", "c", "p", "d", "q"}, want: outboxErr("FULL")},
		{name: "seq up to 2^53-1", seed: outboxHash("9007199254740989", "0"), args: []string{"0", "0", "c", "p", "d", "q"},
			want:  []any{old, int64(9007199254740990), int64(1), int64(9007199254740991), int64(1)},
			after: outboxWith(outboxHash("9007199254740991", "0"), "c", "9007199254740990:p", "d", "9007199254740991:q"), afterTTL: -1},
		{name: "seq with a leading zero", seed: outboxWith(two, "_seq", "07"), args: []string{"0", "0", "c", "p"}, want: outboxErr("CORRUPT")},
		{name: "bad _seq", seed: outboxWith(two, "_seq", "-3"), args: []string{"0", "0", "c", "p"}, want: outboxErr("CORRUPT")},
		{name: "retry of a foreign value", seed: outboxWith(two, "c", "no seq here"), args: []string{"0", "0", "d", "p", "c", "p"}, want: outboxErr("CORRUPT")},
	})
}

// TestBatchScriptsCrossSlot: on a cluster, a batch script called with keys of
// two slots is refused by Redis with CROSSSLOT before it runs: nothing is
// written, not even the keys of the first slot.
func TestBatchScriptsCrossSlot(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, cluster3URL(t))
	loadScripts(t, c)
	base := keyFor(t, "crossslot:")
	a, b := base+"{a}1", base+"{b}1" // slots 15495 and 3300
	s, _ := redisonce.Get("claim_many")
	for _, n := range c.Nodes() {
		// Sent to each node as a raw command, bypassing rueidis's own slot check.
		err := n.Do(ctx, n.B().Arbitrary("EVALSHA", s.SHA1, "2", a, b, "0", "1").Build()).Error()
		if code := errCode(err); code != "CROSSSLOT" && code != "MOVED" {
			t.Errorf("EVALSHA claim_many with keys of two slots: %v, want CROSSSLOT (or MOVED)", err)
		}
	}
	for _, k := range []string{a, b} {
		if got := raw(t, c, k); got.Type != "none" {
			t.Errorf("%s after a refused call: %+v", k, got)
		}
	}
}

// TestClaimManySlotGrouping: random ids, many with hash tags (some empty or
// unclosed, which do not count as tags), on the 3-master cluster. The store
// must group them exactly as Redis hashes them: a key in the wrong group
// would make rueidis panic (cross-slot) or Redis answer CROSSSLOT.
func TestClaimManySlotGrouping(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, cluster3URL(t))
	s := must.Store(store.NewClaims(c, store.WithPrefix(uniquePrefix(t))))
	r := rand.New(rand.NewPCG(1, 2))
	parts := []string{"{", "}", "a", "b", "{t}", "{}", "x{y", "é", "{tag1}", "{tag2}"}
	ids := make([]string, 2000)
	for i := range ids {
		var b strings.Builder
		for range 1 + r.IntN(4) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		ids[i] = b.String()
	}
	seen := map[string]bool{}
	want := make([]bool, len(ids))
	for i, id := range ids {
		want[i] = !seen[id]
		seen[id] = true
	}
	got, err := s.ClaimMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClaimMany (-want +got):\n%s", diff)
	}
	all, err := s.SeenMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range all {
		if !ok {
			t.Fatalf("SeenMany: %q not seen after ClaimMany", ids[i])
		}
	}
	// Every key is where CLUSTER KEYSLOT says (the store's slot function and
	// Redis's agree): read each back on its own.
	for id := range seen {
		if ok, err := s.Seen(ctx, id); err != nil || !ok {
			t.Fatalf("Seen(%q) = %v, %v", id, ok, err)
		}
	}
}
