package store_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/internal/redistest"
	"github.com/redisonce/redisonce/store"
)

// pausable starts a redis-server for the test and returns a client on it
// and a function that stops the server for d (DEBUG SLEEP, on a client of
// its own) and returns once the pause has begun.
func pausable(t *testing.T) (rueidis.Client, func(d time.Duration)) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := redisproc.StartT(t, redisproc.Options{})
	c, pauser := redistest.Client(t, srv.URL()), redistest.Client(t, srv.URL())
	return c, func(d time.Duration) {
		go func() {
			_ = pauser.Do(context.Background(), pauser.B().Arbitrary("DEBUG", "SLEEP").Args(strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).Build()).Error()
		}()
		time.Sleep(20 * time.Millisecond) // the pause has begun
	}
}

// TestBatchDelayGathersCommits: commits that queue behind a call in flight
// wait the batch delay for the ones after them, while other Dos run their
// fns, and share their call. The server is paused (DEBUG SLEEP) under the
// first commit; 15 Dos start together, their fns returning 40 ms apart, over
// 560 ms. Without a delay, the commits that queued during the pause share a
// call and every later one finds nothing in flight and goes alone; with a
// 500 ms delay, all but the last share one call. Each Do still returns
// within the pause, the delay, its fn and a round trip.
func TestBatchDelayGathersCommits(t *testing.T) {
	c, pause := pausable(t)
	const pauseFor, gap, n = 200 * time.Millisecond, 40 * time.Millisecond, 15
	calls := map[time.Duration]int{}
	for _, delay := range []time.Duration{0, 500 * time.Millisecond} {
		ctx := context.Background()
		claims := must.Store(store.NewClaims(c, store.WithPrefix(fmt.Sprintf("bd%v:", delay))))
		store.SetBatchDelay(claims, delay)
		ids := make([]string, n)
		for i := range ids {
			ids[i] = "m" + strconv.Itoa(i)
		}
		b, err := claims.Batch(ctx, ids, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		pause(pauseFor)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var slowest time.Duration
		for i, id := range ids {
			wg.Go(func() {
				start := time.Now()
				ran, err := b.Do(ctx, id, func(context.Context) error {
					time.Sleep(time.Duration(i) * gap)
					return nil
				})
				if !ran || err != nil {
					t.Errorf("delay %v: Do(%s) = %v, %v", delay, id, ran, err)
				}
				mu.Lock()
				slowest = max(slowest, time.Since(start)-time.Duration(i)*gap)
				mu.Unlock()
			})
		}
		wg.Wait()
		_ = b.Close()
		calls[delay] = redistest.Calls(t, c, "evalsha", "eval")
		if most := pauseFor + delay + 2*time.Second; slowest > most {
			t.Errorf("delay %v: a Do took %v beside its fn, more than the pause, the delay and a round trip (%v)", delay, slowest, most)
		}
	}
	t.Logf("script calls: %d without a batch delay, %d with 500ms", calls[0], calls[500*time.Millisecond])
	// Without a delay: one call for the first, one for those queued in the
	// pause (~4), then one each (~10). With it: the first, one for the next
	// 13, one for the last.
	if calls[0] < 8 || calls[500*time.Millisecond] > 5 {
		t.Fatalf("commit calls for %d Dos ending %v apart: %d without a batch delay (want >= 8), %d with 500ms (want <= 5)",
			n, gap, calls[0], calls[500*time.Millisecond])
	}
}

// TestBatchDelayNotWithoutIDs: a Batch made without ids (a middleware's:
// every Do claims its own id, and its caller waits for it) never waits for
// more requests: with a 2 s delay, 10 Dos whose claims and commits queued
// behind a call held up by a 200 ms server pause all return well within the
// delay.
func TestBatchDelayNotWithoutIDs(t *testing.T) {
	c, pause := pausable(t)
	ctx := context.Background()
	claims := must.Store(store.NewClaims(c, store.WithPrefix("every:")))
	const delay = 2 * time.Second
	store.SetBatchDelay(claims, delay)
	ids := make([]string, 11)
	for i := range ids {
		ids[i] = "m" + strconv.Itoa(i)
	}
	b, err := claims.Batch(ctx, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pause(200 * time.Millisecond)
	start := time.Now()
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			if ran, err := b.Do(ctx, id, func(context.Context) error { return nil }); !ran || err != nil {
				t.Errorf("Do(%s) = %v, %v", id, ran, err)
			}
		})
		if i == 0 {
			time.Sleep(20 * time.Millisecond) // the first claim leads, into the pause
		}
	}
	wg.Wait()
	if took := time.Since(start); took > delay*3/4 {
		t.Fatalf("the Dos took %v: the requests queued behind the pause waited for the %v delay in a Batch made without ids", took, delay)
	}
}

// TestBatchDelayLoneDoWaitsForNothing: a Do whose operations find nothing in
// flight is sent at once, whatever the delay: on Redis and on the memory
// twin, a lone Batch.Do (its claim and its commit; or, its id claimed up
// front, its commit) returns well within a delay of 2 s.
func TestBatchDelayLoneDoWaitsForNothing(t *testing.T) {
	for name, claims := range map[string]*store.Claims{
		"redis":  must.Store(store.NewClaims(redisClient(t), store.WithPrefix(testPrefix(t)))),
		"memory": must.Store(store.NewMemoryClaims()),
	} {
		store.SetBatchDelay(claims, 2*time.Second)
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for _, upFront := range []bool{false, true} {
				for i := range 3 {
					id := fmt.Sprintf("lone%v%d", upFront, i)
					var ids []string
					if upFront {
						ids = []string{id}
					}
					b := must.Store(claims.Batch(ctx, ids, time.Minute))
					start := time.Now()
					ran, err := b.Do(ctx, id, func(context.Context) error { return nil })
					if took := time.Since(start); !ran || err != nil || took > time.Second {
						t.Fatalf("lone Do %s = %v, %v after %v; want ran, nil, well within the 2s batch delay", id, ran, err, took)
					}
					_ = b.Close()
				}
			}
		})
	}
}
