package scripts_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

var errBenchUnexpected = errors.New("unexpected result")

// BenchmarkClaim claims a fresh id per op (every claim creates its key).
func BenchmarkClaim(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewClaims(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
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

// BenchmarkClaimMany claims 100 fresh ids per op.
func BenchmarkClaimMany(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewClaims(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		ids := benchIDs(b.N * 100)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			got, err := s.ClaimMany(ctx, ids[i*100:i*100+100])
			if err == nil && !got[99] {
				err = errBenchUnexpected
			}
			return err
		})
	})
}

// BenchmarkSeen asks about an id that is claimed.
func BenchmarkSeen(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewClaims(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		ctx := context.Background()
		if err := s.Remember(ctx, "seen"); err != nil {
			b.Fatal(err)
		}
		benchParallel(b, g, func(int) error {
			ok, err := s.Seen(ctx, "seen")
			if err == nil && !ok {
				err = errBenchUnexpected
			}
			return err
		})
	})
}

// BenchmarkForget forgets a claimed id per op.
func BenchmarkForget(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewClaims(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		ids := benchIDs(b.N)
		ctx := context.Background()
		if _, err := s.ClaimMany(ctx, ids); err != nil {
			b.Fatal(err)
		}
		benchParallel(b, g, func(i int) error { return s.Forget(ctx, ids[i]) })
	})
}

// BenchmarkClaimsDo runs the leased flow on a fresh id per op: claim "~token",
// a no-op fn, commit.
func BenchmarkClaimsDo(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewClaims(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		ids := benchIDs(b.N)
		ctx := context.Background()
		fn := func(context.Context) error { return nil }
		benchParallel(b, g, func(i int) error {
			ran, err := s.Do(ctx, ids[i], time.Minute, fn)
			if err == nil && !ran {
				err = errBenchUnexpected
			}
			return err
		})
	})
}

// BenchmarkClaimsBatchDo is BenchmarkClaimsDo through one long-lived
// Claims.Batch (no ids claimed up front): each Do's claim and commit are
// gathered with the other goroutines' in flight. At g=1 nothing is in flight
// beside a Do, so it measures what batching adds to a lone message.
func BenchmarkClaimsBatchDo(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewClaims(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		ids := benchIDs(b.N)
		ctx := context.Background()
		batch, err := s.Batch(ctx, nil, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		fn := func(context.Context) error { return nil }
		benchParallel(b, g, func(i int) error {
			ran, err := batch.Do(ctx, ids[i], fn)
			if err == nil && !ran {
				err = errBenchUnexpected
			}
			return err
		})
	})
}

// BenchmarkSeenMany asks about 100 ids in one call, every other one claimed.
func BenchmarkSeenMany(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewClaims(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		ctx := context.Background()
		ids := benchIDs(100)
		if _, err := s.ClaimMany(ctx, ids[:50]); err != nil {
			b.Fatal(err)
		}
		benchParallel(b, g, func(int) error {
			got, err := s.SeenMany(ctx, ids)
			if err == nil && (!got[0] || got[99]) {
				err = errBenchUnexpected
			}
			return err
		})
	})
}
