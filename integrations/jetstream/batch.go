package jetstream

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/internal/delivery"
)

// DefaultMaxBatch is how many messages Handler.Consume takes together
// unless WithBatch says otherwise.
const DefaultMaxBatch = 100

// WithBatch sets how Handler.Consume gathers messages into a batch: at most
// max of them (default DefaultMaxBatch; 1 claims each message on its own),
// and, once a first message is queued, up to wait for more to join it
// (default 0: the messages queued by then). A lone message's latency grows by
// at most wait (the claims' gathering adds at most one round trip, and only
// while another call is in flight). Handle and Process do not batch.
func WithBatch(max int, wait time.Duration) Option {
	return func(h *Handler) { h.maxBatch, h.batchWait = max, wait }
}

// Consume is cons.Consume(h.Handle) with the messages taken in batches: the
// callback queues each delivery, and one goroutine takes the queued ones
// together (WithBatch), claims their ids in one call per hash slot
// (store.Claims.Batch), runs fn on them one at a time in delivery order —
// a message's fn starts once the one before it returned — and acks, naks or
// terminates each message, as Handle does, once its own commit (or release)
// is in; those settlements run while the next fns do. Every row of the
// Handler's table holds per message: one message's failure, in-flight id or
// store error settles that message only.
//
// The callback blocks while 2×max messages are queued, so the consumer's
// own buffer (PullMaxMessages) holds the rest. Messages queued or claimed
// wait for their turn without InProgress: keep max small beside the
// consumer's AckWait, or JetStream redelivers them meanwhile (the
// redelivery finds the id in flight, or processed, as a republished message
// would). WithReport is called from the settling goroutines, one call at a
// time.
//
// The returned ConsumeContext's Stop stops the consumer: the fn running
// finishes, and the messages queued or claimed that no fn started are
// released and nak'd at once (OutcomeReleased); Drain runs them all first.
// Closed is closed once every message taken is settled. With WithCoalesce,
// Consume is cons.Consume(h.Handle) (no batching).
func (h *Handler) Consume(cons jetstream.Consumer, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	if h == nil || cons == nil {
		return nil, invalid("Consume with a nil Handler or consumer")
	}
	if h.co != nil || h.maxBatch == 1 && h.batchWait == 0 {
		return cons.Consume(h.Handle, opts...)
	}
	w := &batcher{h: h, q: make(chan jetstream.Msg, 2*h.maxBatch), closed: make(chan struct{}), idle: make(chan func())}
	inner, err := cons.Consume(func(msg jetstream.Msg) { w.q <- msg }, opts...)
	if err != nil {
		return nil, err
	}
	w.inner = inner
	go w.loop()
	return w, nil
}

// batcher is Handler.Consume's ConsumeContext: the queue between the
// consumer's callback and the goroutine that runs the batches.
type batcher struct {
	h        *Handler
	inner    jetstream.ConsumeContext
	q        chan jetstream.Msg
	stopping atomic.Bool
	settling sync.WaitGroup
	closed   chan struct{}
	outcomes []Outcome // ProcessBatch's, by index in the batch
	errs     []error
	// idle hands work to the goroutines of messages already settled (go_),
	// closed once every message is settled.
	idle chan func()
}

// go_ runs f in a goroutine of a message already settled, or in a new one
// when none is idle. A message's settlement (its Do: lease, heartbeat,
// commit, ack) is a deep call chain: a new goroutine grows its stack,
// copying it, several times over; a goroutine kept for the next message
// keeps its stack.
func (w *batcher) go_(f func()) {
	select {
	case w.idle <- f:
	default:
		go func() {
			f()
			for f := range w.idle {
				f()
			}
		}()
	}
}

func (w *batcher) Stop()                   { w.stopping.Store(true); w.inner.Stop() }
func (w *batcher) Drain()                  { w.inner.Drain() }
func (w *batcher) Closed() <-chan struct{} { return w.closed }

func (w *batcher) loop() {
	defer close(w.closed)
	defer close(w.idle) // after every settlement
	defer w.settling.Wait()
	for {
		var first jetstream.Msg
		select {
		case first = <-w.q:
		case <-w.inner.Closed():
			// No callback runs any more: what is queued is all there is.
			select {
			case first = <-w.q:
			default:
				return
			}
		}
		batch := w.gather(first)
		w.run(w.h.ctx, batch, 0)
	}
}

// gather takes the queued messages after first, up to the batch's max,
// waiting up to the batch's wait for them.
func (w *batcher) gather(first jetstream.Msg) []jetstream.Msg {
	h := w.h
	batch := []jetstream.Msg{first}
	var timeout <-chan time.Time
	if h.batchWait > 0 {
		t := time.NewTimer(h.batchWait)
		defer t.Stop()
		timeout = t.C
	}
	for len(batch) < h.maxBatch {
		if timeout == nil {
			select {
			case m := <-w.q:
				batch = append(batch, m)
				continue
			default:
			}
			break
		}
		select {
		case m := <-w.q:
			batch = append(batch, m)
			continue
		case <-timeout:
		case <-w.inner.Closed():
		}
		timeout = nil // the wait is over: take what is queued
	}
	return batch
}

// run claims the batch's ids together and starts each message's settlement
// in turn under ctx (the batch starts at index base of ProcessBatch's
// messages), returning once the last fn has returned (or will not
// run); the settlements finish in the background (w.settling).
func (w *batcher) run(ctx context.Context, batch []jetstream.Msg, base int) {
	h := w.h
	ids := make([]string, len(batch))
	var valid []string
	for i, msg := range batch {
		id, err := h.msgID(msg)
		if err != nil {
			w.settle(base+i, msg, OutcomeError, joinNak(err, msg, h.lease))
			continue
		}
		ids[i] = id
		valid = append(valid, id)
	}
	if len(valid) == 0 {
		return
	}
	cl, closeBatch := delivery.Claimer(h.claims), func() {}
	if !w.stopping.Load() && ctx.Err() == nil {
		cl, closeBatch = h.openBatch(ctx, valid)
	}
	double := w.outcomes != nil || h.doubleAck
	var batchDone sync.WaitGroup
	batchDone.Add(len(valid))
	w.settling.Add(len(valid))
	// Each message is settled on a goroutine of its own (its Do: the lease,
	// then the commit and the ack), started while the fn before it runs;
	// its fn runs on this goroutine, in turn: the Do hands it over (turns[i])
	// and waits for its result. One goroutine runs the fns back to back, with
	// no hand-off between two of them (a hand-off to another goroutine per
	// message cost a sixth of the throughput), while the settlements go on
	// beside it.
	turns := make([]chan fnTurn, len(batch))
	cancels := make([]context.CancelFunc, len(batch))
	start := func(i int) {
		turns[i] = make(chan fnTurn)
		mctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		if w.stopping.Load() {
			cancel() // no fn starts after Stop: the lease is given back, the message nak'd
		}
		turn := turns[i]
		w.go_(func() {
			defer w.settling.Done()
			defer batchDone.Done()
			defer cancel()
			o, err := h.run(mctx, cl, batch[i], ids[i], double, func(lctx context.Context) error {
				t := fnTurn{ctx: lctx, done: make(chan error, 1)}
				select {
				case turn <- t:
					return <-t.done
				case <-lctx.Done(): // the lease or the batch's context ended first
					return context.Cause(lctx)
				}
			})
			close(turn) // fn ran, or never will: the loop goes on
			w.settle(base+i, batch[i], o, err)
		})
	}
	next := func(i int) int {
		for i < len(batch) && ids[i] == "" {
			i++
		}
		return i
	}
	i := next(0)
	if i < len(batch) {
		start(i)
	}
	for i < len(batch) {
		j := next(i + 1)
		if j < len(batch) {
			start(j) // its lease is taken up while fn i runs
		}
		if t, ok := <-turns[i]; ok {
			if w.stopping.Load() {
				cancels[i]()
				t.done <- context.Canceled
			} else {
				t.done <- h.callRecovered(t.ctx, batch[i])
			}
		}
		i = j
	}
	w.settling.Add(1)
	go func() {
		defer w.settling.Done()
		batchDone.Wait()
		closeBatch()
	}()
}

// fnTurn is a batch message's fn handed to the batch's goroutine: fn's
// context (the lease's), and where its error goes.
type fnTurn struct {
	ctx  context.Context
	done chan error
}

// callRecovered is h.call with a panic recovered as fn's error, as
// delivery.Do recovers one on the goroutine it runs fn on.
func (h *Handler) callRecovered(ctx context.Context, msg jetstream.Msg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &delivery.PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return h.call(ctx, msg)
}

// settle reports the outcome of the batch's message i, one report at a
// time, and keeps it when the batch is ProcessBatch's.
func (w *batcher) settle(i int, msg jetstream.Msg, o Outcome, err error) {
	if w.outcomes != nil {
		w.outcomes[i], w.errs[i] = o, err
	}
	if w.h.report != nil {
		w.h.reportMu.Lock()
		defer w.h.reportMu.Unlock()
		w.h.report(msg, o, err)
	}
}

// ProcessBatch processes the deliveries msgs together — for a loop of your
// own over consumer.Fetch, a fetch at a time — as Handler.Consume processes
// a batch: their ids claimed in one call per hash slot, fn run on them one
// at a time in order (a message's fn once the one before it returned), each
// message acked, nak'd or terminated as Process would once its own commit is
// in, while the next fns run. It returns once every message is settled, with
// the outcome of each, in msgs' order, and the errors behind them joined
// (each also reported to WithReport). A nil ctx, a nil Handler or a nil
// message gives store.ErrInvalidArgument and settles nothing. With
// WithCoalesce, the messages are processed one by one (Process).
func (h *Handler) ProcessBatch(ctx context.Context, msgs []jetstream.Msg) ([]Outcome, error) {
	if h == nil || ctx == nil {
		return nil, invalid("ProcessBatch with a nil Handler or context")
	}
	for _, m := range msgs {
		if m == nil {
			return nil, invalid("ProcessBatch with a nil message")
		}
	}
	out, errs := make([]Outcome, len(msgs)), make([]error, len(msgs))
	if h.co != nil {
		for i, m := range msgs {
			out[i], errs[i] = h.Process(ctx, m)
		}
		return out, errors.Join(errs...)
	}
	w := &batcher{h: h, outcomes: out, errs: errs, idle: make(chan func())}
	for lo := 0; lo < len(msgs); lo += maxClaimBatch {
		w.run(ctx, msgs[lo:min(lo+maxClaimBatch, len(msgs))], lo)
	}
	w.settling.Wait()
	close(w.idle)
	return out, errors.Join(errs...)
}

// maxClaimBatch is the most ids ProcessBatch claims in one call.
const maxClaimBatch = 500

// openBatch claims ids in one call per hash slot (store.Claims.Batch) and
// returns them as the messages' claimer, and what gives back the leases no
// Do took. When that claim fails (ctx ended, an id the store refuses), each
// message's Do claims its own id and meets that error there.
func (h *Handler) openBatch(ctx context.Context, ids []string) (delivery.Claimer, func()) {
	b, err := h.claims.Batch(ctx, ids, h.lease)
	if err != nil {
		return h.claims, func() {}
	}
	return delivery.Batched{B: b}, func() { _ = b.Close() }
}

// joinNak naks msg after lease for a delivery that err settles.
func joinNak(err error, msg jetstream.Msg, lease time.Duration) error {
	return errors.Join(err, msg.NakWithDelay(lease))
}
