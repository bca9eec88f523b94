package streams_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// outcomeLog records a Consumer's handle events in order.
type outcomeLog struct {
	mu   sync.Mutex
	outs []store.Outcome
	errs []error
}

func (l *outcomeLog) Observe(_ context.Context, ev store.Event) {
	if ev.Op != "handle" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outs, l.errs = append(l.outs, ev.Outcome), append(l.errs, ev.Err)
}

func (l *outcomeLog) get() ([]store.Outcome, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.outs), slices.Clone(l.errs)
}

// Every row of the outcome table (docs/integrations.md, "One behaviour per
// outcome"), on a real Redis: one entry per row, with id field "id" = "m1",
// the outcomes reported for it in order (repeated in_flight collapsed: a
// holder that extends its lease sends the entry round again), how often the
// handler ran, the claim key, the dead-letter stream's length and the
// group's pending count at the end.
func TestOutcomeTable(t *testing.T) {
	_, rc := newServer(t)
	boom := errors.New("boom")
	const lease = time.Second
	for i, tc := range []struct {
		name    string
		setup   func(t *testing.T, claims *store.Claims)
		h       func(ctx context.Context, n int) error // run n, from 1
		stop    bool                                   // stop the consumer once the handler runs
		want    []store.Outcome
		runs    int
		key     string // "" absent, "1" processed
		dead    int64  // entries in the dead-letter stream
		pending int64
	}{
		{name: "success", h: func(context.Context, int) error { return nil },
			want: []store.Outcome{store.Outcome("acked")}, runs: 1, key: "1"},
		{name: "duplicate", setup: func(t *testing.T, c *store.Claims) {
			if err := c.Remember(context.Background(), "m1"); err != nil {
				t.Fatal(err)
			}
		}, h: func(context.Context, int) error { return nil }, want: []store.Outcome{store.Outcome("duplicate")}, key: "1"},
		{name: "in flight", setup: func(t *testing.T, c *store.Claims) {
			holding := make(chan struct{})
			go func() {
				_, _ = c.Do(context.Background(), "m1", lease, func(context.Context) error {
					close(holding)
					time.Sleep(1500 * time.Millisecond)
					return nil
				})
			}()
			<-holding
		}, h: func(context.Context, int) error { return nil },
			want: []store.Outcome{store.Outcome("in_flight"), store.Outcome("duplicate")}, key: "1"},
		{name: "failure", h: func(_ context.Context, n int) error {
			if n == 1 {
				return boom
			}
			return nil
		}, want: []store.Outcome{store.Outcome("failed"), store.Outcome("acked")}, runs: 2, key: "1"},
		{name: "panic", h: func(_ context.Context, n int) error {
			if n == 1 {
				panic("kaboom")
			}
			return nil
		}, want: []store.Outcome{store.Outcome("failed"), store.Outcome("acked")}, runs: 2, key: "1"},
		{name: "permanent failure", h: func(context.Context, int) error { return store.Permanent(boom) },
			want: []store.Outcome{streams.OutcomeDeadLettered}, runs: 1, key: "1", dead: 1},
		{name: "shutdown", stop: true, h: func(ctx context.Context, _ int) error { <-ctx.Done(); return ctx.Err() },
			want: []store.Outcome{store.Outcome("released")}, runs: 1, pending: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, prefix := fmt.Sprintf("ot%d", i), fmt.Sprintf("ot%d:", i)
			claims, err := store.NewClaims(rc, store.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, claims)
			}
			var log outcomeLog
			var mu sync.Mutex
			runs := 0
			started := make(chan struct{}, 10)
			c, err := streams.New(rc, claims, stream, "g", "c1", func(ctx context.Context, m streams.Message) error {
				mu.Lock()
				runs++
				n := runs
				mu.Unlock()
				started <- struct{}{}
				return tc.h(ctx, n)
			}, streams.WithLease(lease), streams.WithIDField("id"), streams.WithRetryDelay(50*time.Millisecond),
				streams.WithReclaimInterval(20*time.Millisecond), streams.WithDeadLetter(stream+":dead", 5),
				streams.WithShutdownGrace(100*time.Millisecond), streams.WithObserver(&log))
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			xadd(t, rc, stream, "id", "m1")
			if tc.stop {
				select {
				case <-started:
				case <-time.After(10 * time.Second):
					t.Fatal("the handler never ran")
				}
				stop()
			}
			waitFor(t, 15*time.Second, fmt.Sprintf("a final outcome (want %v)", tc.want), func() bool {
				outs, _ := log.get()
				return len(outs) > 0 && outs[len(outs)-1] != store.Outcome("in_flight") && outs[len(outs)-1] != store.Outcome("failed")
			})
			time.Sleep(200 * time.Millisecond) // an outcome too many would show by now
			stop()
			outs, errs := log.get()
			if got := slices.Compact(slices.Clone(outs)); !slices.Equal(got, tc.want) {
				t.Errorf("outcomes %v (errors %v), want %v", outs, errs, tc.want)
			}
			if tc.name == "panic" && (errs[0] == nil || !strings.Contains(errs[0].Error(), "kaboom")) {
				t.Errorf("the panic was reported with %v, want its value", errs[0])
			}
			mu.Lock()
			defer mu.Unlock()
			if runs != tc.runs {
				t.Errorf("handler ran %d times, want %d", runs, tc.runs)
			}
			v, err := rc.Do(context.Background(), rc.B().Get().Key(prefix+"m1").Build()).ToString()
			if err != nil {
				v = ""
			}
			if v != tc.key {
				t.Errorf("claim key holds %q, want %q", v, tc.key)
			}
			dead, err := rc.Do(context.Background(), rc.B().Xlen().Key(stream+":dead").Build()).AsInt64()
			if err != nil || dead != tc.dead {
				t.Errorf("dead-letter stream holds %d entries (%v), want %d", dead, err, tc.dead)
			}
			if p := pending(t, rc, stream, "g"); p != tc.pending {
				t.Errorf("%d entries pending, want %d", p, tc.pending)
			}
		})
	}
}
