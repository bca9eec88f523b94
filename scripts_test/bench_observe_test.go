package scripts_test

import (
	"context"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The cost of an observer: BenchmarkClaim, BenchmarkAppend and
// BenchmarkAcquire again, with an observer that does nothing. Compare their
// allocs/op with the plain ones: a store without an observer builds no event
// at all.

var benchObserver = store.ObserverFunc(func(context.Context, store.Event) {})

func BenchmarkClaimObserved(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewClaims(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour),
			store.WithObserver(benchObserver)))
		ids := benchIDs(b.N)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			ok, err := s.Claim(ctx, ids[i])
			if err == nil && !ok {
				err = errBenchUnexpected
			}
			return err
		})
	})
}

func BenchmarkAppendObserved(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		ob := must.Store(store.NewOutbox(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour),
			store.WithObserver(benchObserver)))
		conns := benchConns(1024)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			_, _, err := ob.Append(ctx, conns[i%len(conns)], benchPayload)
			return err
		})
	})
}

func BenchmarkAcquireObserved(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithObserver(benchObserver)))
		keys := benchIDs(b.N)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			_, ok, err := s.AcquireWith(ctx, keys[i], benchAcquireOptions)
			if err == nil && !ok {
				err = errBenchUnexpected
			}
			return err
		})
	})
}
