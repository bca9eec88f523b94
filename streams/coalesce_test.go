package streams_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// TestConsumerCoalesce: 30 updates of one product and 3 of another, read in
// one batch while the first rebuild of each runs for 300 ms: every entry is
// acked (the kept ones as coalesced), each product is rebuilt at most twice,
// with its own entries, and rebuilds of one product never overlap. (The
// entries' handlers trigger concurrently: the second rebuild runs the entry
// whose trigger reached Redis last, not necessarily the newest id.)
func TestConsumerCoalesce(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("co-claims:")))
	var ev events
	var mu sync.Mutex
	runs := map[string][]string{} // sku -> entry ids rebuilt with
	active := map[string]int{}
	overlap := 0
	h := func(ctx context.Context, m streams.Message) error {
		if l, ok := store.LeaseFromContext(ctx); !ok || l.ID != m.Values["sku"] || l.Fence == 0 {
			t.Errorf("the handler's lease %+v, %v; want the sku's, with a fence", l, ok)
		}
		mu.Lock()
		runs[m.ClaimID] = append(runs[m.ClaimID], m.ID)
		active[m.ClaimID]++
		if active[m.ClaimID] > 1 {
			overlap++
		}
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		active[m.ClaimID]--
		mu.Unlock()
		return nil
	}
	of := map[string]string{} // entry id -> sku
	for i := 0; i < 30; i++ {
		of[xadd(t, rc, "products", "sku", "sku-1", "n", "x")] = "sku-1"
		if i%10 == 0 {
			of[xadd(t, rc, "products", "sku", "sku-2", "n", "y")] = "sku-2"
		}
	}
	c, err := streams.New(rc, claims, "products", "index", "c1", h, streams.WithObserver(&ev), streams.WithLease(2*time.Second),
		streams.WithCoalesce(func(m streams.Message) string { return m.Values["sku"] }, store.CoalesceOptions{},
			store.WithPrefix("co-index:")))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	waitFor(t, 10*time.Second, "every entry acked", func() bool {
		// (XPENDING fails until Run created the group.)
		res, err := rc.Do(context.Background(), rc.B().Arbitrary("XPENDING").Keys("products").Args("index").Build()).ToArray()
		if err != nil {
			return false
		}
		n, _ := res[0].AsInt64()
		return n == 0 && ev.get(streams.OutcomeCoalesced)+ev.get(store.Outcome("acked")) == 33
	})
	waitFor(t, 10*time.Second, "the last rebuilds", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := len(runs["sku-1"]) + len(runs["sku-2"])
		return n >= 4 && active["sku-1"] == 0 && active["sku-2"] == 0
	})
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for sku, ids := range runs {
		if len(ids) > 2 {
			t.Errorf("%s rebuilt %d times (%v), want at most 2", sku, len(ids), ids)
		}
		for _, id := range ids {
			if of[id] != sku {
				t.Errorf("%s rebuilt with entry %s of %q", sku, id, of[id])
			}
		}
	}
	if overlap != 0 {
		t.Errorf("%d rebuilds of one product overlapped", overlap)
	}
	if got := ev.get(streams.OutcomeCoalesced) + ev.get(store.Outcome("acked")); got != 33 {
		t.Errorf("%d entries acked or coalesced, want 33 (coalesced %d)", got, ev.get(streams.OutcomeCoalesced))
	}
}

// TestConsumerCoalesceBadOption: a nil key func is refused by New.
func TestConsumerCoalesceBadOption(t *testing.T) {
	_, rc := newServer(t)
	_, err := streams.New(rc, must.Store(store.NewClaims(rc)), "s", "g", "c", func(context.Context, streams.Message) error { return nil },
		streams.WithCoalesce(nil, store.CoalesceOptions{}))
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("New with a nil coalescing key = %v, want ErrInvalidArgument", err)
	}
}
