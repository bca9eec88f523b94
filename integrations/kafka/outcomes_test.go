package kafka_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/store"
)

// Every row of the outcome table (docs/integrations.md, "One behaviour per
// outcome"), on kfake and a real Redis: one record "p1" per row, the
// outcomes reported for it in order, how often fn ran and its effect
// happened, the claim key and the group's committed offset at the end.
func TestOutcomeTable(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		// setup runs before the consumer starts; hold, when set, returns once
		// another consumer holds the id.
		setup func(t *testing.T, e *env)
		// fn is the handler's work on attempt n (from 1), its effect counted
		// when it returns nil.
		fn       func(ctx context.Context, n int32) error
		stop     bool // stop Run once fn ran (a shutdown)
		want     []kafka.Outcome
		runs     int32
		effects  int32
		key      string // the claim key's value at the end ("" absent)
		offset   int64  // the committed offset at the end
		deadLets int32
	}{
		{name: "success", fn: func(context.Context, int32) error { return nil },
			want: []kafka.Outcome{kafka.OutcomeDone}, runs: 1, effects: 1, key: "1", offset: 1},
		{name: "duplicate", setup: func(t *testing.T, e *env) {
			if err := e.claims.Remember(context.Background(), "p1"); err != nil {
				t.Fatal(err)
			}
		}, fn: func(context.Context, int32) error { return nil },
			want: []kafka.Outcome{kafka.OutcomeDuplicate}, key: "1", offset: 1},
		{name: "in flight", setup: func(t *testing.T, e *env) {
			holding := make(chan struct{})
			go func() {
				_, _ = e.claims.Do(context.Background(), "p1", time.Second, func(context.Context) error {
					close(holding)
					time.Sleep(1500 * time.Millisecond)
					return nil
				})
			}()
			<-holding
		}, fn: func(context.Context, int32) error { return nil },
			want: []kafka.Outcome{kafka.OutcomeInFlight, kafka.OutcomeDuplicate}, key: "1", offset: 1},
		{name: "failure", fn: func(_ context.Context, n int32) error {
			if n == 1 {
				return boom
			}
			return nil
		}, want: []kafka.Outcome{kafka.OutcomeRetry, kafka.OutcomeDone}, runs: 2, effects: 1, key: "1", offset: 1},
		{name: "panic", fn: func(_ context.Context, n int32) error {
			if n == 1 {
				panic("kaboom")
			}
			return nil
		}, want: []kafka.Outcome{kafka.OutcomeRetry, kafka.OutcomeDone}, runs: 2, effects: 1, key: "1", offset: 1},
		{name: "permanent failure", fn: func(context.Context, int32) error { return store.Permanent(boom) },
			want: []kafka.Outcome{kafka.OutcomeDeadLetter}, runs: 1, offset: 1, deadLets: 1},
		{name: "shutdown", stop: true, fn: func(ctx context.Context, _ int32) error { <-ctx.Done(); return ctx.Err() },
			want: []kafka.Outcome{kafka.OutcomeRevoked}, runs: 1, offset: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			if tc.setup != nil {
				tc.setup(t, e)
			}
			e.produce(t, payment(0, "p1"))
			var runs, effects, deadLets atomic.Int32
			var mu sync.Mutex
			var got []kafka.Outcome
			var errs []error
			started := make(chan struct{}, 10)
			c, err := kafka.New(e.claims, func(ctx context.Context, r *kgo.Record) error {
				n := runs.Add(1)
				started <- struct{}{}
				if err := tc.fn(ctx, n); err != nil {
					return err
				}
				effects.Add(1)
				return nil
			}, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")), kafka.WithLease(time.Second),
				kafka.WithDeadLetter(func(context.Context, *kgo.Record, error) error { deadLets.Add(1); return nil }),
				kafka.WithReport(func(r *kgo.Record, o kafka.Outcome, err error) {
					if r.Offset < 0 {
						return // not the record's
					}
					mu.Lock()
					got, errs = append(got, o), append(errs, err)
					mu.Unlock()
				}))
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, c)
			if tc.stop {
				select {
				case <-started:
				case <-time.After(20 * time.Second):
					t.Fatal("fn never ran")
				}
				stop()
			}
			terminal := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got) > 0 && got[len(got)-1] != kafka.OutcomeInFlight && got[len(got)-1] != kafka.OutcomeRetry
			}
			if !waitFor(20*time.Second, terminal) {
				t.Fatalf("outcomes %v after 20 s, want %v", got, tc.want)
			}
			time.Sleep(300 * time.Millisecond) // an outcome too many would show by now
			stop()
			mu.Lock()
			defer mu.Unlock()
			// The holder of an id in flight extends its lease: the record
			// is tried again after each lease time left, as often as that
			// takes; one row of in_flight stands for them.
			if !slices.Equal(slices.Compact(slices.Clone(got)), tc.want) {
				t.Errorf("outcomes %v (errors %v), want %v", got, errs, tc.want)
			}
			if tc.name == "panic" && (len(errs) == 0 || errs[0] == nil || !strings.Contains(errs[0].Error(), "kaboom")) {
				t.Errorf("the panic's outcome came with %v, want its value", errs)
			}
			if runs.Load() != tc.runs || effects.Load() != tc.effects || deadLets.Load() != tc.deadLets {
				t.Errorf("fn ran %d times, effect %d, dead letters %d; want %d, %d, %d",
					runs.Load(), effects.Load(), deadLets.Load(), tc.runs, tc.effects, tc.deadLets)
			}
			v, err := e.rc.Do(context.Background(), e.rc.B().Get().Key(e.prefix+"claims:p1").Build()).ToString()
			if err != nil {
				v = ""
			}
			if v != tc.key {
				t.Errorf("claim key holds %q, want %q", v, tc.key)
			}
			if off := e.committed(t, 1)[0]; off != tc.offset {
				t.Errorf("committed offset %d, want %d", off, tc.offset)
			}
		})
	}
}
