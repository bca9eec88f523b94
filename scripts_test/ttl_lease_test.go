package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/store"
)

// A live owner never loses its key to expiry: a store TTL of 1 s, a lease of
// 300 ms and an fn of 2 s (the report's numbers). While the first owner's
// context is live a competitor calls Do every 50 ms and a reader checks the
// raw key; the property: no competitor's fn starts while the first owner's
// context is live, and the key exists all that time. Then the final write:
// the record holds the result, replayable, for the TTL again from then
// (Records; Claims' commit always counted its TTL from the commit).

const (
	ttlShort  = time.Second
	ttlLease  = 300 * time.Millisecond
	ttlRun    = 2 * time.Second
	ttlPoll   = 50 * time.Millisecond
	ttlRounds = 40 // polls: 2 s
)

// ttlTimeline records what happened, in ms since the first fn started.
type ttlTimeline struct {
	mu     sync.Mutex
	t0     time.Time
	events []string
}

func (tl *ttlTimeline) add(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, fmt.Sprintf("%6d ms  ", time.Since(tl.t0).Milliseconds())+fmt.Sprintf(format, args...))
}

func (tl *ttlTimeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.events, "\n")
}

// ttlOwner runs fn as the first owner: it sleeps ttlRun (watching its
// context), while compete(i) runs every ttlPoll and raw() reads the key. It
// returns when fn and the competitors are done; it fails the test when a
// competitor's fn started while the owner's context was live, when the key was
// missing meanwhile, or when the owner lost its lease (the property would be
// empty).
func ttlOwner(t *testing.T, tl *ttlTimeline, run func(fn func(ctx context.Context) error) error,
	compete func(i int) (ran bool, err error), raw func() (int64, error)) {
	t.Helper()
	var live atomic.Bool // the owner's context is live
	var overlaps, missing, competitors atomic.Int64
	ownerErr := run(func(ctx context.Context) error {
		tl.mu.Lock()
		tl.t0 = time.Now()
		tl.mu.Unlock()
		live.Store(true)
		stop := context.AfterFunc(ctx, func() {
			live.Store(false)
			tl.add("owner's context cancelled: %v", context.Cause(ctx))
		})
		defer stop()
		tl.add("owner's fn starts")
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range ttlRounds {
				time.Sleep(ttlPoll)
				if !live.Load() {
					return
				}
				ran, err := compete(i)
				competitors.Add(1)
				if ran {
					if live.Load() {
						overlaps.Add(1)
					}
					tl.add("competitor %d RAN fn (owner live: %v), err %v", i, live.Load(), err)
				} else if !errors.Is(err, store.ErrInFlight) {
					tl.add("competitor %d: %v", i, err)
				}
				pttl, err := raw()
				if err != nil || pttl <= 0 {
					if live.Load() {
						missing.Add(1)
					}
					tl.add("raw key: PTTL %d, %v (owner live: %v)", pttl, err, live.Load())
				}
			}
		})
		select {
		case <-time.After(ttlRun):
		case <-ctx.Done():
		}
		err := ctx.Err()
		tl.add("owner's fn returns (ctx err %v)", err)
		live.Store(false)
		wg.Wait()
		return err
	})
	tl.add("owner's Do returns %v", ownerErr)
	if ownerErr != nil {
		t.Errorf("the owner's Do = %v; want nil (its lease of %v should hold on loopback)", ownerErr, ttlLease)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d competitors ran fn while the owner's context was live", n)
	}
	if n := missing.Load(); n > 0 {
		t.Errorf("the key was missing %d times while the owner's context was live", n)
	}
	// The competitors ran past the TTL: the property is not empty.
	if n := competitors.Load(); n < int64(ttlShort/ttlPoll)+2 {
		t.Errorf("only %d competitor calls, none past the TTL; the test proves little", n)
	}
}

func pttl(c rueidis.Client, key string) func() (int64, error) {
	return func() (int64, error) {
		return c.Do(context.Background(), c.B().Pttl().Key(key).Build()).AsInt64()
	}
}

// TestRecordOutlivesShortTTL: Records.Do with a TTL shorter than its lease
// and its fn, on a standalone server and a cluster.
func TestRecordOutlivesShortTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, url := range map[string]func(*testing.T) string{"standalone": standaloneURL, "cluster": clusterURL} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, url(t))
			prefix := uniquePrefix(t)
			s := store.NewRecords(c, store.WithPrefix(prefix), store.WithTTL(ttlShort))
			o := store.AcquireOptions{Lease: ttlLease}
			tl := &ttlTimeline{t0: time.Now()}
			ttlOwner(t, tl, func(fn func(context.Context) error) error {
				_, _, err := s.Do(ctx, "k", o, func(ctx context.Context) ([]byte, error) {
					return []byte("A"), fn(ctx)
				})
				return err
			}, func(int) (bool, error) {
				ran := false
				_, _, err := s.Do(ctx, "k", o, func(context.Context) ([]byte, error) {
					ran = true
					return []byte("B"), nil
				})
				return ran, err
			}, pttl(c, prefix+"k"))

			// The result is kept for the TTL from the final write.
			left, err := pttl(c, prefix+"k")()
			if err != nil || left <= 0 || left > ttlShort.Milliseconds() {
				t.Errorf("after the final write the key's PTTL = %d, %v; want the TTL again: 0 < PTTL <= %d", left, err, ttlShort.Milliseconds())
			}
			res, replayed, err := s.Do(ctx, "k", o, func(context.Context) ([]byte, error) {
				t.Error("fn ran again after the first completed")
				return nil, nil
			})
			if string(res) != "A" || !replayed || err != nil {
				t.Errorf("Do after the run = %q, %v, %v; want the replay of A", res, replayed, err)
			}
			raw, err := c.Do(ctx, c.B().Hgetall().Key(prefix+"k").Build()).AsStrMap()
			if err != nil || raw["status"] != "completed" || raw["payload"] != "A" || raw["lease_ms"] != "0" {
				t.Errorf("raw record = %v, %v; want completed A without a lease", raw, err)
			}
			t.Logf("timeline:\n%s\nPTTL after the final write: %d ms", tl, left)
		})
	}
}

// TestClaimOutlivesShortTTL: Claims.Do under a store TTL shorter than the
// run. A claim's key expires with its lease (claim.lua with PX lease,
// extend.lua PEXPIRE), never with the store's TTL, which only the commit
// applies: the same hole does not exist there, and this test keeps it so.
func TestClaimOutlivesShortTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	prefix := uniquePrefix(t)
	s := store.NewClaims(c, store.WithPrefix(prefix), store.WithTTL(ttlShort))
	tl := &ttlTimeline{t0: time.Now()}
	ttlOwner(t, tl, func(fn func(context.Context) error) error {
		_, err := s.Do(ctx, "m", ttlLease, fn)
		return err
	}, func(int) (bool, error) {
		ran := false
		_, err := s.Do(ctx, "m", ttlLease, func(context.Context) error {
			ran = true
			return nil
		})
		return ran, err
	}, pttl(c, prefix+"m"))
	if t.Failed() {
		t.Logf("timeline:\n%s", tl)
	}
	left, err := pttl(c, prefix+"m")()
	v, _ := c.Do(ctx, c.B().Get().Key(prefix+"m").Build()).ToString()
	if err != nil || v != "1" || left <= 0 || left > ttlShort.Milliseconds() {
		t.Errorf("after the commit: value %q, PTTL %d, %v; want \"1\" with the TTL: 0 < PTTL <= %d", v, left, err, ttlShort.Milliseconds())
	}
}

// TestHTTPIdemOutlivesShortTTL: httpidem with WithTTL shorter than its lease
// and its handler: a retry meanwhile is answered 409, never run; after the
// response, a retry gets it replayed.
func TestHTTPIdemOutlivesShortTTL(t *testing.T) {
	t.Parallel()
	c := newClient(t, standaloneURL(t))
	prefix := uniquePrefix(t)
	rs := store.NewRecords(c, store.WithPrefix(prefix))
	var runs atomic.Int64
	tl := &ttlTimeline{t0: time.Now()}
	var ownerCtx atomic.Pointer[context.Context]
	h := httpidem.Middleware(rs, httpidem.WithTTL(ttlShort), httpidem.WithLease(ttlLease))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		tl.add("handler run %d starts", n)
		if n == 1 {
			ctx := r.Context()
			ownerCtx.Store(&ctx)
			select {
			case <-time.After(ttlRun):
			case <-ctx.Done():
				tl.add("handler run 1: context done: %v", context.Cause(ctx))
			}
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	}))
	send := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/pay", strings.NewReader("x"))
		req.Header.Set(httpidem.HeaderKey, "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- send() }()
	conflicts := 0
	for i := range ttlRounds {
		time.Sleep(ttlPoll)
		if p := ownerCtx.Load(); p == nil || (*p).Err() != nil {
			if i > 2 {
				break
			}
			continue
		}
		w := send()
		if w.Code != http.StatusConflict {
			tl.add("retry %d: %d %q", i, w.Code, w.Body.String())
			continue
		}
		conflicts++
	}
	w := <-first
	tl.add("first response: %d %q", w.Code, w.Body.String())
	if w.Code != http.StatusCreated || w.Body.String() != "run 1" {
		t.Errorf("first response = %d %q; want 201 run 1", w.Code, w.Body.String())
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want once", n)
	}
	if conflicts < int(ttlShort/ttlPoll)+2 {
		t.Errorf("only %d retries answered 409 while the first ran; none past the TTL?", conflicts)
	}
	again := send()
	if again.Code != http.StatusCreated || again.Body.String() != "run 1" || again.Header().Get(httpidem.HeaderReplayed) != "true" {
		t.Errorf("retry after the response = %d %q replayed=%q; want the replay of 201 run 1",
			again.Code, again.Body.String(), again.Header().Get(httpidem.HeaderReplayed))
	}
	if t.Failed() {
		t.Logf("timeline:\n%s", tl)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want once", n)
	}
}
