package scripts_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The coalescing scripts through redis-cli (TestNonGoCallers*): a non-Go
// caller triggers, takes, extends and finishes a key as the headers
// document, and a Go Coalescer on the same prefix sees what it did.

func init() {
	const fence = "1000000000000000000"
	redisCLICases["coalesce_trigger"] = []cliCase{
		{name: "idle: the caller runs", argv: []string{"tok", "60000", "0", "0", "0", "p"}, like: `1\n\d{19}`, check: coKept},
		{name: "held by a Go run's lease: kept", seed: coHoldGo, argv: []string{"tok", "60000", "0", "0", "0", "p"}, like: `0\n\d+`,
			check: coRunsAfter(0, "")},
		{name: "debounced 1 ms: kept, then a Go sweep runs it", argv: []string{"tok", "60000", "1", "0", "0", "p"}, like: `0\n1`,
			check: coRunsAfter(5*time.Millisecond, "p")},
		{name: "bad lease", argv: []string{"tok", "0", "0", "0", "0", "p"}, want: "BADARG", wantErr: true, check: coRuns},
	}
	redisCLICases["coalesce_take"] = []cliCase{
		{name: "a due next: taken", seed: coKeepRaw("n"), argv: []string{"tok", "60000"}, like: `1\n\d{19}\nn`, check: coKept},
		{name: "nothing pending", argv: []string{"tok", "60000"}, want: "-1", check: coRuns},
	}
	redisCLICases["coalesce_extend"] = []cliCase{
		{name: "own lease", seed: coHoldRaw(fence), argv: []string{"tok", "60000"}, want: "1", check: coKept},
		{name: "another's lease", seed: coHoldRaw(fence), argv: []string{"other", "60000"}, want: "0", check: coKept},
	}
	redisCLICases["coalesce_finish"] = []cliCase{
		{name: "done, nothing pending", seed: coHoldRaw(fence), argv: []string{"tok", fence, "done", "1000", "60000", "0"}, want: "-1", check: coRuns},
		{name: "a Go trigger kept meanwhile: handed over", seed: func(t *testing.T, e *cliEnv, id string) {
			coHoldRaw(fence)(t, e, id)
			coTrigger(t, e, id, "g", false)
		}, argv: []string{"tok", fence, "done", "1000", "60000", "0"}, like: `1\n\d{19}\ng`, check: coKept},
		{name: "stale fence", seed: coHoldRaw(fence), argv: []string{"tok", "999", "done", "1000", "60000", "0"}, want: "STALE_OWNER", wantErr: true, check: coKept},
	}
}

// coalescer is a Go Coalescer on e's prefix whose runs are recorded.
func coalescer(t *testing.T, e *cliEnv, o store.CoalesceOptions) (*store.Coalescer, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var ran []string
	c := must.Store(store.NewCoalescer(e.raw, func(ctx context.Context, key string, payload []byte) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, string(payload))
		return nil
	}, o, store.WithPrefix(e.prefix)))
	t.Cleanup(func() { c.Close() })
	return c, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ran...)
	}
}

// coTrigger triggers id through Go and checks whether it ran.
func coTrigger(t *testing.T, e *cliEnv, id, payload string, wantRan bool) {
	t.Helper()
	c, _ := coalescer(t, e, store.CoalesceOptions{})
	ran, err := c.Trigger(e.ctx, id, []byte(payload))
	if err != nil || ran != wantRan {
		t.Fatalf("Coalescer.Trigger(%q) = %v, %v; want ran %v", id, ran, err, wantRan)
	}
}

// coKept: a Go trigger of id is kept: a run (the redis-cli caller's) holds it.
func coKept(t *testing.T, e *cliEnv, id string) { coTrigger(t, e, id, "g", false) }

// coRuns: a Go trigger of id runs at once: nothing holds it.
func coRuns(t *testing.T, e *cliEnv, id string) { coTrigger(t, e, id, "g", true) }

// coRunsAfter: after d, a Go Sweep runs want ("" = nothing).
func coRunsAfter(d time.Duration, want string) func(t *testing.T, e *cliEnv, id string) {
	return func(t *testing.T, e *cliEnv, id string) {
		t.Helper()
		time.Sleep(d)
		c, ran := coalescer(t, e, store.CoalesceOptions{})
		if _, err := c.Sweep(e.ctx); err != nil {
			t.Fatal(err)
		}
		got := ran()
		found := false
		for _, p := range got {
			found = found || p == want
		}
		if (want == "") != (len(got) == 0) || (want != "" && !found) {
			t.Fatalf("a Go sweep ran %q, want %q", got, want)
		}
	}
}

// coHoldGo holds id with a Go trigger whose lease a run keeps (the run
// blocks until the test ends).
func coHoldGo(t *testing.T, e *cliEnv, id string) {
	t.Helper()
	started, release := make(chan struct{}), make(chan struct{})
	c := must.Store(store.NewCoalescer(e.raw, func(ctx context.Context, key string, payload []byte) error {
		close(started)
		<-release
		return nil
	}, store.CoalesceOptions{}, store.WithPrefix(e.prefix)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.Trigger(e.ctx, id, []byte("held"))
	}()
	<-started
	t.Cleanup(func() { close(release); <-done; c.Close() })
}

// coKeepRaw writes the hash of an idle key whose next, payload, is due.
func coKeepRaw(payload string) func(t *testing.T, e *cliEnv, id string) {
	return func(t *testing.T, e *cliEnv, id string) {
		t.Helper()
		now := time.Now().UnixMilli()
		do(t, e.raw, "HSET", e.prefix+id, "next", payload, "due", strconv.FormatInt(now-1000, 10), "first", strconv.FormatInt(now-1000, 10))
	}
}

// coHoldRaw writes the hash of a run held by token "tok" at fence, as
// coalesce_trigger leaves it.
func coHoldRaw(fence string) func(t *testing.T, e *cliEnv, id string) {
	return func(t *testing.T, e *cliEnv, id string) {
		t.Helper()
		now := time.Now().UnixMilli()
		do(t, e.raw, "HSET", e.prefix+id, "tok", "tok", "lease", strconv.FormatInt(now+60000, 10), "fence", fence, "run", "p", "last", strconv.FormatInt(now, 10))
	}
}
