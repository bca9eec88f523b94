package scripts_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
)

// Table tests of the coalescing scripts, driven by EVALSHA: seed a raw hash
// (times relative to the server's clock), run the script, compare the reply
// and the raw key. Every error case checks that nothing changed.
//
// In a seeded or wanted hash and in a wanted reply, "{now+N}" / "{now-N}" is
// the server time in ms plus or minus N (a wanted one within 2 s of it),
// "{fence}" a clock fence (19 digits, the server's TIME in ns at µs
// precision, taken during the call), "{wait N}" an integer in (N-2000, N].

type coCase struct {
	name  string
	seed  map[string]string // nil: no key
	ttl   int64             // the seeded key's PTTL (ms); 0: none
	args  []string
	want  []string // the reply's elements as strings, with the marks above; or {"ERR CODE"}
	after map[string]string
	// afterTTL: -1 no expiry, -2 no key, N > 0 a ceiling (within 5 s below)
	afterTTL int64
}

func coHash(pairs ...string) map[string]string {
	h := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		h[pairs[i]] = pairs[i+1]
	}
	return h
}

// coWith is a copy of h with the pairs set; "-" deletes a field.
func coWith(h map[string]string, pairs ...string) map[string]string {
	out := map[string]string{}
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

func serverMS(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	tm, err := c.Do(context.Background(), c.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return s*1000 + us/1000
}

// coSeedValue renders a seeded value's {now±N}.
func coSeedValue(v string, now int64) string {
	if strings.HasPrefix(v, "{now") && strings.HasSuffix(v, "}") {
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(v, "{now"), "}"), 10, 64)
		return strconv.FormatInt(now+n, 10)
	}
	return v
}

// coMatch reports whether got matches the wanted value with its marks.
func coMatch(want, got string, t0, t1 int64) bool {
	switch {
	case want == "{fence}":
		f, err := strconv.ParseUint(got, 10, 64)
		return err == nil && len(got) == 19 && f >= uint64(t0)*1_000_000 && f <= uint64(t1+1)*1_000_000
	case strings.HasPrefix(want, "{wait "):
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(want, "{wait "), "}"), 10, 64)
		g, err := strconv.ParseInt(got, 10, 64)
		return err == nil && g > n-2000 && g <= n
	case strings.HasPrefix(want, "{now"):
		n, _ := strconv.ParseInt(coSeedValue(want, t0), 10, 64)
		g, err := strconv.ParseInt(got, 10, 64)
		return err == nil && g >= n-2000 && g <= n+2000
	}
	return want == got
}

func runCoCases(t *testing.T, script string, cases []coCase) {
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := keyFor(t, "co:")
			now := serverMS(t, c)
			if tc.seed != nil {
				args := []string{"HSET", key}
				for k, v := range tc.seed {
					args = append(args, k, coSeedValue(v, now))
				}
				do(t, c, args...)
				if tc.ttl > 0 {
					do(t, c, "PEXPIRE", key, strconv.FormatInt(tc.ttl, 10))
				}
			}
			before := raw(t, c, key)
			t0 := serverMS(t, c)
			got, err := evalshaMsg(c, script, key, tc.args...)
			t1 := serverMS(t, c)
			after := raw(t, c, key)
			if len(tc.want) == 1 && strings.HasPrefix(tc.want[0], "ERR ") {
				if code := errCode(err); code != strings.TrimPrefix(tc.want[0], "ERR ") {
					t.Fatalf("%s = %v, %v; want error %s", script, got, err, tc.want[0])
				}
				if diff := cmp.Diff(before, after, approxTTL); diff != "" {
					t.Errorf("an error reply changed the key (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", script, err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("reply %q, want %q", got, tc.want)
			}
			for i := range got {
				if !coMatch(tc.want[i], got[i], t0, t1) {
					t.Errorf("reply %q, want %q (element %d)", got, tc.want, i)
				}
			}
			if tc.after == nil {
				if after.Type != "none" {
					t.Errorf("the key is a %s %v, want none", after.Type, after.Hash)
				}
				return
			}
			if after.Type != "hash" {
				t.Fatalf("the key is a %s, want a hash %v", after.Type, tc.after)
			}
			for k := range after.Hash {
				if _, ok := tc.after[k]; !ok {
					t.Errorf("field %s = %q, want none", k, after.Hash[k])
				}
			}
			for k, v := range tc.after {
				g, ok := after.Hash[k]
				if !ok || !coMatch(v, g, t0, t1) {
					t.Errorf("field %s = %q (present %v), want %q; hash %v", k, g, ok, v, after.Hash)
				}
			}
			// The reply's fence is the one stored.
			if len(got) >= 2 && got[0] == "1" && after.Hash["fence"] != got[1] {
				t.Errorf("reply fence %s, stored %s", got[1], after.Hash["fence"])
			}
			switch {
			case tc.afterTTL == -1 && after.PTTL != -1:
				t.Errorf("PTTL %d, want none", after.PTTL)
			case tc.afterTTL > 0 && (after.PTTL > tc.afterTTL || after.PTTL < tc.afterTTL-5000):
				t.Errorf("PTTL %d, want about %d", after.PTTL, tc.afterTTL)
			}
		})
	}
}

// evalshaMsg runs script and returns its reply as strings (an array's
// elements, or the one integer).
func evalshaMsg(c rueidis.Client, name, key string, args ...string) ([]string, error) {
	s, ok := redisonce.Get(name)
	if !ok {
		return nil, fmt.Errorf("no script %q", name)
	}
	m, err := c.Do(context.Background(), c.B().Evalsha().Sha1(s.SHA1).Numkeys(1).Key(key).Arg(args...).Build()).ToMessage()
	if err != nil {
		return nil, err
	}
	if m.IsInt64() {
		n, _ := m.AsInt64()
		return []string{strconv.FormatInt(n, 10)}, nil
	}
	arr, err := m.ToArray()
	if err != nil {
		return nil, fmt.Errorf("reply %s: %w", m.String(), err)
	}
	out := make([]string, len(arr))
	for i := range arr {
		if arr[i].IsInt64() {
			n, _ := arr[i].AsInt64()
			out[i] = strconv.FormatInt(n, 10)
		} else if out[i], err = arr[i].ToString(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// States of a coalescing key.
var (
	coHeld      = coHash("tok", "tokA", "lease", "{now+60000}", "fence", "1000000000000000000", "run", "r", "last", "{now-1000}")
	coHeldNext  = coWith(coHeld, "next", "n", "due", "{now-500}", "first", "{now-800}")
	coDead      = coWith(coHeld, "lease", "{now-1}")
	coDeadNext  = coWith(coDead, "next", "n", "due", "{now-500}", "first", "{now-800}")
	coIdleNext  = coHash("fence", "1000000000000000000", "next", "n", "due", "{now-500}", "first", "{now-800}", "last", "{now-5000}")
	coLaterNext = coWith(coIdleNext, "due", "{now+3000}")
	coAhead     = coWith(coHeld, "fence", "9000000000000000009", "lease", "{now-1}")
	coTopFence  = coWith(coDead, "fence", "9999999999999999999")
)

func TestCoalesceTriggerScript(t *testing.T) {
	ran := coHash("tok", "tokB", "lease", "{now+30000}", "fence", "{fence}", "run", "p", "last", "{now}")
	runCoCases(t, "coalesce_trigger", []coCase{
		{name: "idle: runs", args: []string{"tokB", "30000", "0", "0", "0", "p"}, want: []string{"1", "{fence}"}, after: ran, afterTTL: -1},
		{name: "held: kept", seed: coHeld, args: []string{"tokB", "30000", "0", "0", "0", "p"}, want: []string{"0", "{wait 60000}"},
			after: coWith(coHeld, "next", "p", "due", "{now}", "first", "{now}"), afterTTL: -1},
		{name: "held with a next: replaced, first kept", seed: coHeldNext, args: []string{"tokB", "30000", "0", "0", "0", "p"},
			want: []string{"0", "{wait 60000}"}, after: coWith(coHeldNext, "next", "p", "due", "{now}"), afterTTL: -1},
		{name: "empty payload kept", seed: coHeld, args: []string{"tokB", "30000", "0", "0", "0", ""}, want: []string{"0", "{wait 60000}"},
			after: coWith(coHeld, "next", "", "due", "{now}", "first", "{now}")},
		{name: "dead holder: runs, the next replaced", seed: coDeadNext, args: []string{"tokB", "30000", "0", "0", "0", "p"},
			want: []string{"1", "{fence}"}, after: ran},
		{name: "fence ahead of the clock: + 1", seed: coAhead, args: []string{"tokB", "30000", "0", "0", "0", "p"},
			want: []string{"1", "9000000000000000010"}, after: coWith(ran, "fence", "9000000000000000010")},
		{name: "fence at its largest", seed: coTopFence, args: []string{"tokB", "30000", "0", "0", "0", "p"}, want: []string{"ERR FULL"}},
		{name: "debounce: kept until quiet", args: []string{"tokB", "30000", "5000", "50000", "0", "p"}, want: []string{"0", "{wait 5000}"},
			after: coHash("next", "p", "due", "{now+5000}", "first", "{now}")},
		{name: "debounce: capped by the maximum wait", seed: coIdleNext, args: []string{"tokB", "30000", "5000", "1000", "0", "p"},
			want: []string{"0", "{wait 200}"}, after: coWith(coIdleNext, "next", "p", "due", "{now+200}")},
		{name: "throttle: kept until last + throttle", seed: coHash("last", "{now-1000}"), ttl: 9000, args: []string{"tokB", "30000", "0", "0", "4000", "p"},
			want: []string{"0", "{wait 3000}"}, after: coHash("last", "{now-1000}", "next", "p", "due", "{now+3000}", "first", "{now}"), afterTTL: -1},
		{name: "throttle passed: runs", seed: coHash("last", "{now-5000}"), args: []string{"tokB", "30000", "0", "0", "4000", "p"},
			want: []string{"1", "{fence}"}, after: ran},
		{name: "bad lease", args: []string{"tokB", "0", "0", "0", "0", "p"}, want: []string{"ERR BADARG"}},
		{name: "bad debounce", seed: coHeld, args: []string{"tokB", "1000", "-1", "0", "0", "p"}, want: []string{"ERR BADARG"}},
		{name: "empty token", seed: coHeld, args: []string{"", "1000", "0", "0", "0", "p"}, want: []string{"ERR BADARG"}},
		{name: "corrupt time", seed: coWith(coHeld, "lease", "soon"), args: []string{"tokB", "1000", "0", "0", "0", "p"}, want: []string{"ERR CORRUPT"}},
		{name: "corrupt fence", seed: coWith(coHeld, "fence", "0100"), args: []string{"tokB", "1000", "0", "0", "0", "p"}, want: []string{"ERR CORRUPT"}},
	})
}

func TestCoalesceTakeScript(t *testing.T) {
	taken := func(h map[string]string, payload string) map[string]string {
		return coWith(h, "tok", "tokB", "lease", "{now+30000}", "fence", "{fence}", "run", payload, "last", "{now}", "next", "-", "due", "-", "first", "-")
	}
	runCoCases(t, "coalesce_take", []coCase{
		{name: "nothing there", args: []string{"tokB", "30000"}, want: []string{"-1"}},
		{name: "held, nothing pending", seed: coHeld, args: []string{"tokB", "30000"}, want: []string{"-1"}, after: coHeld},
		{name: "held, a next pending: wait", seed: coHeldNext, args: []string{"tokB", "30000"}, want: []string{"0", "{wait 60000}"}, after: coHeldNext},
		{name: "idle next due: taken", seed: coIdleNext, args: []string{"tokB", "30000"}, want: []string{"1", "{fence}", "n"}, after: taken(coIdleNext, "n")},
		{name: "idle next not due: wait", seed: coLaterNext, args: []string{"tokB", "30000"}, want: []string{"0", "{wait 3000}"}, after: coLaterNext},
		{name: "dead holder's next: taken", seed: coDeadNext, args: []string{"tokB", "30000"}, want: []string{"1", "{fence}", "n"}, after: taken(coDeadNext, "n")},
		{name: "dead holder, no next: its run again", seed: coDead, args: []string{"tokB", "30000"}, want: []string{"1", "{fence}", "r"}, after: taken(coDead, "r")},
		{name: "fence at its largest", seed: coTopFence, args: []string{"tokB", "30000"}, want: []string{"ERR FULL"}},
		{name: "bad lease", seed: coIdleNext, args: []string{"tokB", "x"}, want: []string{"ERR BADARG"}},
		{name: "corrupt", seed: coWith(coIdleNext, "due", "-5"), args: []string{"tokB", "30000"}, want: []string{"ERR CORRUPT"}},
	})
}

func TestCoalesceExtendScript(t *testing.T) {
	runCoCases(t, "coalesce_extend", []coCase{
		{name: "own lease", seed: coHeld, args: []string{"tokA", "90000"}, want: []string{"1"}, after: coWith(coHeld, "lease", "{now+90000}")},
		{name: "own lease, passed, nobody took it", seed: coDead, args: []string{"tokA", "90000"}, want: []string{"1"}, after: coWith(coHeld, "lease", "{now+90000}")},
		{name: "another's lease", seed: coHeld, args: []string{"tokB", "90000"}, want: []string{"0"}, after: coHeld},
		{name: "no holder", seed: coIdleNext, args: []string{"tokA", "90000"}, want: []string{"0"}, after: coIdleNext},
		{name: "nothing there", args: []string{"tokA", "90000"}, want: []string{"0"}},
		{name: "bad lease", seed: coHeld, args: []string{"tokA", "0"}, want: []string{"ERR BADARG"}},
	})
}

func TestCoalesceFinishScript(t *testing.T) {
	const f = "1000000000000000000"
	args := func(tok, fence, outcome string) []string { return []string{tok, fence, outcome, "2000", "30000", "0"} }
	handed := func(h map[string]string, payload string) map[string]string {
		return coWith(h, "lease", "{now+30000}", "fence", "{fence}", "run", payload, "last", "{now}", "next", "-", "due", "-", "first", "-")
	}
	runCoCases(t, "coalesce_finish", []coCase{
		{name: "done, nothing pending: deleted", seed: coHeld, args: args("tokA", f, "done"), want: []string{"-1"}},
		{name: "done, a next due: handed over", seed: coHeldNext, args: args("tokA", f, "done"), want: []string{"1", "{fence}", "n"}, after: handed(coHeldNext, "n")},
		{name: "done, a next later: left for a take", seed: coWith(coHeldNext, "due", "{now+4000}"), args: args("tokA", f, "done"),
			want: []string{"0", "{wait 4000}"}, after: coWith(coHeldNext, "due", "{now+4000}", "tok", "-", "lease", "-", "run", "-")},
		{name: "retry, nothing pending: the run's payload kept", seed: coHeld, args: args("tokA", f, "retry"),
			want: []string{"0", "{wait 2000}"}, after: coHash("fence", f, "last", "{now-1000}", "next", "r", "due", "{now+2000}", "first", "{now}")},
		{name: "retry, a next due: the next handed over", seed: coHeldNext, args: args("tokA", f, "retry"), want: []string{"1", "{fence}", "n"}, after: handed(coHeldNext, "n")},
		{name: "throttled idle: kept until last + throttle", seed: coHeld, args: []string{"tokA", f, "done", "0", "30000", "5000"},
			want: []string{"-1"}, after: coHash("fence", f, "last", "{now-1000}"), afterTTL: 4000},
		{name: "a passed lease nobody took: still ours", seed: coDead, args: args("tokA", f, "done"), want: []string{"-1"}},
		{name: "stale token", seed: coHeldNext, args: args("tokB", f, "done"), want: []string{"ERR STALE_OWNER"}},
		{name: "stale fence", seed: coHeldNext, args: args("tokA", "999", "done"), want: []string{"ERR STALE_OWNER"}},
		{name: "nothing there", args: args("tokA", f, "done"), want: []string{"ERR STALE_OWNER"}},
		{name: "bad outcome", seed: coHeld, args: args("tokA", f, "ok"), want: []string{"ERR BADARG"}},
		{name: "bad fence", seed: coHeld, args: args("tokA", "x1", "done"), want: []string{"ERR BADARG"}},
		{name: "bad lease", seed: coHeld, args: []string{"tokA", f, "done", "0", "0", "0"}, want: []string{"ERR BADARG"}},
	})
}
