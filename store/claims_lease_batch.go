package store

import (
	"context"
	"sync"
	"time"
)

// Batch runs Claims.Do's lease engine for many ids at once: the claims,
// extensions, commits and releases of every Do a Batch runs, and of every
// other Batch of the same store, are gathered into one script call per
// operation and hash slot (lease_many.lua, extend_many.lua, commit_many.lua,
// release_many.lua; a group of one id runs the single-id script), and the
// calls of one gathering go out in one round trip. Each id keeps its own
// lease token, fence, heartbeat, local lease deadline and outcome, exactly as
// Claims.Do gives them: a batched call is only a cheaper way to send the same
// per-id operation, and each id reads its own element of the reply.
//
// A gathering goes out as soon as no other one of the store is in flight
// (flush when idle): a lone Do is not delayed at all, and under load each
// operation waits at most for the call in flight ahead of it, one round trip,
// while the ones that queue up meanwhile share the next call.
//
// Claims.Batch claims a read batch's ids up front; Do runs each. It is safe
// for concurrent use: a consumer with N handlers calls Do from each of them.
type Batch struct {
	s      *Claims
	lease  time.Duration
	linger bool // made with ids (a read): its requests may wait (batchDelay)

	mu   sync.Mutex
	held map[string]*preLease // the ids claimed up front that no Do took yet
	idle *time.Timer          // Close, a lease after the claims were sent
}

// preLease is one id's claim sent by Claims.Batch: lease_many.lua's element
// and, for a lease won, its heartbeat, beating from before the claim was
// sent (as Claims.Do's) until Do runs the id, Close gives it back, or a
// lease passes without a Do (idle).
type preLease struct {
	value string // "~<token>"
	n     int64  // 1 won, 0 processed, -(ms left) in flight
	fence uint64
	sent  time.Time // when the call that claimed it was sent
	err   error
	hb    *heartbeat // a lease won: its heartbeat
}

// Batch claims ids with leases of length lease, in one script call per hash
// slot (at most 500 ids per call) and one round trip, for Do to run them:
// each id gets a token of its own and, when won, a fence of its own. An id
// given twice is claimed once (the first Do of it takes the lease; a later
// Do claims it again, and finds it in flight or processed: first wins).
//
// Every id and lease is validated, and ctx checked, before anything is sent
// (ErrInvalidArgument, or ctx's error: no Batch). Then the error is nil: an
// id whose call failed (a lost connection, ctx ending before the reply; the
// claim may have landed, and then expires after lease) gets that error from
// its Do, as Claims.Do returns its claim's. ids may be empty: Do then claims
// each id it is given, gathered with the other operations in flight.
//
// Each lease won is extended as Claims.Do's is (every lease/4, from before
// the claim was sent, so a round trip up to lease/2 loses nothing) while its
// id waits for its Do, for at most a lease: a lease no Do took within a lease
// of its claim is given back, and a Do after that claims its id again. Close
// gives back every lease that no Do took.
func (s *Claims) Batch(ctx context.Context, ids []string, lease time.Duration) (*Batch, error) {
	if s == nil {
		return nil, nilStore("batch", "", "Claims")
	}
	if err := s.checkBatch(ctx, "batch"); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if err := s.check(ctx, "batch", id); err != nil {
			return nil, err
		}
	}
	if lease <= 0 {
		return nil, errorf("batch", "", ErrInvalidArgument, "lease %v must be > 0", lease)
	}
	b := &Batch{s: s, lease: lease, held: make(map[string]*preLease, len(ids)), linger: len(ids) > 0}
	if len(ids) == 0 {
		return b, nil
	}
	uniq, _ := firstOccurrences(ids)
	ops := batched{g: &s.gather} // extensions: they never wait
	reqs := make([]*leaseReq, len(uniq))
	hbs := make([]*heartbeat, len(uniq))
	// The beats run under no caller's context until a Do takes the lease.
	bctx := context.WithoutCancel(ctx)
	for i, id := range uniq {
		value := newLeaseValue()
		reqs[i] = &leaseReq{op: opLease, id: id, value: value, arg: lease}
		hbs[i] = startHeartbeat(bctx, lease, time.Now(), "do", ErrLeaseLost, s.extendOn(ops, id, value[1:], lease))
	}
	// The read's claims are a batch already: sent at once, one call per
	// slot, not queued behind the gathering in flight.
	s.b.leaseFlush(ctx, reqs)
	b.mu.Lock()
	defer b.mu.Unlock()
	won := false
	for i, r := range reqs {
		p := &preLease{value: r.value, n: r.n, fence: r.fence, sent: r.sent, err: r.err}
		if r.err != nil || r.n != 1 {
			hbs[i].stop()
		} else {
			hbs[i].answered()
			p.hb = hbs[i]
			won = true
		}
		b.held[r.id] = p
	}
	if won {
		// A lease after the claims were sent, the leases no Do took go back.
		b.idle = time.AfterFunc(time.Until(reqs[0].sent.Add(lease)), func() { _ = b.Close() })
	}
	return b, nil
}

// Do is Claims.Do for id under the Batch's lease, with the same outcomes,
// errors and guarantees, each id on its own: the lease claimed by
// Claims.Batch when it holds one for id (no round trip; or its answer: the
// id processed, or the claim's error), otherwise a claim sent now, gathered
// with the others in flight (also for an id Claims.Batch found in flight:
// its holder may have finished since). Its extensions, its commit and its
// release are gathered the same way, and Do returns once its own commit's
// (or release's) reply is in: an id whose commit did not land is never
// reported done. One id's failure gives back that id only.
//
// A Do whose ctx is already done when it is called gives back the lease
// Claims.Batch took for id (a read entry left to other consumers) and
// returns ctx's error; fn does not run.
func (b *Batch) Do(ctx context.Context, id string, fn func(context.Context) error) (ran bool, err error) {
	if b == nil {
		return false, nilStore("do", id, "Batch")
	}
	s := b.s
	if ctx != nil && ctx.Err() != nil {
		if pre := b.take(id); pre != nil {
			b.giveBack(ctx, id, pre)
		}
	}
	err = s.observeDo(ctx, id, func() (out Outcome, err error) {
		if err := s.check(ctx, "do", id); err != nil {
			return outcome(err, outError), err
		}
		if fn == nil {
			return outInvalid, errorf("do", id, ErrInvalidArgument, "nil fn")
		}
		ran, out, err = s.doOn(ctx, batched{&s.gather, b.linger}, id, b.lease, fn, b.take(id))
		return out, err
	})
	return ran, err
}

// Close gives back every lease Claims.Batch took that no Do ran, in one
// script call per hash slot, retried on transport failures for up to 5 s; a
// Do after Close claims its id again. A Batch closes itself a lease after
// its claims were sent. The error is the first give-back that
// failed (that lease then expires on its own).
func (b *Batch) Close() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	held := b.held
	b.held = nil
	if b.idle != nil {
		b.idle.Stop()
	}
	b.mu.Unlock()
	var reqs []*leaseReq
	for id, p := range held {
		p.stop()
		if p.hb != nil {
			reqs = append(reqs, &leaseReq{op: opRelease, id: id, value: p.value})
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), finalWriteBudget)
	defer cancel()
	return retryLost(ctx, func(ctx context.Context) error {
		if err := b.s.gather.run(ctx, reqs...); err != nil {
			return err
		}
		var first error
		rest := reqs[:0]
		for _, r := range reqs {
			if r.err != nil {
				if first == nil {
					first = r.err
				}
				rest = append(rest, r)
			}
		}
		reqs = rest
		return first
	})
}

// take removes and returns id's lease claimed up front, or nil.
func (b *Batch) take(id string) *preLease {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.held[id]
	if p != nil {
		delete(b.held, id)
	}
	return p
}

// stop ends a lease's heartbeat, for a lease no fn will run under.
func (p *preLease) stop() {
	if p.hb != nil {
		p.hb.stop()
	}
}

// giveBack releases a lease claimed up front that no fn will run under.
func (b *Batch) giveBack(ctx context.Context, id string, p *preLease) {
	p.stop()
	if p.hb == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
	defer cancel()
	_ = retryLost(rctx, func(ctx context.Context) error {
		return batched{&b.s.gather, b.linger}.release(ctx, id, p.value[1:])
	})
}

// extendOn is the extension of id's lease (token's) through ops, reported
// to the observer.
func (s *Claims) extendOn(ops leaseOps, id, token string, lease time.Duration) extendFunc {
	extend := extendFunc(func(ctx context.Context, sent *time.Time) (bool, error) {
		n, err := ops.extend(ctx, id, token, lease, sent)
		return n == 1, err
	})
	if s.ev.obs != nil {
		extend = s.ev.observeExtend(id, "extend", outLeaseLost, extend)
	}
	return extend
}

// doOn is Claims.do over ops (the backend, or the gathered calls of a
// Batch), from pre, a claim already sent (Claims.Batch), when not nil.
func (s *Claims) doOn(ctx context.Context, ops leaseOps, id string, lease time.Duration, fn func(context.Context) error, pre *preLease) (bool, Outcome, error) {
	if lease <= 0 {
		return false, outInvalid, errorf("do", id, ErrInvalidArgument, "lease %v must be > 0", lease)
	}
	if pre != nil && pre.err == nil && pre.n < 0 {
		// In flight when the batch was claimed: its holder may have finished
		// since (a repeat in an earlier read, committed or given back), so
		// the answer is asked again now.
		pre = nil
	}
	if pre != nil && pre.hb != nil && !pre.hb.held() {
		// Its heartbeat found it lost, or its local deadline passed, while
		// the id waited: give it back (if it is still ours) and claim again.
		pre.stop()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
		err := retryLost(rctx, func(ctx context.Context) error { return ops.release(ctx, id, pre.value[1:]) })
		cancel()
		if err != nil {
			return false, outcome(err, outError), err
		}
		pre = nil
	}
	value := newLeaseValue()
	if pre != nil {
		value = pre.value
	}
	token := value[1:] // the token shares the value's string
	var (
		n     int64
		fence uint64
		hb    *heartbeat
		sent  time.Time
		err   error
	)
	if pre != nil {
		n, fence, sent, err, hb = pre.n, pre.fence, pre.sent, pre.err, pre.hb
		if hb != nil {
			hb.reparent(ctx)
		}
	} else {
		hb, sent, err = takeLease(ctx, lease, ErrLeaseLost, s.extendOn(ops, id, token, lease), func(sent *time.Time) (bool, error) {
			var err error
			n, fence, err = ops.claim(ctx, "do", id, value, lease, sent)
			return n == 1, err
		})
	}
	if err != nil {
		return false, outcome(err, outError), err
	}
	switch {
	case n == 0:
		return false, outDuplicate, nil
	case n < 0:
		// claim.lua answers -(ms left on the holder's lease)
		return false, outInFlight, inFlight("do", id, time.Duration(-n)*time.Millisecond)
	}
	release := func(ctx context.Context) error { return ops.release(ctx, id, token) }
	out, err := runLease(ctx, hb, Lease{ID: id, Token: token, Fence: fence}, sent, false, fn, release, nil,
		func(ctx context.Context, _ error, deadline time.Time, lost bool) (Outcome, error) {
			return s.commit(ctx, ops, id, token, deadline, lost)
		})
	return true, out, err
}

// leaseOps are the four per-id operations of the lease engine, with
// claimsBackend's signatures: the backend itself (Claims.Do), or batched
// (Batch.Do), which gathers them.
type leaseOps interface {
	claim(ctx context.Context, op, id, value string, ttl time.Duration, sent *time.Time) (int64, uint64, error)
	extend(ctx context.Context, id, token string, lease time.Duration, sent *time.Time) (int64, error)
	commit(ctx context.Context, id, token string, ttl time.Duration) (int64, error)
	release(ctx context.Context, id, token string) error
}

// leaseOp names the operation of a gathered request.
type leaseOp uint8

const (
	opLease   leaseOp = iota // lease_many.lua (claim.lua with "~<token>")
	opExtend                 // extend_many.lua
	opCommit                 // commit_many.lua
	opRelease                // release_many.lua
)

// leaseReq is one id's operation in a gathering, and its reply.
type leaseReq struct {
	op     leaseOp
	id     string
	value  string        // "~<token>"
	arg    time.Duration // the lease (opLease, opExtend) or the TTL (opCommit)
	linger bool          // may wait for more to share its call (batchDelay)

	// Set by the flush, before done is closed.
	n     int64
	fence uint64
	sent  time.Time // when the call that ran it was sent
	err   error
	done  chan struct{}

	// Under the gatherer's mu: the caller has gone (gone), and the flush
	// that took the request.
	gone  bool
	flush *flushState
}

// gatherer sends the gathered requests of one store (flush when idle): a
// request that finds nothing in flight is sent at once by its own caller,
// under its own context, as Claims.Do sends it; the requests that arrive
// while a send is in flight queue, and the flush loop sends everything
// queued in one flush when the send ahead of them is back.
type gatherer struct {
	b     claimsBackend
	delay time.Duration // batchDelay (tests set another)

	mu      sync.Mutex
	queue   []*leaseReq
	leading int  // callers sending their own requests now
	looping bool // the flush loop runs
	kick    *time.Timer
	// lingerAt is when the first queued request that may wait for more
	// (leaseReq.linger) was queued; zero when none is queued.
	lingerAt time.Time
}

// batchDelay is how long the requests of a read's Batch (Claims.Batch with
// ids: a consumer's read, whose fns run one after another or side by side
// while their commits trail behind) that queue behind a call in flight wait,
// from the first of them, for more to share their call. A request that finds
// nothing in flight never waits, so a lone message is not delayed; a Batch
// made without ids (a middleware's, whose every Do's caller waits for it)
// never waits either (but its requests queued beside a read's, on a store
// both share, go out with them). Under load a consumer's commits then share calls by
// the dozen instead of a few (fewer script calls: less of the server's and
// the client's CPU per message, BENCHMARKS.md, "Streams"), at the cost of
// at most this much more before a Do returns (Go's timers wake about 1 ms
// late on a virtual machine whose clock ticks in ms: it is then ~1 ms).
// Short beside any lease, ack or request timeout.
const batchDelay = 300 * time.Microsecond

// run sends reqs, or queues them and waits for their replies, or for ctx
// to end: then the requests not sent yet are dropped (never sent), and a
// flush whose every request's caller has gone is cancelled. Each request
// carries its own reply or error.
func (g *gatherer) run(ctx context.Context, reqs ...*leaseReq) error {
	g.mu.Lock()
	if g.leading == 0 && !g.looping {
		// Nothing in flight: no one to gather with, and no hop to another
		// goroutine.
		g.leading++
		g.mu.Unlock()
		g.b.leaseFlush(ctx, reqs)
		g.mu.Lock()
		g.leading--
		if len(g.queue) > 0 && !g.looping {
			g.looping = true
			go g.loop()
		}
		g.mu.Unlock()
		return nil // each request holds its reply or its error (ctx's among them)
	}
	for _, r := range reqs {
		r.done, r.gone, r.flush = make(chan struct{}), false, nil
	}
	if g.lingerAt.IsZero() && reqs[0].linger {
		g.lingerAt = time.Now()
	}
	g.queue = append(g.queue, reqs...)
	if !g.looping {
		// Behind a caller's own send: the loop starts when it is back, or
		// after gatherStall if it is not.
		if g.kick == nil {
			g.kick = time.AfterFunc(gatherStall, g.startLoop)
		} else {
			g.kick.Reset(gatherStall)
		}
	}
	g.mu.Unlock()
	for i, r := range reqs {
		select {
		case <-r.done:
		case <-ctx.Done():
			g.abandon(reqs[i:])
			return ctx.Err()
		}
	}
	return nil
}

// startLoop starts the flush loop if requests wait and it is not running.
func (g *gatherer) startLoop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) > 0 && !g.looping {
		g.looping = true
		go g.loop()
	}
}

// abandon marks requests whose caller has gone: one not sent yet is
// dropped, and a flush left with no caller is cancelled.
func (g *gatherer) abandon(reqs []*leaseReq) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range reqs {
		r.gone = true
		if f := r.flush; f != nil {
			if f.waiting--; f.waiting == 0 {
				f.cancel()
			}
		}
	}
}

// flushState is one flush in flight: its context, cancelled once no caller
// waits for any of its requests, and how many still do (under the
// gatherer's mu).
type flushState struct {
	cancel  context.CancelFunc
	waiting int
}

// gatherStall is how long the flush loop waits for a flush before it sends
// the next one beside it: a call stalled on a slow link or a stopped server
// does not hold up the extensions and commits of other ids behind it.
const gatherStall = 50 * time.Millisecond

// loop flushes the queue until it is empty: one flush at a time, or one
// more beside a flush that has been in flight for gatherStall; each flush
// once its first request has waited the delay (batchDelay), or at once when
// a call's worth of requests has queued.
func (g *gatherer) loop() {
	stall := time.NewTimer(gatherStall)
	defer stall.Stop()
	var linger *time.Timer
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
	for {
		g.mu.Lock()
		if wait := g.delay - time.Since(g.lingerAt); !g.lingerAt.IsZero() && wait > 0 && len(g.queue) < maxBatchKeys {
			g.mu.Unlock()
			if linger == nil {
				linger = time.NewTimer(wait)
			} else {
				linger.Reset(wait)
			}
			<-linger.C
			g.mu.Lock()
		}
		g.lingerAt = time.Time{}
		q := g.queue[:0:0]
		for _, r := range g.queue {
			if !r.gone {
				q = append(q, r)
			}
		}
		g.queue = nil
		if len(q) == 0 {
			g.looping = false
			g.mu.Unlock()
			return
		}
		// No deadline: each caller has its own (a deadline here would also
		// be the deadline of a redial the flush started, which rueidis
		// applies to every command waiting on it:
		// docs/upstream-rueidis-redial.md). Cancelled once every caller
		// has gone.
		ctx, cancel := context.WithCancel(context.Background())
		f := &flushState{cancel: cancel, waiting: len(q)}
		for _, r := range q {
			r.flush = f
		}
		g.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer cancel()
			g.b.leaseFlush(ctx, q)
			for _, r := range q {
				close(r.done)
			}
		}()
		stall.Reset(gatherStall)
		select {
		case <-done:
		case <-stall.C:
		}
	}
}

// batched is leaseOps through a store's gatherer.
// linger: the requests may wait for more to share their call (batchDelay);
// extensions never do.
type batched struct {
	g      *gatherer
	linger bool
}

func (o batched) one(ctx context.Context, r *leaseReq, sent *time.Time) (int64, uint64, error) {
	if err := o.g.run(ctx, r); err != nil {
		// r may still be written by its flush: not read.
		return 0, 0, opError(opName(r.op), r.id, err)
	}
	if sent != nil {
		*sent = r.sent
	}
	return r.n, r.fence, r.err
}

func (o batched) claim(ctx context.Context, _, id, value string, lease time.Duration, sent *time.Time) (int64, uint64, error) {
	return o.one(ctx, &leaseReq{op: opLease, id: id, value: value, arg: lease, linger: o.linger}, sent)
}

func (o batched) extend(ctx context.Context, id, token string, lease time.Duration, sent *time.Time) (int64, error) {
	n, _, err := o.one(ctx, &leaseReq{op: opExtend, id: id, value: "~" + token, arg: lease}, sent)
	return n, err
}

func (o batched) commit(ctx context.Context, id, token string, ttl time.Duration) (int64, error) {
	n, _, err := o.one(ctx, &leaseReq{op: opCommit, id: id, value: "~" + token, arg: ttl, linger: o.linger}, nil)
	return n, err
}

func (o batched) release(ctx context.Context, id, token string) error {
	_, _, err := o.one(ctx, &leaseReq{op: opRelease, id: id, value: "~" + token, linger: o.linger}, nil)
	return err
}

// opName is the operation's name in errors: the single-id script's.
func opName(op leaseOp) string {
	return [...]string{"do", "extend", "commit", "release"}[op]
}
