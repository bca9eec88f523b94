package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// Fence is the lease's fencing token, never 0: every lease granted for
	// an id (Claims.Do) or a key (Records.Do) in a store's prefix carries a
	// fence above every fence granted for it before, across an expiry,
	// Forget, Delete, a release after a failure, a takeover, and a restart
	// of a Redis server that lost its data. A downstream system that stores
	// the highest fence it has seen per id and refuses a write with a lower
	// one (or an equal one from another owner) refuses every stale owner.
	//
	// It is the server's clock (TIME, the clock that expires keys) in
	// nanoseconds since the epoch at microsecond precision, or, for a record
	// taken over, its fence + 1 when that is higher (a fence ahead of the
	// clock); past 2^53, so keep it as a uint64 or a decimal string, never a
	// float64. The memory twins use their clock (WithClock) the same way,
	// and never grant a fence twice. The limit, documented in
	// docs/guarantees.md ("Fences"): a server clock stepped back, or a
	// failover to a replica whose clock is behind (or that missed the
	// writes: WithWaitReplicas), can grant a lower fence once the key
	// that held a higher one is gone.
	Fence uint64
}

// clockFence is the fence a memory twin grants at now, as the scripts'
// clock_fence: now in ns since the epoch at µs precision, raised above
// *last, the twin's last fence (the scripts wait out the µs they read, so no
// later grant reads it again; a fake clock that stands still gets + 1
// instead). It stores the fence in *last; callers hold the twin's lock.
func clockFence(now time.Time, last *uint64) uint64 {
	var f uint64
	if us := now.UnixMicro(); us > 0 {
		f = uint64(us) * 1000
	}
	if f <= *last {
		f = *last + 1
	}
	*last = f
	return f
}

type leaseKey struct{}

// speculativeKey marks the context of an extension sent before the claim's
// reply came back: its "lost" answer means nothing (it may have overtaken the
// claim), so the observer does not report it.
type speculativeKey struct{}

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

// OnExtend returns a copy of ctx under which Claims.Do and Records.Do (on
// either backend) call fn after each successful extension of their lease, with
// the lease fn holds (the one LeaseFromContext gives). It is for a caller that
// must keep another timer in step with the lease, such as a broker's
// redelivery timeout (JetStream's InProgress, an SQS visibility timeout).
//
// fn runs on the lease's heartbeat, one call at a time, after the extension's
// reply: keep it short (on a slow link, overlapping extensions wait for each
// other's calls). Do makes no call after it has returned. A failed extension is not reported. A nil fn
// leaves ctx as it is, and so does a nil ctx: OnExtend(nil, fn) returns nil,
// which Do refuses with ErrInvalidArgument like any nil context.
func OnExtend(ctx context.Context, fn func(Lease)) context.Context {
	if fn == nil || ctx == nil {
		return ctx
	}
	return context.WithValue(ctx, extendHookKey{}, fn)
}

// extendFunc extends the caller's lease by its full length from now: true when
// the caller still holds it, false when it is lost (taken over, removed,
// finished by someone else). An error means the extension's fate is unknown (a
// network error): it is retried. *sent holds the time the heartbeat sent it;
// an extension that had to send again (EVAL after NOSCRIPT) moves it to the
// send time of the command that ran.
type extendFunc func(ctx context.Context, sent *time.Time) (bool, error)

// clockRateMargin is the share of a lease that Do's local lease deadline keeps
// back for the difference in rate between this process's clock and the Redis
// server's: lease/clockRateMargin, 1% (100 ms of a 10 s lease). Clocks
// disciplined by NTP differ in rate by at most 0.05%; a clock stepped on the
// server (not slewed) can still end a lease early there. See leaseMargin.
const clockRateMargin = 100

// timerMargin is the rest of the margin: the time between the local deadline
// and fn seeing its context cancelled, on a busy machine (a timer fires late,
// a goroutine or a process waits for a CPU). It is at most a tenth of the
// lease.
const timerMargin = 20 * time.Millisecond

// leaseMargin is how much sooner than the server the local lease deadline
// lets a lease go: lease/clockRateMargin + min(timerMargin, lease/10).
func leaseMargin(lease time.Duration) time.Duration {
	return lease/clockRateMargin + min(timerMargin, lease/10)
}

// maxBeatsInFlight bounds the extensions one Do has in flight at once: beats
// are paced from their send times, so on a slow link several overlap.
const maxBeatsInFlight = 8

// heartbeat keeps one Do's lease alive while fn runs, and is fn's context.
//
// It keeps a local lease deadline: the send time of the last successful
// claim or extension, plus the lease, minus leaseMargin (1% for clock rate,
// and up to 20 ms for a late timer). The server
// lets the lease go no sooner than the lease after the command arrived, which
// is after it was sent, so until the local deadline nobody else can hold the
// id. A timer of its own cancels fn's context at the deadline, whatever
// extension is in flight; Deadline reports it; Err and Done read the clock,
// so a process that was paused sees the loss as soon as it runs again, before
// any round trip or timer.
//
// Extensions go out every lease/4 counted from the send time of the previous
// one, and each may run until the local deadline, so that on a slow link they
// overlap (up to maxBeatsInFlight): with a round trip up to lease/2 each
// success lands before the deadline it extends. The first beat is counted
// from the claim's send time and may go out before the claim's reply has come
// back: it is fenced by the claim's token, so until the claim is confirmed a
// "lost" answer means only that it overtook the claim, and is ignored.
type heartbeat struct {
	context.Context // fn's context, made by confirm
	lease           Lease
	parent          context.Context
	cancel          context.CancelCauseFunc
	extend          extendFunc
	length, period  time.Duration
	margin          time.Duration
	op              string
	sentinel        error       // wrapped by the cause of a lost lease
	onExtend        func(Lease) // OnExtend's fn, or nil
	claimSent       time.Time   // when the claim that ran was sent (takeLease)
	hookMu          sync.Mutex  // one onExtend call at a time

	mu          sync.Mutex
	confirmed   time.Time // when the claim's reply came back (zero: not yet)
	deadline    time.Time // the local lease deadline
	lost        bool      // the lease was found lost, or its deadline passed
	lostCause   error     // why
	stopped     bool
	next        *time.Timer // the next beat
	nextAt      time.Time
	expiry      *time.Timer // at deadline
	lastErr     error       // the last extension's error
	inFlight    map[*time.Time]context.CancelFunc
	beats       sync.WaitGroup
	outstanding int
}

// startHeartbeat starts the heartbeat of a claim sent at sent (just before it
// goes out: its token is already minted), before its reply is known. confirm
// hands fn its context once the claim is won; stop ends it either way.
func startHeartbeat(ctx context.Context, lease time.Duration, sent time.Time, op string, sentinel error, extend extendFunc) *heartbeat {
	h := &heartbeat{parent: ctx, extend: extend, length: lease,
		period: max(lease/4, time.Millisecond), margin: leaseMargin(lease), op: op, sentinel: sentinel,
		deadline: sent.Add(lease - leaseMargin(lease)), inFlight: map[*time.Time]context.CancelFunc{}}
	h.onExtend, _ = ctx.Value(extendHookKey{}).(func(Lease))
	h.mu.Lock() // a first beat reads h.next under mu
	h.nextAt = sent.Add(h.period)
	h.next = time.AfterFunc(time.Until(h.nextAt), h.beat)
	h.mu.Unlock()
	return h
}

// confirm says the claim was won (l is its lease; sent is when the claim
// command that ran was sent, the EVAL's after a NOSCRIPT) and makes fn's
// context: a child of the Do's ctx, with the Lease as a value, cancelled at
// the local deadline.
//
// A claim whose reply came back after the local deadline (a slow dial, a
// stall) has not lost anything yet, since fn has not started: confirm sends
// one extension first. If it finds the key still holding this claim's token,
// nobody took the id in between (a takeover writes another token), and the
// deadline counts from that extension's send time; otherwise, or if it does
// not answer within a lease, fn gets a context already cancelled.
func (h *heartbeat) confirm(l Lease, sent time.Time) {
	h.mu.Lock()
	h.Context, h.cancel = context.WithCancelCause(h.parent)
	// Under mu: a beat sent before this reply (speculative) may be reading
	// the lease for OnExtend right now.
	h.lease = l
	now := time.Now()
	if h.confirmed.IsZero() { // (a claim sent ahead was answered before: answered)
		h.confirmed = now
	}
	if d := sent.Add(h.length - h.margin); d.After(h.deadline) {
		h.deadline = d
	}
	if !now.Before(h.deadline) {
		giveUp := time.AfterFunc(h.length, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if !h.stopped && !h.lost && !time.Now().Before(h.deadline) {
				h.expireLocked()
			}
		})
		h.mu.Unlock()
		h.beat() // sent after the reply: a "lost" answer is a loss
		giveUp.Stop()
		h.mu.Lock()
	}
	defer h.mu.Unlock()
	if h.lost {
		h.cancel(h.lostCause) // lost before fn's context was made
	}
	if h.lost || h.stopped {
		return
	}
	// On a slow link the next paced beat would land too late: the beats sent
	// before the claim's reply may all have overtaken the claim. Send one now
	// when the next one, taking twice the claim's round trip, would not land
	// before the deadline; on a fast link this never happens.
	if rtt := h.confirmed.Sub(sent); h.nextAt.Add(2 * rtt).After(h.deadline) {
		go h.beat()
	}
	d := time.Until(h.deadline)
	if d <= 0 {
		h.loseLocked(fmt.Errorf("redisonce: %s %q: %w: the claim's reply came back after the lease's local deadline, and no extension succeeded since", h.op, h.lease.ID, h.sentinel))
		return
	}
	h.expiry = time.AfterFunc(d, h.expire)
}

// answered records that the claim's reply came back, for a claim sent
// ahead of its Do (Claims.Batch): from now on an extension's "lost" answer
// is a loss. The heartbeat goes on beating until confirm or stop.
func (h *heartbeat) answered() {
	h.mu.Lock()
	if h.confirmed.IsZero() {
		h.confirmed = time.Now()
	}
	h.mu.Unlock()
}

// reparent makes ctx the heartbeat's parent: fn's context derives from it,
// and its OnExtend hook is the one called. For a claim sent ahead of its Do,
// before confirm.
func (h *heartbeat) reparent(ctx context.Context) {
	h.mu.Lock()
	h.parent = ctx
	h.onExtend, _ = ctx.Value(extendHookKey{}).(func(Lease))
	h.mu.Unlock()
}

// held reports whether the lease is still held as far as the heartbeat
// knows: not found lost, not stopped, and its local deadline ahead.
func (h *heartbeat) held() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.lost && !h.stopped && time.Now().Before(h.deadline)
}

// Value gives LeaseFromContext the lease.
func (h *heartbeat) Value(key any) any {
	if key == (leaseKey{}) {
		return h.lease
	}
	return h.Context.Value(key)
}

// Deadline is the local lease deadline (or the Do's ctx's, if sooner). It
// moves forward with every successful extension, which a context's Deadline
// usually does not: read it again rather than keep it.
func (h *heartbeat) Deadline() (time.Time, bool) {
	h.mu.Lock()
	d, parent := h.deadline, h.parent
	h.mu.Unlock()
	if pd, ok := parent.Deadline(); ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}

// Err is the context's error, after reading the clock: past the local
// deadline the lease is lost even if the timer has not run yet.
func (h *heartbeat) Err() error {
	h.checkClock()
	return h.Context.Err()
}

// Done is the context's channel, after reading the clock (see Err).
func (h *heartbeat) Done() <-chan struct{} {
	h.checkClock()
	return h.Context.Done()
}

func (h *heartbeat) checkClock() {
	h.mu.Lock()
	if !h.stopped && !h.lost && !time.Now().Before(h.deadline) {
		h.expireLocked()
	}
	h.mu.Unlock()
}

// expire is the deadline's timer.
func (h *heartbeat) expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.lost {
		return
	}
	if d := time.Until(h.deadline); d > 0 { // an extension moved it meanwhile
		h.expiry.Reset(d)
		return
	}
	h.expireLocked()
}

func (h *heartbeat) expireLocked() {
	cause := fmt.Errorf("redisonce: %s %q: %w: no extension succeeded within the lease (the local deadline passed)", h.op, h.lease.ID, h.sentinel)
	if h.lastErr != nil {
		cause = fmt.Errorf("redisonce: %s %q: %w: no extension succeeded within the lease (the local deadline passed): %w", h.op, h.lease.ID, h.sentinel, h.lastErr)
	}
	h.loseLocked(cause)
}

// loseLocked ends the lease for this Do: fn's context is cancelled with
// cause and no extension is sent any more.
func (h *heartbeat) loseLocked(cause error) {
	h.lost = true
	h.lostCause = cause
	if h.cancel != nil { // nil until confirm: a claim sent ahead lost before its Do
		h.cancel(cause)
	}
	h.next.Stop()
	if h.expiry != nil {
		h.expiry.Stop()
	}
	for _, c := range h.inFlight {
		c()
	}
}

func (h *heartbeat) beat() {
	h.mu.Lock()
	if h.stopped || h.lost {
		h.mu.Unlock()
		return
	}
	sent := time.Now()
	h.nextAt = sent.Add(h.period)
	h.next.Reset(h.period)
	if h.outstanding >= maxBeatsInFlight {
		h.mu.Unlock()
		return
	}
	h.outstanding++
	h.beats.Add(1)
	defer h.beats.Done()
	// No deadline of its own: the heartbeat cancels it when the local
	// deadline passes (loseLocked) or at stop. (A deadline would also be the
	// deadline of a redial it happened to start, which rueidis applies to
	// every command waiting on that dial, the claim included:
	// docs/upstream-rueidis-redial.md.)
	bctx, bcancel := context.WithCancel(context.WithoutCancel(h.parent))
	if h.confirmed.IsZero() {
		bctx = context.WithValue(bctx, speculativeKey{}, true)
	}
	key := &sent
	h.inFlight[key] = bcancel
	h.mu.Unlock()

	held, err := h.extend(bctx, &sent)
	bcancel()
	if err == nil && held {
		// Within beats (stop waits for it, so no call after Do returned),
		// one call at a time (beats overlap on a slow link), and only once
		// fn runs (fn holds the lease it reports).
		h.mu.Lock()
		ok, l, hook := h.Context != nil && !h.stopped && !h.lost, h.lease, h.onExtend
		h.mu.Unlock()
		if ok && hook != nil {
			h.hookMu.Lock()
			hook(l)
			h.hookMu.Unlock()
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.inFlight, key)
	h.outstanding--
	if h.stopped || h.lost {
		return
	}
	switch {
	case err == nil && held:
		if d := sent.Add(h.length - h.margin); d.After(h.deadline) {
			h.deadline = d
			if h.expiry != nil {
				h.expiry.Reset(time.Until(d))
			}
		}
	case err == nil:
		// Only an extension sent after the claim's reply came back ran after
		// the claim; an earlier one may have overtaken it.
		if !h.confirmed.IsZero() && !sent.Before(h.confirmed) {
			h.loseLocked(fmt.Errorf("redisonce: %s %q: %w: another caller holds it, or it was removed", h.op, h.lease.ID, h.sentinel))
		}
	default:
		// A transient error: try again soon (lease/10) rather than at the next
		// paced beat, while the deadline lasts.
		h.lastErr = err
		if h.outstanding == 0 {
			if soon := time.Now().Add(max(h.length/10, time.Millisecond)); soon.Before(h.nextAt) {
				h.nextAt = soon
				h.next.Reset(time.Until(soon))
			}
		}
	}
}

// stop ends the beats, cancels the extensions in flight and waits for them,
// and releases fn's context (if confirm made one). It reports the lease as
// the heartbeat last knew it: its local deadline, and whether it was lost.
func (h *heartbeat) stop() (deadline time.Time, lost bool) {
	h.mu.Lock()
	h.stopped = true
	h.next.Stop()
	if h.expiry != nil {
		h.expiry.Stop()
	}
	for _, c := range h.inFlight {
		c()
	}
	h.mu.Unlock()
	h.beats.Wait()
	if h.cancel != nil {
		h.cancel(nil)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline, h.lost
}

// retryLost runs write, and runs it again while it fails with a transport
// error (transient: not a Redis reply, not the store's own refusal, not a
// closed client) and ctx lasts. Only for writes that are safe to repeat: Do's
// final commit, release, fenced update or fenced delete. A lost connection
// leaves such a write done or not done; without the retry a Do whose callback
// ran would leave its lease in place, and the message or request would run
// again once the lease expired. ctx is the write's own budget (Do gives its
// final writes 5 seconds): a context error while ctx is still live is
// someone else's — rueidis fails every command waiting on a redial with the
// error of the command that started the dial (docs/upstream-rueidis-redial.md)
// — and is retried like any transport failure.
//
// Not rueidis's own retry (a command marked ToRetryable): Claims.Do must see
// that its commit was retried (a retry finding the processed mark is its own
// first attempt having landed only under the conditions Claims.commit checks), and
// a retried command would have to be pinned against the rueidis race in
// docs/upstream-rueidis-race.md. Unlike rueidis's retry it ignores
// ClientOption.DisableRetry, which a rueidis.Client does not expose.
func retryLost(ctx context.Context, write func(context.Context) error) error {
	return retryLostPaced(ctx, 250*time.Millisecond, write)
}

// retryLostPaced is retryLost with the longest pause between attempts:
// Records.Do's outcome write through an outage retries every 50 ms at most,
// so that once Redis is back the owner's write lands before a client's
// retry, paced in seconds, can find the key free (a restart that lost the
// record).
func retryLostPaced(ctx context.Context, maxPause time.Duration, write func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := write(ctx)
		if err == nil || !transient(ctx, err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(min(time.Duration(attempt)*20*time.Millisecond, maxPause)):
		}
	}
}

// storeErrors are the sentinels a store's answer wraps: a reply (or a check
// in Go), never a transport failure.
var storeErrors = []error{ErrNotFound, ErrStaleOwner, ErrInFlight, ErrLeaseLost, ErrOutboxFull,
	ErrFingerprintMismatch, ErrInvalidArgument, ErrUnexpectedReply, ErrNotReplicated}

// transient reports whether err, returned by a write run under ctx, is a
// transport failure that a retry may cure: the command may or may not have
// run; or a LOADING, MASTERDOWN, CLUSTERDOWN or TRYAGAIN reply (it did not
// run). Not: another Redis reply (the command ran and answered), a store sentinel
// (a reply mapped, or an argument refused before sending), a closed client,
// or ctx itself ending (the write's budget is spent).
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		// A server that is loading its data after a restart, or a cluster
		// or replica not serving yet, ran nothing: try again.
		code, _, _ := strings.Cut(re.Error(), " ")
		return code == "LOADING" || code == "MASTERDOWN" || code == "CLUSTERDOWN" || code == "TRYAGAIN"
	}
	if errors.Is(err, rueidis.ErrClosing) {
		return false
	}
	for _, s := range storeErrors {
		if errors.Is(err, s) {
			return false
		}
	}
	return true
}

// The lease engine: the one flow Claims.Do and Records.Do run, from the
// claim (or acquire) that takes an id or key with a lease to the final write.
// Each store gives it its own claim, extension, give-back and final write.

// finalWriteBudget bounds a Do's final write (commit, release, the record's
// outcome) with its retries; it runs even when the Do's ctx is cancelled.
const finalWriteBudget = 5 * time.Second

// takeLease sends take, the claim of a lease of length lease, with its
// heartbeat (extend; sentinel for a lost lease) started before it is sent:
// the local lease deadline counts from the send time, and on a slow link the
// first extension may have to leave before the claim's reply is back. take
// writes its send time to sent and reports whether it won; unless it won
// (or on its error), the heartbeat is stopped again.
func takeLease(ctx context.Context, lease time.Duration, sentinel error, extend extendFunc, take func(sent *time.Time) (bool, error)) (*heartbeat, time.Time, error) {
	hb := startHeartbeat(ctx, lease, time.Now(), "do", sentinel, extend)
	sent := &hb.claimSent // on the heartbeat, which is on the heap anyway
	won, err := take(sent)
	if err != nil || !won {
		hb.stop()
	}
	return hb, *sent, err
}

// runLease runs fn under the lease l that hb keeps (its claim sent at sent),
// then ends it: a panic in fn, or an error keep does not keep (nil: none),
// gives the id back (giveBack) before the panic goes on or the error is
// returned; otherwise finish makes the final write, with the lease as the
// heartbeat last knew it (its local deadline, and whether it was lost). The
// give-back and the final write run even when ctx is already cancelled,
// under a budget of their own (finalWriteBudget), and the give-back is
// retried on transport failures (retryLost): it only gives the id back and
// claims nothing, so a retry that finds the lease gone (the first attempt
// landed) or another caller's (left alone) is a success.
//
// hold keeps the heartbeat beating through the give-back and the final
// write, whose budget is then the lease it holds (heldFor: as long as the
// lease is held, at least finalWriteBudget) instead of finalWriteBudget:
// Records.Do's outcome survives an outage as long as its lease does.
// finish then gets the deadline and loss as they stood when fn returned.
func runLease(ctx context.Context, hb *heartbeat, l Lease, sent time.Time, hold bool, fn func(context.Context) error,
	giveBack func(context.Context) error, keep func(error) bool,
	finish func(ctx context.Context, fnErr error, deadline time.Time, lost bool) (Outcome, error)) (Outcome, error) {
	hb.confirm(l, sent)
	done := false
	defer func() {
		if done {
			return
		}
		// fn panicked: give the id back before the panic goes on.
		hb.stop()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
		defer cancel()
		_ = retryLost(rctx, giveBack)
	}()
	fnErr := fn(hb)
	done = true
	// The effect has happened (or failed): write it even if ctx was
	// cancelled meanwhile, so a redelivery does not run it again.
	var (
		deadline time.Time
		lost     bool
		wctx     context.Context
		cancel   context.CancelFunc
	)
	if hold {
		hb.mu.Lock()
		deadline, lost = hb.deadline, hb.lost
		hb.mu.Unlock()
		wctx, cancel = heldFor(context.WithoutCancel(ctx), hb)
		defer hb.stop()
	} else {
		deadline, lost = hb.stop()
		wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
	}
	defer cancel()
	if fnErr != nil && (keep == nil || !keep(fnErr)) {
		if err := retryLost(wctx, giveBack); err != nil {
			// The lease will expire on its own; report both.
			return outcome(err, outError), errors.Join(fnErr, err)
		}
		return outReleased, fnErr
	}
	return finish(wctx, fnErr, deadline, lost)
}

// heldFor returns a context for a Do's final write after fn returned, the
// heartbeat still beating: it ends once both finalWriteBudget has passed and
// the heartbeat's local lease deadline has (the deadline moves with every
// renewal, so a write retried through an outage goes on for as long as the
// lease is held, and at least finalWriteBudget). Past the deadline another
// caller may take the record over; a fenced write then fails with
// ErrStaleOwner, so trying up to it costs nothing but time.
func heldFor(parent context.Context, h *heartbeat) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	floor := time.Now().Add(finalWriteBudget)
	var mu sync.Mutex
	var t *time.Timer
	var check func()
	check = func() {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		until := h.deadline
		if h.lost {
			until = time.Time{}
		}
		h.mu.Unlock()
		if floor.After(until) {
			until = floor
		}
		if d := time.Until(until); d > 0 {
			t = time.AfterFunc(d, check)
			return
		}
		cancel()
	}
	check()
	return ctx, func() {
		cancel()
		mu.Lock()
		if t != nil {
			t.Stop()
		}
		mu.Unlock()
	}
}
