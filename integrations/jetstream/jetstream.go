package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/internal/delivery"
	"github.com/redisonce/redisonce/store"
)

// DefaultLease is the lease of a Handler unless WithLease says otherwise:
// JetStream's default AckWait (30 s), so a consumer on the defaults has its
// AckWait reset every 7.5 s, a quarter of it.
const DefaultLease = 30 * time.Second

// Outcome is what a Handler did with one delivery, as reported to WithReport
// and returned by Process.
type Outcome string

const (
	// OutcomeDone: fn ran and succeeded; the message is double-acked. The
	// error is nil, or the commit's when it failed after fn's effect (the
	// message is done all the same: a redelivery would run fn again).
	OutcomeDone Outcome = delivery.NameDone
	// OutcomeDuplicate: the id was processed already (a redelivery, or the
	// same message published twice); fn did not run; the message is
	// double-acked.
	OutcomeDuplicate Outcome = delivery.NameDuplicate
	// OutcomeInFlight: another consumer holds the id's lease; fn did not run;
	// the message is nak'd with the time left on that lease as its delay.
	OutcomeInFlight Outcome = delivery.NameInFlight
	// OutcomeRetry: fn failed (returned an error or panicked) and the failure
	// policy chose a redelivery; the claim was released and the message nak'd
	// with the policy's delay.
	OutcomeRetry Outcome = "retry"
	// OutcomeTerm: fn failed and the failure policy chose to stop (by
	// default: an error marked store.Permanent); the message is terminated
	// (Term: never redelivered, an advisory is published).
	OutcomeTerm Outcome = "term"
	// OutcomeReleased: the context was cancelled (a shutdown) before the
	// message was done; the claim is released and the message nak'd at once,
	// for another consumer.
	OutcomeReleased Outcome = delivery.NameReleased
	// OutcomeError: the store failed before fn ran (Redis unreachable), or
	// the message had no usable id; the message is nak'd with the lease as
	// its delay.
	OutcomeError Outcome = "error"
)

// Failure is a failure policy's decision for a message whose fn failed.
type Failure struct {
	// Term stops redelivery (jetstream.Msg.Term); Delay is then unused.
	Term bool
	// Delay is the nak's delay before JetStream redelivers (NakWithDelay);
	// 0 redelivers at once.
	Delay time.Duration
}

// DefaultFailure is the failure policy unless WithFailurePolicy says
// otherwise: Term when fn's error is marked store.Permanent, else a redelivery
// after an exponential backoff on the delivery count: 1 s, 2 s, 4 s... up to
// 1 minute. The consumer's MaxDeliver, when set, bounds the attempts. A nil
// msg counts as a first delivery.
func DefaultFailure(msg jetstream.Msg, err error) Failure {
	if store.IsPermanent(err) {
		return Failure{Term: true}
	}
	n := uint64(1)
	if msg == nil {
		return Failure{Delay: time.Second}
	}
	if md, mdErr := msg.Metadata(); mdErr == nil && md.NumDelivered > 0 {
		n = md.NumDelivered
	}
	d := time.Minute
	if n <= 6 {
		d = time.Second << (n - 1)
	}
	return Failure{Delay: d}
}

// MsgID is the id of a message unless WithID says otherwise: its Nats-Msg-Id
// header (the id JetStream's own publish deduplication uses), or, when the
// message has none, "<stream>:<stream sequence>", which tells redeliveries of
// one stored message apart from other messages but cannot tell that a
// message was published twice.
func MsgID(msg jetstream.Msg) (string, error) {
	if msg == nil {
		return "", invalid("nil message")
	}
	if id := msg.Headers().Get(nats.MsgIdHdr); id != "" {
		return id, nil
	}
	md, err := msg.Metadata()
	if err != nil {
		return "", err
	}
	return md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10), nil
}

// Option configures a Handler.
type Option func(*Handler)

// WithLease sets the lease a handler holds on a message's id while fn runs
// (default DefaultLease). The lease is extended every lease/4, and every
// extension sends InProgress, so keep lease/4 well below the consumer's
// AckWait (lease <= AckWait leaves three quarters of AckWait as margin). A
// crashed consumer's messages are taken over by another one once its lease
// has passed.
func WithLease(d time.Duration) Option { return func(h *Handler) { h.lease = d } }

// WithID sets how a message's id is found (default MsgID): an id taken from
// the payload (an order number, a payment id) makes a message that a producer
// published twice, under two Nats-Msg-Id values or outside JetStream's
// duplicate window, run once.
func WithID(id func(jetstream.Msg) (string, error)) Option {
	return func(h *Handler) { h.id = id }
}

// WithFailurePolicy sets what happens to a message whose fn failed (default
// DefaultFailure).
func WithFailurePolicy(p func(jetstream.Msg, error) Failure) Option {
	return func(h *Handler) { h.failure = p }
}

// WithContext sets the context Handle runs fn under (default
// context.Background()): cancel it to stop the handlers that run, whose
// claims are then released and messages nak'd at once, for another consumer.
// Stop the consumer (ConsumeContext.Stop) with it: a delivery that arrives
// after the cancel is nak'd at once too, and comes back.
func WithContext(ctx context.Context) Option { return func(h *Handler) { h.ctx = ctx } }

// WithReport sets a function told of every delivery's outcome and error (the
// error of fn, of the store, or of the ack or nak); Handle has no other way to
// report them. It runs on the handler's goroutine.
func WithReport(r func(msg jetstream.Msg, o Outcome, err error)) Option {
	return func(h *Handler) { h.report = r }
}

// WithAckTimeout bounds the wait for DoubleAck's confirmation (default 5 s).
func WithAckTimeout(d time.Duration) Option { return func(h *Handler) { h.ackTimeout = d } }

// WithDoubleAck makes Consume's batches acknowledge a message done (or a
// duplicate) with DoubleAck, as Handle, Process and ProcessBatch do, instead
// of Ack: the outcome WithReport is told of then waits for the server's
// confirmation, and its error says whether the ack landed. Without it a
// batch's acks are Acks: a settlement nobody waits for does not pay a reply
// per message (BENCHMARKS.md), and an ack that is lost costs one redelivery
// after AckWait, which the claims answer as a duplicate (fn does not run)
// and ack again.
func WithDoubleAck() Option { return func(h *Handler) { h.doubleAck = true } }

// Handler runs fn at most once per message id over JetStream's at-least-once
// delivery, through a *store.Claims's Do. Its Handle method is a
// jetstream.MessageHandler; its Consume method runs a consumer's messages in
// batches (see the package documentation, Batches).
//
// Per delivery:
//
//	fn succeeded                   DoubleAck                  OutcomeDone
//	id processed already           DoubleAck, fn not run      OutcomeDuplicate
//	(Consume's batches: Ack instead of DoubleAck, unless WithDoubleAck)
//	id in flight elsewhere         NakWithDelay(time left     OutcomeInFlight
//	                               on that lease)
//	fn failed or panicked          the failure policy:        OutcomeRetry, OutcomeTerm
//	                               NakWithDelay or Term
//	fn failed, store.Permanent     Term (DefaultFailure)      OutcomeTerm
//	context cancelled (shutdown)   Nak                        OutcomeReleased
//	store error before fn ran      NakWithDelay(lease)        OutcomeError
//
// A panic in fn is recovered: it is fn's error (the panic's value in its
// text), the claim is released, and the process goes on. fn succeeded but
// the commit failed (the lease lost, the store unreachable): the message is
// acked as done, with the commit's error, since fn's effect happened.
//
// While fn runs, every lease extension (every lease/4) sends InProgress, so
// JetStream does not redeliver the message under a live handler however long
// fn takes; one InProgress is also sent when fn starts, for a message that
// waited in the client's buffer.
//
// fn's effect must be all-or-nothing: one write, or idempotent downstream, or
// fenced with the lease's token (store.LeaseFromContext). A consumer killed
// between two writes of fn leaves the first one done, and the redelivery runs
// fn again.
type Handler struct {
	claims     *store.Claims
	fn         func(context.Context, jetstream.Msg) error
	lease      time.Duration
	id         func(jetstream.Msg) (string, error)
	failure    func(jetstream.Msg, error) Failure
	ctx        context.Context
	report     func(jetstream.Msg, Outcome, error)
	ackTimeout time.Duration
	co         *store.Coalescer // WithCoalesce
	coKey      func(jetstream.Msg) (string, error)
	maxBatch   int           // WithBatch: Consume's batches
	batchWait  time.Duration // WithBatch
	doubleAck  bool          // WithDoubleAck: Consume's batches too
	reportMu   sync.Mutex    // one report at a time from Consume's settlements
}

// New returns a Handler that runs fn once per message id through claims (or,
// with WithCoalesce, triggers the message's key; fn may then be nil). It
// returns store.ErrInvalidArgument for a nil claims or fn, a lease or ack
// timeout <= 0, a nil id function, policy, context or option.
func New(claims *store.Claims, fn func(context.Context, jetstream.Msg) error, opts ...Option) (*Handler, error) {
	h := &Handler{claims: claims, fn: fn, lease: DefaultLease, id: MsgID, failure: DefaultFailure,
		ctx: context.Background(), ackTimeout: 5 * time.Second, maxBatch: DefaultMaxBatch}
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		o(h)
	}
	switch {
	case claims == nil:
		return nil, invalid("nil claims")
	case fn == nil && h.co == nil:
		return nil, invalid("nil fn")
	case h.co != nil && h.coKey == nil:
		return nil, invalid("nil coalescing key function")
	case h.lease <= 0:
		return nil, invalid("lease %v must be > 0", h.lease)
	case h.ackTimeout <= 0:
		return nil, invalid("ack timeout %v must be > 0", h.ackTimeout)
	case h.id == nil:
		return nil, invalid("nil id function")
	case h.failure == nil:
		return nil, invalid("nil failure policy")
	case h.ctx == nil:
		return nil, invalid("nil context")
	case h.maxBatch <= 0 || h.maxBatch > 500:
		return nil, invalid("batch of %d messages: want 1..500", h.maxBatch)
	case h.batchWait < 0:
		return nil, invalid("batch wait %v must be >= 0", h.batchWait)
	}
	return h, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("redisonce/jetstream: %w: "+format, append([]any{store.ErrInvalidArgument}, args...)...)
}

// Handle processes one delivery under the handler's context (WithContext); it
// is a jetstream.MessageHandler: consumer.Consume(h.Handle).
func (h *Handler) Handle(msg jetstream.Msg) {
	if h == nil {
		return
	}
	_, _ = h.Process(h.ctx, msg)
}

// Process processes one delivery under ctx and acks, naks or terminates it
// (see Handler); for a loop of its own over consumer.Fetch or
// consumer.Messages. It returns the outcome and the error behind it, or the
// ack's error. A nil ctx or msg (or a nil Handler) gives OutcomeError and
// store.ErrInvalidArgument, and the message is neither acked nor nak'd:
// JetStream redelivers it after its AckWait.
func (h *Handler) Process(ctx context.Context, msg jetstream.Msg) (Outcome, error) {
	if h == nil {
		return OutcomeError, invalid("nil Handler")
	}
	var o Outcome
	var err error
	if ctx == nil || msg == nil {
		o, err = OutcomeError, invalid("nil context or message")
	} else {
		o, err = h.process(ctx, msg)
	}
	if h.report != nil {
		h.report(msg, o, err)
	}
	return o, err
}

func (h *Handler) process(ctx context.Context, msg jetstream.Msg) (Outcome, error) {
	if h.co != nil {
		return h.coalesce(ctx, msg)
	}
	id, err := h.msgID(msg)
	if err != nil {
		return OutcomeError, errors.Join(err, msg.NakWithDelay(h.lease))
	}
	return h.run(ctx, h.claims, msg, id, true, func(ctx context.Context) error { return h.call(ctx, msg) })
}

// msgID is the message's id, or why it has none.
func (h *Handler) msgID(msg jetstream.Msg) (string, error) {
	id, err := h.id(msg)
	if err == nil && id == "" {
		err = errors.New("empty id")
	}
	if err != nil {
		return "", fmt.Errorf("redisonce/jetstream: message id: %w", err)
	}
	return id, nil
}

// run settles one delivery of msg, whose id is id, through cl (the claims,
// or a batch of them) and acks, naks or terminates it; a message done or a
// duplicate with DoubleAck when double, else with Ack. exec runs fn under
// the lease's context: h.call, or a batch's turn (batch.go).
func (h *Handler) run(ctx context.Context, cl delivery.Claimer, msg jetstream.Msg, id string, double bool, exec func(context.Context) error) (Outcome, error) {
	dctx := store.OnExtend(ctx, func(store.Lease) { _ = msg.InProgress() })
	r := delivery.Do(dctx, cl, id, h.lease, exec)
	switch r.Row {
	case delivery.Done, delivery.Duplicate, delivery.CommitFailed:
		// CommitFailed: fn's effect happened, so the message is done; a
		// redelivery would run it again. r.Err says why the commit failed.
		o := OutcomeDone
		if r.Row == delivery.Duplicate {
			o = OutcomeDuplicate
		}
		if !double {
			return o, errors.Join(r.Err, msg.Ack())
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.ackTimeout)
		defer cancel()
		return o, errors.Join(r.Err, msg.DoubleAck(actx))
	case delivery.Failed, delivery.Permanent:
		f := h.failure(msg, r.Err)
		if f.Term {
			return OutcomeTerm, errors.Join(r.Err, msg.TermWithReason(truncate(r.Err.Error(), 256)))
		}
		return OutcomeRetry, errors.Join(r.Err, msg.NakWithDelay(max(f.Delay, 0)))
	case delivery.InFlight:
		return OutcomeInFlight, errors.Join(r.Err, msg.NakWithDelay(r.RedeliverAfter))
	case delivery.Shutdown:
		// The claim is released (or was never taken): another consumer may
		// have the message now.
		return OutcomeReleased, errors.Join(r.Err, msg.Nak())
	default:
		return OutcomeError, errors.Join(r.Err, msg.NakWithDelay(h.lease))
	}
}

// call runs fn on msg, with one InProgress first, for a message that waited
// in the client's buffer (or its batch).
func (h *Handler) call(ctx context.Context, msg jetstream.Msg) error {
	_ = msg.InProgress()
	return h.fn(ctx, msg)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
