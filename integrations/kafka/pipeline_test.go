package kafka_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// TestPipelineGoesOnWhenTheCommitIsInFirst: a record whose Do has returned
// done (its commit in) by the time the partition looks at it, the fn's
// "returned nil" waiting beside it, lets the next record start like one
// whose fn was seen returning first. A loaded machine delays the partition's
// goroutine that long now and then; the hook delays it every time (the
// memory twin commits in microseconds), and the partition must handle every
// record. Before the fix it stopped at the first record whose done result
// it happened to read first, silently.
func TestPipelineGoesOnWhenTheCommitIsInFirst(t *testing.T) {
	kafka.SetTestHookStarted(func() { time.Sleep(2 * time.Millisecond) })
	defer kafka.SetTestHookStarted(nil)
	const n = 300
	e := newEnv(t, 1)
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, payment(0, fmt.Sprintf("pay-%d", i)))
	}
	e.produce(t, rs...)
	var done atomic.Int64
	c, err := kafka.New(must.Store(store.NewMemoryClaims()), func(context.Context, *kgo.Record) error { return nil },
		e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")),
		kafka.WithReport(func(_ *kgo.Record, o kafka.Outcome, _ error) {
			if o == kafka.OutcomeDone {
				done.Add(1)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	defer stop()
	if !waitFor(20*time.Second, func() bool { return done.Load() == n }) {
		t.Fatalf("%d of %d records done after 20 s: the partition stopped", done.Load(), n)
	}
}
