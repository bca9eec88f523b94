package scripts_test

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/internal/redistest"
	"github.com/redisonce/redisonce/store"
)

// scriptCalls reads INFO commandstats: the script calls (EVALSHA and EVAL,
// the heartbeats' form) and the server's µs spent in them.
func scriptCalls(tb testing.TB, srv *redisproc.Server) (calls, usec float64) {
	tb.Helper()
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+),usec=(\d+),`).FindAllStringSubmatch(info, -1) {
		c, _ := strconv.ParseFloat(m[1], 64)
		u, _ := strconv.ParseFloat(m[2], 64)
		calls, usec = calls+c, usec+u
	}
	return calls, usec
}

// TestCoalesceBurstCost: a burst of 200 triggers of one key from 8
// goroutines, all arriving while the first run holds the key, costs at most
// two runs (the first, and one with the last payload), and one script call
// per trigger plus a few per run (its end, its lease's extensions), counted
// by the server (INFO commandstats on a private server).
func TestCoalesceBurstCost(t *testing.T) {
	srv := newServer(t, redisproc.Options{})
	c := newClient(t, srv.URL())
	const n, workers = 200, 8
	var runs atomic.Int64
	var mu sync.Mutex
	var payloads []string
	started := make(chan struct{}, 1)
	burstDone := make(chan struct{}) // the first run lasts until every trigger of the burst returned
	co := must.Store(store.NewCoalescer(c, func(ctx context.Context, key string, payload []byte) error {
		runs.Add(1)
		mu.Lock()
		payloads = append(payloads, string(payload))
		mu.Unlock()
		select {
		case started <- struct{}{}:
			<-burstDone
		default:
		}
		return nil
	}, store.CoalesceOptions{Lease: 5 * time.Second}, store.WithPrefix(uniquePrefix(t))))
	defer co.Close()
	ctx := context.Background()
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := co.Trigger(ctx, "k", []byte("first"))
		first <- err
	}()
	<-started
	var next atomic.Int64
	var wg sync.WaitGroup
	var kept atomic.Int64
	var lastSent sync.Map
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i < n; i = next.Add(1) {
				p := "t" + strconv.FormatInt(i, 10)
				lastSent.Store(p, time.Now())
				ran, err := co.Trigger(ctx, "k", []byte(p))
				if err != nil || ran {
					t.Errorf("trigger %d during the run = ran %v, %v; want kept", i, ran, err)
					return
				}
				kept.Add(1)
			}
		}()
	}
	wg.Wait()
	close(burstDone)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The kept next runs in the background: wait until the key is idle.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if v, _ := srv.Do("DBSIZE"); v == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key did not become idle within 10 s")
		}
	}
	calls, usec := scriptCalls(t, srv)
	mu.Lock()
	defer mu.Unlock()
	if r := runs.Load(); r != 2 {
		t.Fatalf("%d runs for a burst of %d triggers during one run (payloads %v), want 2", r, kept.Load()+1, payloads)
	}
	// The second run's payload is one of the burst's (the last to arrive).
	if _, ok := lastSent.Load(payloads[1]); !ok {
		t.Errorf("the second run ran %q, not a payload of the burst", payloads[1])
	}
	// One call per trigger, and per run: its trigger or hand-over, its end,
	// a few extensions (one every 1.25 s of a 5 s lease).
	if calls > float64(kept.Load()+1)+6 {
		t.Errorf("%v script calls for %d triggers and 2 runs, want at most one per trigger plus 6", calls, kept.Load()+1)
	}
	t.Logf("%d triggers: 2 runs, %v script calls, %.1f server-µs per trigger", kept.Load()+1, calls, usec/float64(kept.Load()+1))
}

// BenchmarkCoalesceBurst: bursts of 100 triggers per key from 8 goroutines,
// each run a 5 ms "rebuild", on a private server. coalesce: Coalescer.Trigger
// per trigger; do-per-trigger: Claims.Do per trigger (one message id each,
// so every trigger runs). Reported: runs per burst, script calls and the
// server's µs (INFO commandstats, EVALSHA + EVAL) per trigger, and the
// server's CPU (INFO cpu) per trigger.
func BenchmarkCoalesceBurst(b *testing.B) {
	const burst, workers = 100, 8
	srv, err := redisproc.Start(redisproc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Stop() })
	c := benchClientAt(b, srv.URL())
	ctx := context.Background()
	for _, mode := range []string{"coalesce", "do-per-trigger"} {
		b.Run(mode, func(b *testing.B) {
			var runs atomic.Int64
			rebuild := func(context.Context) error { runs.Add(1); time.Sleep(5 * time.Millisecond); return nil }
			prefix := benchPrefix(b)
			co := must.Store(store.NewCoalescer(c, func(ctx context.Context, _ string, _ []byte) error { return rebuild(ctx) },
				store.CoalesceOptions{Lease: 5 * time.Second}, store.WithPrefix(prefix)))
			defer co.Close()
			claims := must.Store(store.NewClaims(c, store.WithPrefix(prefix), store.WithTTL(time.Minute)))
			if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
				b.Fatal(err)
			}
			cpu0 := redistest.ServerCPU(b, c)
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
						key := "k" + strconv.FormatInt(i/burst, 10)
						var err error
						if mode == "coalesce" {
							_, err = co.Trigger(ctx, key, []byte(strconv.FormatInt(i, 10)))
						} else {
							_, err = claims.Do(ctx, key+":"+strconv.FormatInt(i, 10), 5*time.Second, rebuild)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if mode == "coalesce" {
				// The last runs of each burst: until no coalescing key is left.
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
					keys, err := c.Do(ctx, c.B().Keys().Pattern(prefix+"*").Build()).AsStrSlice()
					if err != nil {
						b.Fatal(err)
					}
					if len(keys) == 0 {
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("%d keys still pending after a minute", len(keys))
					}
				}
			}
			b.StopTimer()
			calls, usec := scriptCalls(b, srv)
			cpu := redistest.ServerCPU(b, c) - cpu0
			n := float64(b.N)
			b.ReportMetric(float64(runs.Load())/n*burst, "runs/burst")
			b.ReportMetric(calls/n, "calls/trigger")
			b.ReportMetric(usec/n, "server-µs/trigger")
			b.ReportMetric(float64(cpu.Microseconds())/n, "server-cpu-µs/trigger")
		})
	}
}
