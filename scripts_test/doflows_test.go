package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// Do flows the way real services run them, on real Redis: handlers that
// outlive their lease, a full Redis, the records' failure policy, and URLs
// with passwords.

// TestDoLeaseKeptAlive: a handler that sleeps 900 ms under a 200 ms lease
// keeps it (the heartbeat extends it every lease/3); a second caller at 500 ms
// gets ErrInFlight, the handler runs once, and the first caller commits.
func TestDoLeaseKeptAlive(t *testing.T) {
	url := standaloneURL(t)
	c := newClient(t, url)
	ctx := context.Background()

	t.Run("Claims", func(t *testing.T) {
		prefix := keyFor(t, "doflows:")
		s := must.Store(store.NewClaims(c, store.WithPrefix(prefix)))
		var runs atomic.Int32
		first := make(chan error, 1)
		go func() {
			ran, err := s.Do(ctx, "m", 200*time.Millisecond, func(ctx context.Context) error {
				runs.Add(1)
				select {
				case <-time.After(900 * time.Millisecond):
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			})
			if !ran {
				err = errors.Join(err, errors.New("ran = false"))
			}
			first <- err
		}()
		time.Sleep(500 * time.Millisecond)
		ran, err := s.Do(ctx, "m", 200*time.Millisecond, func(context.Context) error {
			runs.Add(1)
			return nil
		})
		if ran || !errors.Is(err, store.ErrInFlight) {
			t.Errorf("second caller at 500ms: Do = %v, %v; want false, ErrInFlight", ran, err)
		}
		if err := <-first; err != nil {
			t.Errorf("first caller: Do = %v; want true, nil", err)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the handler ran %d times, want 1", n)
		}
		if v := c.Do(ctx, c.B().Get().Key(prefix+"m").Build()); mustString(t, v) != "1" {
			t.Errorf("key holds %q, want 1", mustString(t, v))
		}
	})

	t.Run("Records", func(t *testing.T) {
		prefix := keyFor(t, "doflows:")
		s := must.Store(store.NewRecords(c, store.WithPrefix(prefix)))
		o := store.AcquireOptions{Lease: 200 * time.Millisecond}
		var runs atomic.Int32
		type out struct {
			res []byte
			err error
		}
		first := make(chan out, 1)
		go func() {
			res, _, err := s.Do(ctx, "k", o, func(ctx context.Context) ([]byte, error) {
				runs.Add(1)
				if l, ok := store.LeaseFromContext(ctx); !ok || l.Token == "" || l.Fence == 0 {
					return nil, fmt.Errorf("LeaseFromContext = %+v, %v", l, ok)
				}
				select {
				case <-time.After(900 * time.Millisecond):
					return []byte("A"), nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			})
			first <- out{res, err}
		}()
		time.Sleep(500 * time.Millisecond)
		_, _, err := s.Do(ctx, "k", o, func(context.Context) ([]byte, error) {
			runs.Add(1)
			return []byte("B"), nil
		})
		if !errors.Is(err, store.ErrInFlight) {
			t.Errorf("second caller at 500ms: Do = %v; want ErrInFlight", err)
		}
		if got := <-first; string(got.res) != "A" || got.err != nil {
			t.Errorf("first caller: Do = %q, %v; want A, nil", got.res, got.err)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the handler ran %d times, want 1", n)
		}
		r, ok, err := s.Get(ctx, "k")
		if !ok || err != nil || r.Status != store.StatusCompleted || string(r.Payload) != "A" || !createdFence(r) {
			t.Errorf("record = %+v, %v, %v; want completed A, the fence it was created with", r, ok, err)
		}
	})
}

// TestDoCrashedOwnerLeaseExpires: an owner that stops extending (a crashed
// process: its lease written raw, with nobody to renew it) loses the id once
// the lease passes, and the next Do runs fn.
func TestDoCrashedOwnerLeaseExpires(t *testing.T) {
	c := newClient(t, standaloneURL(t))
	ctx := context.Background()

	t.Run("Claims", func(t *testing.T) {
		prefix := keyFor(t, "doflows:")
		s := must.Store(store.NewClaims(c, store.WithPrefix(prefix)))
		do(t, c, "SET", prefix+"m", "~crashed", "PX", "200")
		if ran, err := s.Do(ctx, "m", time.Second, func(context.Context) error { return nil }); ran || !errors.Is(err, store.ErrInFlight) {
			t.Fatalf("Do while the crashed owner's lease is live = %v, %v; want false, ErrInFlight", ran, err)
		}
		time.Sleep(300 * time.Millisecond)
		if ran, err := s.Do(ctx, "m", time.Second, func(context.Context) error { return nil }); !ran || err != nil {
			t.Errorf("Do after the lease passed = %v, %v; want true, nil", ran, err)
		}
	})

	t.Run("Records", func(t *testing.T) {
		prefix := keyFor(t, "doflows:")
		s := must.Store(store.NewRecords(c, store.WithPrefix(prefix)))
		// AcquireWith alone renews nothing: the owner behaves as a crashed one.
		crashed, ok, err := s.AcquireWith(ctx, "k", store.AcquireOptions{Lease: 200 * time.Millisecond})
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		time.Sleep(300 * time.Millisecond)
		res, _, err := s.Do(ctx, "k", store.AcquireOptions{Lease: time.Second}, func(context.Context) ([]byte, error) { return []byte("B"), nil })
		if string(res) != "B" || err != nil {
			t.Errorf("Do after the lease passed = %q, %v; want B, nil", res, err)
		}
		done := store.StatusCompleted
		if err := s.Update(ctx, "k", store.Update{Status: &done, Token: crashed.Token}); !errors.Is(err, store.ErrStaleOwner) {
			t.Errorf("the crashed owner's fenced update = %v, want ErrStaleOwner", err)
		}
	})
}

// TestDoCommitUnderFullMemory: a handler that fills Redis (maxmemory 1,
// noeviction) still commits: commit.lua carries allow-oom, so the effect that
// happened is recorded and never run again.
func TestDoCommitUnderFullMemory(t *testing.T) {
	srv := newServer(t, redisproc.Options{MaxMemoryPolicy: "noeviction"})
	c := newClient(t, srv.URL())
	ctx := context.Background()
	s := must.Store(store.NewClaims(c))
	ran, err := s.Do(ctx, "m", 300*time.Millisecond, func(ctx context.Context) error {
		if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1").Build()).Error(); err != nil {
			return err
		}
		// Redis is full now: a plain write is refused...
		if err := c.Do(ctx, c.B().Set().Key("other").Value("x").Build()).Error(); err == nil || !strings.Contains(err.Error(), "OOM") {
			return fmt.Errorf("SET under maxmemory 1 = %v, want OOM", err)
		}
		// ...and the lease survives a few heartbeats (extend.lua carries allow-oom).
		time.Sleep(500 * time.Millisecond)
		return ctx.Err()
	})
	if !ran || err != nil {
		t.Errorf("Do = %v, %v; want true, nil", ran, err)
	}
	if v := c.Do(ctx, c.B().Get().Key(store.DefaultClaimsPrefix+"m").Build()); mustString(t, v) != "1" {
		t.Errorf("key holds %q, want 1", mustString(t, v))
	}
	// A redelivery claims first (a write that grows memory): make room.
	do(t, c, "CONFIG", "SET", "maxmemory", "0")
	if ran, err := s.Do(ctx, "m", time.Second, func(context.Context) error { return nil }); ran || err != nil {
		t.Errorf("redelivery = %v, %v; want false, nil (a duplicate)", ran, err)
	}
}

// TestRecordsDoFailurePolicy: an error from fn, a context.Canceled (the client
// hung up) or a context.DeadlineExceeded deletes the record, so the next Do
// runs fn again; only store.Permanent is stored and replayed with ErrFailed.
func TestRecordsDoFailurePolicy(t *testing.T) {
	c := newClient(t, standaloneURL(t))
	ctx := context.Background()
	s := must.Store(store.NewRecords(c, store.WithPrefix(keyFor(t, "doflows:"))))
	o := store.AcquireOptions{Lease: time.Second}
	for i, fail := range []error{errors.New("provider 503"), context.Canceled, context.DeadlineExceeded} {
		key := fmt.Sprintf("k%d", i)
		if _, _, err := s.Do(ctx, key, o, func(context.Context) ([]byte, error) { return nil, fail }); !errors.Is(err, fail) {
			t.Fatalf("Do = %v, want %v", err, fail)
		}
		var runs int
		res, replayed, err := s.Do(ctx, key, o, func(context.Context) ([]byte, error) { runs++; return []byte("ok"), nil })
		if runs != 1 || string(res) != "ok" || replayed || err != nil {
			t.Errorf("after %v: next Do ran fn %d times = %q, %v, %v; want once, ok, false, nil", fail, runs, res, replayed, err)
		}
	}
	declined := errors.New("card declined")
	if _, _, err := s.Do(ctx, "p", o, func(context.Context) ([]byte, error) { return nil, store.Permanent(declined) }); !errors.Is(err, declined) {
		t.Fatalf("Do = %v, want the declined error", err)
	}
	res, replayed, err := s.Do(ctx, "p", o, func(context.Context) ([]byte, error) {
		t.Error("fn ran again after a Permanent failure")
		return nil, nil
	})
	if string(res) != "card declined" || !replayed || !errors.Is(err, store.ErrFailed) {
		t.Errorf("next Do = %q, %v, %v; want the error text, true, ErrFailed", res, replayed, err)
	}
}

// TestOpenNeverShowsThePassword: a wrong password, and an unreachable host,
// give errors without the password in their text.
func TestOpenNeverShowsThePassword(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	srv := newServer(t, redisproc.Options{Password: "the-right-one"})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := l.Addr().String()
	l.Close() // nothing listens there now
	for _, u := range []string{
		"redis://:" + secret + "@" + srv.Addr,
		"redis://app:" + secret + "@" + srv.Addr + "/0",
		"redis://:" + secret + "@" + unreachable,
		"redis://:" + secret + "@" + srv.Addr + "/notadb",
		"redis://:" + secret + "@" + unreachable + ":bad-port",
	} {
		opens := map[string]func() error{
			"OpenClaims":  func() error { s, err := store.OpenClaims(u); closeIf(s, err); return err },
			"OpenOutbox":  func() error { s, err := store.OpenOutbox(u); closeIf(s, err); return err },
			"OpenRecords": func() error { s, err := store.OpenRecords(u); closeIf(s, err); return err },
			"ClientOptions": func() error {
				_, err := store.ClientOptions(u)
				if err == nil {
					return errors.New("ok (no error to check)")
				}
				return err
			},
		}
		for name, open := range opens {
			err := open()
			if err == nil {
				t.Errorf("%s(%s) = nil error, want one", name, strings.ReplaceAll(u, secret, "***"))
				continue
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(fmt.Sprintf("%+v", err), secret) {
				t.Errorf("%s: the error shows the password: %v", name, err)
			}
			for e := errors.Unwrap(err); e != nil; e = errors.Unwrap(e) {
				if strings.Contains(e.Error(), secret) {
					t.Errorf("%s: a wrapped error shows the password: %v", name, e)
				}
			}
		}
	}
}

func closeIf(s interface{ Close() error }, err error) {
	if err == nil {
		s.Close()
	}
}

func mustString(t *testing.T, r interface{ ToString() (string, error) }) string {
	t.Helper()
	v, err := r.ToString()
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	return v
}

// TestOpenChecksOptionsFirst: an invalid option fails Open* before it
// connects, so the error names the option, not the network.
func TestOpenChecksOptionsFirst(t *testing.T) {
	const nowhere = "redis://127.0.0.1:1"
	if _, err := store.OpenClaims(nowhere, store.WithTTL(-1)); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("OpenClaims(WithTTL(-1)) = %v, want ErrInvalidArgument", err)
	}
	if _, err := store.OpenRecords(nowhere, store.WithTTL(-1)); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("OpenRecords(WithTTL(-1)) = %v, want ErrInvalidArgument", err)
	}
	if _, err := store.OpenOutbox(nowhere, store.WithMaxUnacked(-1)); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("OpenOutbox(WithMaxUnacked(-1)) = %v, want ErrInvalidArgument", err)
	}
}
