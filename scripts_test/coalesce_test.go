package scripts_test

import (
	"context"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

func coalescerHarness(url func(*testing.T) string) func(*testing.T) {
	return func(t *testing.T) {
		c := newClient(t, url(t))
		storetest.TestCoalescer(t, storetest.CoalescerHarness{
			New: func(t *testing.T, fn func(ctx context.Context, key string, payload []byte) error, o store.CoalesceOptions, opts ...store.Option) (*store.Coalescer, error) {
				return store.NewCoalescer(c, fn, o, append([]store.Option{store.WithPrefix(uniquePrefix(t))}, opts...)...)
			},
			Wait: time.Sleep,
			Now:  time.Now,
			Tick: 200 * time.Millisecond,
		})
	}
}

func TestCoalescerConformance(t *testing.T) {
	t.Run("standalone", coalescerHarness(standaloneURL))
	t.Run("cluster", coalescerHarness(clusterURL))
}
