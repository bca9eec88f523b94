package jetstream_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/internal/leaktest"
)

// batchFrame is in the stack of every goroutine of a batch of
// Handler.Consume or ProcessBatch: the loop, the messages' settlements and
// the goroutines kept for the next message.
const batchFrame = "integrations/jetstream.(*batcher)"

// TestBatchesLeaveNoGoroutines: once Consume's Closed is closed, and once
// ProcessBatch has returned, none of their goroutines is left, the ones kept
// to settle the next message included.
func TestBatchesLeaveNoGoroutines(t *testing.T) {
	e := newEnv(t, 0)
	cons := e.consumer(t, "c", 30*time.Second)
	const n = 100
	for i := range n {
		e.publish(t, "m"+strconv.Itoa(i), strconv.Itoa(i))
	}
	var done atomic.Int64
	h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error { return nil },
		jetstream.WithReport(func(_ natsjs.Msg, o jetstream.Outcome, _ error) {
			if o == jetstream.OutcomeDone {
				done.Add(1)
			}
		}))
	cc, err := h.Consume(cons)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); done.Load() < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if done.Load() != n {
		t.Fatalf("%d of %d messages done", done.Load(), n)
	}
	if leaktest.Count(batchFrame) == 0 {
		t.Fatal("no goroutine of Consume's batches found while it runs: the stack match is wrong")
	}
	cc.Stop()
	select {
	case <-cc.Closed():
	case <-time.After(10 * time.Second):
		t.Fatal("Closed not closed 10 s after Stop")
	}
	noneLeft := func(what string) {
		t.Helper()
		if g := leaktest.Left(batchFrame, 5*time.Second); g > 0 {
			t.Errorf("%d goroutines of the batches left 5 s after %s", g, what)
		}
	}
	noneLeft("Closed")

	// ProcessBatch over a fetch of redelivered-free new messages.
	for i := range 20 {
		e.publish(t, "p"+strconv.Itoa(i), strconv.Itoa(i))
	}
	pull := e.consumer(t, "p", 30*time.Second)
	batch, err := pull.Fetch(n+20, natsjs.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []natsjs.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		t.Fatal("the fetch returned no message")
	}
	if _, err := h.ProcessBatch(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	noneLeft("ProcessBatch returned")
}
