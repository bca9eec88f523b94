package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/internal/delivery"
	"github.com/redisonce/redisonce/store"
)

// DefaultLease is the lease of a Consumer unless WithLease says otherwise.
const DefaultLease = 30 * time.Second

// Outcome is what the consumer did with one attempt at a record, as reported
// to WithReport.
type Outcome string

const (
	// OutcomeDone: fn ran and succeeded; the record's offset is marked for
	// commit. The error is nil, or the claim commit's when it failed after
	// fn's effect (the record is done all the same: a retry would run fn
	// again).
	OutcomeDone Outcome = delivery.NameDone
	// OutcomeDuplicate: the id was processed already; fn did not run; the
	// offset is marked.
	OutcomeDuplicate Outcome = delivery.NameDuplicate
	// OutcomeInFlight: another consumer holds the id's lease; the record is
	// tried again, in order, once that lease can have run out.
	OutcomeInFlight Outcome = delivery.NameInFlight
	// OutcomeRetry: fn failed (returned an error or panicked) and the
	// failure policy chose another attempt, or the store failed before fn
	// ran; the record is tried again, in order, after a backoff.
	OutcomeRetry Outcome = "retry"
	// OutcomeDeadLetter: fn failed and the failure policy gave up: the
	// record went to the dead-letter function (WithDeadLetter) and its
	// offset is marked.
	OutcomeDeadLetter Outcome = delivery.NameDeadLettered
	// OutcomeRevoked: the record's partition was revoked (or lost, or the
	// consumer stopped) before it was done; its offset is not marked, and
	// the partition's next owner reads it again.
	OutcomeRevoked Outcome = "revoked"
)

// Failure is a failure policy's decision for a record whose fn failed.
type Failure struct {
	// DeadLetter gives up on the record: it is passed to the dead-letter
	// function and its offset is committed. Otherwise the record is tried
	// again after Delay, before any later record of its partition.
	DeadLetter bool
	Delay      time.Duration
}

// DefaultFailure is the failure policy unless WithFailurePolicy says
// otherwise: dead letter for an error marked store.Permanent, else another
// attempt after an exponential backoff on the attempt number (1, 2, ...):
// 100 ms, 200 ms, 400 ms... up to 30 s, without end.
func DefaultFailure(_ *kgo.Record, err error, attempt int) Failure {
	if store.IsPermanent(err) {
		return Failure{DeadLetter: true}
	}
	d := 30 * time.Second
	if attempt <= 9 {
		d = min(d, 100*time.Millisecond<<(attempt-1))
	}
	return Failure{Delay: d}
}

// OffsetID is the id of a record unless WithID says otherwise:
// "<topic>/<partition>/<offset>". It tells a record read again (after a
// crash, a rebalance, an uncommitted offset) from other records, but not a
// message a producer sent twice: use HeaderID, or WithID with an id from the
// payload, for that. (The record's key is not an id: Kafka keys route records
// to partitions, and many records share one.)
func OffsetID(r *kgo.Record) (string, error) {
	if r == nil {
		return "", invalid("nil record")
	}
	return r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10), nil
}

// HeaderID returns an id function that reads the record header name (a
// producer-given message id, which survives the producer sending the
// message twice); a record without it is an error (a failure for the policy).
func HeaderID(name string) func(*kgo.Record) (string, error) {
	return func(r *kgo.Record) (string, error) {
		if r == nil {
			return "", invalid("nil record")
		}
		for _, h := range r.Headers {
			if h.Key == name && len(h.Value) > 0 {
				return string(h.Value), nil
			}
		}
		return "", fmt.Errorf("record %s/%d/%d has no %q header", r.Topic, r.Partition, r.Offset, name)
	}
}

// Option configures a Consumer.
type Option func(*Consumer)

// WithLease sets the lease held on a record's id while fn runs (default
// DefaultLease); it is extended every lease/4. A crashed consumer's records
// are taken over once its lease has passed.
func WithLease(d time.Duration) Option { return func(c *Consumer) { c.lease = d } }

// WithID sets how a record's id is found (default OffsetID).
func WithID(id func(*kgo.Record) (string, error)) Option { return func(c *Consumer) { c.id = id } }

// WithFailurePolicy sets what happens to a record whose fn failed (default
// DefaultFailure). attempt counts this consumer's attempts at the record,
// from 1.
func WithFailurePolicy(p func(r *kgo.Record, err error, attempt int) Failure) Option {
	return func(c *Consumer) { c.failure = p }
}

// WithDeadLetter sets where records go that the failure policy gives up on
// (default: nowhere; they are reported with OutcomeDeadLetter and skipped),
// e.g. a produce to a dead-letter topic. When it fails the record is tried
// again, so a record is never skipped without reaching it.
func WithDeadLetter(dl func(ctx context.Context, r *kgo.Record, err error) error) Option {
	return func(c *Consumer) { c.deadLetter = dl }
}

// WithReport sets a function told of every attempt's outcome and error. It
// runs on the partition's goroutine. An error that belongs to no record (a
// fetch error, as OutcomeRetry; a failed commit on revoke, as OutcomeRevoked)
// comes with a record holding only its topic and partition, Offset -1.
func WithReport(r func(rec *kgo.Record, o Outcome, err error)) Option {
	return func(c *Consumer) { c.report = r }
}

// WithMaxBuffered sets how many polled records a partition may queue before
// its fetching is paused (default 1000); it resumes once the queue is down to
// half of it. The partition's handler holds up to 500 more, taken from the
// queue together.
func WithMaxBuffered(n int) Option { return func(c *Consumer) { c.maxBuffered = n } }

// WithRevokeTimeout bounds how long a rebalance waits for a revoked
// partition's handler to return after its context was cancelled (default
// 10 s). A handler still running then keeps its claim until it returns; the
// partition's next owner finds the record in flight and waits for it. Keep
// it below the group's rebalance timeout (kgo.RebalanceTimeout, 60 s by
// default), or a slow revoke gets this member dropped from the group.
func WithRevokeTimeout(d time.Duration) Option { return func(c *Consumer) { c.revokeTimeout = d } }

// Consumer is a Kafka consumer-group member (a franz-go client) that runs fn
// once per record id through a *store.Claims's Do, and commits a
// partition's offset only past records that are done.
//
// Each assigned partition has one goroutine that handles its records one at
// a time, in offset order: partitions run in parallel, the fns of one
// partition's records never do. The records queued for a partition are
// claimed together, in one call (see the package documentation, Batches),
// and a record's fn starts while the previous record's commit is on its
// way. A record that is not done holds its partition back and is retried in
// order (Kafka's ordering is kept; later records wait):
//
//	fn succeeded                 offset marked, next record       OutcomeDone
//	id processed already         offset marked, fn not run        OutcomeDuplicate
//	id in flight elsewhere       wait the time left on that       OutcomeInFlight
//	                             lease, try again
//	fn failed or panicked        the failure policy: try again    OutcomeRetry
//	                             after a backoff, or dead letter  OutcomeDeadLetter
//	                             and mark the offset
//	fn failed, store.Permanent   dead letter (DefaultFailure),    OutcomeDeadLetter
//	                             offset marked
//	partition revoked or lost,   fn's context cancelled, offset   OutcomeRevoked
//	  or Run's context done        not marked
//	store error before fn ran    try again after a backoff        OutcomeRetry
//
// A panic in fn is recovered: it is fn's error (the panic's value in its
// text), the claim is released, and the partition's goroutine goes on. fn
// succeeded but the claim's commit failed (the lease lost, the store
// unreachable): the offset is marked as done, with the commit's error, since
// fn's effect happened.
//
// Marked offsets are committed by franz-go's autocommit (AutoCommitMarks,
// every 5 s unless kgo.AutoCommitInterval says otherwise), when a partition
// is revoked (after its handler returned), and when Run returns. A crash
// therefore re-reads records past the last commit: their ids are processed
// already, and they are acknowledged without running fn.
//
// fn's effect must be all-or-nothing: one write, or idempotent downstream, or
// fenced with the lease's token (store.LeaseFromContext). A consumer killed
// between two writes of fn leaves the first one done, and the record's next
// reader runs fn again.
type Consumer struct {
	cl            *kgo.Client
	claims        *store.Claims
	fn            func(context.Context, *kgo.Record) error
	lease         time.Duration
	id            func(*kgo.Record) (string, error)
	failure       func(*kgo.Record, error, int) Failure
	deadLetter    func(context.Context, *kgo.Record, error) error
	report        func(*kgo.Record, Outcome, error)
	maxBuffered   int
	revokeTimeout time.Duration
	co            *store.Coalescer // WithCoalesce
	coKey         func(*kgo.Record) (string, error)

	holdsMu sync.Mutex
	holds   map[string]chan struct{} // ids claimed up front by a batch, until settled (openBatch)

	mu      sync.Mutex
	runCtx  context.Context // set by Run: the partitions' parent
	parts   map[topicPartition]*partition
	started bool
}

type topicPartition struct {
	topic     string
	partition int32
}

// New returns a Consumer over a new franz-go client made with opts, to which
// it adds what it needs (AutoCommitMarks, BlockRebalanceOnPoll and the
// partition callbacks); opts must make a group consumer (kgo.ConsumerGroup,
// kgo.ConsumeTopics, the seed brokers). Do not set OnPartitionsAssigned,
// OnPartitionsRevoked or OnPartitionsLost, nor DisableAutoCommit, in opts.
//
// With WithCoalesce, fn may be nil (the Coalescer's fn runs). It returns
// store.ErrInvalidArgument for a nil claims or fn, a lease,
// buffer or revoke timeout <= 0, a nil id function, policy or option.
func New(claims *store.Claims, fn func(context.Context, *kgo.Record) error, opts []kgo.Opt, options ...Option) (*Consumer, error) {
	c := &Consumer{claims: claims, fn: fn, lease: DefaultLease, id: OffsetID, failure: DefaultFailure,
		maxBuffered: 1000, revokeTimeout: 10 * time.Second, parts: map[topicPartition]*partition{},
		holds: map[string]chan struct{}{}}
	for _, o := range options {
		if o == nil {
			return nil, invalid("nil option")
		}
		o(c)
	}
	switch {
	case claims == nil:
		return nil, invalid("nil claims")
	case fn == nil && c.co == nil:
		return nil, invalid("nil fn")
	case c.co != nil && c.coKey == nil:
		return nil, invalid("nil coalescing key function")
	case c.lease <= 0:
		return nil, invalid("lease %v must be > 0", c.lease)
	case c.id == nil:
		return nil, invalid("nil id function")
	case c.failure == nil:
		return nil, invalid("nil failure policy")
	case c.maxBuffered <= 0:
		return nil, invalid("max buffered %d must be > 0", c.maxBuffered)
	case c.revokeTimeout <= 0:
		return nil, invalid("revoke timeout %v must be > 0", c.revokeTimeout)
	}
	all := append(append([]kgo.Opt(nil), opts...),
		kgo.AutoCommitMarks(),
		// A rebalance's callbacks wait until a poll's records are queued
		// (AllowRebalance), so no record polled before a revoke reaches a
		// partition assigned after it, out of order and past its commit.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { c.stop(ctx, m, true) }),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { c.stop(ctx, m, false) }))
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("redisonce/kafka: %w", err)
	}
	c.cl = cl
	return c, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("redisonce/kafka: %w: "+format, append([]any{store.ErrInvalidArgument}, args...)...)
}

// Client is the consumer's franz-go client (to produce, or to read its
// state); do not poll it, Run does. Nil for a nil Consumer.
func (c *Consumer) Client() *kgo.Client {
	if c == nil {
		return nil
	}
	return c.cl
}

// Run polls and handles records until ctx is cancelled or the client is
// closed; then it cancels the handlers, waits for them (up to the revoke
// timeout), commits the marked offsets, leaves the group and closes the
// client. It returns nil, or an error when called twice: Run once per
// Consumer. A nil ctx (or a nil Consumer) gives store.ErrInvalidArgument and
// does not count as the Run.
func (c *Consumer) Run(ctx context.Context) error {
	if c == nil || ctx == nil {
		return invalid("Run with a nil Consumer or context")
	}
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("redisonce/kafka: Run called twice")
	}
	c.started, c.runCtx = true, ctx
	c.mu.Unlock()
	defer c.cl.Close() // leaves the group: revokes what is left
	for {
		fs := c.cl.PollRecords(ctx, 1000)
		if ctx.Err() != nil || fs.IsClientClosed() {
			c.cl.AllowRebalance()
			break
		}
		fs.EachError(func(t string, p int32, err error) {
			if c.report != nil {
				c.report(&kgo.Record{Topic: t, Partition: p, Offset: -1}, OutcomeRetry, fmt.Errorf("redisonce/kafka: fetch: %w", err))
			}
		})
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if len(ftp.Records) == 0 {
				return
			}
			c.mu.Lock()
			p := c.parts[topicPartition{ftp.Topic, ftp.Partition}]
			c.mu.Unlock()
			if p != nil {
				p.push(ftp.Records)
			}
		})
		c.cl.AllowRebalance() // push never blocks: callbacks wait only this long
	}
	// Stop every partition and commit what is done, before Close revokes.
	c.mu.Lock()
	all := map[string][]int32{}
	for tp := range c.parts {
		all[tp.topic] = append(all[tp.topic], tp.partition)
	}
	c.mu.Unlock()
	c.stop(context.WithoutCancel(ctx), all, true)
	return nil
}

func (c *Consumer) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	parent := c.runCtx
	if parent == nil {
		parent = context.Background()
	}
	for t, ps := range m {
		for _, n := range ps {
			tp := topicPartition{t, n}
			if c.parts[tp] != nil {
				continue
			}
			p := &partition{c: c, tp: tp, wake: make(chan struct{}, 1), done: make(chan struct{})}
			p.ctx, p.cancel = context.WithCancel(parent)
			c.parts[tp] = p
			go p.run()
		}
	}
}

// stop cancels the partitions in m, waits for their handlers (bounded), and,
// for a revoke (not a loss), commits the marked offsets.
func (c *Consumer) stop(ctx context.Context, m map[string][]int32, commit bool) {
	c.mu.Lock()
	var ps []*partition
	for t, ns := range m {
		for _, n := range ns {
			tp := topicPartition{t, n}
			if p := c.parts[tp]; p != nil {
				ps = append(ps, p)
				delete(c.parts, tp)
			}
		}
	}
	c.mu.Unlock()
	for _, p := range ps {
		p.cancel()
	}
	timeout := time.After(c.revokeTimeout)
	for _, p := range ps {
		select {
		case <-p.done:
		case <-timeout:
			// Its handler outlives the revoke: whatever it finishes is not
			// marked (the partition may be another member's by then).
			p.detached.Store(true)
		}
	}
	if commit && len(ps) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.revokeTimeout)
		defer cancel()
		if err := c.cl.CommitMarkedOffsets(cctx); err != nil && c.report != nil {
			c.report(&kgo.Record{Offset: -1}, OutcomeRevoked, fmt.Errorf("redisonce/kafka: commit on revoke: %w", err))
		}
	}
}

// partition handles one assigned partition's records in order.
type partition struct {
	c      *Consumer
	tp     topicPartition
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	detached atomic.Bool // the revoke stopped waiting for it

	mu     sync.Mutex
	queue  []*kgo.Record
	paused bool
}

func (p *partition) push(rs []*kgo.Record) {
	p.mu.Lock()
	p.queue = append(p.queue, rs...)
	if !p.paused && len(p.queue) >= p.c.maxBuffered {
		p.paused = true
		p.c.cl.PauseFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// maxBatch bounds the records a partition takes from its queue at once: the
// records of one or more polls, handed to handleBatch together.
const maxBatch = 500

// take waits for queued records and returns up to maxBatch of them, in
// offset order; nil once the partition is stopped.
func (p *partition) take() []*kgo.Record {
	for {
		p.mu.Lock()
		if n := min(len(p.queue), maxBatch); n > 0 {
			rs := slices.Clone(p.queue[:n])
			clear(p.queue[:n])
			p.queue = p.queue[n:]
			if p.paused && len(p.queue) <= p.c.maxBuffered/2 {
				p.paused = false
				p.c.cl.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
			}
			p.mu.Unlock()
			return rs
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return nil
		}
	}
}

func (p *partition) run() {
	defer close(p.done)
	defer func() {
		p.mu.Lock()
		if p.paused {
			p.c.cl.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
		}
		p.mu.Unlock()
	}()
	for {
		rs := p.take()
		if rs == nil || !p.handleBatch(rs) {
			return
		}
	}
}

// handleBatch handles the records rs, taken together from the queue, in
// offset order, and marks each one's offset once it is done; false when the
// partition stopped first (the records left are not marked: the
// partition's next owner reads them again).
//
// The records' fns run one at a time, in order, and a record's fn starts as
// soon as the one before it returned nil: its claim's commit is still on its
// way (gathered with the others in flight), and its offset is marked once
// that commit's reply is in, after every record before it. A record that is
// not done at its first attempt (failed, in flight elsewhere, a store error)
// stops the pipeline: the records before it are settled and marked, it is
// retried on its own (handle), and the records after it start again behind
// it.
func (p *partition) handleBatch(rs []*kgo.Record) bool {
	c := p.c
	if c.co != nil {
		for _, r := range rs {
			if !c.handle(p.ctx, r, nil) || p.detached.Load() {
				return false
			}
			c.cl.MarkCommitRecords(r)
		}
		return true
	}
	for len(rs) > 0 {
		bt := c.openBatch(p.ctx, rs)
		n, first := p.pipeline(bt, rs)
		c.closeBatch(bt)
		if p.detached.Load() || (n < len(rs) && first == nil) {
			return false
		}
		if n == len(rs) {
			return true
		}
		// rs[n] was not done at its first attempt: its own attempts, then
		// the records after it.
		if !c.handle(p.ctx, rs[n], first) || p.detached.Load() {
			return false
		}
		c.cl.MarkCommitRecords(rs[n])
		rs = rs[n+1:]
	}
	return true
}

// testHookStarted, when not nil, runs in pipeline after a record's Do has
// started and before its end is looked at (tests: the commit lands first).
var testHookStarted func()

// pipelined is one record's first attempt, run by pipeline.
type pipelined struct {
	r    *kgo.Record
	res  chan delivery.Result // its settlement, once Do returned
	next chan bool            // true once fn returned nil: the next fn may start
}

// pipeline runs the first attempt of each record of rs in order, through
// bt, each fn once the previous one returned nil, and settles them in order
// (reported, offset marked). It returns how many records are done and, when
// that is fewer than len(rs), the first attempt's result of the record that
// is not (the records after it did not start).
func (p *partition) pipeline(bt *batch, rs []*kgo.Record) (int, *delivery.Result) {
	c := p.c
	var inflight []*pipelined
	done := 0
	// settle reports and marks the records at the head of inflight whose Do
	// returned (waiting for all of them when wait), up to the first one that
	// is not done, whose result it returns.
	settle := func(wait bool) *delivery.Result {
		for len(inflight) > 0 {
			var res delivery.Result
			select {
			case res = <-inflight[0].res:
			default:
				if !wait {
					return nil
				}
				res = <-inflight[0].res
			}
			r := inflight[0].r
			inflight = inflight[1:]
			switch res.Row {
			case delivery.Done, delivery.CommitFailed:
				// CommitFailed: fn's effect happened, so the record is done; a
				// retry would run it again. res.Err says why the commit failed.
				c.say(r, OutcomeDone, res.Err)
			case delivery.Duplicate:
				c.say(r, OutcomeDuplicate, nil)
			default:
				return &res
			}
			if !p.detached.Load() {
				c.cl.MarkCommitRecords(r)
				done++
			}
		}
		return nil
	}
	for i, r := range rs {
		id, err := c.id(r)
		if err == nil && id == "" {
			err = errors.New("empty id")
		}
		if err != nil {
			// a record without a usable id fails like fn: the policy decides
			if first := settle(true); first != nil {
				return done, first
			}
			return done, &delivery.Result{Row: delivery.Failed, Err: fmt.Errorf("redisonce/kafka: record id: %w", err)}
		}
		if ch := bt.wait[i]; ch != nil {
			// Another holder of the id in this Consumer: its Do first (at
			// most a lease: two partitions may wait for each other's).
			t := time.NewTimer(c.lease)
			select {
			case <-ch:
			case <-t.C:
			case <-p.ctx.Done():
			}
			t.Stop()
		}
		pl := &pipelined{r: r, res: make(chan delivery.Result, 1), next: make(chan bool, 1)}
		inflight = append(inflight, pl)
		go func() {
			res := delivery.Do(p.ctx, bt.cl, id, c.lease, func(ctx context.Context) error {
				err := c.fn(ctx, r)
				pl.next <- err == nil
				return err
			})
			c.settled(bt, id)
			pl.res <- res
		}()
		if testHookStarted != nil {
			testHookStarted()
		}
		// The next fn starts once this one returned nil, or once this
		// record's Do returned a duplicate or done (its fn returned nil:
		// when the commit is in before this goroutine looks, both are
		// ready, and either may be read); any other end stops the
		// pipeline, and this record is its last.
		var goOn bool
		select {
		case goOn = <-pl.next:
		case res := <-pl.res:
			pl.res <- res
			switch res.Row {
			case delivery.Duplicate, delivery.Done, delivery.CommitFailed:
				goOn = true
			}
		}
		if !goOn {
			break
		}
		settle(false)
	}
	first := settle(true)
	return done, first
}

// batch is the claims of records taken together (openBatch).
type batch struct {
	cl    delivery.Claimer
	b     *store.Batch             // nil when the claim up front failed
	owned map[string]chan struct{} // ids it claimed up front, until their Do returns
	wait  []chan struct{}          // per record: the other holder of its id in this Consumer, or nil
}

// openBatch claims the ids of rs (up to the first record without one) in
// one call per hash slot (store.Claims.Batch), but for the ids another batch
// of this Consumer holds, or an earlier record of rs: such a record first
// waits for that one's Do (batch.wait), instead of finding its id in flight
// and waiting out a whole lease. When the claim fails (ctx ended, an id the
// store refuses), each record's Do claims its own id and meets that error.
func (c *Consumer) openBatch(ctx context.Context, rs []*kgo.Record) *batch {
	bt := &batch{cl: c.claims, owned: map[string]chan struct{}{}, wait: make([]chan struct{}, len(rs))}
	var ids []string
	c.holdsMu.Lock()
	for i, r := range rs {
		id, err := c.id(r)
		if err != nil || id == "" {
			break
		}
		if ch := c.holds[id]; ch != nil {
			bt.wait[i] = ch
			continue
		}
		ch := make(chan struct{})
		c.holds[id], bt.owned[id] = ch, ch
		ids = append(ids, id)
	}
	c.holdsMu.Unlock()
	if len(ids) == 0 {
		return bt
	}
	if b, err := c.claims.Batch(ctx, ids, c.lease); err == nil {
		bt.cl, bt.b = delivery.Batched{B: b}, b
	}
	return bt
}

// settled ends the batch's hold of id once its Do returned.
func (c *Consumer) settled(bt *batch, id string) {
	c.holdsMu.Lock()
	defer c.holdsMu.Unlock()
	if ch := bt.owned[id]; ch != nil {
		delete(bt.owned, id)
		delete(c.holds, id)
		close(ch)
	}
}

// closeBatch gives back the leases no Do took and ends the batch's holds.
func (c *Consumer) closeBatch(bt *batch) {
	if bt.b != nil {
		_ = bt.b.Close()
	}
	c.holdsMu.Lock()
	defer c.holdsMu.Unlock()
	for id, ch := range bt.owned {
		delete(c.holds, id)
		close(ch)
	}
	bt.owned = nil
}

func (c *Consumer) say(r *kgo.Record, o Outcome, err error) {
	if c.report != nil {
		c.report(r, o, err)
	}
}

// handle runs r's attempts until it is done (true: mark its offset) or ctx is
// cancelled (false); first, when not nil, is the result of its first
// attempt, already run.
func (c *Consumer) handle(ctx context.Context, r *kgo.Record, first *delivery.Result) bool {
	for attempt := 1; ; attempt++ {
		var delay time.Duration
		id, err := c.id(r)
		if err == nil && id == "" {
			err = errors.New("empty id")
		}
		var res delivery.Result
		switch {
		case first != nil:
			res, first = *first, nil
		case c.co != nil:
			o, cerr, keyErr := c.coalesce(ctx, r)
			switch {
			case o != OutcomeRetry:
				c.say(r, o, cerr)
				return true
			case keyErr:
				// a record without a usable key fails like fn: the policy decides
				res = delivery.Result{Row: delivery.Failed, Err: fmt.Errorf("redisonce/kafka: coalescing key: %w", cerr)}
			case ctx.Err() != nil:
				res = delivery.Result{Row: delivery.Shutdown, Err: cerr}
			default:
				res = delivery.Result{Row: delivery.StoreError, Err: cerr} // retried after a backoff
			}
		case err != nil:
			// a record without a usable id fails like fn: the policy decides
			res = delivery.Result{Row: delivery.Failed, Err: fmt.Errorf("redisonce/kafka: record id: %w", err)}
		default:
			res = delivery.Do(ctx, c.claims, id, c.lease, func(ctx context.Context) error { return c.fn(ctx, r) })
		}
		switch res.Row {
		case delivery.Done, delivery.CommitFailed:
			// CommitFailed: fn's effect happened, so the record is done; a
			// retry would run it again. res.Err says why the commit failed.
			c.say(r, OutcomeDone, res.Err)
			return true
		case delivery.Duplicate:
			c.say(r, OutcomeDuplicate, nil)
			return true
		case delivery.Shutdown:
			c.say(r, OutcomeRevoked, res.Err)
			return false
		case delivery.InFlight:
			c.say(r, OutcomeInFlight, res.Err)
			delay = res.RedeliverAfter
		case delivery.Failed, delivery.Permanent:
			f := c.failure(r, res.Err, attempt)
			if f.DeadLetter {
				if c.deadLetter != nil {
					if dlErr := c.deadLetter(ctx, r, res.Err); dlErr != nil {
						c.say(r, OutcomeRetry, errors.Join(res.Err, fmt.Errorf("redisonce/kafka: dead letter: %w", dlErr)))
						delay = DefaultFailure(r, dlErr, attempt).Delay
						break
					}
				}
				c.say(r, OutcomeDeadLetter, res.Err)
				return true
			}
			c.say(r, OutcomeRetry, res.Err)
			delay = f.Delay
		default:
			// the store failed before fn ran (Redis unreachable)
			c.say(r, OutcomeRetry, res.Err)
			delay = DefaultFailure(r, res.Err, attempt).Delay
		}
		t := time.NewTimer(max(delay, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			c.say(r, OutcomeRevoked, ctx.Err())
			return false
		case <-t.C:
		}
	}
}
