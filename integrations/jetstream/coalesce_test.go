package jetstream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// TestCoalesce: 20 updates of one product published at once, consumed with
// WithCoalesce on a debounced Coalescer: every message is double-acked as
// coalesced (none redelivered), and the product is rebuilt once, with the
// last update, after the burst.
func TestCoalesce(t *testing.T) {
	e := newEnv(t, 0)
	c := e.consumer(t, "c", 2*time.Second)
	var mu sync.Mutex
	var runs []string
	co := must.Store(store.NewCoalescer(e.rc, func(ctx context.Context, key string, payload []byte) error {
		mu.Lock()
		runs = append(runs, key+"="+string(payload))
		mu.Unlock()
		return nil
	}, store.CoalesceOptions{Debounce: 300 * time.Millisecond}, store.WithPrefix(e.prefix+"co:")))
	defer co.Close()
	outcomes := map[jetstream.Outcome]int{}
	h := newHandler(t, e.claims, nil,
		jetstream.WithCoalesce(co, func(natsjs.Msg) (string, error) { return "product-1", nil }),
		jetstream.WithReport(func(_ natsjs.Msg, o jetstream.Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			outcomes[o]++
			if err != nil {
				t.Errorf("outcome %s: %v", o, err)
			}
		}))
	for i := 1; i <= 20; i++ {
		e.publish(t, "", "v"+string(rune('a'+i-1)))
	}
	cc, err := c.Consume(h.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n, o := len(runs), outcomes[jetstream.OutcomeCoalesced]
		mu.Unlock()
		if n >= 1 && o == 20 && pendingAcks(t, c) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: runs %v, outcomes %v, %d pending acks", runs, outcomes, pendingAcks(t, c))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1 || runs[0] != "product-1=vt" {
		t.Errorf("runs %v; want one, with the last update (vt)", runs)
	}
	if outcomes[jetstream.OutcomeCoalesced] != 20 || len(outcomes) != 1 {
		t.Errorf("outcomes %v; want 20 coalesced", outcomes)
	}
}

// TestCoalesceBadOption: WithCoalesce without a key function is refused.
func TestCoalesceBadOption(t *testing.T) {
	co := must.Store(store.NewMemoryCoalescer(func(context.Context, string, []byte) error { return nil }, store.CoalesceOptions{}))
	defer co.Close()
	_, err := jetstream.New(must.Store(store.NewMemoryClaims()), nil, jetstream.WithCoalesce(co, nil))
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("New with a nil coalescing key = %v, want ErrInvalidArgument", err)
	}
}
