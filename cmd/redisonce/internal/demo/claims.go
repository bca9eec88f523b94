package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redisonce/redisonce/store"
)

// The claims section: a stream of messages with duplicates (a producer that
// retried) is drained by several consumers through Claims.Do. Deliveries are
// at least once: a message whose consumer nacks it, or dies holding it, comes
// back. Some effects fail once (a downstream timeout) and are retried. One
// consumer crashes mid-message without acking or releasing: its lease expires
// and another consumer processes the message.
const (
	claimsConsumers  = 4
	claimsMessages   = 120
	claimsLease      = 600 * time.Millisecond // longer than any effect
	claimsVisibility = 300 * time.Millisecond // a delivery not acked by then is redelivered
	claimsNackDelay  = 60 * time.Millisecond  // redelivery delay of a nacked delivery
	claimsWork       = 2 * time.Millisecond   // how long one effect takes
	claimsCrashAfter = 5                      // the crashing consumer's effects before it dies
)

// errDownstream is the transient failure some effects hit on their first try.
var errDownstream = errors.New("downstream timeout")

// errCrashed ends the crashing consumer's effect: by then its process "died".
var errCrashed = errors.New("consumer crashed")

func runClaims(ctx context.Context, d *Env) (Tally, error) {
	r := planClaims(d)
	if err := r.drain(ctx); err != nil {
		return Tally{}, err
	}
	effects, err := r.check(ctx)
	if err != nil {
		return Tally{}, err
	}
	d.say("claims", "drained: %d deliveries for %d messages", r.delivered, claimsMessages)
	return Tally{
		Delivered:  r.delivered,
		Duplicates: r.duplicates,
		Unique:     claimsMessages,
		Effects:    effects,
		Replays:    NA,
		Stale:      NA,
		Notes: []string{
			fmt.Sprintf("%s found the message in flight and were redelivered later (Do: ErrInFlight)", plural(r.inFlight, "delivery", "deliveries")),
			fmt.Sprintf("%s released the lease and were retried by a redelivery", plural(r.retried, "failed effect", "failed effects")),
			fmt.Sprintf("1 consumer crashed holding %s; %s processed it after the lease expired", r.crashedID, r.tookOver),
		},
	}, nil
}

// claimsRun is the claims section's state: the broker, the effects, and what
// the consumers saw.
type claimsRun struct {
	d    *Env
	ids  []string
	q    *queue
	fx   *effects
	opts []store.Option

	mu                                       sync.Mutex
	delivered, duplicates, inFlight, retried int
	processed                                int
	crashedID, tookOver                      string
	crashedAt                                time.Time
	tookOverAfter                            time.Duration
	lost                                     []string
}

// planClaims builds the stream: every message once or more (a producer that
// retried), shuffled, some effects set to fail once.
func planClaims(d *Env) *claimsRun {
	rng := rand.New(rand.NewPCG(1, 2)) // the same stream every run
	ids := make([]string, claimsMessages)
	var stream []string
	flaky := map[string]bool{}
	for i := range ids {
		ids[i] = fmt.Sprintf("order-%03d", i+1)
		copies := 1
		switch r := rng.IntN(10); {
		case r < 3:
			copies = 2
		case r < 4:
			copies = 3
		}
		for range copies {
			stream = append(stream, ids[i])
		}
		if rng.IntN(20) == 0 {
			flaky[ids[i]] = true
		}
	}
	rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	d.say("claims", "%d consumers, %d messages published as %d (producer retries), lease %v, %d effects fail once",
		claimsConsumers, claimsMessages, len(stream), claimsLease, len(flaky))
	return &claimsRun{
		d: d, ids: ids, q: newQueue(stream, claimsVisibility),
		fx:   &effects{applied: map[string]int{}, failed: map[string]bool{}, flaky: flaky},
		opts: []store.Option{store.WithPrefix(d.prefix + "claims:"), store.WithTTL(10 * time.Minute)},
	}
}

// drain runs the consumers until the stream is drained; the last one
// crashes mid-message.
func (r *claimsRun) drain(ctx context.Context) error {
	errs := make(chan error, claimsConsumers)
	for i := range claimsConsumers {
		go func() { errs <- r.consume(ctx, fmt.Sprintf("c%d", i+1), i == claimsConsumers-1) }()
	}
	var first error
	for range claimsConsumers {
		if err := <-errs; err != nil && first == nil {
			first = err
			r.q.stop()
		}
	}
	return first
}

// consume is one consumer process: its own client and store, taking
// deliveries until the stream is drained or, when crash is set, it dies.
func (r *claimsRun) consume(ctx context.Context, name string, crash bool) error {
	proc, err := r.d.newProcess()
	if err != nil {
		return err
	}
	defer proc.client.Close()
	claims, err := store.NewClaims(proc.client, r.opts...)
	if err != nil {
		return err
	}
	done := 0
	for {
		del, ok := r.q.take(ctx)
		if !ok {
			return ctx.Err()
		}
		r.count(func() { r.delivered++ })
		ran, err := claims.Do(ctx, del.id, claimsLease, func(ctx context.Context) error {
			if crash && done == claimsCrashAfter {
				r.crash(proc, name, del.id)
				return errCrashed
			}
			r.noteTakeover(name, del.id)
			done++
			return r.fx.apply(ctx, del.id)
		})
		if errors.Is(err, errCrashed) {
			return nil // dead: never acks
		}
		if err := r.settle(del, ran, err); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

func (r *claimsRun) count(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// crash kills the consumer's process mid-message: its connections drop, so
// neither the release Do attempts nor an ack gets out; the lease "~<token>"
// stays in Redis until it expires.
func (r *claimsRun) crash(proc *process, name, id string) {
	proc.kill()
	r.count(func() { r.crashedID, r.crashedAt = id, time.Now() })
	r.d.say("claims", "%s crashed while processing %s: its lease stays until it expires, the broker will redeliver", name, id)
}

// noteTakeover records the first consumer to process the crashed message.
func (r *claimsRun) noteTakeover(name, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id == r.crashedID && r.tookOver == "" {
		r.tookOver, r.tookOverAfter = name, time.Since(r.crashedAt)
		r.d.say("claims", "%s processes %s %v after the crash: the dead consumer's lease expired",
			name, id, r.tookOverAfter.Round(10*time.Millisecond))
	}
}

// settle acks or nacks a delivery by Do's outcome, as a consumer does.
func (r *claimsRun) settle(del *delivery, ran bool, err error) error {
	switch {
	case err == nil && ran:
		r.q.ack(del)
		r.count(func() {
			r.processed++
			if r.processed%(claimsMessages/4) == 0 {
				r.d.say("claims", "%d/%d messages processed (%d deliveries so far)", r.processed, claimsMessages, r.delivered)
			}
		})
	case err == nil:
		r.q.ack(del) // a duplicate of a processed message: ack, no effect
		r.count(func() { r.duplicates++ })
	case errors.Is(err, store.ErrInFlight):
		r.q.nack(del, claimsNackDelay) // another consumer holds it; it may yet fail
		r.count(func() { r.inFlight++ })
	case errors.Is(err, errDownstream):
		r.q.nack(del, claimsNackDelay) // the lease was released: a redelivery retries
		r.count(func() { r.retried++ })
	case errors.Is(err, store.ErrLeaseLost):
		r.q.ack(del) // only when an effect outlives its lease; not in this demo
		r.count(func() { r.lost = append(r.lost, del.id) })
	default:
		return err
	}
	return nil
}

// check verifies that every message was applied exactly once and that the
// store agrees, and returns the number of effects.
func (r *claimsRun) check(ctx context.Context) (int, error) {
	check, err := store.OpenClaims(r.d.url, r.opts...)
	if err != nil {
		return 0, err
	}
	defer check.Close()
	// The lease was set just before the crash, by at most one effect's work.
	if r.tookOverAfter < claimsLease-claimsWork-20*time.Millisecond {
		return 0, fmt.Errorf("%s was processed again %v after the crash, before the %v lease expired", r.crashedID, r.tookOverAfter, claimsLease)
	}
	effects := 0
	for _, id := range r.ids {
		n := r.fx.count(id)
		effects += n
		if n != 1 {
			return 0, fmt.Errorf("message %s: effect applied %d times, want exactly 1", id, n)
		}
		if seen, err := check.Seen(ctx, id); err != nil || !seen {
			return 0, fmt.Errorf("message %s: processed, but Claims.Seen says %v (%v)", id, seen, err)
		}
	}
	if r.crashedID == "" || r.tookOver == "" {
		return 0, errors.New("the crash scenario did not happen (no crash, or no take-over)")
	}
	if len(r.lost) > 0 {
		return 0, fmt.Errorf("leases lost on %v: an effect outlived its lease", r.lost)
	}
	// Every delivery ends one way: effect, duplicate, in flight, failed effect,
	// or the crash.
	if sum := effects + r.duplicates + r.inFlight + r.retried + 1; sum != r.delivered {
		return 0, fmt.Errorf("%d deliveries, but effects %d + duplicates %d + in flight %d + failures %d + crash 1 = %d",
			r.delivered, effects, r.duplicates, r.inFlight, r.retried, sum)
	}
	return effects, nil
}

// effects is the side effect the consumers apply (think: charge a card), with a
// count per message so the demo can prove each happened exactly once.
type effects struct {
	mu      sync.Mutex
	applied map[string]int
	flaky   map[string]bool // fail the first attempt
	failed  map[string]bool
}

func (e *effects) apply(ctx context.Context, id string) error {
	select {
	case <-time.After(claimsWork):
	case <-ctx.Done():
		return ctx.Err()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.flaky[id] && !e.failed[id] {
		e.failed[id] = true
		return errDownstream
	}
	e.applied[id]++
	return nil
}

func (e *effects) count(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.applied[id]
}

// queue is an at-least-once broker in memory: a delivery not acked within the
// visibility timeout is delivered again, and a nacked one after a delay.
type queue struct {
	mu         sync.Mutex
	ready      []*delivery
	inflight   map[*delivery]time.Time // delivery -> visibility deadline
	visibility time.Duration
	stopped    bool
}

type delivery struct {
	id        string
	notBefore time.Time
}

func newQueue(ids []string, visibility time.Duration) *queue {
	q := &queue{inflight: map[*delivery]time.Time{}, visibility: visibility}
	for _, id := range ids {
		q.ready = append(q.ready, &delivery{id: id})
	}
	return q
}

// take returns the next delivery, waiting for one to become ready; false when
// the stream is drained (nothing ready, nothing in flight), stopped, or ctx ends.
func (q *queue) take(ctx context.Context) (*delivery, bool) {
	for {
		q.mu.Lock()
		now := time.Now()
		for del, deadline := range q.inflight {
			if now.After(deadline) { // its consumer died or stalled: redeliver
				delete(q.inflight, del)
				q.ready = append(q.ready, del)
			}
		}
		if q.stopped || (len(q.ready) == 0 && len(q.inflight) == 0) {
			q.mu.Unlock()
			return nil, false
		}
		for i, del := range q.ready {
			if !now.Before(del.notBefore) {
				q.ready = append(q.ready[:i], q.ready[i+1:]...)
				q.inflight[del] = now.Add(q.visibility)
				q.mu.Unlock()
				return del, true
			}
		}
		q.mu.Unlock()
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return nil, false
		}
	}
}

func (q *queue) ack(del *delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.inflight, del)
}

func (q *queue) nack(del *delivery, delay time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.inflight[del]; ok {
		delete(q.inflight, del)
		del.notBefore = time.Now().Add(delay)
		q.ready = append(q.ready, del)
	}
}

func (q *queue) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
}
