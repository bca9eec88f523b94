package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/delivery"
	"github.com/redisonce/redisonce/internal/inflight"
	"github.com/redisonce/redisonce/store"
)

// settleTimeout bounds each XACK, XCLAIM or XADD that settles an entry; they
// run even after Run's context is done.
const settleTimeout = 5 * time.Second

// run is one Run: its handler slots, its handlers and their context.
type run struct {
	c    *Consumer
	hctx context.Context // the handlers' context: cancelled when the grace ends
	// slots holds one element per entry read and not settled yet (running,
	// or waiting for a worker; with batching, until its handler returned),
	// up to readAhead times the concurrency: reading ahead
	// keeps the handlers busy while the next read is on its way. Acquire
	// sends, release receives.
	slots chan struct{}
	// minRead is the fewest free slots a read waits for: 1, and with
	// batching concurrency/2, so that a read (and its one claim call) takes
	// several entries while the entries already held keep the handlers busy.
	minRead int
	// committing holds one element per entry whose handler returned and
	// whose commit has not landed yet (with batching), up to twice the
	// concurrency: a commit waits for the call ahead of it and the claims
	// store's gathering of a read's commits (up to ~1 ms), and meanwhile the
	// handlers go on with the next entries.
	committing chan struct{}
	// workers holds one element per running handler, up to the concurrency.
	workers chan struct{}
	// stopping is closed when Run's context is done: entries read ahead and
	// not started are then left for other consumers.
	stopping     <-chan struct{}
	handlers     sync.WaitGroup
	shuttingDown atomic.Bool
	// running maps the claim ids this Run is handling to a channel closed
	// when that handling ends: a second entry with the same id (a producer's
	// duplicate read in the same batch) waits for it instead of finding it
	// in flight and waiting out the lease.
	mu      sync.Mutex
	running map[string]chan struct{}
	// entries are the entry ids this Run holds (running or read ahead): a
	// reclaim that takes one of its own back does not run it twice.
	entries map[string]struct{}
	// acks feeds ackLoop the ids of entries to XACK: a handler slot is free
	// as soon as its claim is committed, and one XACK carries many ids.
	acks chan string
	// idle hands work to the goroutines of entries already settled (go_),
	// closed when Run returns.
	idle chan func()
}

// go_ runs f in a goroutine of an entry already settled, or in a new one
// when none is idle. An entry's call chain (its lease, heartbeat, handler
// and commit) is deep: a new goroutine grows its stack, copying it, several
// times over, which costs more than the handler of a short message; a
// goroutine kept for the next entry keeps its stack.
func (r *run) go_(f func()) {
	select {
	case r.idle <- f:
	default:
		go func() {
			f()
			for f := range r.idle {
				f()
			}
		}()
	}
}

// ackMax is the most entry ids one XACK carries.
const ackMax = 256

// ackLoop acknowledges the ids sent on r.acks, as many per XACK as queue
// up within the ack delay of the first (WithAckDelay), until r.acks is
// closed and drained: then the last ids go out at once. An XACK that fails
// leaves its entries pending: they are reclaimed, found processed, and acked
// again.
func (r *run) ackLoop() {
	c := r.c
	ids := make([]string, 0, ackMax)
	var due *time.Timer // the ack delay of the first id queued
	var dueC <-chan time.Time
	if c.cfg.ackDelay > 0 {
		due = time.NewTimer(c.cfg.ackDelay)
		due.Stop()
		dueC = due.C
	}
	for id := range r.acks {
		ids = append(ids[:0], id)
		if due != nil {
			due.Reset(c.cfg.ackDelay)
		}
	fill:
		for len(ids) < ackMax {
			select { // what has queued up
			case id, ok := <-r.acks:
				if !ok {
					break fill
				}
				ids = append(ids, id)
				continue
			default:
				if dueC == nil {
					break fill
				}
			}
			select { // what comes within the delay
			case id, ok := <-r.acks:
				if !ok {
					break fill
				}
				ids = append(ids, id)
			case <-dueC:
				break fill
			}
		}
		if due != nil {
			due.Stop()
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.hctx), settleTimeout)
		start := time.Now()
		err := c.client.Do(ctx, c.client.B().Xack().Key(c.stream).Group(c.group).Id(ids...).Build()).Error()
		cancel()
		if err != nil {
			c.report(r.hctx, "ack", ids[0], store.Outcome("error"), start, fmt.Errorf("redisonce: streams: ack %d entries of %q: %w", len(ids), c.stream, err))
		}
	}
}

// begin registers claim id as handled here, first waiting for a handling of
// the same id in this Run to end; end, the returned func, unregisters it.
func (r *run) begin(id string) (end func()) {
	for {
		r.mu.Lock()
		wait, busy := r.running[id]
		if !busy {
			ch := make(chan struct{})
			r.running[id] = ch
			r.mu.Unlock()
			return func() {
				r.mu.Lock()
				delete(r.running, id)
				r.mu.Unlock()
				close(ch)
			}
		}
		r.mu.Unlock()
		select {
		case <-wait:
		case <-r.hctx.Done():
			return func() {}
		}
	}
}

// reserve blocks for r.minRead free handler slots, then takes up to every
// free one; it returns how many it took (0 when ctx is done: none held).
func (r *run) reserve(ctx context.Context) int {
	n := 0
	for n < r.minRead {
		select {
		case r.slots <- struct{}{}:
			n++
		case <-ctx.Done():
			r.release(n)
			return 0
		}
	}
	for n < cap(r.slots) {
		select {
		case r.slots <- struct{}{}:
			n++
			continue
		default:
		}
		break
	}
	return n
}

func (r *run) release(n int) {
	for range n {
		<-r.slots
	}
}

// loop reads and reclaims entries for the free slots until ctx is done: in
// each turn it reserves the free slots, gives them first to entries pending
// past the min idle time (XAUTOCLAIM) when a reclaim is due, and the rest
// to new entries (XREADGROUP ... >), blocking at most until the next
// reclaim. One loop, so a blocked read never holds slots a reclaim needs.
func (r *run) loop(ctx context.Context) {
	c := r.c
	backoff := 50 * time.Millisecond
	cursor, nextReclaim := "0-0", time.Now().Add(c.cfg.reclaimEvery)
	for ctx.Err() == nil {
		n := r.reserve(ctx)
		if n == 0 {
			return
		}
		if now := time.Now(); !now.Before(nextReclaim) {
			next, msgs, err := r.reclaim(ctx, cursor, n)
			if err != nil && ctx.Err() == nil {
				c.report(ctx, "reclaim", "", store.Outcome("error"), now, fmt.Errorf("redisonce: streams: reclaim %q: %w", c.stream, err))
			}
			cursor = next
			if cursor == "0-0" || err != nil {
				// Scanned the whole pending list: wait for the next tick.
				nextReclaim = now.Add(c.cfg.reclaimEvery)
			}
			r.startAll(msgs[:min(n, len(msgs))])
			n -= min(n, len(msgs))
			if n == 0 {
				continue
			}
		}
		block := min(c.cfg.block, time.Until(nextReclaim))
		if block < time.Millisecond {
			r.release(n)
			continue
		}
		start := time.Now()
		cmd := c.client.B().Xreadgroup().Group(c.group, c.name).Count(int64(n)).Block(block.Milliseconds()).
			Streams().Key(c.stream).Id(">").Build()
		res, err := c.client.Do(ctx, cmd).AsXRead()
		if err != nil {
			r.release(n)
			if ctx.Err() != nil {
				return
			}
			if rueidis.IsRedisNil(err) { // BLOCK timed out
				continue
			}
			if strings.HasPrefix(err.Error(), "NOGROUP") { // the stream or group was deleted
				err = c.createGroup(ctx)
			}
			if err != nil {
				c.report(ctx, "read", "", store.Outcome("error"), start, fmt.Errorf("redisonce: streams: read %q: %w", c.stream, err))
				sleep(ctx, backoff)
				backoff = min(2*backoff, 2*time.Second)
			}
			continue
		}
		backoff = 50 * time.Millisecond
		entries := res[c.stream]
		entries = entries[:min(n, len(entries))] // COUNT n: never more
		r.release(n - len(entries))
		msgs := make([]Message, len(entries))
		for i, e := range entries {
			msgs[i] = Message{Stream: c.stream, ID: e.ID, Values: e.FieldValues, Deliveries: 1}
		}
		r.startAll(msgs)
	}
}

// reclaim runs one XAUTOCLAIM from cursor and, with a dead-letter stream,
// reads the delivery counts of what it claimed (XPENDING, one round trip).
func (r *run) reclaim(ctx context.Context, cursor string, count int) (string, []Message, error) {
	c := r.c
	res, err := c.client.Do(ctx, c.client.B().Xautoclaim().Key(c.stream).Group(c.group).Consumer(c.name).
		MinIdleTime(c.minIdleMS).Start(cursor).Count(int64(count)).Build()).ToArray()
	if err != nil {
		return cursor, nil, err
	}
	if len(res) < 2 {
		return cursor, nil, fmt.Errorf("%w: XAUTOCLAIM replied %d elements", store.ErrUnexpectedReply, len(res))
	}
	next, err := res[0].ToString()
	if err != nil {
		return cursor, nil, err
	}
	entries, err := res[1].AsXRange()
	if err != nil {
		return cursor, nil, err
	}
	// (Entries deleted from the stream come back in res[2]; Redis >= 7.0
	// has already dropped them from the pending list.)
	msgs := make([]Message, 0, len(entries))
	for _, e := range entries {
		msgs = append(msgs, Message{Stream: c.stream, ID: e.ID, Values: e.FieldValues})
	}
	if c.cfg.deadLetter != "" && len(msgs) > 0 {
		cmds := make(rueidis.Commands, len(msgs))
		for i, m := range msgs {
			cmds[i] = c.client.B().Arbitrary("XPENDING").Keys(c.stream).Args(c.group, m.ID, m.ID, "1").Build()
		}
		for i, res := range c.client.DoMulti(ctx, cmds...) {
			msgs[i].Deliveries = pendingCount(res)
		}
	}
	return next, msgs, nil
}

// pendingCount reads the delivery count from an XPENDING start end 1 reply:
// [[id, consumer, idle, deliveries]]; 0 when it cannot.
func pendingCount(res rueidis.RedisResult) int64 {
	rows, err := res.ToArray()
	if err != nil || len(rows) != 1 {
		return 0
	}
	row, err := rows[0].ToArray()
	if err != nil || len(row) != 4 {
		return 0
	}
	n, err := row[3].AsInt64()
	if err != nil {
		return 0
	}
	return n
}

// startAll runs the handlers of one read's (or reclaim's) entries, each in
// a goroutine holding one reserved slot. An entry this Run already holds
// (its own, reclaimed while its handler runs longer than the lease) is
// parked for another lease instead. With batching, the claim ids of the
// entries that go to Claims.Do are claimed first, in one call per hash slot
// (Claims.Batch), in a goroutine of its own so the next read is not held up;
// the Batch is closed once every entry of the read is settled.
func (r *run) startAll(msgs []Message) {
	if len(msgs) == 0 {
		return
	}
	c := r.c
	var fresh []Message
	r.mu.Lock()
	for _, m := range msgs {
		if _, held := r.entries[m.ID]; held {
			r.handlers.Add(1)
			go func() {
				defer r.handlers.Done()
				defer r.release(1)
				start := time.Now()
				r.park(m.ID, c.minIdle)
				c.report(r.hctx, "handle", c.claimID(&m), store.Outcome("in_flight"), start, nil)
			}()
			continue
		}
		r.entries[m.ID] = struct{}{}
		fresh = append(fresh, m)
	}
	r.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	r.handlers.Add(len(fresh))
	if !c.cfg.batch || c.co != nil {
		for _, m := range fresh {
			r.go_(func() { r.handle(m, nil) })
		}
		return
	}
	r.go_(func() {
		var ids []string
		for i := range fresh {
			if id := c.claimID(&fresh[i]); id != "" && !(c.cfg.maxDeliveries > 0 && fresh[i].Deliveries > c.cfg.maxDeliveries) {
				ids = append(ids, id)
			}
		}
		rb := &readBatch{left: int32(len(fresh))}
		if len(ids) > 0 {
			// An error (the handlers' context ended; ids are valid) leaves
			// each entry to claim its id on its own.
			rb.b, _ = c.claims.Batch(r.hctx, ids, c.cfg.lease)
		}
		if rb.b == nil {
			rb.b, _ = c.claims.Batch(r.hctx, nil, c.cfg.lease)
		}
		for _, m := range fresh {
			r.go_(func() { r.handle(m, rb) })
		}
	})
}

// readBatch is the Batch of one read's entries, closed (its leases no
// handler took given back) when the last of them is settled.
type readBatch struct {
	b    *store.Batch // nil when the Batch could not be made
	left int32        // entries not settled yet (atomic)
}

// done counts one entry settled.
func (rb *readBatch) done() {
	if rb != nil && atomic.AddInt32(&rb.left, -1) == 0 && rb.b != nil {
		_ = rb.b.Close()
	}
}

// handle settles one entry once a worker is free; it holds one slot,
// released when it returns, or with batching (rb, the entry's read's Batch,
// not nil) as soon as the handler returned: the commit and the ack then go
// on behind the handlers, and the next read does not wait for them.
func (r *run) handle(m Message, rb *readBatch) {
	defer r.handlers.Done()
	var slotOnce sync.Once
	freeSlot := func() { slotOnce.Do(func() { r.release(1) }) }
	defer freeSlot()
	defer rb.done()
	defer func() {
		r.mu.Lock()
		delete(r.entries, m.ID)
		r.mu.Unlock()
	}()
	c := r.c
	var start time.Time
	if c.cfg.observer != nil {
		start = time.Now()
	}
	var out store.Outcome
	var err error
	select {
	case r.workers <- struct{}{}:
		// With batching the worker is free again as soon as the handler
		// returned: the commit (gathered with the others') and the ack go
		// on behind it, holding one of 2×concurrency commit tokens (the
		// worker waits for one), so that at most 3×concurrency effects
		// await their commit at any time.
		var once sync.Once
		committing := false
		free := func() {
			once.Do(func() {
				if rb != nil {
					r.committing <- struct{}{}
					committing = true
					freeSlot()
				}
				<-r.workers
			})
		}
		select {
		case <-r.stopping:
			out = r.releaseUnstarted(&m, rb)
		default:
			out, err = r.settle(&m, rb, free)
		}
		free()
		if committing {
			<-r.committing
		}
	case <-r.stopping:
		out = r.releaseUnstarted(&m, rb)
	}
	c.report(r.hctx, "handle", m.ClaimID, out, start, err)
}

// releaseUnstarted leaves an entry read ahead and never started to the
// other consumers: reclaimable at once.
func (r *run) releaseUnstarted(m *Message, rb *readBatch) store.Outcome {
	m.ClaimID = r.c.claimID(m)
	if rb != nil && rb.b != nil && m.ClaimID != "" {
		// A done context gives the lease Claims.Batch took back, first:
		// whoever reclaims the entry finds the id free.
		done, cancel := context.WithCancel(r.hctx)
		cancel()
		_, _ = rb.b.Do(done, m.ClaimID, func(context.Context) error { return nil })
	}
	r.park(m.ID, 0)
	return store.Outcome("released")
}

// settle runs m through Claims.Do (through its read's Batch, rb, when not
// nil) and acks or parks it; it returns the outcome and the error that goes
// with it. free frees the handler's worker: called once the handler has
// returned.
func (r *run) settle(m *Message, rb *readBatch, free func()) (store.Outcome, error) {
	c := r.c
	m.ClaimID = c.claimID(m)
	if m.ClaimID == "" {
		m.ClaimID = c.stream + "/" + m.ID
		if c.cfg.deadLetter != "" {
			return r.deadLetter(m, fmt.Sprintf("no %q field", c.cfg.idField))
		}
		// Left pending: never dropped silently.
		return store.Outcome("invalid"), fmt.Errorf("redisonce: streams %q: %w: no %q field",
			m.ClaimID, store.ErrInvalidArgument, c.cfg.idField)
	}
	if c.cfg.maxDeliveries > 0 && m.Deliveries > c.cfg.maxDeliveries {
		return r.deadLetter(m, fmt.Sprintf("delivered %d times", m.Deliveries))
	}
	if c.co != nil {
		return r.coalesce(m)
	}
	end := r.begin(m.ClaimID)
	var claims delivery.Claimer = c.claims
	if rb != nil && rb.b != nil {
		claims = delivery.Batched{B: rb.b}
	}
	res := delivery.Do(r.hctx, claims, m.ClaimID, c.cfg.lease, func(ctx context.Context) error {
		defer free()
		return c.handle(ctx, *m)
	})
	end()
	err := res.Err
	if p := (*delivery.PanicError)(nil); errors.As(err, &p) {
		// The claim id quoted the way store errors quote it, so that
		// Event.ErrorText(false) leaves it out.
		err = fmt.Errorf("redisonce: streams %q: %w", m.ClaimID, err)
	}
	switch res.Row {
	case delivery.Done, delivery.CommitFailed:
		// CommitFailed: the handler's effect happened, so the entry is done;
		// a redelivery would run it again. err says why the commit failed.
		r.acks <- m.ID
		return store.Outcome("acked"), err
	case delivery.Duplicate:
		r.acks <- m.ID
		return store.Outcome("duplicate"), nil
	case delivery.InFlight:
		r.park(m.ID, res.RedeliverAfter)
		return store.Outcome("in_flight"), err
	case delivery.Shutdown:
		r.park(m.ID, 0)
		return store.Outcome("released"), err
	case delivery.Failed, delivery.Permanent:
		if c.cfg.maxDeliveries > 0 && (m.Deliveries >= c.cfg.maxDeliveries || res.Row == delivery.Permanent) {
			return r.deadLetter(m, err.Error())
		}
		r.park(m.ID, c.cfg.retryDelay)
		return store.Outcome("failed"), err
	default:
		// A store error before the handler ran: the entry stays pending,
		// reclaimed after the min idle time.
		return store.Outcome("error"), err
	}
}

// deadLetter adds m to the dead-letter stream through Claims.Do (once per
// claim id, never while another consumer holds it), then acks it.
func (r *run) deadLetter(m *Message, reason string) (store.Outcome, error) {
	c := r.c
	ran, err := c.claims.Do(r.hctx, m.ClaimID, c.cfg.lease, func(ctx context.Context) error {
		fields := make([]string, 0, len(m.Values))
		for f := range m.Values {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		cmd := c.client.B().Xadd().Key(c.cfg.deadLetter).Id("*").FieldValue()
		for _, f := range fields {
			cmd = cmd.FieldValue(f, m.Values[f])
		}
		cmd = cmd.FieldValue("redisonce.stream", c.stream).FieldValue("redisonce.id", m.ID).
			FieldValue("redisonce.deliveries", strconv.FormatInt(m.Deliveries, 10)).FieldValue("redisonce.error", reason)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		return c.client.Do(sctx, cmd.Build()).Error()
	})
	switch {
	case err == nil:
		r.acks <- m.ID
		if ran {
			return OutcomeDeadLettered, nil
		}
		return store.Outcome("duplicate"), nil
	case errors.Is(err, store.ErrInFlight):
		r.park(m.ID, inflight.Delay(err, c.minIdle))
		return store.Outcome("in_flight"), err
	default:
		return store.Outcome("error"), err
	}
}

// park leaves entry id pending, reclaimable (by any consumer) once after has
// passed: XCLAIM ... IDLE (min idle - after) JUSTID sets its idle time
// without counting a delivery. If it fails, the entry is reclaimed after the
// min idle time instead.
func (r *run) park(id string, after time.Duration) {
	c := r.c
	idle := max(c.minIdle-after, 0)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.hctx), settleTimeout)
	defer cancel()
	_ = c.client.Do(ctx, c.client.B().Xclaim().Key(c.stream).Group(c.group).Consumer(c.name).MinIdleTime("0").
		Id(id).Idle(idle.Milliseconds()).Justid().Build()).Error()
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
