package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// The memory Coalescer on a fake clock (nothing runs on a timer: the suite
// moves the clock and sweeps) and on the real one (its watch timers run the
// due nexts).
func TestMemoryCoalescer(t *testing.T) {
	t.Run("FakeClock", func(t *testing.T) {
		clock := storetest.NewClock()
		storetest.TestCoalescer(t, storetest.CoalescerHarness{
			New: func(t *testing.T, fn func(ctx context.Context, key string, payload []byte) error, o store.CoalesceOptions, opts ...store.Option) (*store.Coalescer, error) {
				return store.NewMemoryCoalescer(fn, o, append(opts, store.WithClock(clock.Now))...)
			},
			Wait: clock.Advance,
			Now:  clock.Now,
		})
	})
	t.Run("RealClock", func(t *testing.T) {
		storetest.TestCoalescer(t, storetest.CoalescerHarness{
			New: func(t *testing.T, fn func(ctx context.Context, key string, payload []byte) error, o store.CoalesceOptions, opts ...store.Option) (*store.Coalescer, error) {
				return store.NewMemoryCoalescer(fn, o, opts...)
			},
			Wait: time.Sleep,
			Now:  time.Now,
			Tick: 50 * time.Millisecond,
		})
	})
}
