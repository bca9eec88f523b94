package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
)

// CoalescerHarness tells TestCoalescer how to make and age a Coalescer under
// test.
type CoalescerHarness struct {
	// New returns a Coalescer running fn in modes o with opts applied,
	// isolated from every other one New returns (a fresh prefix), or the
	// constructor's error. The suite closes it.
	New func(t *testing.T, fn func(ctx context.Context, key string, payload []byte) error, o store.CoalesceOptions, opts ...store.Option) (*store.Coalescer, error)
	// Wait lets d pass (time.Sleep, or Clock.Advance for a fake clock).
	Wait func(d time.Duration)
	// Now is the store's clock (time.Now, or Clock.Now).
	Now func() time.Time
	// Tick is the unit of the modes' durations in the suite (Redis: 100ms);
	// a property is asserted with at least a tick of margin.
	Tick time.Duration
}

// runLog records a Coalescer's runs: payload, start and end on the harness's
// clock and in real time, the fence, and the most runs of one key at once.
type runLog struct {
	mu      sync.Mutex
	now     func() time.Time
	runs    []run
	active  map[string]int
	overlap int
}

type run struct {
	key, payload string
	start, end   time.Time // the harness's clock
	fence        uint64
}

func newRunLog(now func() time.Time) *runLog {
	return &runLog{now: now, active: map[string]int{}}
}

// fn returns a Coalescer's fn that logs each run, then calls body (nil: none).
func (l *runLog) fn(body func(ctx context.Context, key string, payload []byte) error) func(ctx context.Context, key string, payload []byte) error {
	return func(ctx context.Context, key string, payload []byte) error {
		lease, _ := store.LeaseFromContext(ctx)
		l.mu.Lock()
		l.active[key]++
		if l.active[key] > 1 {
			l.overlap++
		}
		i := len(l.runs)
		l.runs = append(l.runs, run{key: key, payload: string(payload), start: l.now(), fence: lease.Fence})
		l.mu.Unlock()
		var err error
		if body != nil {
			err = body(ctx, key, payload)
		}
		l.mu.Lock()
		l.active[key]--
		l.runs[i].end = l.now()
		l.mu.Unlock()
		return err
	}
}

func (l *runLog) snapshot() []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]run(nil), l.runs...)
}

// ended is the number of runs that returned.
func (l *runLog) ended() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.runs {
		if !r.end.IsZero() {
			n++
		}
	}
	return n
}

// waitRuns waits (real time, up to 10 s) until n runs have ended; with a
// fake clock it sweeps too.
func waitRuns(t *testing.T, l *runLog, c *store.Coalescer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.ended() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs ended within 10 s, want %d: %+v", l.ended(), n, l.snapshot())
		}
		if _, err := c.Sweep(context.Background()); err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCoalescer runs the Coalescer's contract against h's stores.
func TestCoalescer(t *testing.T, h CoalescerHarness) {
	if h.Tick <= 0 {
		h.Tick = 100 * time.Millisecond
	}
	if h.Now == nil {
		h.Now = time.Now
	}
	newC := func(t *testing.T, fn func(ctx context.Context, key string, payload []byte) error, o store.CoalesceOptions, opts ...store.Option) *store.Coalescer {
		t.Helper()
		c, err := h.New(t, fn, o, opts...)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx := context.Background()

	t.Run("KeepLastIfActive", func(t *testing.T) {
		// Five triggers while a run holds the key: each is kept, the later
		// replacing the earlier, and they cost one more run, with the last
		// payload, started after the last of them.
		l := newRunLog(h.Now)
		release := make(chan struct{})
		started := make(chan struct{}, 10)
		c := newC(t, l.fn(func(ctx context.Context, key string, payload []byte) error {
			started <- struct{}{}
			if string(payload) == "p0" {
				<-release
			}
			return nil
		}), store.CoalesceOptions{Lease: 10 * h.Tick})
		done := make(chan error, 1)
		go func() {
			ran, err := c.Trigger(ctx, "k", []byte("p0"))
			if err == nil && !ran {
				err = fmt.Errorf("the first trigger was not run: %v", ran)
			}
			done <- err
		}()
		<-started
		var lastSent time.Time
		for i := 1; i <= 5; i++ {
			lastSent = h.Now()
			ran, err := c.Trigger(ctx, "k", []byte(fmt.Sprintf("p%d", i)))
			if err != nil || ran {
				t.Fatalf("trigger %d during a run = ran %v, %v; want kept", i, ran, err)
			}
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		waitRuns(t, l, c, 2)
		h.Wait(h.Tick)
		runs := l.snapshot()
		if len(runs) != 2 || runs[0].payload != "p0" || runs[1].payload != "p5" {
			t.Fatalf("runs %+v; want p0, then p5 once", runs)
		}
		if runs[1].start.Before(lastSent) || runs[1].fence <= runs[0].fence {
			t.Errorf("the second run started at %v (last trigger sent at %v), fence %d after %d", runs[1].start, lastSent, runs[1].fence, runs[0].fence)
		}
		if l.overlap != 0 {
			t.Errorf("%d runs overlapped", l.overlap)
		}
	})

	t.Run("Background", func(t *testing.T) {
		// With Background, the trigger that wins the key returns at once and
		// its run goes on: the next triggers are kept and cost one run.
		l := newRunLog(h.Now)
		release := make(chan struct{})
		c := newC(t, l.fn(func(ctx context.Context, key string, payload []byte) error {
			if string(payload) == "a" {
				<-release
			}
			return nil
		}), store.CoalesceOptions{Lease: 10 * h.Tick, Background: true})
		ran, err := c.Trigger(ctx, "k", []byte("a"))
		if err != nil || !ran {
			t.Fatalf("a background trigger = ran %v, %v; want ran at once", ran, err)
		}
		for _, p := range []string{"b", "c"} {
			if ran, err := c.Trigger(ctx, "k", []byte(p)); err != nil || ran {
				t.Fatalf("trigger %s during the background run = ran %v, %v; want kept", p, ran, err)
			}
		}
		close(release)
		waitRuns(t, l, c, 2)
		h.Wait(h.Tick)
		if runs := l.snapshot(); len(runs) != 2 || runs[1].payload != "c" {
			t.Fatalf("runs %+v; want a, then c", runs)
		}
	})

	t.Run("IdleRunsAtOnce", func(t *testing.T) {
		l := newRunLog(h.Now)
		c := newC(t, l.fn(nil), store.CoalesceOptions{})
		for i := 0; i < 3; i++ {
			ran, err := c.Trigger(ctx, "k", []byte{byte('a' + i)})
			if err != nil || !ran {
				t.Fatalf("trigger %d on an idle key = ran %v, %v; want ran", i, ran, err)
			}
		}
		if runs := l.snapshot(); len(runs) != 3 || runs[0].fence >= runs[1].fence || runs[1].fence >= runs[2].fence {
			t.Fatalf("runs %+v: want 3, fences increasing", runs)
		}
	})

	t.Run("ConcurrentBurst", func(t *testing.T) {
		// Goroutines trigger one key at once while runs take a while: runs
		// never overlap, every trigger is covered by a run that started after
		// it was sent, and the runs are far fewer than the triggers.
		l := newRunLog(time.Now)
		c := newC(t, l.fn(func(ctx context.Context, key string, payload []byte) error {
			time.Sleep(20 * time.Millisecond)
			return nil
		}), store.CoalesceOptions{Lease: 10 * h.Tick})
		const workers, each = 8, 25
		var mu sync.Mutex
		var sent []time.Time
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					at := time.Now()
					if _, err := c.Trigger(ctx, "k", []byte(fmt.Sprintf("w%d-%d", w, i))); err != nil {
						t.Errorf("Trigger: %v", err)
						return
					}
					mu.Lock()
					sent = append(sent, at)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// The last run may still be going on: wait until the key is idle.
		deadline := time.Now().Add(10 * time.Second)
		for {
			runs := l.snapshot()
			last := runs[len(runs)-1]
			if !last.end.IsZero() && time.Since(last.end) > 5*h.Tick {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the runs did not settle within 10 s")
			}
			time.Sleep(h.Tick)
		}
		runs := l.snapshot()
		if l.overlap != 0 {
			t.Errorf("%d runs of the key overlapped", l.overlap)
		}
		for _, at := range sent {
			covered := false
			for _, r := range runs {
				if !r.start.Before(at) && !r.end.IsZero() {
					covered = true
					break
				}
			}
			if !covered {
				t.Fatalf("a trigger sent at %v is covered by no run that started after it (last run started %v)", at, runs[len(runs)-1].start)
			}
		}
		if len(runs) >= workers*each/2 {
			t.Errorf("%d runs for %d triggers: nothing coalesced", len(runs), workers*each)
		}
		t.Logf("%d triggers, %d runs", workers*each, len(runs))
	})

	t.Run("Debounce", func(t *testing.T) {
		// Debounce 5 ticks: each trigger moves the run to 5 ticks after it;
		// it runs once, with the last payload.
		l := newRunLog(h.Now)
		c := newC(t, l.fn(nil), store.CoalesceOptions{Debounce: 5 * h.Tick, MaxWait: 100 * h.Tick})
		ran, err := c.Trigger(ctx, "k", []byte("a"))
		if err != nil || ran {
			t.Fatalf("a debounced trigger = ran %v, %v; want kept", ran, err)
		}
		h.Wait(2 * h.Tick)
		if ran, err := c.Trigger(ctx, "k", []byte("b")); err != nil || ran {
			t.Fatalf("second trigger = ran %v, %v", ran, err)
		}
		h.Wait(4 * h.Tick)
		if _, err := c.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if runs := l.snapshot(); len(runs) != 0 {
			t.Fatalf("runs %+v 4 ticks after the last trigger; debounce is 5", runs)
		}
		h.Wait(2 * h.Tick)
		waitRuns(t, l, c, 1)
		h.Wait(h.Tick)
		c.Sweep(ctx)
		if runs := l.snapshot(); len(runs) != 1 || runs[0].payload != "b" {
			t.Fatalf("runs %+v; want one, with b", runs)
		}
	})

	t.Run("DebounceMaxWait", func(t *testing.T) {
		// Triggers every 2 ticks with a debounce of 4 would never run; a
		// MaxWait of 5 runs the next 5 ticks after its first trigger.
		l := newRunLog(h.Now)
		c := newC(t, l.fn(nil), store.CoalesceOptions{Debounce: 4 * h.Tick, MaxWait: 5 * h.Tick})
		start := h.Now()
		for i := 0; i < 2; i++ {
			if ran, err := c.Trigger(ctx, "k", []byte{byte('a' + i)}); err != nil || ran {
				t.Fatalf("trigger %d = ran %v, %v", i, ran, err)
			}
			h.Wait(2 * h.Tick)
		}
		// 4 ticks after the first: due at 5 (MaxWait), not 8 (debounce).
		if ran, err := c.Trigger(ctx, "k", []byte("c")); err != nil || ran {
			t.Fatalf("a trigger near the maximum wait = ran %v, %v; want kept", ran, err)
		}
		h.Wait(2 * h.Tick)
		waitRuns(t, l, c, 1)
		runs := l.snapshot()
		if len(runs) != 1 || runs[0].payload != "c" {
			t.Fatalf("runs %+v; want one, with c", runs)
		}
		if at := runs[0].start.Sub(start); at < 5*h.Tick-h.Tick/2 || at >= 8*h.Tick {
			t.Errorf("the run started %v after the first trigger; want from MaxWait (5 ticks), before the debounce of the last (8 ticks)", at)
		}
	})

	t.Run("Throttle", func(t *testing.T) {
		// Throttle 5 ticks: the first trigger runs, the next one within 5
		// ticks of that run's start is kept and runs 5 ticks after it.
		l := newRunLog(h.Now)
		c := newC(t, l.fn(nil), store.CoalesceOptions{Throttle: 5 * h.Tick})
		if ran, err := c.Trigger(ctx, "k", []byte("a")); err != nil || !ran {
			t.Fatalf("first throttled trigger = ran %v, %v; want ran", ran, err)
		}
		for _, p := range []string{"b", "c"} {
			ran, err := c.Trigger(ctx, "k", []byte(p))
			if err != nil || ran {
				t.Fatalf("trigger %s within the throttle = ran %v, %v; want kept", p, ran, err)
			}
		}
		h.Wait(3 * h.Tick)
		c.Sweep(ctx)
		if n := len(l.snapshot()); n != 1 {
			t.Fatalf("%d runs 3 ticks into a 5-tick throttle, want 1", n)
		}
		h.Wait(3 * h.Tick)
		waitRuns(t, l, c, 2)
		runs := l.snapshot()
		if len(runs) != 2 || runs[1].payload != "c" || runs[1].start.Sub(runs[0].start) < 5*h.Tick {
			t.Fatalf("runs %+v; want a then c, 5 ticks or more apart", runs)
		}
	})

	t.Run("FailureRetried", func(t *testing.T) {
		// A failed run keeps its payload as the key's next, due RetryDelay
		// later; a Permanent failure drops it.
		l := newRunLog(h.Now)
		boom := errors.New("boom")
		var mu sync.Mutex
		fails := map[string]int{"retry": 1}
		c := newC(t, l.fn(func(ctx context.Context, key string, payload []byte) error {
			mu.Lock()
			defer mu.Unlock()
			if string(payload) == "never" {
				return store.Permanent(boom)
			}
			if fails[string(payload)] > 0 {
				fails[string(payload)]--
				return boom
			}
			return nil
		}), store.CoalesceOptions{RetryDelay: 3 * h.Tick})
		ran, err := c.Trigger(ctx, "k", []byte("retry"))
		if !ran || !errors.Is(err, boom) {
			t.Fatalf("a failing run = ran %v, %v; want ran and fn's error", ran, err)
		}
		if ran, err := c.Trigger(ctx, "n", []byte("never")); !ran || !errors.Is(err, boom) {
			t.Fatalf("a permanent failure = ran %v, %v", ran, err)
		}
		h.Wait(4 * h.Tick)
		waitRuns(t, l, c, 3)
		h.Wait(4 * h.Tick)
		c.Sweep(ctx)
		var got []string
		for _, r := range l.snapshot() {
			got = append(got, r.key+":"+r.payload)
		}
		if strings.Join(got, " ") != "k:retry n:never k:retry" {
			t.Fatalf("runs %v; want k:retry, n:never, then k:retry once more", got)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		l := newRunLog(h.Now)
		c := newC(t, l.fn(nil), store.CoalesceOptions{})
		cases := []struct {
			name    string
			key     string
			payload []byte
			ctx     context.Context
			o       *store.CoalesceOptions
		}{
			{"empty key", "", nil, ctx, nil},
			{"key too long", strings.Repeat("k", store.MaxIDLen+1), nil, ctx, nil},
			{"payload too large", "k", make([]byte, (4<<20)+1), ctx, nil},
			{"nil context", "k", nil, nil, nil},
			{"negative lease", "k", nil, ctx, &store.CoalesceOptions{Lease: -1}},
			{"negative debounce", "k", nil, ctx, &store.CoalesceOptions{Debounce: -1}},
			{"negative throttle", "k", nil, ctx, &store.CoalesceOptions{Throttle: -time.Second}},
		}
		for _, tc := range cases {
			var err error
			if tc.o != nil {
				_, err = c.Trigger(tc.ctx, tc.key, tc.payload, *tc.o)
			} else {
				_, err = c.Trigger(tc.ctx, tc.key, tc.payload)
			}
			if !errors.Is(err, store.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", tc.name, err)
			}
		}
		if n := len(l.snapshot()); n != 0 {
			t.Fatalf("%d runs after bad input", n)
		}
		// Nothing was written: the key is idle and runs at once.
		if ran, err := c.Trigger(ctx, "k", nil); err != nil || !ran {
			t.Fatalf("a trigger after the bad input = ran %v, %v; want ran", ran, err)
		}
		if c, err := h.New(t, nil, store.CoalesceOptions{}); !errors.Is(err, store.ErrInvalidArgument) || c != nil {
			t.Errorf("New with a nil fn = %v, %v; want nil, ErrInvalidArgument", c, err)
		}
		if c, err := h.New(t, l.fn(nil), store.CoalesceOptions{Debounce: -1}); !errors.Is(err, store.ErrInvalidArgument) || c != nil {
			t.Errorf("New with negative options = %v, %v; want nil, ErrInvalidArgument", c, err)
		}
	})

	t.Run("LeaseInContext", func(t *testing.T) {
		// fn's context is the lease's: it carries the Lease, and has a deadline
		// no later than the lease from the start.
		var got store.Lease
		var deadline time.Time
		var began time.Time
		c := newC(t, func(ctx context.Context, key string, payload []byte) error {
			got, _ = store.LeaseFromContext(ctx)
			deadline, _ = ctx.Deadline()
			began = time.Now()
			return nil
		}, store.CoalesceOptions{Lease: 10 * h.Tick})
		ran, err := c.Trigger(ctx, "k", []byte("x"))
		if err != nil || !ran {
			t.Fatalf("Trigger = ran %v, %v", ran, err)
		}
		if got.ID != "k" || got.Token == "" || got.Fence == 0 || deadline.After(began.Add(10*h.Tick)) {
			t.Fatalf("lease %+v, deadline %v after the start; want the key, a token, a fence, deadline within the lease", got, deadline.Sub(began))
		}
	})
}
