package store_test

import (
	"testing"

	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

func TestMemoryClaims(t *testing.T) {
	clock := storetest.NewClock()
	storetest.TestClaims(t, storetest.ClaimsHarness{
		New: func(t *testing.T, opts ...store.Option) (*store.Claims, error) {
			return store.NewMemoryClaims(append(opts, store.WithClock(clock.Now))...)
		},
		Wait: clock.Advance,
	})
}

func TestMemoryOutbox(t *testing.T) {
	clock := storetest.NewClock()
	storetest.TestOutbox(t, storetest.OutboxHarness{
		New: func(t *testing.T, opts ...store.Option) (*store.Outbox, error) {
			return store.NewMemoryOutbox(append(opts, store.WithClock(clock.Now))...)
		},
		Wait: clock.Advance,
	})
}

func TestMemoryRecords(t *testing.T) {
	clock := storetest.NewClock()
	storetest.TestRecords(t, storetest.RecordsHarness{
		New: func(t *testing.T, opts ...store.Option) (*store.Records, error) {
			return store.NewMemoryRecords(append(opts, store.WithClock(clock.Now))...)
		},
		Wait: clock.Advance,
		Now:  clock.Now,
	})
}
