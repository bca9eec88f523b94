package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/internal/faultnet"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// TestRecordsKilledAfterCommit: the worker is SIGKILLed after fn's
// transaction committed and before the Redis record's final write — the
// window in which a Redis-only store charges twice. The retry, on another
// server, replays the committed response; the charge exists once. With
// FLUSHALL before the retry too (the Redis record gone: a restart without
// persistence, a failover), the row alone answers.
func TestRecordsKilledAfterCommit(t *testing.T) {
	srv := startRecServers(t)
	for _, flush := range []bool{false, true} {
		t.Run("flush="+strconv.FormatBool(flush), func(t *testing.T) {
			e := srv.env(t)
			s := e.records(t)
			charges := e.chargesTable(t)
			const lease = time.Second
			w := startWorker(t, e, charges, "kill-after-commit", lease)
			if r := post(w.url, "pay-1", 100); r.err == nil {
				t.Fatalf("the killed worker answered %d %q", r.status, r.body)
			}
			w.killedBySIGKILL(t)
			ids := e.charges(t, charges, "pay-1")
			if len(ids) != 1 {
				t.Fatalf("charges after the kill: %v, want one (the commit happened)", ids)
			}
			if rec, ok, err := s.lease.Get(context.Background(), recordKey("pay-1")); err != nil || !ok || rec.Status != store.StatusPending {
				t.Fatalf("the Redis record after the kill = %+v, %v, %v; want the dead owner's pending record", rec, ok, err)
			}
			if flush {
				e.flushRedis(t)
			}
			// The retry waits out the dead owner's lease (WithWait), takes
			// the key over, and finds the row.
			api := paymentsServer(t, s, charges, lease, 10*time.Second, nil)
			want := chargeBody(ids[0], 100)
			for i := range 2 { // the second retry is answered from Redis
				r := post(api.URL, "pay-1", 100)
				if r.err != nil || r.status != http.StatusCreated || !r.replayed || r.body != want {
					t.Fatalf("retry %d = %d replayed=%v %q %v; want 201, replayed, %s", i, r.status, r.replayed, r.body, r.err, want)
				}
			}
			if got := e.charges(t, charges, "pay-1"); !slices.Equal(got, ids) {
				t.Errorf("charges after the retries: %v, want %v", got, ids)
			}
			if rec, ok, err := s.lease.Get(context.Background(), recordKey("pay-1")); err != nil || !ok || rec.Status != store.StatusCompleted {
				t.Errorf("the Redis record after the retry = %+v, %v, %v; want it completed from the row", rec, ok, err)
			}
		})
	}
}

// TestRecordsKilledBeforeCommit: the worker is SIGKILLed just before its
// commit: the server rolls its transaction back (the charge never was), and
// the retry runs the handler: one charge, a fresh 201.
func TestRecordsKilledBeforeCommit(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	s := e.records(t)
	charges := e.chargesTable(t)
	const lease = time.Second
	w := startWorker(t, e, charges, "kill-before-commit", lease)
	if r := post(w.url, "pay-1", 100); r.err == nil {
		t.Fatalf("the killed worker answered %d %q", r.status, r.body)
	}
	w.killedBySIGKILL(t)
	claim, ok, err := s.readRow(context.Background(), s.db, recordKey("pay-1"))
	if err != nil || !ok || claim.status != store.StatusPending {
		t.Fatalf("row after the kill = %+v, %v, %v; want the dead worker's pending claim", claim, ok, err)
	}
	api := paymentsServer(t, s, charges, lease, 10*time.Second, nil)
	r := post(api.URL, "pay-1", 100)
	ids := e.charges(t, charges, "pay-1")
	if len(ids) != 1 {
		t.Fatalf("charges: %v, want exactly one (the retry's)", ids)
	}
	if r.err != nil || r.status != http.StatusCreated || r.replayed || r.body != chargeBody(ids[0], 100) {
		t.Errorf("retry = %d replayed=%v %q %v; want a first 201 for charge %d", r.status, r.replayed, r.body, r.err, ids[0])
	}
	if row, _, err := s.readRow(context.Background(), s.db, recordKey("pay-1")); err != nil || row.fence <= claim.fence || row.status != store.StatusCompleted {
		t.Errorf("row = %+v, %v; want completed by the takeover (a fence above the dead claim's %d)", row, err, claim.fence)
	}
}

// TestRecordsStaleOwnerPaused: the worker's handler inserted its charge and
// is paused (SIGSTOP) past its lease; another server takes the key over and
// charges. When the paused worker resumes and reaches its commit, it is
// refused — its charge rolls back, its client gets a 503 — and nothing the
// new owner committed changes. With FLUSHALL before the resume, Redis can no
// longer tell the worker its lease is gone: the row's fence refuses it.
func TestRecordsStaleOwnerPaused(t *testing.T) {
	srv := startRecServers(t)
	for _, flush := range []bool{false, true} {
		t.Run("flush="+strconv.FormatBool(flush), func(t *testing.T) {
			e := srv.env(t)
			s := e.records(t)
			charges := e.chargesTable(t)
			const lease = time.Second
			w := startWorker(t, e, charges, "stall", lease)
			first := make(chan response, 1)
			go func() { first <- post(w.url, "pay-1", 100) }()
			staleID, _ := strconv.ParseInt(strings.TrimPrefix(w.line(t), "inserted "), 10, 64)
			if err := syscall.Kill(w.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// The paused worker cannot renew: wait until its lease has passed.
			waitFor(t, 30*time.Second, "the paused worker's lease to pass", func() bool {
				rec, ok, err := s.lease.Get(context.Background(), recordKey("pay-1"))
				return err == nil && ok && rec.Status == store.StatusPending && time.Now().After(rec.LeaseUntil.Add(50*time.Millisecond))
			})
			api := paymentsServer(t, s, charges, lease, 0, nil)
			r := post(api.URL, "pay-1", 100)
			ids := e.charges(t, charges, "pay-1")
			if len(ids) != 1 || ids[0] == staleID {
				t.Fatalf("charges after the takeover: %v (the paused worker's uncommitted one is %d), want the new owner's only", ids, staleID)
			}
			want := chargeBody(ids[0], 100)
			if r.err != nil || r.status != http.StatusCreated || r.replayed || r.body != want {
				t.Fatalf("the new owner's response = %d replayed=%v %q %v; want a first 201 %s", r.status, r.replayed, r.body, r.err, want)
			}
			row, _, err := s.readRow(context.Background(), s.db, recordKey("pay-1"))
			if err != nil || row.fence < 2 || row.status != store.StatusCompleted {
				t.Fatalf("row after the takeover = %+v, %v; want completed at fence >= 2", row, err)
			}
			if flush {
				e.flushRedis(t)
			}
			// Resume the worker: its handler answers, its commit is refused.
			if _, err := fmt.Fprintln(w.stdin, "go"); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(w.cmd.Process.Pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-first:
				if r.err != nil || r.status != http.StatusServiceUnavailable {
					t.Errorf("the stale owner's client got %d %q %v; want 503 (its effect did not commit)", r.status, r.body, r.err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the stale owner's request did not end in 30 s")
			}
			if got := e.charges(t, charges, "pay-1"); !slices.Equal(got, ids) {
				t.Errorf("charges after the stale owner resumed: %v, want %v", got, ids)
			}
			after, _, err := s.readRow(context.Background(), s.db, recordKey("pay-1"))
			if err != nil || after.fence != row.fence || after.token != row.token || string(after.result) != string(row.result) {
				t.Errorf("the stale owner changed the row: %+v, was %+v (%v)", after, row, err)
			}
			if r := post(api.URL, "pay-1", 100); r.status != http.StatusCreated || !r.replayed || r.body != want {
				t.Errorf("a later retry = %d replayed=%v %q; want the new owner's response replayed", r.status, r.replayed, r.body)
			}
		})
	}
}

// TestRecordsConcurrentDuplicates: 8 copies of each of 12 requests, sent at
// once to two servers with stores of their own: each key charges once and
// every copy gets the same response.
func TestRecordsConcurrentDuplicates(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	charges := e.chargesTable(t)
	var apis []string
	for range 2 {
		pool := newPool(t, e.pg.URL("postgres"))
		s, err := NewRecords(must.Store(store.NewRecords(newRedisClient(t, e.redis.Addr), store.WithPrefix(e.prefix))), pool, WithRecordsTable(e.table))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTable(context.Background()); err != nil {
			t.Fatal(err)
		}
		apis = append(apis, paymentsServer(t, s, charges, 5*time.Second, 20*time.Second, nil).URL)
	}
	const keys, copies = 12, 8
	got := make([][]response, keys)
	var wg sync.WaitGroup
	for k := range keys {
		got[k] = make([]response, copies)
		for c := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[k][c] = post(apis[c%2], fmt.Sprintf("dup-%d", k), 10+k)
			}()
		}
	}
	wg.Wait()
	for k := range keys {
		key := fmt.Sprintf("dup-%d", k)
		ids := e.charges(t, charges, key)
		if len(ids) != 1 {
			t.Errorf("%s: charges %v, want exactly one", key, ids)
			continue
		}
		first := 0
		for c, r := range got[k] {
			if r.err != nil || r.status != http.StatusCreated || r.body != chargeBody(ids[0], 10+k) {
				t.Errorf("%s copy %d: %d %q %v; want 201 %s", key, c, r.status, r.body, r.err, chargeBody(ids[0], 10+k))
			}
			if !r.replayed {
				first++
			}
		}
		if first != 1 {
			t.Errorf("%s: %d responses not marked replayed, want 1", key, first)
		}
	}
}

// TestRecordsResponseNotStored: under WithRetry5xx a 5xx is not stored, so
// its transaction rolls back with the handler's charge; the retry runs the
// handler on a database the first run did not change: one charge in all.
func TestRecordsResponseNotStored(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	s := e.records(t)
	charges := e.chargesTable(t)
	var mu sync.Mutex
	failNext := true
	inner := chargeHandler(charges, nil)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fail := failNext
		failNext = false
		mu.Unlock()
		if !fail {
			inner.ServeHTTP(w, r)
			return
		}
		// the charge is inserted, then the provider fails: a 502
		rec := &discard{header: http.Header{}}
		inner.ServeHTTP(rec, r)
		if rec.status != http.StatusCreated {
			t.Errorf("the failing run's insert: %d", rec.status)
		}
		http.Error(w, "provider unavailable", http.StatusBadGateway)
	})
	mw, err := httpidem.Middleware(s, httpidem.WithSharedKeys(), httpidem.WithLease(5*time.Second), httpidem.WithRetry5xx())
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(mw(h))
	defer api.Close()
	url := api.URL
	r := post(url, "pay-1", 100)
	if r.status != http.StatusBadGateway || r.replayed {
		t.Fatalf("first = %d replayed=%v %q; want the handler's 502", r.status, r.replayed, r.body)
	}
	if ids := e.charges(t, charges, "pay-1"); len(ids) != 0 {
		t.Fatalf("charges after the 502: %v, want none (rolled back with the response)", ids)
	}
	if rec, ok, err := s.Get(context.Background(), recordKey("pay-1")); ok || err != nil {
		t.Fatalf("record after the 502 = %+v, %v, %v; want none", rec, ok, err)
	}
	if n := e.count(t, `SELECT count(*) FROM `+e.table); n != 0 {
		t.Fatalf("%d rows after the 502, want 0 (the claim is given back)", n)
	}
	r = post(url, "pay-1", 100)
	ids := e.charges(t, charges, "pay-1")
	if len(ids) != 1 || r.status != http.StatusCreated || r.replayed || r.body != chargeBody(ids[0], 100) {
		t.Fatalf("retry = %d replayed=%v %q, charges %v; want a first 201 and one charge", r.status, r.replayed, r.body, ids)
	}
}

// discard is a ResponseWriter that keeps the status only.
type discard struct {
	header http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.status = code }

// TestRecordsConnectionLostAtCommit: the connection to Postgres is reset
// while COMMIT is on its way (a proxy delays it, then resets every
// connection). Reset before COMMIT reached the server: the transaction is
// rolled back, Do says ErrNotCommitted and a retry runs fn. Reset after it
// reached the server, with its answer on the way back: Do cannot tell from
// the broken connection, reads the row on a new one, finds its own outcome
// and reports it committed; a retry replays it.
func TestRecordsConnectionLostAtCommit(t *testing.T) {
	srv := startRecServers(t)
	for _, tc := range []struct {
		name      string
		resetAt   time.Duration // after COMMIT is sent; each way takes `delay`
		committed bool
	}{
		{"before the server", 500 * time.Millisecond, false},
		{"after the server", 1500 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const delay = time.Second
			e := srv.env(t)
			e.records(t) // the table
			charges := e.chargesTable(t)
			proxy, err := faultnet.Listen(fmt.Sprintf("127.0.0.1:%d", e.pg.Port))
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			pool := newPool(t, strings.Replace(e.pg.URL("postgres"), fmt.Sprintf(":%d/", e.pg.Port), ":"+strings.Split(proxy.Addr(), ":")[1]+"/", 1))
			s, err := NewRecords(must.Store(store.NewRecords(e.client, store.WithPrefix(e.prefix))), pool, WithRecordsTable(e.table))
			if err != nil {
				t.Fatal(err)
			}
			commitHook = func(_, when string) {
				if when != "before" {
					return
				}
				proxy.SetLatency(delay)
				go func() {
					time.Sleep(tc.resetAt)
					proxy.Reset()
					proxy.SetLatency(0)
				}()
			}
			defer func() { commitHook = nil }()
			ctx := context.Background()
			o := store.AcquireOptions{Lease: 10 * time.Second}
			var runs atomic.Int32
			res, _, err := s.Do(ctx, "k", o, insertFn(t, charges, "k", &runs, nil))
			commitHook = nil
			time.Sleep(tc.resetAt) // the reset has happened
			ids := e.charges(t, charges, "k")
			if tc.committed {
				if err != nil || len(ids) != 1 || string(res) != fmt.Sprintf("charge %d", ids[0]) {
					t.Fatalf("Do = %q, %v with charges %v; want the committed result, no error", res, err, ids)
				}
			} else if !errors.Is(err, store.ErrNotCommitted) || len(ids) != 0 {
				t.Fatalf("Do = %q, %v with charges %v; want ErrNotCommitted and no charge", res, err, ids)
			}
			again, replayed, err := s.Do(ctx, "k", o, insertFn(t, charges, "k", &runs, nil))
			ids = e.charges(t, charges, "k")
			if err != nil || len(ids) != 1 || replayed != tc.committed || string(again) != fmt.Sprintf("charge %d", ids[0]) {
				t.Errorf("retry = %q, %v, %v with charges %v; want one charge, replayed=%v", again, replayed, err, ids, tc.committed)
			}
		})
	}
}

// recordKey is the record key httpidem gives an Idempotency-Key under
// WithSharedKeys: its own key space, "k:".
func recordKey(key string) string { return "k:" + key }
