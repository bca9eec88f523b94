package scripts_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redistest"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// BenchmarkStreamsConsumer: the cost of exactly-once on a Redis stream. The
// streams runner (each read claimed in one Claims.Batch call, the commits
// gathered behind the handlers, then XACK) against a plain consumer
// (XREADGROUP + XACK), with the same handler (one INCRBY), the same server
// and the same number of handlers in flight (16). Each sub-benchmark round
// consumes b.N entries XADDed before the timer starts; reported: msgs/s and
// the server's CPU time per message (used_cpu_user + used_cpu_sys from INFO,
// over the round). "runner-unbatched" is the runner with
// WithBatching(false) (one Claims.Do per entry: claim and commit each a
// script call); "runner-memclaims" is the runner on MemoryClaims: its own
// cost, without the claims' round trips.
//
// Then, because a shared machine's speed drifts between sub-benchmarks, the
// parent runs 9 interleaved rounds of 3,000 messages (plain, runner,
// runner-unbatched, plain...) and prints the medians of the rounds' ratios
// to the plain consumer in the same round: the figures BENCHMARKS.md reports.
func BenchmarkStreamsConsumer(b *testing.B) {
	const concurrency = 16
	for _, kind := range []string{"plain", "runner", "runner-unbatched", "runner-memclaims"} {
		b.Run(fmt.Sprintf("%s/handlers=%d", kind, concurrency), func(b *testing.B) {
			c := benchClient(b)
			rate, srv, cl := consumeRound(b, c, kind, concurrency, b.N)
			b.ReportMetric(rate, "msgs/s")
			b.ReportMetric(float64(srv.Nanoseconds())/1e3, "srv-µs/msg")
			b.ReportMetric(float64(cl.Nanoseconds())/1e3, "client-µs/msg")
		})
	}
	c := benchClient(b)
	kinds := []string{"runner", "runner-unbatched"}
	ratios, cpuRatios := map[string][]float64{}, map[string][]float64{}
	rates, cpus, clients := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for range 9 {
		pr, ps, pc := consumeRound(b, c, "plain", concurrency, 3000)
		rates["plain"], cpus["plain"] = append(rates["plain"], pr), append(cpus["plain"], float64(ps.Nanoseconds())/1e3)
		clients["plain"] = append(clients["plain"], float64(pc.Nanoseconds())/1e3)
		for _, k := range kinds {
			rr, rs, rc := consumeRound(b, c, k, concurrency, 3000)
			rates[k], cpus[k] = append(rates[k], rr), append(cpus[k], float64(rs.Nanoseconds())/1e3)
			clients[k] = append(clients[k], float64(rc.Nanoseconds())/1e3)
			ratios[k] = append(ratios[k], rr/pr)
			cpuRatios[k] = append(cpuRatios[k], float64(rs)/float64(ps))
		}
	}
	for _, k := range kinds {
		fmt.Printf("BenchmarkStreamsConsumer: %s/plain = %.2fx msgs/s, server CPU per message %.2fx (medians of 9 interleaved rounds of 3000 messages, 16 handlers; "+
			"%s %.0f msgs/s %.1f µs/msg, plain %.0f msgs/s %.1f µs/msg; the consumer process's CPU %.1f vs %.1f µs/msg); goal for the runner >= 0.9x msgs/s, <= 1.3x CPU\n",
			k, median(ratios[k]), median(cpuRatios[k]), k, median(rates[k]), median(cpus[k]), median(rates["plain"]), median(cpus["plain"]),
			median(clients[k]), median(clients["plain"]))
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// consumeRound XADDs n entries to a fresh stream, then consumes them with a
// consumer of kind ("plain", "runner", "runner-unbatched" or
// "runner-memclaims") and returns the
// messages per second, the server's CPU time per message and this
// process's (the consumer's: the runner and rueidis, or the plain loop; the
// benchmark's own polling for the last ack too). b's timer runs only while the
// consumer does.
func consumeRound(b *testing.B, c rueidis.Client, kind string, concurrency, n int) (float64, time.Duration, time.Duration) {
	b.Helper()
	b.StopTimer()
	ctx := context.Background()
	prefix := benchPrefix(b)
	stream, group := prefix+"s", "g"
	seedStream(b, c, stream, n)
	defer c.Do(ctx, c.B().Del().Key(stream).Build())
	handler := func(ctx context.Context, m streams.Message) error {
		return c.Do(ctx, c.B().Incrby().Key(prefix+"ledger").Increment(1).Build()).Error()
	}
	var acked atomic.Int64
	var run func(ctx context.Context) error
	if kind == "plain" {
		run = func(ctx context.Context) error {
			return plainConsumer(ctx, c, stream, group, concurrency, handler, &acked)
		}
	} else {
		obs := store.ObserverFunc(func(_ context.Context, e store.Event) {
			if e.Outcome == store.Outcome("acked") {
				acked.Add(1)
			}
		})
		var claims *store.Claims = must.Store(store.NewClaims(c, store.WithPrefix(prefix+"c:"), store.WithTTL(time.Hour)))
		if kind == "runner-memclaims" {
			claims = must.Store(store.NewMemoryClaims())
		}
		cons, err := streams.New(c, claims, stream, group, "c1", handler, streams.WithConcurrency(concurrency), streams.WithObserver(obs),
			streams.WithBatching(kind != "runner-unbatched"))
		if err != nil {
			b.Fatal(err)
		}
		run = cons.Run
	}
	cpu0, client0 := redistest.ServerCPU(b, c), processCPU()
	b.StartTimer()
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(rctx) }()
	for acked.Load() < int64(n) {
		time.Sleep(200 * time.Microsecond)
	}
	// The runner sends its XACKs behind the commits: wait for the last one.
	for kind != "plain" && pendingEntries(b, c, stream, group) > 0 {
		time.Sleep(200 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	client := processCPU() - client0
	cpu := redistest.ServerCPU(b, c) - cpu0
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if got, _ := c.Do(ctx, c.B().Get().Key(prefix+"ledger").Build()).AsInt64(); got != int64(n) {
		b.Fatalf("ledger %d after %d messages", got, n)
	}
	return float64(n) / elapsed.Seconds(), cpu / time.Duration(n), client / time.Duration(n)
}

// processCPU is this process's CPU time so far (user + system, getrusage).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pendingEntries(b *testing.B, c rueidis.Client, stream, group string) int64 {
	b.Helper()
	res, err := c.Do(context.Background(), c.B().Arbitrary("XPENDING").Keys(stream).Args(group).Build()).ToArray()
	if err != nil || len(res) == 0 {
		b.Fatalf("XPENDING: %v", err)
	}
	n, _ := res[0].AsInt64()
	return n
}

// seedStream XADDs n entries (a msg_id and an amount) to stream, 1,000 per
// round trip.
func seedStream(b *testing.B, c rueidis.Client, stream string, n int) {
	b.Helper()
	ctx := context.Background()
	for lo := 0; lo < n; lo += 1000 {
		cmds := make(rueidis.Commands, 0, 1000)
		for i := lo; i < min(lo+1000, n); i++ {
			cmds = append(cmds, c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue("msg_id", strconv.Itoa(i)).
				FieldValue("amount", "1").Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// plainConsumer is what a user writes without the runner: XREADGROUP for
// the free handlers, each entry's handler in a goroutine, XACK when it
// returns nil (at-least-once: no dedupe).
func plainConsumer(ctx context.Context, c rueidis.Client, stream, group string, concurrency int,
	h func(context.Context, streams.Message) error, acked *atomic.Int64) error {
	err := c.Do(ctx, c.B().XgroupCreate().Key(stream).Group(group).Id("0").Mkstream().Build()).Error()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return err
	}
	slots := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		slots <- struct{}{}
		n := 1
	fill:
		for n < concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break fill
			}
		}
		res, err := c.Do(ctx, c.B().Xreadgroup().Group(group, "c1").Count(int64(n)).Block(100).Streams().Key(stream).Id(">").Build()).AsXRead()
		entries := res[stream]
		for range n - len(entries) {
			<-slots
		}
		if err != nil {
			continue
		}
		for _, e := range entries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				m := streams.Message{Stream: stream, ID: e.ID, Values: e.FieldValues, Deliveries: 1}
				if h(ctx, m) == nil && c.Do(context.WithoutCancel(ctx), c.B().Xack().Key(stream).Group(group).Id(e.ID).Build()).Error() == nil {
					acked.Add(1)
				}
			}()
		}
	}
	return nil
}
