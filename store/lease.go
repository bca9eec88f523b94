package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/redis/rueidis"
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
	if ctx == nil {
		return Lease{}, false
	}
	l, ok := ctx.Value(leaseKey{}).(Lease)
	return l, ok
}

type extendHookKey struct{}

// OnExtend returns a copy of ctx under which Claims.Do, Records.Do and their
// memory twins call fn after each successful extension of their lease, with
// the lease fn holds (the one LeaseFromContext gives). It is for a caller that
// must keep another timer in step with the lease, such as a broker's
// redelivery timeout (JetStream's InProgress, an SQS visibility timeout).
//
// fn runs on the lease's heartbeat, one call at a time, before the next
// extension is scheduled: keep it short, it delays the next one. Do makes no
// call after it has returned. A failed extension is not reported. A nil fn
// leaves ctx as it is.
func OnExtend(ctx context.Context, fn func(Lease)) context.Context {
	if fn == nil {
		return ctx
	}
	return context.WithValue(ctx, extendHookKey{}, fn)
}

// extendFunc extends the caller's lease by its full length from now: true when
// the caller still holds it, false when it is lost (taken over, removed,
// finished by someone else). An error means the extension's fate is unknown (a
// network error): it is retried.
type extendFunc func(ctx context.Context) (bool, error)

// heartbeat keeps one Do's lease alive while fn runs. It is also fn's
// context (the Do's ctx, cancellable, with the Lease as a value), so a Do
// allocates it once and starts no goroutine until the first beat is due.
type heartbeat struct {
	context.Context // fn's context
	lease           Lease
	parent          context.Context
	cancel          context.CancelCauseFunc
	extend          extendFunc
	length, period  time.Duration
	op              string
	sentinel        error       // wrapped by the cause of a lost lease
	onExtend        func(Lease) // OnExtend's fn, or nil

	mu         sync.Mutex
	timer      *time.Timer
	stopped    bool
	lastOK     time.Time          // the start of the last successful extension
	beatCancel context.CancelFunc // cancels the extension in flight
	beats      sync.WaitGroup
}

// Value gives LeaseFromContext the lease.
func (h *heartbeat) Value(key any) any {
	if key == (leaseKey{}) {
		return h.lease
	}
	return h.Context.Value(key)
}

// keepAlive runs while fn runs: every lease/3 it extends the lease. When an
// extension finds the lease lost, or no extension has succeeded for a whole
// lease (the lease may have run out on the server), fn's context is cancelled
// with a cause "redisonce: <op> <id>: <sentinel>: ...". The heartbeat is fn's
// context (with the Lease in it); its stop ends the beats, waits for an
// extension in flight, and releases fn's context.
//
// The heartbeat outlives a cancelled ctx (fn's context is cancelled with it,
// but the effect may still be completing, and Do commits it). A process that
// dies stops extending, so its lease still expires.
func keepAlive(ctx context.Context, lease time.Duration, l Lease, op string, sentinel error, extend extendFunc) *heartbeat {
	h := &heartbeat{lease: l, parent: ctx, extend: extend, length: lease,
		period: max(lease/3, time.Millisecond), op: op, sentinel: sentinel, lastOK: time.Now()}
	h.onExtend, _ = ctx.Value(extendHookKey{}).(func(Lease))
	h.Context, h.cancel = context.WithCancelCause(ctx)
	h.mu.Lock() // a first beat reads h.timer under mu
	h.timer = time.AfterFunc(h.period, h.beat)
	h.mu.Unlock()
	return h
}

func (h *heartbeat) beat() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.beats.Add(1)
	defer h.beats.Done()
	bctx, bcancel := context.WithTimeout(context.WithoutCancel(h.parent), h.period)
	h.beatCancel = bcancel
	h.mu.Unlock()

	start := time.Now()
	held, err := h.extend(bctx)
	bcancel()
	if err == nil && held && h.onExtend != nil {
		// Before the next beat is scheduled (calls never overlap) and
		// within beats (stop waits for it).
		h.onExtend(h.lease)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	h.beatCancel = nil
	if h.stopped {
		return
	}
	switch {
	case err == nil && held:
		h.lastOK = start
		h.timer.Reset(h.period)
	case err == nil:
		h.cancel(fmt.Errorf("redisonce: %s %q: %w: another caller holds it, or it was removed", h.op, h.lease.ID, h.sentinel))
	case time.Since(h.lastOK) >= h.length:
		h.cancel(fmt.Errorf("redisonce: %s %q: %w: no extension succeeded within the lease: %w", h.op, h.lease.ID, h.sentinel, err))
	default:
		// A transient error: try again soon, until the lease would actually
		// have run out.
		h.timer.Reset(min(h.period, max(h.length/10, time.Millisecond)))
	}
}

func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	if h.beatCancel != nil {
		h.beatCancel()
	}
	h.mu.Unlock()
	h.beats.Wait()
	h.cancel(nil)
}

// retryLost runs write, and runs it again (up to 3 times in all, within ctx)
// while it fails because its connection was lost. Only for writes that are
// safe to repeat: Do's final commit, release, fenced update or fenced delete.
// A lost connection leaves such a write done or not done; without the retry
// a Do whose callback ran would leave its lease in place, and the message or
// request would run again once the lease expired.
//
// Not rueidis's own retry (a command marked ToRetryable): Claims.Do must see
// that its commit was retried (a retry finding the processed mark is its own
// first attempt having landed), and a retried command would have to be pinned
// against the rueidis race in docs/upstream-rueidis-race.md. Unlike rueidis's
// retry it ignores ClientOption.DisableRetry, which a rueidis.Client does not
// expose.
func retryLost(ctx context.Context, write func(context.Context) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = write(ctx)
		if err == nil || attempt == 3 || !connLost(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
}

// connLost reports whether err means a connection broke under a command (it
// may or may not have run), as opposed to a reply, a closed client or a
// cancelled context.
func connLost(err error) bool {
	if _, ok := rueidis.IsRedisErr(err); ok {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rueidis.ErrClosing) {
		return false
	}
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}
