package store

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// keepAlive's heartbeat, with extensions scripted: a transient error does not
// cancel fn until a whole lease passed without a successful extension; a lost
// lease cancels it at the next beat; a stopped heartbeat calls extend no more.
func TestKeepAlive(t *testing.T) {
	const lease = 300 * time.Millisecond
	lost := errors.New("lost")
	l := Lease{ID: "m", Token: "tok"}

	t.Run("TransientErrorsWithinTheLease", func(t *testing.T) {
		var calls atomic.Int32
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(context.Context) (bool, error) {
			// Fails for the first ~200ms (less than a lease), then succeeds.
			if calls.Add(1) <= 3 {
				return false, io.ErrUnexpectedEOF
			}
			return true, nil
		})
		time.Sleep(3 * lease)
		if err := context.Cause(ctx); err != nil {
			t.Errorf("fn's context was cancelled (%v) by transient errors shorter than the lease", err)
		}
		if got, ok := LeaseFromContext(ctx); !ok || got != l {
			t.Errorf("LeaseFromContext = %+v, %v; want %+v", got, ok, l)
		}
		ctx.stop()
		n := calls.Load()
		time.Sleep(lease)
		if calls.Load() != n {
			t.Error("extend ran after stop")
		}
		if n < 5 {
			t.Errorf("extend ran %d times in 3 leases, want the failures retried quickly and beats every lease/3", n)
		}
	})

	t.Run("ErrorsForAWholeLease", func(t *testing.T) {
		start := time.Now()
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(context.Context) (bool, error) {
			return false, io.ErrUnexpectedEOF
		})
		defer ctx.stop()
		select {
		case <-ctx.Done():
		case <-time.After(10 * lease):
			t.Fatal("fn's context was not cancelled after a whole lease of failed extensions")
		}
		if took := time.Since(start); took < lease {
			t.Errorf("cancelled after %v, before the lease (%v) could have run out", took, lease)
		}
		if err := context.Cause(ctx); !errors.Is(err, lost) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cause = %v, want lost and the last error", err)
		}
	})

	t.Run("Lost", func(t *testing.T) {
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(context.Context) (bool, error) { return false, nil })
		defer ctx.stop()
		select {
		case <-ctx.Done():
		case <-time.After(lease):
			t.Fatal("fn's context was not cancelled at the first beat that found the lease lost")
		}
		if !errors.Is(context.Cause(ctx), lost) {
			t.Errorf("cause = %v, want lost", context.Cause(ctx))
		}
	})

	t.Run("ParentCancelled", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		var calls atomic.Int32
		ctx := keepAlive(parent, lease, l, "do", lost, func(context.Context) (bool, error) { calls.Add(1); return true, nil })
		defer ctx.stop()
		cancel()
		if ctx.Err() == nil {
			t.Error("fn's context outlived its parent")
		}
		// The lease is still kept: the effect may be finishing, and Do commits it.
		time.Sleep(lease)
		if calls.Load() == 0 {
			t.Error("the heartbeat stopped with the caller's context")
		}
	})
}

// An extension in flight when the flow ends is cancelled by stop: the flow
// is over, nothing failed, so the observer hears no "extend" event for it
// (an error event there would page someone for nothing). An extension whose
// own timeout passed is still reported, as an error.
func TestObserveExtendCutShortByStop(t *testing.T) {
	var got []Event
	ev := events{obs: ObserverFunc(func(_ context.Context, e Event) { got = append(got, e) }), store: "claims", prefix: "p:"}
	inFlight := make(chan struct{})
	extend := ev.observeExtend("m", "extend", OutcomeLeaseLost, func(ctx context.Context) (bool, error) {
		close(inFlight)
		<-ctx.Done()
		return false, ctx.Err()
	})
	h := keepAlive(context.Background(), 30*time.Millisecond, Lease{ID: "m", Token: "tok"}, "do", ErrLeaseLost, extend)
	<-inFlight // the first beat (after 10ms) is waiting on its extension
	h.stop()
	if len(got) != 0 {
		t.Errorf("events after stop cut an extension short: %+v, want none", got)
	}

	bctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	timedOut := ev.observeExtend("m", "extend", OutcomeLeaseLost, func(ctx context.Context) (bool, error) {
		<-ctx.Done()
		return false, ctx.Err()
	})
	if _, err := timedOut(bctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out extension: err %v", err)
	}
	if len(got) != 1 || got[0].Outcome != OutcomeError || !errors.Is(got[0].Err, context.DeadlineExceeded) {
		t.Errorf("timed-out extension: events %+v, want one error event", got)
	}
}
