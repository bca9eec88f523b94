package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lease is the ownership a running Do holds on its id or key. Claims.Do and
// Records.Do put it in fn's context (LeaseFromContext), so fn can pass the
// fencing token to a downstream system that checks it.
type Lease struct {
	// ID is the message id (Claims) or the record key (Records), without the
	// store's prefix.
	ID string
	// Token is the owner token: the value "~<token>" holds while a claim is in
	// flight, or the record's token field. It changes when another caller
	// takes over.
	Token string
	// Fence is the record's fence (Records.Do only; 0 for Claims): it grows by
	// one on every takeover, so a downstream system can refuse a write whose
	// fence is lower than one it has already seen.
	Fence uint64
}

type leaseKey struct{}

// LeaseFromContext returns the lease of the Do whose fn received ctx (or a
// context derived from it), and false outside such a fn.
func LeaseFromContext(ctx context.Context) (Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(Lease)
	return l, ok
}

// extendFunc extends the caller's lease by its full length from now: true when
// the caller still holds it, false when it is lost (taken over, removed,
// finished by someone else). An error means the extension's fate is unknown (a
// network error): it is retried.
type extendFunc func(ctx context.Context) (bool, error)

// keepAlive runs while fn runs: every lease/3 it extends the lease. When an
// extension finds the lease lost, or no extension has succeeded for a whole
// lease (the lease may have run out on the server), fn's context is cancelled
// with a cause wrapping lost. The returned context is fn's (with the Lease in
// it); stop ends the heartbeat and waits for it.
//
// A process that dies stops extending, so its lease still expires.
func keepAlive(ctx context.Context, lease time.Duration, l Lease, lost error, extend extendFunc) (context.Context, func()) {
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, l))
	hctx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	interval := lease / 3
	if interval < time.Millisecond {
		interval = time.Millisecond
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		lastOK := time.Now() // the lease was just taken or extended
		wait := interval
		t := time.NewTimer(wait)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
			}
			start := time.Now()
			ectx, ecancel := context.WithTimeout(hctx, interval)
			held, err := extend(ectx)
			ecancel()
			if hctx.Err() != nil {
				return
			}
			switch {
			case err == nil && held:
				lastOK, wait = start, interval
			case err == nil:
				cancel(fmt.Errorf("%w: another caller holds it, or it was removed", lost))
				return
			case time.Since(lastOK) >= lease:
				cancel(fmt.Errorf("%w: no extension succeeded within the lease: %w", lost, err))
				return
			default:
				// A transient error: try again soon, until the lease would
				// actually have run out.
				wait = min(interval, max(lease/10, time.Millisecond))
			}
			t.Reset(wait)
		}
	}()
	return fctx, func() {
		stopBeat()
		wg.Wait()
		cancel(nil)
	}
}
