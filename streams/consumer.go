// Package streams runs a Redis Streams consumer group whose handler's effect
// happens once per message id, however often an entry is delivered: each
// entry goes through store.Claims.Do's lease engine, batched per read
// (store.Claims.Batch).
//
// A Consumer reads its group with blocking XREADGROUP, runs up to
// WithConcurrency handlers at once, and settles every entry:
//
//	handler outcome                      what happens to the entry      Event outcome
//	ran and returned nil                 XACK                           acked
//	a duplicate of a processed id        XACK (the effect ran before)   duplicate
//	in flight (another consumer holds    left pending, reclaimable      in_flight
//	  the id's lease)                      after RetryAfter
//	the handler failed (or panicked)     left pending, reclaimable      failed
//	                                       after WithRetryDelay
//	failed on its MaxDeliveries-th       XADD to the dead-letter        dead_lettered
//	  delivery, or delivered more often,   stream, then XACK
//	  or failed with store.Permanent(err)
//	cancelled by a shutdown              left pending, reclaimable      released
//	                                       at once by another consumer
//	a store or Redis error before the    left pending (reclaimed after  error
//	  handler ran                          the min idle time)
//
// A panic in the handler is recovered: it is the handler's error (the
// panic's value in its text), the claim is released, and the consumer goes
// on. A handler that returned nil whose commit failed (the lease lost, the
// store unreachable) is acked and reported acked with the commit's error:
// its effect happened, and a redelivery would run it again.
//
// Streams has no negative acknowledgement: an entry that is not acked stays
// in the group's pending list, and a Consumer reclaims pending entries with
// XAUTOCLAIM once they have been idle for the lease (the time after which a
// dead consumer's claim has expired). An entry left pending for a reason
// (in flight, failed) has its idle time set with XCLAIM ... IDLE JUSTID
// (which does not count a delivery) so that it becomes reclaimable exactly
// when it is worth another try: for an id in flight, after the time left on
// the holder's lease (store.RetryAfter). Redeliveries of an entry another
// consumer is still working on are therefore paced by the lease, not by the
// reclaim loop.
//
// # What the handler must do
//
// The handler's effect must be all-or-nothing: one write (a single SQL
// transaction, one Redis command or script), or a call to a downstream system
// that is idempotent for the message id, or a write fenced with the lease
// token (store.LeaseFromContext) that the downstream refuses once the lease
// is gone. A handler that makes two separate writes and is killed between
// them leaves the first one done and the message unprocessed: the
// redelivery runs the whole handler again, and the first write happens twice.
// Claims.Do makes the handler run to completion once; it cannot undo half
// of a run that died. A process can also die after the effect and before
// Claims.Do commits it (a few milliseconds): an effect that must never repeat
// should be idempotent for the message id too, e.g. one script or
// transaction that checks the lease token, records the id, and makes the
// writes (docs/integrations.md's "fenced pattern"; TestFencedPattern checks it).
//
// # Ids
//
// By default the claim id of an entry is the stream key, "/", and the entry
// id ("payments/1700000000000-0"), so one Claims store can serve several
// streams. A producer that may XADD the same message twice (a retry after a
// timeout) should put its own message id in a field and name it with
// WithIDField: the two entries then share one claim, and the second is acked
// as a duplicate.
//
// # Batching
//
// Each read's claim ids are claimed in one script call per hash slot
// (Claims.Batch) before their handlers start, and each handler's lease
// extensions, commit or release are gathered with the others in flight into
// one call per operation and slot; every id keeps its own lease, fence and
// outcome. A gathered call goes out as soon as none is in flight, so an entry
// handled alone waits for nothing more than with one Claims.Do per entry, and
// under load an operation waits at most one round trip. A handler's worker is
// free as soon as it returns; its entry is acked once its own commit's reply is
// in, and at most WithConcurrency entries wait for their commit at a time, so a
// crash can make at most the running handlers and those commits run again.
// WithBatching(false) runs one Claims.Do per entry (BENCHMARKS.md compares
// both with a plain consumer).
//
// # Cluster
//
// The stream key, the dead-letter stream and the claim keys are used by
// separate commands, so they may live in different hash slots.
package streams

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/delivery"
	"github.com/redisonce/redisonce/store"
)

// Message is one stream entry, as the handler sees it.
type Message struct {
	// Stream is the stream key; ID the entry id ("1700000000000-0").
	Stream, ID string
	// Values are the entry's fields and values.
	Values map[string]string
	// ClaimID is the id Claims.Do ran the handler under: the WithIDField
	// field's value, or Stream + "/" + ID.
	ClaimID string
	// Deliveries is how many times the group delivered the entry, this time
	// included (1 on the first read). It is counted only when a dead-letter
	// stream is set (WithDeadLetter); otherwise 1 on the first read and 0 on a
	// reclaimed entry ("not counted").
	Deliveries int64
}

// Handler applies one message's effect. Its context carries the claim's
// lease (store.LeaseFromContext) and is cancelled when the lease is lost or
// when a shutdown's grace period ends. Its effect must be all-or-nothing (see
// the package doc). A handler that panics has failed: the panic is
// recovered, and its value is in the error the entry is reported with.
type Handler func(ctx context.Context, m Message) error

// Outcomes a Consumer reports (store.Event.Outcome, with Store "streams" and
// Op "handle"), besides store.Outcome("acked"), store.Outcome("duplicate"),
// store.Outcome("in_flight"), store.Outcome("failed"), store.Outcome("released"),
// store.Outcome("invalid") and store.Outcome("error").
const (
	// OutcomeDeadLettered: the entry was added to the dead-letter stream
	// and acked.
	OutcomeDeadLettered store.Outcome = delivery.NameDeadLettered
)

// Option configures a Consumer.
type Option func(*config)

type config struct {
	concurrency   int
	lease         time.Duration
	idField       string
	deadLetter    string
	maxDeliveries int64
	retryDelay    time.Duration
	block         time.Duration
	reclaimEvery  time.Duration
	startID       string
	grace         time.Duration
	observer      store.Observer
	batch         bool
	ackDelay      time.Duration
	err           error

	coalesceKey       func(Message) string // WithCoalesce
	coalesceOpts      store.CoalesceOptions
	coalesceStoreOpts []store.Option
}

// WithConcurrency sets how many handlers run at once. Default 16.
func WithConcurrency(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.err = fmt.Errorf("streams: concurrency %d must be >= 1: %w", n, store.ErrInvalidArgument)
		}
		c.concurrency = n
	}
}

// WithLease sets the lease Claims.Do takes on each message id (kept alive
// while the handler runs), which is also the idle time after which a pending
// entry is reclaimed from a consumer that died: pick it a little longer than
// the longest pause (GC, network) you accept before another consumer takes
// over, not the handler's length. Default 10 s.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d < 10*time.Millisecond {
			c.err = fmt.Errorf("streams: lease %v must be >= 10ms: %w", d, store.ErrInvalidArgument)
		}
		c.lease = d
	}
}

// WithIDField takes each entry's claim id from the field name instead of the
// entry id, for producers that may XADD one message twice. An entry without
// the field (or with it empty) is not handled: it is dead-lettered when a
// dead-letter stream is set, and otherwise left pending and reported invalid.
// Default: none (Stream + "/" + the entry id).
func WithIDField(name string) Option {
	return func(c *config) {
		if name == "" {
			c.err = fmt.Errorf("streams: empty id field: %w", store.ErrInvalidArgument)
		}
		c.idField = name
	}
}

// WithDeadLetter moves an entry to the stream key after maxDeliveries
// deliveries: when its handler fails on the maxDeliveries-th delivery, or when
// it is delivered more often than that (a handler that kills its process, a
// consumer killed each time) — and at once when the handler's error is
// marked store.Permanent (a retry cannot succeed). Without a dead-letter
// stream a permanent error is retried like any other. The dead letter is an XADD of the entry's fields
// plus "redisonce.stream", "redisonce.id", "redisonce.deliveries" and
// "redisonce.error", followed by an XACK of the entry. It runs through
// Claims.Do like a handler, so it happens once per claim id and never while
// another consumer holds the id; the id is then marked processed (to replay a
// dead letter under the same id, Claims.Forget it first). A crash between the
// XADD and its commit may add the dead letter twice (both copies carry
// redisonce.id). Default: none (an entry is retried forever).
func WithDeadLetter(stream string, maxDeliveries int) Option {
	return func(c *config) {
		if stream == "" || maxDeliveries < 1 {
			c.err = fmt.Errorf("streams: dead letter %q after %d deliveries: want a stream and >= 1: %w", stream, maxDeliveries, store.ErrInvalidArgument)
		}
		c.deadLetter, c.maxDeliveries = stream, int64(maxDeliveries)
	}
}

// WithRetryDelay sets how long an entry whose handler failed stays pending
// before it is reclaimed and retried (at most the lease). Default 1 s.
func WithRetryDelay(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.err = fmt.Errorf("streams: retry delay %v must be >= 0: %w", d, store.ErrInvalidArgument)
		}
		c.retryDelay = d
	}
}

// WithBlock sets how long one XREADGROUP waits for new entries. Default 2 s.
func WithBlock(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.err = fmt.Errorf("streams: block %v must be >= 1ms: %w", d, store.ErrInvalidArgument)
		}
		c.block = d
	}
}

// WithAckDelay sets how long a settled entry's XACK waits for the entries
// settled after it, so that one XACK carries them all: an XACK goes out d
// after the first id it carries was settled, or as soon as it carries 256
// ids, with one XACK in flight at a time. 0 sends each as soon as the one
// before it is back. Default 1 ms: at a few thousand entries a second and
// more, an XACK per millisecond instead of one per commit saves the server
// most of its XACK calls (BENCHMARKS.md, "Streams").
//
// The ack is not what makes an entry's effect happen once (its committed
// claim is): an entry whose XACK waits, or is lost with its process, is
// reclaimed after the min idle time, found processed, and acked then. A delay
// lets XPENDING show an entry d longer. It must be shorter than the lease.
func WithAckDelay(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.err = fmt.Errorf("streams: ack delay %v must be >= 0: %w", d, store.ErrInvalidArgument)
		}
		c.ackDelay = d
	}
}

// WithReclaimInterval sets how often the consumer looks for pending entries
// to reclaim (XAUTOCLAIM). Default: lease/10, between 50 ms and 1 s.
func WithReclaimInterval(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.err = fmt.Errorf("streams: reclaim interval %v must be >= 1ms: %w", d, store.ErrInvalidArgument)
		}
		c.reclaimEvery = d
	}
}

// WithStartID sets where a group the Consumer creates starts reading: "0"
// (the default: every entry in the stream, so nothing a producer wrote before
// the first consumer started is skipped) or "$" (only entries added from now
// on). An existing group is left as it is.
func WithStartID(id string) Option {
	return func(c *config) {
		if id == "" {
			c.err = fmt.Errorf("streams: empty start id: %w", store.ErrInvalidArgument)
		}
		c.startID = id
	}
}

// WithShutdownGrace sets how long Run waits, once its context is done, for
// running handlers to finish before cancelling their contexts. A cancelled
// handler's claim is released and its entry left pending, reclaimable at once
// by another consumer. Default: the lease.
func WithShutdownGrace(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.err = fmt.Errorf("streams: shutdown grace %v must be >= 0: %w", d, store.ErrInvalidArgument)
		}
		c.grace = d
	}
}

// WithObserver reports one store.Event per entry (Store "streams", Op
// "handle", Prefix the stream key, Key the claim id, Outcome as in the package
// doc), one per failed read or reclaim (Op "read" or "reclaim", outcome
// error), and one per failed XACK of a batch of entries (Op "ack", Key the
// batch's first entry id, outcome error). The claims store reports its own events through its own observer.
// The runner's own error texts quote the claim id the way store errors do
// (`redisonce: streams "payments/1700000000000-0": handler panicked: ...`), so
// Event.ErrorText(false), which the observers without their key option record,
// shows neither the claim id nor the entry id in it. Default: none.
func WithObserver(o store.Observer) Option {
	return func(c *config) { c.observer = o }
}

// WithBatching sets whether the claims, lease extensions, commits and
// releases of the entries go through one store.Batch per read (true, the
// default) or one Claims.Do per entry (false).
//
// Batched, the claim ids of a read are claimed in one script call per hash
// slot before their handlers start, and each finished handler's commit is
// gathered with the other commits, extensions and releases in flight into
// one call per operation and slot. A gathered call goes out as soon as none
// is in flight: an entry handled alone waits for nothing more than with
// Claims.Do, and under load an operation waits at most one round trip (the
// call in flight ahead of it) to share the next call. The entry is acked
// only once its own commit's reply is in, as without batching. false makes
// every operation its own call, sent at once, at the cost of one script call
// per operation per entry (BENCHMARKS.md, "Streams").
func WithBatching(on bool) Option {
	return func(c *config) { c.batch = on }
}

// Consumer is one member of a consumer group. Make one per process (or per
// group the process serves) with New, and call Run.
type Consumer struct {
	client              rueidis.Client
	claims              *store.Claims
	stream, group, name string
	handle              Handler
	cfg                 config
	minIdle             time.Duration
	minIdleMS           string
	co                  *store.Coalescer // WithCoalesce
}

// New returns a Consumer named consumer in group on stream: it runs h once
// per claim id through claims. client is borrowed (Run does not close it);
// claims may share it. Options: WithConcurrency, WithLease, WithIDField,
// WithDeadLetter, WithRetryDelay, WithBlock, WithReclaimInterval,
// WithStartID, WithShutdownGrace, WithObserver, WithCoalesce, WithBatching,
// WithAckDelay. Consumer names must be unique
// within the group (a process's hostname and pid, say).
func New(client rueidis.Client, claims *store.Claims, stream, group, consumer string, h Handler, opts ...Option) (*Consumer, error) {
	cfg := config{concurrency: 16, lease: 10 * time.Second, retryDelay: time.Second, block: 2 * time.Second, startID: "0", grace: -1,
		batch: true, ackDelay: time.Millisecond}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("streams: nil option: %w", store.ErrInvalidArgument)
		}
		o(&cfg)
	}
	switch {
	case cfg.err != nil:
		return nil, cfg.err
	case client == nil || claims == nil || h == nil:
		return nil, fmt.Errorf("streams: nil client, claims or handler: %w", store.ErrInvalidArgument)
	case stream == "" || group == "" || consumer == "":
		return nil, fmt.Errorf("streams: stream %q, group %q and consumer %q must not be empty: %w", stream, group, consumer, store.ErrInvalidArgument)
	case cfg.ackDelay >= cfg.lease:
		return nil, fmt.Errorf("streams: ack delay %v must be shorter than the lease %v: %w", cfg.ackDelay, cfg.lease, store.ErrInvalidArgument)
	case cfg.deadLetter == stream:
		return nil, fmt.Errorf("streams: the dead-letter stream is the stream %q: %w", stream, store.ErrInvalidArgument)
	}
	if cfg.reclaimEvery == 0 {
		cfg.reclaimEvery = min(max(cfg.lease/10, 50*time.Millisecond), time.Second)
	}
	if cfg.grace < 0 {
		cfg.grace = cfg.lease
	}
	cfg.retryDelay = min(cfg.retryDelay, cfg.lease)
	c := &Consumer{client: client, claims: claims, stream: stream, group: group, name: consumer, handle: h, cfg: cfg}
	// A dead consumer's lease expires at most a lease after its last
	// extension, and its entry was delivered before that: once idle for a
	// lease, an entry is worth reclaiming.
	c.minIdle = cfg.lease
	c.minIdleMS = strconv.FormatInt(c.minIdle.Milliseconds(), 10)
	if err := c.newCoalescer(); err != nil {
		return nil, err
	}
	return c, nil
}

// Run creates the group if it is missing (XGROUP CREATE ... MKSTREAM), then
// reads and handles entries until ctx is done. Then it stops reading, waits
// up to the shutdown grace for running handlers, cancels the ones still
// running (their entries stay pending, reclaimable at once by another
// consumer), and returns nil. It returns an error only when the group cannot
// be created or ctx is done before it was, and store.ErrInvalidArgument for
// a nil ctx or a nil Consumer. Run may be called again after it returned.
func (c *Consumer) Run(ctx context.Context) error {
	if c == nil || ctx == nil {
		return fmt.Errorf("redisonce: streams: nil consumer or context: %w", store.ErrInvalidArgument)
	}
	if err := c.createGroup(ctx); err != nil {
		return err
	}
	// Handlers outlive ctx by the grace period: they get a context of their
	// own, cancelled when it ends.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	minRead := 1
	if c.readAhead() > 2 {
		minRead = max(1, c.cfg.concurrency/2)
	}
	r := &run{c: c, hctx: hctx, slots: make(chan struct{}, c.readAhead()*c.cfg.concurrency), minRead: minRead, workers: make(chan struct{}, c.cfg.concurrency),
		committing: make(chan struct{}, 2*c.cfg.concurrency),
		stopping:   ctx.Done(), running: map[string]chan struct{}{}, entries: map[string]struct{}{}, acks: make(chan string, 2*ackMax),
		idle: make(chan func())}
	defer close(r.idle) // after every handler returned
	acked := make(chan struct{})
	go func() { defer close(acked); r.ackLoop() }()
	go r.sweep(ctx)
	defer func() {
		close(r.acks) // every handler has returned: flush the last acks
		<-acked
	}()
	r.loop(ctx)

	done := make(chan struct{})
	go func() { r.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.cfg.grace):
		r.shuttingDown.Store(true)
		hcancel()
		<-done
	}
	return nil
}

// readAhead is how many entries per handler a Run holds read and not settled:
// 2 (one running, one waiting), and with batching 4, since an entry then
// waits for its read's claim before its handler starts, and reading further
// ahead keeps the handlers busy meanwhile (BENCHMARKS.md, "Streams").
func (c *Consumer) readAhead() int {
	if c.cfg.batch && c.co == nil {
		return 4
	}
	return 2
}

func (c *Consumer) createGroup(ctx context.Context) error {
	err := c.client.Do(ctx, c.client.B().XgroupCreate().Key(c.stream).Group(c.group).Id(c.cfg.startID).Mkstream().Build()).Error()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisonce: streams: create group %q on %q: %w", c.group, c.stream, err)
	}
	return nil
}

// report sends one Event to the observer, if any.
func (c *Consumer) report(ctx context.Context, op, key string, out store.Outcome, start time.Time, err error) {
	if c.cfg.observer == nil {
		return
	}
	c.cfg.observer.Observe(ctx, store.Event{Store: "streams", Op: op, Prefix: c.stream, Key: key, N: 1,
		Outcome: out, Start: start, Duration: time.Since(start), Err: err})
}

// claimID is m's claim id, or "" when its id field is missing.
func (c *Consumer) claimID(m *Message) string {
	if c.cfg.idField == "" {
		return c.stream + "/" + m.ID
	}
	return m.Values[c.cfg.idField]
}
