package scripts_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scriptCase seeds one raw key, runs a script on it with EVALSHA, and checks the
// reply (or error code) and the raw key afterwards.
type scriptCase struct {
	name string
	seed [][]string // raw commands; "$K" stands for the key
	args []string
	want string // rendered reply, when errc is ""
	// tol: want is an integer and the reply may differ from it by up to tol
	// (a time left, which shrinks while the test runs)
	tol   int64
	errc  string // expected error code (first word); the key must be unchanged
	after rawKey // the key afterwards (ignored when errc is set)
}

func runScriptCases(t *testing.T, script string, cases []scriptCase) {
	t.Helper()
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := keyFor(t, "raw:")
			for _, cmd := range tc.seed {
				args := make([]string, len(cmd))
				for i, a := range cmd {
					args[i] = strings.ReplaceAll(a, "$K", key)
				}
				do(t, c, args...)
			}
			before := raw(t, c, key)
			got, err := evalsha(t, c, script, key, tc.args...)
			if tc.errc != "" {
				if code := errCode(err); code != tc.errc {
					t.Fatalf("error = %v (reply %s), want code %s", err, got, tc.errc)
				}
				if diff := cmp.Diff(before, raw(t, c, key), approxTTL); diff != "" {
					t.Errorf("a refused call changed the key (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("error = %v, want reply %s", err, tc.want)
			}
			if tc.tol > 0 {
				n, nerr := strconv.ParseInt(got, 10, 64)
				w, _ := strconv.ParseInt(tc.want, 10, 64)
				if nerr != nil || n < w-tc.tol || n > w+tc.tol {
					t.Errorf("reply = %s, want %d..%d", got, w-tc.tol, w+tc.tol)
				}
			} else if got != tc.want {
				t.Errorf("reply = %s, want %s", got, tc.want)
			}
			if diff := cmp.Diff(tc.after, raw(t, c, key), approxTTL); diff != "" {
				t.Errorf("key afterwards (-want +got):\n%s", diff)
			}
		})
	}
}

var (
	absent    = rawKey{Type: "none", PTTL: -2}
	done      = rawKey{Type: "string", Str: "1", PTTL: -1}
	seedDone  = [][]string{{"SET", "$K", "1"}}
	seedLease = [][]string{{"SET", "$K", "~tok", "PX", "60000"}}
	seedHash  = [][]string{{"HSET", "$K", "f", "v"}}
	leased    = rawKey{Type: "string", Str: "~tok", PTTL: 60000}
)

func TestScriptClaim(t *testing.T) {
	long := "~" + strings.Repeat("t", 257)
	runScriptCases(t, "claim", []scriptCase{
		{name: "absent/no ttl", args: []string{"0", "1"}, want: "1", after: done},
		{name: "absent/ttl", args: []string{"5000", "1"}, want: "1", after: rawKey{Type: "string", Str: "1", PTTL: 5000}},
		{name: "absent/lease", args: []string{"60000", "~tok"}, want: "1", after: leased},
		{name: "processed", seed: seedDone, args: []string{"5000", "1"}, want: "0", after: done},
		{name: "processed by a SET NX deduper", seed: [][]string{{"SET", "$K", "1", "NX", "PX", "60000"}},
			args: []string{"1000", "~other"}, want: "0", after: rawKey{Type: "string", Str: "1", PTTL: 60000}},
		{name: "foreign value counts as processed", seed: [][]string{{"SET", "$K", "done"}},
			args: []string{"0", "1"}, want: "0", after: rawKey{Type: "string", Str: "done", PTTL: -1}},
		// in flight: the negative of the ms left on the holder's lease
		{name: "in flight", seed: seedLease, args: []string{"0", "1"}, want: "-60000", tol: 5000, after: leased},
		{name: "in flight/lease", seed: seedLease, args: []string{"1000", "~x"}, want: "-60000", tol: 5000, after: leased},
		{name: "in flight/no expiry (a foreign writer)", seed: [][]string{{"SET", "$K", "~tok"}},
			args: []string{"1000", "~x"}, want: "-1", after: rawKey{Type: "string", Str: "~tok", PTTL: -1}},
		{name: "bad ttl/negative", args: []string{"-1", "1"}, errc: "BADARG"},
		{name: "bad ttl/word", args: []string{"abc", "1"}, errc: "BADARG"},
		{name: "bad ttl/fraction", args: []string{"1.5", "1"}, errc: "BADARG"},
		{name: "bad ttl/empty", args: []string{"", "1"}, errc: "BADARG"},
		{name: "bad ttl/16 digits", args: []string{"1000000000000000", "1"}, errc: "BADARG"},
		{name: "bad value/empty", args: []string{"0", ""}, errc: "BADARG"},
		{name: "bad value/2", args: []string{"0", "2"}, errc: "BADARG"},
		{name: "bad value/bare tilde", args: []string{"100", "~"}, errc: "BADARG"},
		{name: "bad value/long token", args: []string{"100", long}, errc: "BADARG"},
		{name: "lease without ttl", args: []string{"0", "~tok"}, errc: "BADARG"},
		{name: "missing value", args: []string{"0"}, errc: "BADARG"},
		{name: "no args", args: nil, errc: "BADARG"},
		{name: "bad arg on existing key", seed: seedLease, args: []string{"x", "1"}, errc: "BADARG"},
		{name: "wrong type", seed: seedHash, args: []string{"0", "1"}, errc: "CORRUPT"},
	})
}

func TestScriptSeen(t *testing.T) {
	runScriptCases(t, "seen", []scriptCase{
		{name: "absent", want: "0", after: absent},
		{name: "processed", seed: seedDone, want: "1", after: done},
		{name: "in flight", seed: seedLease, want: "1", after: leased},
	})
}

func TestScriptForget(t *testing.T) {
	runScriptCases(t, "forget", []scriptCase{
		{name: "absent", want: "0", after: absent},
		{name: "processed", seed: seedDone, want: "1", after: absent},
		{name: "in flight", seed: seedLease, want: "1", after: absent},
	})
}

func TestScriptCommit(t *testing.T) {
	runScriptCases(t, "commit", []scriptCase{
		{name: "held/persist", seed: seedLease, args: []string{"tok", "0"}, want: "1", after: done},
		{name: "held/ttl", seed: seedLease, args: []string{"tok", "3000"}, want: "1",
			after: rawKey{Type: "string", Str: "1", PTTL: 3000}},
		{name: "held by another", seed: seedLease, args: []string{"other", "0"}, want: "-1", after: leased},
		{name: "prefix of the token", seed: seedLease, args: []string{"to", "0"}, want: "-1", after: leased},
		{name: "processed", seed: seedDone, args: []string{"tok", "0"}, want: "0", after: done},
		{name: "processed with a ttl", seed: [][]string{{"SET", "$K", "1", "PX", "60000"}}, args: []string{"tok", "0"}, want: "0",
			after: rawKey{Type: "string", Str: "1", PTTL: 60000}},
		{name: "absent/persist", args: []string{"tok", "0"}, want: "2", after: done},
		{name: "absent/ttl", args: []string{"tok", "3000"}, want: "2", after: rawKey{Type: "string", Str: "1", PTTL: 3000}},
		{name: "bad token/empty", seed: seedLease, args: []string{"", "0"}, errc: "BADARG"},
		{name: "bad token/long", seed: seedLease, args: []string{strings.Repeat("t", 257), "0"}, errc: "BADARG"},
		{name: "bad ttl", seed: seedLease, args: []string{"tok", "-5"}, errc: "BADARG"},
		{name: "missing ttl", seed: seedLease, args: []string{"tok"}, errc: "BADARG"},
		{name: "wrong type", seed: seedHash, args: []string{"tok", "0"}, errc: "CORRUPT"},
	})
}

func TestScriptExtend(t *testing.T) {
	runScriptCases(t, "extend", []scriptCase{
		{name: "held", seed: [][]string{{"SET", "$K", "~tok", "PX", "1000"}}, args: []string{"tok", "60000"}, want: "1", after: leased},
		{name: "held, leading zero", seed: [][]string{{"SET", "$K", "~tok", "PX", "1000"}}, args: []string{"tok", "060000"}, want: "1", after: leased},
		{name: "held by another", seed: seedLease, args: []string{"other", "5000"}, want: "0", after: leased},
		{name: "processed", seed: seedDone, args: []string{"tok", "5000"}, want: "0", after: done},
		{name: "absent", args: []string{"tok", "5000"}, want: "0", after: absent},
		{name: "bad token/empty", seed: seedLease, args: []string{"", "5000"}, errc: "BADARG"},
		{name: "bad lease/zero", seed: seedLease, args: []string{"tok", "0"}, errc: "BADARG"},
		{name: "bad lease/negative", seed: seedLease, args: []string{"tok", "-5"}, errc: "BADARG"},
		{name: "missing lease", seed: seedLease, args: []string{"tok"}, errc: "BADARG"},
	})
}

func TestScriptRelease(t *testing.T) {
	runScriptCases(t, "release", []scriptCase{
		{name: "held", seed: seedLease, args: []string{"tok"}, want: "1", after: absent},
		{name: "held by another", seed: seedLease, args: []string{"other"}, want: "0", after: leased},
		{name: "processed", seed: seedDone, args: []string{"tok"}, want: "0", after: done},
		{name: "absent", args: []string{"tok"}, want: "0", after: absent},
		{name: "bad token/empty", seed: seedLease, args: []string{""}, errc: "BADARG"},
		{name: "missing token", seed: seedLease, args: nil, errc: "BADARG"},
	})
}
