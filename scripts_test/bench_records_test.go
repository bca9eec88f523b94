package scripts_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// benchAcquireOptions: a 30-second lease and a 32-character fingerprint.
var benchAcquireOptions = store.AcquireOptions{TTL: time.Hour, Lease: 30 * time.Second, Fingerprint: "3f7a1c0e9b2d4f6a8c0e2b4d6f8a0c1e"}

// benchPending acquires n records (keys from benchIDs) and returns the keys
// and their owners' tokens.
func benchPending(b *testing.B, s *store.Records, n int) (keys, tokens []string) {
	b.Helper()
	keys, tokens = benchIDs(n), make([]string, n)
	ctx := context.Background()
	benchSetup(b, n, func(i int) error {
		rec, _, err := s.AcquireWith(ctx, keys[i], benchAcquireOptions)
		tokens[i] = rec.Token
		return err
	})
	return keys, tokens
}

// benchCompleted stores a completed 256-byte result under each of n keys.
func benchCompleted(b *testing.B, s *store.Records, n int) []string {
	b.Helper()
	keys, tokens := benchPending(b, s, n)
	ctx := context.Background()
	status, payload := store.StatusCompleted, make([]byte, 256)
	benchSetup(b, n, func(i int) error {
		return s.Update(ctx, keys[i], store.Update{Status: &status, Payload: &payload, Token: tokens[i]})
	})
	return keys
}

// BenchmarkAcquire acquires a fresh key per op (the create path).
func BenchmarkAcquire(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
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

// BenchmarkAcquireExisting acquires a completed record (the replay path: the
// record comes back with its 256-byte result).
func BenchmarkAcquireExisting(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys := benchCompleted(b, s, 1024)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			_, ok, err := s.AcquireWith(ctx, keys[i%len(keys)], benchAcquireOptions)
			if err == nil && ok {
				err = errBenchUnexpected
			}
			return err
		})
	})
}

// BenchmarkUpdate stores "completed" and a 256-byte result, fenced by the
// owner's token, on one of 1024 records.
func BenchmarkUpdate(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys, tokens := benchPending(b, s, 1024)
		ctx := context.Background()
		status, payload := store.StatusCompleted, make([]byte, 256)
		benchParallel(b, g, func(i int) error {
			k := i % len(keys)
			return s.Update(ctx, keys[k], store.Update{Status: &status, Payload: &payload, Token: tokens[k]})
		})
	})
}

// BenchmarkGet reads a completed record with a 256-byte result.
func BenchmarkGet(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys := benchCompleted(b, s, 1024)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			_, ok, err := s.Get(ctx, keys[i%len(keys)])
			if err == nil && !ok {
				err = errBenchUnexpected
			}
			return err
		})
	})
}

// BenchmarkDelete deletes a record per op, whoever owns it.
func BenchmarkDelete(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys, _ := benchPending(b, s, b.N)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error { return s.Delete(ctx, keys[i]) })
	})
}

// BenchmarkDeleteFenced deletes a record per op, fenced by its owner's token.
func BenchmarkDeleteFenced(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys, tokens := benchPending(b, s, b.N)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error { return s.DeleteFenced(ctx, keys[i], tokens[i]) })
	})
}

// BenchmarkRecordsDo runs Do on a fresh key per op: acquire, a no-op fn,
// the fenced update to completed.
func BenchmarkRecordsDo(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys := benchIDs(b.N)
		ctx := context.Background()
		result := make([]byte, 256)
		fn := func(context.Context) ([]byte, error) { return result, nil }
		benchParallel(b, g, func(i int) error {
			_, replayed, err := s.Do(ctx, keys[i], benchAcquireOptions, fn)
			if err == nil && replayed {
				err = errBenchUnexpected
			}
			return err
		})
	})
}

// BenchmarkRecordsDoReplay runs Do on a completed key: the retry path,
// replaying the stored result.
func BenchmarkRecordsDoReplay(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := must.Store(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys := benchCompleted(b, s, 1024)
		ctx := context.Background()
		// fn never runs on a replay; Do refuses a nil one.
		fn := func(context.Context) ([]byte, error) { return nil, errBenchUnexpected }
		benchParallel(b, g, func(i int) error {
			_, replayed, err := s.Do(ctx, keys[i%len(keys)], benchAcquireOptions, fn)
			if err == nil && !replayed {
				err = errBenchUnexpected
			}
			return err
		})
	})
}

// BenchmarkFinalWriteServerTime is the Redis server's own time per final
// write of Records.Do (update.lua: completed, 256-byte payload, fenced by the
// token) with no waiter, from INFO commandstats on a private server (the
// evalsha line: calls and usec), reported as server-µs/op. A waiter
// (AcquireOptions.Wait) may cost a watched record's final write more; this
// is the cost every final write pays.
func BenchmarkFinalWriteServerTime(b *testing.B) {
	srv, err := redisproc.Start(redisproc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Stop() })
	s := must.Store(store.NewRecords(benchClientAt(b, srv.URL()), store.WithPrefix(benchPrefix(b))))
	keys, tokens := benchPending(b, s, b.N)
	ctx := context.Background()
	status, payload := store.StatusCompleted, make([]byte, 256)
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if err := s.Update(ctx, keys[i], store.Update{Status: &status, Payload: &payload, Token: tokens[i]}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+),`).FindStringSubmatch(info)
	if m == nil {
		b.Fatalf("no evalsha line in INFO commandstats: %v", info)
	}
	calls, _ := strconv.ParseFloat(m[1], 64)
	usec, _ := strconv.ParseFloat(m[2], 64)
	if int(calls) != b.N {
		b.Fatalf("%v evalsha calls, want %d", calls, b.N)
	}
	b.ReportMetric(usec/calls, "server-µs/op")
}
