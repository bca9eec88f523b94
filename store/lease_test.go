package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// keepAlive starts a heartbeat whose claim was sent now and won at once.
func keepAlive(ctx context.Context, lease time.Duration, l Lease, op string, sentinel error, extend extendFunc) *heartbeat {
	sent := time.Now()
	h := startHeartbeat(ctx, lease, sent, op, sentinel, extend)
	h.confirm(l, sent)
	return h
}

// The heartbeat, with extensions scripted: a transient error does not
// cancel fn while the local deadline lasts; errors for a whole lease cancel
// it at the deadline (send time + lease - margin), not later; a lost lease
// cancels it at the next beat; a stopped heartbeat calls extend no more.
func TestKeepAlive(t *testing.T) {
	const lease = 300 * time.Millisecond
	lost := errors.New("lost")
	l := Lease{ID: "m", Token: "tok"}

	t.Run("TransientErrorsWithinTheLease", func(t *testing.T) {
		var calls atomic.Int32
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(context.Context, *time.Time) (bool, error) {
			// Fails for the first beat and two quick retries (lease/4 +
			// 2 * lease/10, less than the lease), then succeeds.
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
			t.Errorf("extend ran %d times in 3 leases, want the failures retried quickly and beats every lease/4", n)
		}
	})

	t.Run("ErrorsForAWholeLease", func(t *testing.T) {
		start := time.Now()
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(context.Context, *time.Time) (bool, error) {
			return false, io.ErrUnexpectedEOF
		})
		deadline := time.Now().Add(lease - leaseMargin(lease)) // keepAlive's claim was sent before now
		defer ctx.stop()
		select {
		case <-ctx.Done():
		case <-time.After(10 * lease):
			t.Fatal("fn's context was not cancelled after a whole lease of failed extensions")
		}
		if took := time.Since(start); took < lease-leaseMargin(lease) {
			t.Errorf("cancelled after %v, before the local deadline (%v)", took, lease-leaseMargin(lease))
		}
		if d, ok := ctx.Deadline(); !ok || d.After(deadline) {
			t.Errorf("Deadline = +%v, %v; want at most +%v", d.Sub(start), ok, deadline.Sub(start))
		}
		if err := context.Cause(ctx); !errors.Is(err, lost) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cause = %v, want lost and the last error", err)
		}
	})

	t.Run("HangingExtensionCancelledAtTheDeadline", func(t *testing.T) {
		// An extension that never answers does not hold fn's context past the
		// local deadline: the heartbeat's own timer cancels it.
		start := time.Now()
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(ctx context.Context, _ *time.Time) (bool, error) {
			<-ctx.Done()
			return false, ctx.Err()
		})
		defer ctx.stop()
		<-ctx.Done()
		took := time.Since(start)
		if took < lease-leaseMargin(lease) {
			t.Errorf("cancelled after %v, before the local deadline", took)
		}
		if !errors.Is(context.Cause(ctx), lost) {
			t.Errorf("cause = %v, want lost", context.Cause(ctx))
		}
		t.Logf("a hanging extension: fn's context cancelled %v after the claim was sent (lease %v)", took, lease)
	})

	t.Run("ErrReadsTheClock", func(t *testing.T) {
		// A process paused past the deadline may run fn before the timer:
		// Err must see the deadline passed by itself.
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(ctx context.Context, _ *time.Time) (bool, error) {
			<-ctx.Done()
			return false, ctx.Err()
		})
		defer ctx.stop()
		ctx.mu.Lock()
		ctx.expiry.Stop() // as if the timer had not run yet
		ctx.mu.Unlock()
		d, _ := ctx.Deadline()
		time.Sleep(time.Until(d) + time.Millisecond)
		if ctx.Err() == nil {
			t.Fatal("ctx.Err() is nil past the local deadline")
		}
		if !errors.Is(context.Cause(ctx), lost) {
			t.Errorf("cause = %v, want lost", context.Cause(ctx))
		}
	})

	t.Run("DeadlineMovesWithExtensions", func(t *testing.T) {
		var sends []time.Time
		var mu sync.Mutex
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(context.Context, *time.Time) (bool, error) {
			mu.Lock()
			sends = append(sends, time.Now())
			mu.Unlock()
			return true, nil
		})
		defer ctx.stop()
		d0, _ := ctx.Deadline()
		time.Sleep(lease / 2)
		d1, _ := ctx.Deadline()
		mu.Lock()
		defer mu.Unlock()
		if len(sends) == 0 || !d1.After(d0) {
			t.Fatalf("after %d extensions the deadline moved %v, want forward", len(sends), d1.Sub(d0))
		}
		if want := sends[len(sends)-1].Add(lease - leaseMargin(lease)); d1.After(want) {
			t.Errorf("deadline %v after the last extension's send time + lease - margin", d1.Sub(want))
		}
	})

	t.Run("SlowExtensionsOverlap", func(t *testing.T) {
		// Each extension takes lease/2 (the round trip): beats paced from
		// their send times overlap and every one lands before the deadline.
		var calls atomic.Int32
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(context.Context, *time.Time) (bool, error) {
			calls.Add(1)
			time.Sleep(lease / 2)
			return true, nil
		})
		time.Sleep(4 * lease)
		if err := context.Cause(ctx); err != nil {
			t.Errorf("fn's context was cancelled (%v) with extensions taking lease/2", err)
		}
		ctx.stop()
		if n := calls.Load(); n < 10 {
			t.Errorf("%d extensions in 4 leases, want one every lease/4", n)
		}
	})

	t.Run("SpeculativeLostIgnored", func(t *testing.T) {
		// A beat sent before the claim's reply came back may overtake the
		// claim and find nothing: that is no loss.
		sent := time.Now()
		var calls atomic.Int32
		h := startHeartbeat(context.Background(), lease, sent, "do", lost, func(context.Context, *time.Time) (bool, error) {
			return calls.Add(1) > 1, nil
		})
		time.Sleep(lease/4 + 20*time.Millisecond) // the first beat went out, unconfirmed
		h.confirm(l, sent)
		defer h.stop()
		time.Sleep(lease / 4)
		if calls.Load() < 2 {
			t.Fatalf("%d beats", calls.Load())
		}
		if err := context.Cause(h); err != nil {
			t.Errorf("an unconfirmed beat's lost answer cancelled fn: %v", err)
		}
	})

	t.Run("LateClaimReply", func(t *testing.T) {
		// The claim's reply came back after the local deadline (a slow
		// dial): fn has not started, so one extension decides. Held: fn
		// runs with a live context; lost: fn's context is already cancelled.
		for _, held := range []bool{true, false} {
			sent := time.Now().Add(-lease)
			var calls atomic.Int32
			h := startHeartbeat(context.Background(), lease, sent, "do", lost, func(context.Context, *time.Time) (bool, error) {
				calls.Add(1)
				return held, nil
			})
			h.confirm(l, sent)
			err := h.Err()
			h.stop()
			if calls.Load() == 0 || (err == nil) != held {
				t.Errorf("held %v: after %d extensions ctx.Err() = %v", held, calls.Load(), err)
			}
		}
	})

	t.Run("Lost", func(t *testing.T) {
		ctx := keepAlive(context.Background(), lease, l, "do", lost, func(context.Context, *time.Time) (bool, error) { return false, nil })
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
		ctx := keepAlive(parent, lease, l, "do", lost, func(context.Context, *time.Time) (bool, error) { calls.Add(1); return true, nil })
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

// retryLost retries a write on every transport failure while its own
// context lasts, a context error that is not its own included; never a
// Redis reply, a store's refusal, or once its context ended.
func TestRetryLost(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		err   error
		retry bool
	}{
		{"EOF", io.ErrUnexpectedEOF, true},
		{"ForeignDeadline", fmt.Errorf("dial: %w", context.DeadlineExceeded), true},
		{"ForeignCancel", context.Canceled, true},
		{"RedisReply", &rueidis.RedisError{}, false},
		{"Closing", rueidis.ErrClosing, false},
		{"StaleOwner", errorf("do", "k", ErrStaleOwner, "x"), false},
		{"Invalid", errorf("do", "k", ErrInvalidArgument, "x"), false},
		{"NotReplicated", errorf("do", "k", ErrNotReplicated, "x"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := retryLost(ctx, func(context.Context) error {
				n++
				if n <= 4 {
					return tc.err
				}
				return nil
			})
			if tc.retry && (err != nil || n != 5) {
				t.Errorf("%v: %d attempts, %v; want retried until it succeeds", tc.err, n, err)
			}
			if !tc.retry && (err == nil || n != 1) {
				t.Errorf("%v: %d attempts, %v; want one attempt and the error", tc.err, n, err)
			}
		})
	}
	t.Run("OwnBudgetEnds", func(t *testing.T) {
		bctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := retryLost(bctx, func(context.Context) error { return io.ErrUnexpectedEOF })
		if !errors.Is(err, io.ErrUnexpectedEOF) || time.Since(start) > 2*time.Second {
			t.Errorf("retryLost past its budget = %v after %v", err, time.Since(start))
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
	extend := ev.observeExtend("m", "extend", outLeaseLost, func(ctx context.Context, _ *time.Time) (bool, error) {
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

	// A speculative extension (sent before the claim's reply) that finds
	// no lease is not reported either: it may have overtaken the claim.
	spec := ev.observeExtend("m", "extend", outLeaseLost, func(context.Context, *time.Time) (bool, error) { return false, nil })
	if held, _ := spec(context.WithValue(context.Background(), speculativeKey{}, true), new(time.Time)); held || len(got) != 0 {
		t.Errorf("speculative lost extension: held %v, events %+v; want none", held, got)
	}
	if _, _ = spec(context.Background(), new(time.Time)); len(got) != 1 || got[0].Outcome != outLeaseLost {
		t.Errorf("confirmed lost extension: events %+v, want one lease_lost", got)
	}
	got = nil

	bctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	timedOut := ev.observeExtend("m", "extend", outLeaseLost, func(ctx context.Context, _ *time.Time) (bool, error) {
		<-ctx.Done()
		return false, ctx.Err()
	})
	if _, err := timedOut(bctx, new(time.Time)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out extension: err %v", err)
	}
	if len(got) != 1 || got[0].Outcome != outError || !errors.Is(got[0].Err, context.DeadlineExceeded) {
		t.Errorf("timed-out extension: events %+v, want one error event", got)
	}
}

// The final write's budget under runLease's hold (heldCtx): the first
// attempt runs under a plain deadline, and a write that lands at once never
// leaves it; a failed attempt widens it to the lease the heartbeat holds, so
// an attempt that met the first deadline is retried while the lease lasts,
// and retries end once the lease's local deadline has passed.
func TestHeldCtx(t *testing.T) {
	held := func(context.Context, *time.Time) (bool, error) { return true, nil }
	t.Run("FastPath", func(t *testing.T) {
		hb := keepAlive(context.Background(), time.Hour, Lease{ID: "k"}, "do", ErrStaleOwner, held)
		defer hb.stop()
		c := newHeldCtx(context.Background(), hb)
		defer c.release()
		if d, ok := c.Deadline(); !ok || time.Until(d) > finalWriteBudget {
			t.Fatalf("the first attempt's deadline: %v, %v; want finalWriteBudget from now", d, ok)
		}
		if err := retryLostPaced(c, time.Millisecond, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if c.wide.Load() != nil {
			t.Fatal("a write that landed at once widened its budget")
		}
	})
	t.Run("FirstDeadlineMet", func(t *testing.T) {
		hb := keepAlive(context.Background(), time.Hour, Lease{ID: "k"}, "do", ErrStaleOwner, held)
		defer hb.stop()
		// The first phase already over, and its floor: only the lease is left.
		first, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		c := &heldCtx{Context: first, cancel: cancel, base: context.Background(), hb: hb, floor: time.Now()}
		defer c.release()
		n := 0
		err := retryLostPaced(c, time.Millisecond, func(ctx context.Context) error {
			n++
			switch {
			case n == 1:
				return ctx.Err() // the first attempt met its own deadline
			case n < 4:
				return io.ErrUnexpectedEOF
			}
			return nil
		})
		if err != nil || n != 4 {
			t.Fatalf("%d attempts, %v; want retried under the lease until it lands", n, err)
		}
		if _, ok := c.Deadline(); ok {
			t.Fatal("the widened budget has a deadline; want the lease's, which moves with it")
		}
	})
	t.Run("EndsWithTheLease", func(t *testing.T) {
		const lease = 300 * time.Millisecond
		hb := keepAlive(context.Background(), lease, Lease{ID: "k"}, "do", ErrStaleOwner,
			func(context.Context, *time.Time) (bool, error) { return false, io.ErrUnexpectedEOF })
		defer hb.stop()
		first, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		c := &heldCtx{Context: first, cancel: cancel, base: context.Background(), hb: hb, floor: time.Now()}
		defer c.release()
		hb.mu.Lock()
		deadline := hb.deadline
		hb.mu.Unlock()
		err := retryLostPaced(c, time.Millisecond, func(context.Context) error { return io.ErrUnexpectedEOF })
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("retries past the lease: %v; want the last attempt's error", err)
		}
		if now := time.Now(); now.Before(deadline) || now.After(deadline.Add(finalWriteBudget/2)) {
			t.Fatalf("retries ended %v after the lease's local deadline; want at it", now.Sub(deadline))
		}
	})
}
