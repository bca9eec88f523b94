package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

func recordsHarness(url func(*testing.T) string) func(*testing.T) {
	return func(t *testing.T) {
		c := newClient(t, url(t))
		storetest.TestRecords(t, storetest.RecordsHarness{
			New: func(t *testing.T, opts ...store.Option) (*store.Records, error) {
				return store.NewRecords(c, append([]store.Option{store.WithPrefix(uniquePrefix(t))}, opts...)...)
			},
			Wait: time.Sleep,
			Now:  time.Now, // the server runs on this machine
			Tick: 100 * time.Millisecond,
		})
	}
}

// TestRecordsClusterConformance runs storetest.TestRecords on a cluster;
// the standalone run is store's TestRedisRecords.
func TestRecordsClusterConformance(t *testing.T) {
	recordsHarness(clusterURL)(t)
}

// TestRecordsLayout: the layout-1 string Acquire and Update write under the
// default prefix, field by field (decoded with internal/recordlayout), with times from the server's TIME and the record's
// expiry equal to the key's (PEXPIRETIME), through every way of setting it.
func TestRecordsLayout(t *testing.T) {
	ctx := context.Background()
	for name, url := range map[string]func(*testing.T) string{"standalone": standaloneURL, "cluster": clusterURL} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, url(t))
			s := mustStore(store.NewRecords(c))
			id := keyFor(t, "")
			key := "idempotency:" + id
			t.Cleanup(func() { _ = s.Delete(ctx, id) })

			t0 := recServerMS(t, c, key)
			rec, acquired, err := s.AcquireWith(ctx, id, store.AcquireOptions{TTL: time.Minute, Lease: 30 * time.Second, Fingerprint: "fp"})
			t1 := recServerMS(t, c, key)
			if err != nil || !acquired {
				t.Fatalf("AcquireWith = %v, %v", acquired, err)
			}
			created := rec.CreatedAt.UnixMilli()
			if created < t0 || created > t1 {
				t.Errorf("CreatedAt %d is not the server's TIME (between %d and %d)", created, t0, t1)
			}
			r := recReadRaw(t, c, key)
			want := recRaw{Type: "string", Str: r.Str, Layout: 1, ExpireAt: created + 60000, Hash: map[string]string{
				"status": "pending", "payload": "", "created_ms": fmt.Sprint(created), "updated_ms": fmt.Sprint(created),
				"expires_ms": fmt.Sprint(created + 60000), "lease_ms": fmt.Sprint(created + 30000),
				"fence": strconv.FormatUint(rec.Fence, 10), "fp": "fp", "token": rec.Token,
			}}
			if diff := cmp.Diff(want, r); diff != "" {
				t.Errorf("raw record after Acquire (-want +got):\n%s", diff)
			}
			if !createdFence(rec) {
				t.Errorf("fence %d is not the server's clock (ns) at CreatedAt %d", rec.Fence, created)
			}
			if rec.ExpiresAt.UnixMilli() != r.ExpireAt || rec.LeaseUntil.UnixMilli() != created+30000 {
				t.Errorf("record ExpiresAt %v / LeaseUntil %v disagree with the key", rec.ExpiresAt, rec.LeaseUntil)
			}

			at := time.UnixMilli(created + 90_000).Add(300 * time.Microsecond) // rounds up to the next ms
			st := store.StatusCompleted
			p := []byte("result")
			recNoErr(t, s.Update(ctx, id, store.Update{Status: &st, Payload: &p, ExpiresAt: &at, Token: rec.Token}))
			r = recReadRaw(t, c, key)
			// update.lua takes a duration from the server's TIME: Go
			// sends time.Until(at) rounded up, so the expiry is at or after at
			// (to the ms: TIME is read in whole ms) by the time the call took.
			if r.ExpireAt < created+90_000 || r.ExpireAt > created+91_000 || r.Hash["expires_ms"] != fmt.Sprint(r.ExpireAt) || r.Hash["lease_ms"] != "0" ||
				r.Hash["status"] != "completed" || r.Hash["payload"] != "result" || r.Hash["token"] != rec.Token {
				t.Errorf("raw record after Update = %+v; want completed, result, no lease, expiry in [%d, %d]", r, created+90_000, created+91_000)
			}
			got, ok, err := s.Get(ctx, id)
			if err != nil || !ok || got.ExpiresAt.UnixMilli() != r.ExpireAt {
				t.Errorf("Get = %+v, %v, %v; want ExpiresAt = PEXPIRETIME %d", got, ok, err, r.ExpireAt)
			}
			recNoErr(t, s.Update(ctx, id, store.Update{ExpiresAt: &time.Time{}}))
			if r = recReadRaw(t, c, key); r.ExpireAt != -1 || r.Hash["expires_ms"] != "0" {
				t.Errorf("after Update(ExpiresAt zero): PEXPIRETIME %d, expires_ms %q; want -1, 0", r.ExpireAt, r.Hash["expires_ms"])
			}

			// The store's TTL applies when AcquireOptions.TTL is 0.
			s2 := mustStore(store.NewRecords(c, store.WithTTL(time.Hour)))
			rec2, _, err := s2.Acquire(ctx, id+":2", 0)
			recNoErr(t, err)
			t.Cleanup(func() { _ = s2.Delete(ctx, id+":2") })
			if r := recReadRaw(t, c, key+":2"); r.ExpireAt != rec2.CreatedAt.UnixMilli()+3_600_000 || rec2.ExpiresAt.UnixMilli() != r.ExpireAt {
				t.Errorf("WithTTL(1h): PEXPIRETIME %d, ExpiresAt %v, CreatedAt %v", r.ExpireAt, rec2.ExpiresAt, rec2.CreatedAt)
			}
		})
	}
}

// TestRecordsConcurrentAcquire: 32 clients acquire one key at once, 100
// rounds: exactly one acquires each round, the others see its record without
// its token; then 32 race to take over a key whose lease passed, 50 rounds:
// exactly one does.
func TestRecordsConcurrentAcquire(t *testing.T) {
	ctx := context.Background()
	url := standaloneURL(t)
	prefix := uniquePrefix(t)
	const clients = 32
	stores := make([]*store.Records, clients)
	for i := range stores {
		stores[i] = mustStore(store.NewRecords(newClient(t, url), store.WithPrefix(prefix), store.WithTTL(time.Minute)))
	}
	raw := newClient(t, url)

	race := func(t *testing.T, key string, o store.AcquireOptions) (wins int32, winner store.Record) {
		t.Helper()
		var n atomic.Int32
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				rec, acquired, err := s.AcquireWith(ctx, key, o)
				if err != nil {
					t.Errorf("AcquireWith: %v", err)
					return
				}
				if acquired {
					n.Add(1)
					mu.Lock()
					winner = rec
					mu.Unlock()
				} else if rec.Token != "" {
					t.Errorf("a loser got a token: %+v", rec)
				}
			}()
		}
		close(start)
		wg.Wait()
		return n.Load(), winner
	}

	for round := range 100 {
		key := fmt.Sprint("k", round)
		wins, w := race(t, key, store.AcquireOptions{Lease: time.Minute})
		if wins != 1 {
			t.Fatalf("round %d: %d acquired, want exactly 1", round, wins)
		}
		if tok := recReadRaw(t, raw, prefix+key).Hash["token"]; tok != w.Token || !createdFence(w) {
			t.Fatalf("round %d: stored token %q, winner's %q fence %d", round, tok, w.Token, w.Fence)
		}
	}
	for round := range 50 {
		key := fmt.Sprint("takeover", round)
		first, acquired, err := stores[0].AcquireWith(ctx, key, store.AcquireOptions{Lease: time.Millisecond})
		if err != nil || !acquired {
			t.Fatalf("first acquire: %v, %v", acquired, err)
		}
		time.Sleep(3 * time.Millisecond)
		wins, w := race(t, key, store.AcquireOptions{Lease: time.Minute})
		if wins != 1 || w.Fence <= first.Fence {
			t.Fatalf("takeover round %d: %d acquired (fence %d), want exactly 1 with a fence above %d", round, wins, w.Fence, first.Fence)
		}
	}
}

// TestRecordsStalledOwner: an owner whose lease passed and was taken over can
// neither complete, fail, move, nor delete the record: the raw hash and its
// expiry are unchanged by every attempt; the new owner completes it.
func TestRecordsStalledOwner(t *testing.T) {
	ctx := context.Background()
	for name, url := range map[string]func(*testing.T) string{"standalone": standaloneURL, "cluster": clusterURL} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, url(t))
			prefix := uniquePrefix(t)
			stalled := mustStore(store.NewRecords(c, store.WithPrefix(prefix)))
			fresh := mustStore(store.NewRecords(newClient(t, url(t)), store.WithPrefix(prefix)))
			a, ok, err := stalled.AcquireWith(ctx, "job", store.AcquireOptions{TTL: time.Minute, Lease: 50 * time.Millisecond})
			if err != nil || !ok {
				t.Fatalf("acquire: %v, %v", ok, err)
			}
			time.Sleep(120 * time.Millisecond)
			b, ok, err := fresh.AcquireWith(ctx, "job", store.AcquireOptions{Lease: time.Minute})
			if err != nil || !ok || b.Fence <= a.Fence {
				t.Fatalf("takeover: %+v, %v, %v", b, ok, err)
			}
			before := recReadRaw(t, c, prefix+"job")
			done, failed := store.StatusCompleted, store.StatusFailed
			late := []byte("stale result")
			never := time.Time{}
			for what, err := range map[string]error{
				"complete": stalled.Update(ctx, "job", store.Update{Status: &done, Payload: &late, Token: a.Token}),
				"fail":     stalled.Update(ctx, "job", store.Update{Status: &failed, Token: a.Token}),
				"persist":  stalled.Update(ctx, "job", store.Update{ExpiresAt: &never, Token: a.Token}),
				"delete":   stalled.DeleteFenced(ctx, "job", a.Token),
			} {
				if !errors.Is(err, store.ErrStaleOwner) {
					t.Errorf("stalled owner's %s = %v, want ErrStaleOwner", what, err)
				}
			}
			if diff := cmp.Diff(before, recReadRaw(t, c, prefix+"job")); diff != "" {
				t.Errorf("the stalled owner changed the record (-before +after):\n%s", diff)
			}
			result := []byte("fresh result")
			recNoErr(t, fresh.Update(ctx, "job", store.Update{Status: &done, Payload: &result, Token: b.Token}))
			r := recReadRaw(t, c, prefix+"job")
			// The takeover's minute-long lease ran past the retention (a
			// minute from creation), so the key lived on the lease; the
			// final write puts it back on the retention, expires_ms, which
			// nobody moved (records_expiry_test.go has the rule).
			if r.Hash["payload"] != "fresh result" || r.Hash["status"] != "completed" || r.Hash["fence"] != strconv.FormatUint(b.Fence, 10) ||
				r.Hash["expires_ms"] != before.Hash["expires_ms"] || strconv.FormatInt(r.ExpireAt, 10) != r.Hash["expires_ms"] {
				t.Errorf("after the new owner's update: %+v", r)
			}
		})
	}
}

// TestRecordsBadInputSendsNothing: refused calls send no command and write no key.
func TestRecordsBadInputSendsNothing(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, redisproc.Options{})
	c := newClient(t, srv.URL())
	s := mustStore(store.NewRecords(c))
	before := commandCount(t, c)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	long := strings.Repeat("x", store.MaxIDLen+1)
	st := func(s string) *store.Status { v := store.Status(s); return &v }
	big := make([]byte, store.MaxRecordPayloadLen+1)
	fn := func(context.Context) ([]byte, error) { t.Error("fn ran"); return nil, nil }
	var errs []error
	add := func(_ any, _ bool, err error) { errs = append(errs, err) }
	add(s.Acquire(ctx, "", time.Second))
	add(s.Acquire(ctx, long, time.Second))
	add(s.Acquire(ctx, "k", -time.Second))
	add(s.AcquireWith(ctx, "k", store.AcquireOptions{Lease: -time.Second}))
	add(s.AcquireWith(ctx, "k", store.AcquireOptions{Fingerprint: strings.Repeat("f", 256+1)}))
	add(s.Get(ctx, ""))
	add(s.Do(ctx, "k", store.AcquireOptions{}, fn))
	add(s.Do(ctx, "", store.AcquireOptions{Lease: time.Second}, fn))
	_, err := store.NewRecords(c, store.WithTTL(-1))
	errs = append(errs, err)
	errs = append(errs,
		s.Update(ctx, "k", store.Update{}),
		s.Update(ctx, "k", store.Update{Status: st("")}),
		s.Update(ctx, "k", store.Update{Status: st(strings.Repeat("s", maxStatusLen+1))}),
		s.Update(ctx, "k", store.Update{Payload: &big}),
		s.Update(ctx, "", store.Update{Status: st("completed")}),
		s.Delete(ctx, long),
		s.DeleteFenced(ctx, "k", ""),
	)
	for i, err := range errs {
		if !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("call %d: error = %v, want ErrInvalidArgument", i, err)
		}
	}
	if _, _, err := s.Acquire(cancelled, "k", 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	// The second reading counts the first INFO, and nothing else may be sent.
	if after := commandCount(t, c); after != before+1 {
		t.Errorf("refused calls sent %d commands", after-before-1)
	}
	if n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("DBSIZE after refused calls = %d, %v; want 0", n, err)
	}
	if _, err := store.OpenRecords(srv.URL(), store.WithTTL(-1)); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("OpenRecords with a negative TTL: %v", err)
	}
}

// TestRecordsForeignValue: a key holding something other than a record hash
// (a JSON string, say) is reported as ErrUnexpectedReply and
// left alone; Delete removes it.
func TestRecordsForeignValue(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	prefix := uniquePrefix(t)
	s := mustStore(store.NewRecords(c, store.WithPrefix(prefix)))
	json := `{"key":"export:123","status":"completed"}`
	do(t, c, "SET", prefix+"export:123", json)
	_, _, err := s.Acquire(ctx, "export:123", 0)
	recWantErr(t, err, store.ErrUnexpectedReply)
	_, _, err = s.Get(ctx, "export:123")
	recWantErr(t, err, store.ErrUnexpectedReply)
	st := store.StatusFailed
	recWantErr(t, s.Update(ctx, "export:123", store.Update{Status: &st}), store.ErrUnexpectedReply)
	recWantErr(t, s.DeleteFenced(ctx, "export:123", "tok"), store.ErrUnexpectedReply)
	_, _, err = s.Do(ctx, "export:123", store.AcquireOptions{Lease: time.Second}, func(context.Context) ([]byte, error) {
		t.Error("fn ran")
		return nil, nil
	})
	recWantErr(t, err, store.ErrUnexpectedReply)
	if r := recReadRaw(t, c, prefix+"export:123"); r.Str != json {
		t.Errorf("the foreign value changed: %+v", r)
	}
	recNoErr(t, s.Delete(ctx, "export:123"))
	if _, acquired, err := s.Acquire(ctx, "export:123", 0); err != nil || !acquired {
		t.Errorf("Acquire after Delete = %v, %v", acquired, err)
	}
}

// TestRecordsNoScript: after SCRIPT FLUSH every operation falls back to EVAL.
func TestRecordsNoScript(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	s := mustStore(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
	flush := func() {
		if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	rec, acquired, err := s.AcquireWith(ctx, "k", store.AcquireOptions{Lease: time.Minute})
	if err != nil || !acquired {
		t.Fatalf("AcquireWith after SCRIPT FLUSH = %v, %v", acquired, err)
	}
	flush()
	if _, ok, err := s.Get(ctx, "k"); err != nil || !ok {
		t.Fatalf("Get after SCRIPT FLUSH = %v, %v", ok, err)
	}
	flush()
	st := store.StatusCompleted
	recNoErr(t, s.Update(ctx, "k", store.Update{Status: &st, Token: rec.Token}))
	flush()
	recNoErr(t, s.DeleteFenced(ctx, "k", rec.Token))
	flush()
	res, replayed, err := s.Do(ctx, "d", store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) { return []byte("x"), nil })
	if string(res) != "x" || replayed || err != nil {
		t.Errorf("Do after SCRIPT FLUSH = %q, %v, %v", res, replayed, err)
	}
}

// TestRecordsAcrossSlots: records spread over three masters behave the same.
func TestRecordsAcrossSlots(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, cluster3URL(t))
	s := mustStore(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
	for i := range 60 {
		key := strconv.Itoa(i)
		res, replayed, err := s.Do(ctx, key, store.AcquireOptions{Lease: time.Minute, TTL: time.Minute}, func(context.Context) ([]byte, error) {
			return []byte("r" + key), nil
		})
		if string(res) != "r"+key || replayed || err != nil {
			t.Fatalf("Do(%s) = %q, %v, %v", key, res, replayed, err)
		}
	}
	spread := 0
	for _, n := range c.Nodes() {
		if k, _ := n.Do(ctx, n.B().Dbsize().Build()).AsInt64(); k > 0 {
			spread++
		}
	}
	if spread < 3 {
		t.Errorf("records landed on %d nodes, want 3", spread)
	}
	for i := range 60 {
		key := strconv.Itoa(i)
		res, replayed, err := s.Do(ctx, key, store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
			t.Error("fn ran twice")
			return nil, nil
		})
		if string(res) != "r"+key || !replayed || err != nil {
			t.Fatalf("replay Do(%s) = %q, %v, %v", key, res, replayed, err)
		}
	}
}

// TestRecordsClose: NewRecords borrows the client, OpenRecords owns it.
func TestRecordsClose(t *testing.T) {
	ctx := context.Background()
	url := standaloneURL(t)
	c := newClient(t, url)
	if err := mustStore(store.NewRecords(c)).Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Errorf("borrowed client closed by Close: %v", err)
	}
	s, err := store.OpenRecords(url, store.WithPrefix(uniquePrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, "x", 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, _, err := s.Get(ctx, "x"); !errors.Is(err, rueidis.ErrClosing) {
		t.Errorf("Get after Close = %v, want rueidis.ErrClosing", err)
	}
	if _, err := store.OpenRecords("redis://127.0.0.1:1"); err == nil {
		t.Error("OpenRecords on a closed port succeeded")
	}
}

func recNoErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func recWantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error = %v, want %v", err, target)
	}
}
