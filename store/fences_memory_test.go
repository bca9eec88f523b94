package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// The memory twins' fences follow their clock (WithClock) in ns at µs
// precision, and never repeat or go back within a process: a clock that
// stands still, or one stepped back, still gets a higher fence. (Redis
// keeps no such state: a server clock stepped back is the documented limit,
// docs/guarantees.md "Fences"; scripts_test/fences_test.go shows it.)
func TestMemoryFencesFollowTheClock(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	claims := must.Store(store.NewMemoryClaims(store.WithClock(clock.Now)))
	records := must.Store(store.NewMemoryRecords(store.WithClock(clock.Now)))
	claimFence := func() uint64 {
		t.Helper()
		var f uint64
		if _, err := claims.Do(ctx, "m", time.Minute, func(ctx context.Context) error {
			l, _ := store.LeaseFromContext(ctx)
			f = l.Fence
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := claims.Forget(ctx, "m"); err != nil {
			t.Fatal(err)
		}
		return f
	}
	recordFence := func() uint64 {
		t.Helper()
		rec, ok, err := records.AcquireWith(ctx, "k", store.AcquireOptions{})
		if err != nil || !ok {
			t.Fatalf("AcquireWith = %v, %v", ok, err)
		}
		if err := records.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		return rec.Fence
	}

	now := uint64(clock.Now().UnixMicro()) * 1000
	c1, r1 := claimFence(), recordFence()
	if c1 != now || r1 != now {
		t.Errorf("fences at a clock of %d ns: claim %d, record %d; want the clock's", now, c1, r1)
	}
	// The clock stands still: + 1.
	if c2, r2 := claimFence(), recordFence(); c2 != c1+1 || r2 != r1+1 {
		t.Errorf("fences with the clock standing still: %d, %d; want %d, %d", c2, r2, c1+1, r1+1)
	}
	// The clock moves on: its fence.
	clock.Advance(time.Second)
	c3, r3 := claimFence(), recordFence()
	if c3 != now+uint64(time.Second) || r3 != c3 {
		t.Errorf("fences a second later: %d, %d; want %d", c3, r3, now+uint64(time.Second))
	}
	// The clock steps back an hour: each twin remembers its last fence.
	clock.Advance(-time.Hour)
	if c4, r4 := claimFence(), recordFence(); c4 != c3+1 || r4 != r3+1 {
		t.Errorf("fences after the clock stepped back: claim %d, record %d; want %d, %d", c4, r4, c3+1, r3+1)
	}
}
