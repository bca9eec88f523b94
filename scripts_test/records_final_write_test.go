package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// outage is how long the server is down under a running Do: longer than the
// 5 s budget of the final write's first attempt, well inside the lease.
const (
	outage      = 7 * time.Second
	outageLease = 30 * time.Second
)

// TestRecordsDoFinalWriteOutlastsOutage: the server stops answering while fn
// runs and stays away for longer than 5 s — paused (SIGSTOP) or killed and
// restarted on the same port, with its data (append-only file on) or
// without (the record is gone) — and fn returns meanwhile. Do keeps its lease
// and retries the final write until the server is back: the outcome is
// stored (created again when the restart lost the record), and the next Do
// replays it without running fn (one run in all).
func TestRecordsDoFinalWriteOutlastsOutage(t *testing.T) {
	for _, mode := range []string{"pause", "restart", "restart without data"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, redisproc.Options{AppendOnly: mode != "restart without data"})
			c := newClient(t, srv.URL())
			rs := must.Store(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
			ctx := context.Background()
			var runs atomic.Int64
			started, release := make(chan struct{}), make(chan struct{})
			fn := func(context.Context) ([]byte, error) {
				runs.Add(1)
				close(started)
				<-release
				return []byte("charged"), nil
			}
			type result struct {
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			go func() {
				_, _, err := rs.Do(ctx, "k", store.AcquireOptions{Lease: outageLease}, fn)
				done <- result{err, time.Now()}
			}()
			<-started
			if mode != "restart without data" {
				// The acquire is on disk before the server goes (appendfsync everysec).
				do(t, c, "BGREWRITEAOF")
				time.Sleep(1500 * time.Millisecond)
			}
			var err error
			if mode == "pause" {
				err = srv.Pause()
			} else {
				err = srv.Kill()
			}
			if err != nil {
				t.Fatal(err)
			}
			close(release) // fn returns while the server is away
			time.Sleep(outage)
			back := time.Now()
			if mode == "pause" {
				err = srv.Resume()
			} else {
				err = srv.Restart()
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("Do across a %v %s: %v; want the outcome stored once the server is back", outage, mode, r.err)
			}
			if r.at.Before(back) {
				t.Fatalf("Do returned at %v, before the server was back at %v", r.at, back)
			}
			got, replayed, err := rs.Do(ctx, "k", store.AcquireOptions{Lease: outageLease}, fn)
			if err != nil || !replayed || string(got) != "charged" {
				t.Errorf("the retry: %q, replayed %v, %v; want the stored result replayed", got, replayed, err)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("fn ran %d times, want 1", n)
			}
		})
	}
}

// TestRecordsDoFinalWriteUnderFullMemory: memory fills up (maxmemory,
// noeviction) while fn runs. Redis refuses update.lua; the final write goes
// through complete.lua (allow-oom): a result of at most
// store.MaxSmallPayloadLen is stored and replayed; a larger one leaves a
// failed record with a note, so the next Do answers ErrFailed and fn does not
// run again.
func TestRecordsDoFinalWriteUnderFullMemory(t *testing.T) {
	t.Parallel()
	srv := newServer(t, redisproc.Options{MaxMemory: "8mb", MaxMemoryPolicy: "noeviction"})
	c := newClient(t, srv.URL())
	loadScripts(t, c) // SCRIPT LOAD is refused under OOM too
	rs := must.Store(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
	ctx := context.Background()
	small := []byte(strings.Repeat("s", store.MaxSmallPayloadLen))
	large := []byte(strings.Repeat("L", store.MaxSmallPayloadLen+1))
	var runs [2]atomic.Int64
	filled := false
	fill := func() {
		if !filled {
			fillMemory(t, c)
			do(t, c, "CONFIG", "SET", "maxmemory", fmt.Sprint(usedMemory(t, c)/2))
			filled = true
		}
	}
	// Both acquired before memory fills; both finish after.
	startedSmall, startedLarge, goOn := make(chan struct{}), make(chan struct{}), make(chan struct{})
	type res struct {
		got []byte
		err error
	}
	smallDone, largeDone := make(chan res, 1), make(chan res, 1)
	go func() {
		got, _, err := rs.Do(ctx, "small", store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
			runs[0].Add(1)
			close(startedSmall)
			<-goOn
			return small, nil
		})
		smallDone <- res{got, err}
	}()
	go func() {
		got, _, err := rs.Do(ctx, "large", store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
			runs[1].Add(1)
			close(startedLarge)
			<-goOn
			return large, nil
		})
		largeDone <- res{got, err}
	}()
	<-startedSmall
	<-startedLarge
	fill()
	if _, _, err := rs.AcquireWith(ctx, "fresh", store.AcquireOptions{}); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("acquire under full memory: %v; want OOM (the test checks nothing)", err)
	}
	close(goOn)
	if r := <-smallDone; r.err != nil || string(r.got) != string(small) {
		t.Errorf("Do with a %d-byte result under full memory: %d bytes, %v; want it stored", len(small), len(r.got), r.err)
	}
	r := <-largeDone
	if r.err == nil || !strings.Contains(r.err.Error(), "OOM") || string(r.got) != string(large) {
		t.Errorf("Do with a %d-byte result under full memory: %d bytes, %v; want the result with an error wrapping OOM", len(large), len(r.got), r.err)
	}
	rec, ok, err := rs.Get(ctx, "small")
	if err != nil || !ok || rec.Status != store.StatusCompleted || string(rec.Payload) != string(small) || !rec.LeaseUntil.IsZero() {
		t.Errorf("the small record: %+v, %v, %v; want completed with the result, no lease", rec.Status, ok, err)
	}
	rec, ok, err = rs.Get(ctx, "large")
	if err != nil || !ok || rec.Status != store.StatusFailed || !strings.Contains(string(rec.Payload), "not stored") {
		t.Errorf("the large record: %s %q, %v, %v; want failed with a note", rec.Status, rec.Payload, ok, err)
	}
	// Retries, memory still full: replayed, or ErrFailed; fn never runs again.
	got, replayed, err := rs.Do(ctx, "small", store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
		runs[0].Add(1)
		return nil, nil
	})
	if err != nil || !replayed || string(got) != string(small) {
		t.Errorf("retry of small: %d bytes, replayed %v, %v", len(got), replayed, err)
	}
	_, _, err = rs.Do(ctx, "large", store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
		runs[1].Add(1)
		return nil, nil
	})
	if !errors.Is(err, store.ErrFailed) {
		t.Errorf("retry of large: %v, want ErrFailed", err)
	}
	if runs[0].Load() != 1 || runs[1].Load() != 1 {
		t.Errorf("fn ran %d and %d times, want 1 and 1", runs[0].Load(), runs[1].Load())
	}
}
