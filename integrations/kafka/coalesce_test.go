package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// TestCoalesce: 40 updates of two products on one partition, consumed with
// WithCoalesce on a Background Coalescer while each rebuild takes 200 ms:
// every record's offset is
// committed, each product is rebuilt at most twice, its last rebuild with
// its last update (records of one partition trigger in offset order), and
// rebuilds of one product never overlap.
func TestCoalesce(t *testing.T) {
	e := newEnv(t, 1)
	var rs []*kgo.Record
	for i := range 40 {
		sku := fmt.Sprintf("sku-%d", i%2)
		rs = append(rs, &kgo.Record{Partition: 0, Key: []byte(sku), Value: []byte(fmt.Sprintf("%s-v%d", sku, i))})
	}
	e.produce(t, rs...)
	var mu sync.Mutex
	runs := map[string][]string{}
	active := map[string]int{}
	overlap := 0
	co := must.Store(store.NewCoalescer(e.rc, func(ctx context.Context, key string, payload []byte) error {
		mu.Lock()
		runs[key] = append(runs[key], string(payload))
		active[key]++
		overlap += active[key] - 1
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		active[key]--
		mu.Unlock()
		return nil
	}, store.CoalesceOptions{Lease: 5 * time.Second, Background: true}, store.WithPrefix(e.prefix+"co:")))
	defer co.Close()
	outcomes := map[kafka.Outcome]int{}
	c, err := kafka.New(e.claims, nil, e.groupOpts(),
		kafka.WithCoalesce(co, func(r *kgo.Record) (string, error) { return string(r.Key), nil }),
		kafka.WithReport(func(_ *kgo.Record, o kafka.Outcome, err error) {
			mu.Lock()
			outcomes[o]++
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	if !waitFor(20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return outcomes[kafka.OutcomeDone]+outcomes[kafka.OutcomeCoalesced] == len(rs) && active["sku-0"]+active["sku-1"] == 0
	}) {
		t.Fatalf("outcomes %v after 20 s, want %d records handled", outcomes, len(rs))
	}
	time.Sleep(500 * time.Millisecond) // the last rebuilds, handed over in the background
	stop()
	mu.Lock()
	defer mu.Unlock()
	for _, sku := range []string{"sku-0", "sku-1"} {
		got := runs[sku]
		last := fmt.Sprintf("%s-v%d", sku, 38+int(sku[4]-'0'))
		if len(got) == 0 || len(got) > 3 || got[len(got)-1] != last {
			t.Errorf("%s rebuilt with %v; want at most 3 rebuilds (two bursts may straddle the first), the last with %s", sku, got, last)
		}
	}
	if overlap != 0 {
		t.Errorf("%d rebuilds of one product overlapped", overlap)
	}
	if got := e.committed(t, 1); !slices.Equal(got, []int64{int64(len(rs))}) {
		t.Errorf("committed offsets %v, want [%d]", got, len(rs))
	}
}

// TestCoalesceBadOption: WithCoalesce without a key function is refused.
func TestCoalesceBadOption(t *testing.T) {
	co := must.Store(store.NewMemoryCoalescer(func(context.Context, string, []byte) error { return nil }, store.CoalesceOptions{}))
	defer co.Close()
	_, err := kafka.New(must.Store(store.NewMemoryClaims()), nil, []kgo.Opt{kgo.SeedBrokers("localhost:9092")}, kafka.WithCoalesce(co, nil))
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("New with a nil coalescing key = %v, want ErrInvalidArgument", err)
	}
}
