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
	"github.com/redisonce/redisonce/internal/must"
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

// ttlTrial is what one owner's run saw.
type ttlTrial struct {
	ownerErr                        error
	overlaps, missing, competitions int64
}

// ttlOwner runs fn as the first owner: it sleeps ttlRun (watching its
// context), while compete(i) runs every ttlPoll and raw() reads the key's
// PTTL, for as long as the owner's context is live.
func ttlOwner(tl *ttlTimeline, run func(fn func(ctx context.Context) error) error,
	compete func(i int) (ran bool, err error), raw func() (int64, error)) ttlTrial {
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
	return ttlTrial{ownerErr: ownerErr, overlaps: overlaps.Load(), missing: missing.Load(), competitions: competitors.Load()}
}

// ttlTrials runs trial (on a fresh key each time) until one owner keeps its
// lease for the whole run, at most 3 times, and fails the test when the key
// went missing, or a competitor ran fn, while an owner's context was live.
// A trial whose owner lost its lease with the key there all along (a
// heartbeat held up for a whole lease on a loaded machine: the lease rules,
// not the expiry rule) is retried; three of them fail the test. vanished,
// when not nil, tells after a lost lease whether the key had disappeared
// (then the test fails: that is the expiry hole) rather than been taken
// over. It returns the key of the trial that held.
func ttlTrials(t *testing.T, trial func(key string, tl *ttlTimeline) ttlTrial, vanished func(key string) bool) string {
	t.Helper()
	for n := 1; n <= 3; n++ {
		key := fmt.Sprint("k", n)
		tl := &ttlTimeline{t0: time.Now()}
		r := trial(key, tl)
		switch {
		case r.missing > 0:
			t.Fatalf("trial %d: the key was missing %d times while the owner's context was live\n%s", n, r.missing, tl)
		case r.overlaps > 0:
			t.Fatalf("trial %d: %d competitors ran fn while the owner's context was live\n%s", n, r.overlaps, tl)
		case r.ownerErr != nil && vanished != nil && vanished(key):
			t.Fatalf("trial %d: the owner lost its record: it vanished under its lease (not taken over)\n%s", n, tl)
		case r.ownerErr != nil:
			t.Logf("trial %d: the owner lost its lease of %v, taken over (%v); again\n%s", n, ttlLease, r.ownerErr, tl)
			continue
		case r.competitions < int64(ttlShort/ttlPoll)+2:
			// The competitors ran past the TTL: the property is not empty.
			t.Fatalf("trial %d: only %d competitor calls, none past the TTL; the test proves little\n%s", n, r.competitions, tl)
		}
		t.Logf("trial %d, timeline:\n%s", n, tl)
		return key
	}
	t.Fatalf("the owner lost its lease of %v in 3 trials of 3", ttlLease)
	return ""
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
			s := must.Store(store.NewRecords(c, store.WithPrefix(prefix), store.WithTTL(ttlShort)))
			o := store.AcquireOptions{Lease: ttlLease}
			key := ttlTrials(t, func(key string, tl *ttlTimeline) ttlTrial {
				return ttlOwner(tl, func(fn func(context.Context) error) error {
					_, _, err := s.Do(ctx, key, o, func(ctx context.Context) ([]byte, error) {
						return []byte("A"), fn(ctx)
					})
					return err
				}, func(int) (bool, error) {
					ran := false
					_, _, err := s.Do(ctx, key, o, func(context.Context) ([]byte, error) {
						ran = true
						return []byte("B"), nil
					})
					return ran, err
				}, pttl(c, prefix+key))
			}, func(key string) bool {
				// Absent, or created again at fence 1 by a competitor: the
				// record vanished; a takeover would have made fence 2.
				k := rawRecord(t, c, prefix+key)
				return k.Type == "none" || k.Hash["fence"] == "1"
			})

			// The result is kept for the TTL from the final write.
			left, err := pttl(c, prefix+key)()
			if err != nil || left <= 0 || left > ttlShort.Milliseconds() {
				t.Errorf("after the final write the key's PTTL = %d, %v; want the TTL again: 0 < PTTL <= %d", left, err, ttlShort.Milliseconds())
			}
			res, replayed, err := s.Do(ctx, key, o, func(context.Context) ([]byte, error) {
				t.Error("fn ran again after the first completed")
				return nil, nil
			})
			if string(res) != "A" || !replayed || err != nil {
				t.Errorf("Do after the run = %q, %v, %v; want the replay of A", res, replayed, err)
			}
			raw := rawRecord(t, c, prefix+key).Hash
			if raw["status"] != "completed" || raw["payload"] != "A" || raw["lease_ms"] != "0" {
				t.Errorf("raw record = %v; want completed A without a lease", raw)
			}
			t.Logf("PTTL after the final write: %d ms", left)
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
	s := must.Store(store.NewClaims(c, store.WithPrefix(prefix), store.WithTTL(ttlShort)))
	key := ttlTrials(t, func(key string, tl *ttlTimeline) ttlTrial {
		return ttlOwner(tl, func(fn func(context.Context) error) error {
			_, err := s.Do(ctx, key, ttlLease, fn)
			return err
		}, func(int) (bool, error) {
			ran := false
			_, err := s.Do(ctx, key, ttlLease, func(context.Context) error {
				ran = true
				return nil
			})
			return ran, err
		}, pttl(c, prefix+key))
	}, nil)
	left, err := pttl(c, prefix+key)()
	v, _ := c.Do(ctx, c.B().Get().Key(prefix+key).Build()).ToString()
	if err != nil || v != "1" || left <= 0 || left > ttlShort.Milliseconds() {
		t.Errorf("after the commit: value %q, PTTL %d, %v; want \"1\" with the TTL: 0 < PTTL <= %d", v, left, err, ttlShort.Milliseconds())
	}
}

// TestHTTPIdemOutlivesShortTTL: httpidem with WithTTL shorter than its lease
// and its handler: a retry meanwhile is answered 409, never run; after the
// response, a retry gets it replayed. Trials as in ttlTrials: one whose
// handler lost its lease (its context cancelled) is run again, up to 3.
func TestHTTPIdemOutlivesShortTTL(t *testing.T) {
	t.Parallel()
	c := newClient(t, standaloneURL(t))
	rs := must.Store(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
	var runs sync.Map // key -> *atomic.Int64
	var mu sync.Mutex
	var tl *ttlTimeline
	var ownerCtx context.Context
	var lost atomic.Bool // run 1's context ended before it did: its lease was lost
	h := mustMiddleware(t, rs, httpidem.WithSharedKeys(), httpidem.WithTTL(ttlShort), httpidem.WithLease(ttlLease))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := runs.LoadOrStore(r.Header.Get(httpidem.HeaderKey), new(atomic.Int64))
		n := v.(*atomic.Int64).Add(1)
		mu.Lock()
		tl := tl
		if n == 1 {
			ownerCtx = r.Context()
		}
		mu.Unlock()
		tl.add("handler run %d starts", n)
		if n == 1 {
			select {
			case <-time.After(ttlRun):
			case <-r.Context().Done():
				lost.Store(true)
				tl.add("handler run 1: context done: %v", context.Cause(r.Context()))
			}
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	}))
	send := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/pay", strings.NewReader("x"))
		req.Header.Set(httpidem.HeaderKey, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for trial := 1; ; trial++ {
		key := fmt.Sprint("k", trial)
		mu.Lock()
		tl, ownerCtx = &ttlTimeline{t0: time.Now()}, nil
		trialTL := tl
		mu.Unlock()
		lost.Store(false)
		first := make(chan *httptest.ResponseRecorder, 1)
		go func() { first <- send(key) }()
		conflicts := 0
		for i := range ttlRounds {
			time.Sleep(ttlPoll)
			mu.Lock()
			octx := ownerCtx
			mu.Unlock()
			if octx == nil {
				continue
			}
			if octx.Err() != nil {
				break // run 1 ended
			}
			w := send(key)
			if w.Code != http.StatusConflict {
				trialTL.add("retry %d: %d %q", i, w.Code, w.Body.String())
				continue
			}
			conflicts++
		}
		w := <-first
		trialTL.add("first response: %d %q", w.Code, w.Body.String())
		v, _ := runs.Load(key)
		if n := v.(*atomic.Int64).Load(); n != 1 {
			t.Fatalf("trial %d: the handler ran %d times; want once\n%s", trial, n, trialTL)
		}
		if lost.Load() {
			if trial == 3 {
				t.Fatalf("the handler lost its lease of %v in 3 trials of 3\n%s", ttlLease, trialTL)
			}
			t.Logf("trial %d: the handler lost its lease; again\n%s", trial, trialTL)
			continue
		}
		if w.Code != http.StatusCreated || w.Body.String() != "run 1" {
			t.Errorf("first response = %d %q; want 201 run 1", w.Code, w.Body.String())
		}
		if conflicts < int(ttlShort/ttlPoll)+2 {
			t.Errorf("only %d retries answered 409 while the first ran; none past the TTL?", conflicts)
		}
		again := send(key)
		if again.Code != http.StatusCreated || again.Body.String() != "run 1" || again.Header().Get(httpidem.HeaderReplayed) != "true" {
			t.Errorf("retry after the response = %d %q replayed=%q; want the replay of 201 run 1",
				again.Code, again.Body.String(), again.Header().Get(httpidem.HeaderReplayed))
		}
		if n := v.(*atomic.Int64).Load(); n != 1 {
			t.Errorf("the handler ran %d times; want once", n)
		}
		if t.Failed() {
			t.Logf("timeline:\n%s", trialTL)
		}
		return
	}
}
