package streams_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/leaktest"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// runFrame is in the stack of every goroutine of a Run of package streams:
// its handlers, the goroutines kept for the next entry, its ack and sweep
// loops.
const runFrame = "redisonce/streams.(*run)"

// TestConsumerLeavesNoGoroutines: once Run has returned, none of its
// goroutines is left, the ones kept to handle the next entry included,
// batched or not.
func TestConsumerLeavesNoGoroutines(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run("batching="+strconv.FormatBool(batching), func(t *testing.T) {
			_, rc := newServer(t)
			claims := must.Store(store.NewClaims(rc, store.WithPrefix("g:")))
			var ev events
			h := func(context.Context, streams.Message) error { return nil }
			c, err := streams.New(rc, claims, "s", "g", "c1", h, streams.WithConcurrency(8), streams.WithObserver(&ev),
				streams.WithBatching(batching))
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			const n = 200
			for i := range n {
				xadd(t, rc, "s", "n", strconv.Itoa(i))
			}
			waitFor(t, 10*time.Second, "every entry acked", func() bool { return ev.get(store.Outcome("acked")) == n })
			if leaktest.Count(runFrame) == 0 {
				t.Fatal("no goroutine of the Run found while it runs: the stack match is wrong")
			}
			stop()
			if g := leaktest.Left(runFrame, 5*time.Second); g > 0 {
				t.Errorf("%d goroutines of the Run left 5 s after it returned", g)
			}
		})
	}
}
