package scripts_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redisonce/redisonce"
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
		s := mustStore(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
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
		s := mustStore(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
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
		s := mustStore(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
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
		s := mustStore(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
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
		s := mustStore(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys, _ := benchPending(b, s, b.N)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error { return s.Delete(ctx, keys[i]) })
	})
}

// BenchmarkDeleteFenced deletes a record per op, fenced by its owner's token.
func BenchmarkDeleteFenced(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := mustStore(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys, tokens := benchPending(b, s, b.N)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error { return s.DeleteFenced(ctx, keys[i], tokens[i]) })
	})
}

// BenchmarkRecordsDo runs Do on a fresh key per op: acquire, a no-op fn,
// the fenced update to completed.
func BenchmarkRecordsDo(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		s := mustStore(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
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
		s := mustStore(store.NewRecords(benchClient(b), store.WithPrefix(benchPrefix(b))))
		keys := benchCompleted(b, s, 1024)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			_, replayed, err := s.Do(ctx, keys[i%len(keys)], benchAcquireOptions, nil)
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
	s := mustStore(store.NewRecords(benchClientAt(b, srv.URL()), store.WithPrefix(benchPrefix(b))))
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

// BenchmarkFinalWriteBeforeAfterWaiters compares the server's time per
// update.lua final write (completed, 256-byte payload, fenced, no waiter)
// of the script before waiters existed (testdata/update_before_waiters.lua,
// scripts/update.lua of main before waiters, with the expiry rule of issue
// 20) with today's, which reads the record's tenth field, watch: 16
// interleaved rounds of b.N calls each on a private
// server, from INFO commandstats (EVALSHA usec per call), reported as the
// median of each: before-µs/op and after-µs/op.
func BenchmarkFinalWriteBeforeAfterWaiters(b *testing.B) {
	old, err := os.ReadFile("testdata/update_before_waiters.lua")
	if err != nil {
		b.Fatal(err)
	}
	cur, _ := redisonce.Get("update")
	srv, err := redisproc.Start(redisproc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Stop() })
	c := benchClientAt(b, srv.URL())
	ctx := context.Background()
	load := func(src string) string {
		sha, err := c.Do(ctx, c.B().ScriptLoad().Script(src).Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		return sha
	}
	shas := [2]string{load(string(old)), load(cur.Source)}
	evalsha := func() (calls, usec float64) {
		info, err := srv.Do("INFO", "commandstats")
		if err != nil {
			b.Fatal(err)
		}
		m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+),`).FindStringSubmatch(info)
		if m == nil {
			return 0, 0
		}
		calls, _ = strconv.ParseFloat(m[1], 64)
		usec, _ = strconv.ParseFloat(m[2], 64)
		return calls, usec
	}
	payload := string(make([]byte, 256))
	var per [2][]float64
	b.ResetTimer()
	for round := range 16 {
		for j := range 2 {
			which := j ^ (round & 1) // alternate which goes first
			b.StopTimer()
			for i := range b.N {
				k := fmt.Sprintf("ab:%d:%d:%d", round, which, i)
				if err := c.Do(ctx, c.B().Hset().Key(k).FieldValue().FieldValue("status", "pending").FieldValue("payload", "").
					FieldValue("created_ms", "1").FieldValue("updated_ms", "1").FieldValue("expires_ms", "0").
					FieldValue("lease_ms", "99999999999999").FieldValue("fence", "1").FieldValue("fp", "").
					FieldValue("token", "tok").Build()).Error(); err != nil {
					b.Fatal(err)
				}
			}
			c0, u0 := evalsha()
			b.StartTimer()
			for i := range b.N {
				k := fmt.Sprintf("ab:%d:%d:%d", round, which, i)
				if err := c.Do(ctx, c.B().Evalsha().Sha1(shas[which]).Numkeys(1).Key(k).
					Arg("tok", "status", "completed", "payload", payload).Build()).Error(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			c1, u1 := evalsha()
			per[which] = append(per[which], (u1-u0)/(c1-c0))
			b.StartTimer()
		}
	}
	b.StopTimer()
	for j, name := range []string{"before-µs/op", "after-µs/op"} {
		slices.Sort(per[j])
		b.ReportMetric(per[j][len(per[j])/2], name)
	}
}
