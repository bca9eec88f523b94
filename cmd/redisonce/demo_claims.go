package main

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

func demoClaims(ctx context.Context, d *demo) (tally, error) {
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

	q := newQueue(stream, claimsVisibility)
	fx := &effects{applied: map[string]int{}, failed: map[string]bool{}, flaky: flaky}
	var (
		mu                                  sync.Mutex
		delivered, duplicates, inFlight, rt int
		crashedID                           string
		crashedAt                           time.Time
		tookOver                            string
		tookOverAfter                       time.Duration
		lost                                []string
		progressed                          = 0
	)
	opts := []store.Option{store.WithPrefix(d.prefix + "claims:"), store.WithTTL(10 * time.Minute)}

	// The consumers are separate processes: each has its own client and store.
	consumer := func(name string, crash bool) error {
		proc, err := d.newProcess()
		if err != nil {
			return err
		}
		defer proc.client.Close()
		claims := store.NewClaims(proc.client, opts...)
		done := 0
		for {
			del, ok := q.take(ctx)
			if !ok {
				return ctx.Err()
			}
			mu.Lock()
			delivered++
			mu.Unlock()
			ran, err := claims.Do(ctx, del.id, claimsLease, func(ctx context.Context) error {
				if crash && done == claimsCrashAfter {
					// The process dies mid-message: its connections drop, so
					// neither the release Do attempts nor an ack gets out; the
					// lease "~<token>" stays in Redis until it expires.
					proc.kill()
					mu.Lock()
					crashedID, crashedAt = del.id, time.Now()
					mu.Unlock()
					d.say("claims", "%s crashed while processing %s: its lease stays until it expires, the broker will redeliver", name, del.id)
					return errCrashed
				}
				mu.Lock()
				if del.id == crashedID && tookOver == "" {
					tookOver, tookOverAfter = name, time.Since(crashedAt)
					d.say("claims", "%s processes %s %v after the crash: the dead consumer's lease expired",
						name, del.id, tookOverAfter.Round(10*time.Millisecond))
				}
				mu.Unlock()
				done++
				return fx.apply(ctx, del.id)
			})
			switch {
			case errors.Is(err, errCrashed):
				return nil // dead: never acks
			case err == nil && ran:
				q.ack(del)
				mu.Lock()
				progressed++
				if progressed%(claimsMessages/4) == 0 {
					d.say("claims", "%d/%d messages processed (%d deliveries so far)", progressed, claimsMessages, delivered)
				}
				mu.Unlock()
			case err == nil:
				q.ack(del) // a duplicate of a processed message: ack, no effect
				mu.Lock()
				duplicates++
				mu.Unlock()
			case errors.Is(err, store.ErrInFlight):
				q.nack(del, claimsNackDelay) // another consumer holds it; it may yet fail
				mu.Lock()
				inFlight++
				mu.Unlock()
			case errors.Is(err, errDownstream):
				q.nack(del, claimsNackDelay) // the lease was released: a redelivery retries
				mu.Lock()
				rt++
				mu.Unlock()
			case errors.Is(err, store.ErrLeaseLost):
				// Only when an effect outlives its lease; not in this demo.
				q.ack(del)
				mu.Lock()
				lost = append(lost, del.id)
				mu.Unlock()
			default:
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}

	errs := make(chan error, claimsConsumers)
	for i := range claimsConsumers {
		go func() { errs <- consumer(fmt.Sprintf("c%d", i+1), i == claimsConsumers-1) }()
	}
	var first error
	for range claimsConsumers {
		if err := <-errs; err != nil && first == nil {
			first = err
			q.stop()
		}
	}
	if first != nil {
		return tally{}, first
	}

	// Check: every message applied exactly once, and the store agrees.
	check, err := store.OpenClaims(d.url, opts...)
	if err != nil {
		return tally{}, err
	}
	defer check.Close()
	// The lease was set just before the crash, by at most one effect's work.
	if tookOverAfter < claimsLease-claimsWork-20*time.Millisecond {
		return tally{}, fmt.Errorf("%s was processed again %v after the crash, before the %v lease expired", crashedID, tookOverAfter, claimsLease)
	}
	effects := 0
	for _, id := range ids {
		n := fx.count(id)
		effects += n
		if n != 1 {
			return tally{}, fmt.Errorf("message %s: effect applied %d times, want exactly 1", id, n)
		}
		seen, err := check.Seen(ctx, id)
		if err != nil {
			return tally{}, err
		}
		if !seen {
			return tally{}, fmt.Errorf("message %s: processed, but Claims.Seen says no", id)
		}
	}
	if crashedID == "" || tookOver == "" {
		return tally{}, errors.New("the crash scenario did not happen (no crash, or no take-over)")
	}
	if len(lost) > 0 {
		return tally{}, fmt.Errorf("leases lost on %v: an effect outlived its lease", lost)
	}
	// Every delivery ends one way: effect, duplicate, in flight, failed effect,
	// or the crash.
	if sum := effects + duplicates + inFlight + rt + 1; sum != delivered {
		return tally{}, fmt.Errorf("%d deliveries, but effects %d + duplicates %d + in flight %d + failures %d + crash 1 = %d",
			delivered, effects, duplicates, inFlight, rt, sum)
	}
	d.say("claims", "drained: %d deliveries for %d messages", delivered, claimsMessages)
	return tally{
		delivered:  delivered,
		duplicates: duplicates,
		unique:     claimsMessages,
		effects:    effects,
		replays:    na,
		stale:      na,
		notes: []string{
			fmt.Sprintf("%s found the message in flight and were redelivered later (Do: ErrInFlight)", plural(inFlight, "delivery", "deliveries")),
			fmt.Sprintf("%s released the lease and were retried by a redelivery", plural(rt, "failed effect", "failed effects")),
			fmt.Sprintf("1 consumer crashed holding %s; %s processed it after the lease expired", crashedID, tookOver),
		},
	}, nil
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
