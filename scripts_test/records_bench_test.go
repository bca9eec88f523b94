package scripts_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
)

// benchRecords is a Records store on the harness's standalone Redis under a
// prefix of its own.
func benchRecords(b *testing.B, name string) *store.Records {
	b.Helper()
	c := newClientTB(b, benchURL(b))
	prefix := "bench:rec:" + name + ":" + strconv.FormatInt(time.Now().UnixNano(), 10) + ":"
	return store.NewRecords(c, store.WithPrefix(prefix), store.WithTTL(time.Minute))
}

// BenchmarkRecordsAcquire: a new key per call (the create path).
func BenchmarkRecordsAcquire(b *testing.B) {
	s := benchRecords(b, "acquire")
	ctx := context.Background()
	o := store.AcquireOptions{Lease: 30 * time.Second, Fingerprint: "3f7a1c0e9b2d4f6a8c0e2b4d6f8a0c1e"}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := s.AcquireWith(ctx, strconv.FormatInt(n.Add(1), 10), o); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRecordsUpdate: a fenced update storing a 256-byte result.
func BenchmarkRecordsUpdate(b *testing.B) {
	s := benchRecords(b, "update")
	ctx := context.Background()
	const keys = 1024
	tokens := make([]string, keys)
	for i := range tokens {
		rec, _, err := s.AcquireWith(ctx, strconv.Itoa(i), store.AcquireOptions{Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = rec.Token
	}
	payload := make([]byte, 256)
	status := store.StatusCompleted
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(n.Add(1) % keys)
			err := s.Update(ctx, strconv.Itoa(i), store.Update{Status: &status, Payload: &payload, Token: tokens[i]})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRecordsGet: reading a completed record with a 256-byte result.
func BenchmarkRecordsGet(b *testing.B) {
	s := benchRecords(b, "get")
	ctx := context.Background()
	const keys = 1024
	payload := make([]byte, 256)
	status := store.StatusCompleted
	for i := range keys {
		if _, _, err := s.Acquire(ctx, strconv.Itoa(i), 0); err != nil {
			b.Fatal(err)
		}
		if err := s.Update(ctx, strconv.Itoa(i), store.Update{Status: &status, Payload: &payload}); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok, err := s.Get(ctx, strconv.Itoa(int(n.Add(1)%keys))); err != nil || !ok {
				b.Error(ok, err)
				return
			}
		}
	})
}

// BenchmarkRecordsDoReplay: the retry path of Do, a completed record replayed.
func BenchmarkRecordsDoReplay(b *testing.B) {
	s := benchRecords(b, "do")
	ctx := context.Background()
	o := store.AcquireOptions{Lease: 30 * time.Second}
	if _, _, err := s.Do(ctx, "k", o, func(context.Context) ([]byte, error) { return make([]byte, 256), nil }); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, replayed, err := s.Do(ctx, "k", o, nil); err != nil || !replayed {
				b.Error(replayed, err)
				return
			}
		}
	})
}
