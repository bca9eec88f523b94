package scripts_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
)

// The Go benchmarks measure every store operation at 1 and 64 goroutines on
// the shared standalone server, for regressions: compare two runs with
// benchstat. The side-by-side comparison with other clients is
// cmd/benchcmp (make bench).

// benchGoroutines are the concurrency levels of every store benchmark.
var benchGoroutines = []int{1, 64}

// benchClient opens a client on the shared standalone server with the
// options the stores open theirs with.
func benchClient(b *testing.B) rueidis.Client {
	b.Helper()
	return benchClientAt(b, benchURL(b))
}

// benchClientAt is benchClient on the server at url.
func benchClientAt(b *testing.B, url string) rueidis.Client {
	b.Helper()
	opt, err := store.ClientOptions(url)
	if err != nil {
		b.Fatal(err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	// Connect every pipelined connection now (rueidis dials lazily and picks
	// a connection by the key's slot), so the benchmark does not count it.
	ctx := context.Background()
	for i := range 64 {
		if err := c.Do(ctx, c.B().Get().Key("bench:warm:"+strconv.Itoa(i)).Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
			b.Fatal(err)
		}
	}
	return c
}

// benchPrefixes makes every benchmark run use fresh keys.
var benchPrefixes atomic.Int64

// benchPrefix returns a key prefix no other benchmark run uses.
func benchPrefix(b *testing.B) string {
	return fmt.Sprintf("bench:%s:%d:", b.Name(), benchPrefixes.Add(1))
}

// benchIDs returns n distinct ids of 32 hex characters, built before the timer
// starts so that the benchmark counts only the store's allocations.
func benchIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%016x%016x", uint64(i)*0x9E3779B97F4A7C15, uint64(i))
	}
	return ids
}

// benchParallel runs op for i in [0, b.N) from g goroutines and reports
// allocations; the first error fails the benchmark.
func benchParallel(b *testing.B, g int, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	b.ReportAllocs()
	b.ResetTimer()
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := op(int(i)); err != nil {
					once.Do(func() { b.Error(err) })
					return
				}
			}
		}()
	}
	wg.Wait()
}

// benchSetup runs op for i in [0, n) from 64 goroutines, before the timer
// starts: the state a benchmark needs, built with the store itself.
func benchSetup(b *testing.B, n int, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := op(int(i)); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		b.Fatalf("setup: %v", *err)
	}
}

// benchEach runs bench once per concurrency level, as sub-benchmarks g=1, g=64.
func benchEach(b *testing.B, bench func(b *testing.B, g int)) {
	for _, g := range benchGoroutines {
		b.Run("g="+strconv.Itoa(g), func(b *testing.B) { bench(b, g) })
	}
}
