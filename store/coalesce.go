package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// defaultCoalescePrefix is the key prefix of a Coalescer unless WithPrefix
// says otherwise.
const defaultCoalescePrefix = "redisonce:coalesce:"

// coalesceFunc is a coalescing key's work (see Coalescer).
type coalesceFunc = func(ctx context.Context, key string, payload []byte) error

// CoalesceOptions are a Coalescer's modes, for the store (NewCoalescer) or
// for one call (Trigger's last argument). The zero value is keep-last-if-active with a
// 10 s lease.
type CoalesceOptions struct {
	// Lease is how long a run holds its key without an extension; while fn
	// runs the lease is extended every Lease/4, as in Claims.Do. A holder
	// that dies holding it lets it pass, and the key's next (or its own
	// unfinished payload) runs after it. Default 10 s.
	Lease time.Duration
	// Debounce: run once the key has been quiet for Debounce, with the
	// last payload; each trigger moves the run's start to Debounce after it,
	// up to MaxWait after the first trigger the pending next holds.
	// Default 0: no debounce.
	Debounce time.Duration
	// MaxWait caps Debounce: a pending next is due at most MaxWait after the
	// first of its triggers, however often the key is triggered. Default
	// (0) 10 * Debounce; without Debounce it is not used.
	MaxWait time.Duration
	// Throttle: at most one run of the key starts per Throttle; a trigger
	// within Throttle of the last run's start is kept, and runs at last
	// start + Throttle. Default 0: no throttle.
	Throttle time.Duration
	// RetryDelay is how long a payload whose run failed (fn's error, not
	// Permanent) waits before it runs again, unless a later trigger
	// replaced it. Default 1 s.
	RetryDelay time.Duration
	// Background: a Trigger that wins the key starts its run in the
	// background and returns at once (Ran, fn's error not known), instead
	// of running fn in the caller's goroutine. For a consumer that
	// delivers one message at a time (a Kafka partition, a JetStream
	// Consume callback): its next messages arrive while the run goes on,
	// and are kept. Acknowledging the message then is safe: the payload is
	// in the key until its run finishes, so a process that dies mid-run
	// leaves it to be run again after its lease. Default false.
	Background bool
}

const (
	defaultCoalesceLease = 10 * time.Second
	defaultCoalesceRetry = time.Second
)

// withDefaults is o with its defaults, or ErrInvalidArgument for a negative
// duration.
func (o CoalesceOptions) withDefaults(op, key string) (CoalesceOptions, error) {
	if o.Lease < 0 || o.Debounce < 0 || o.MaxWait < 0 || o.Throttle < 0 || o.RetryDelay < 0 {
		return o, errorf(op, key, ErrInvalidArgument, "negative duration in %+v", o)
	}
	if o.Lease == 0 {
		o.Lease = defaultCoalesceLease
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = defaultCoalesceRetry
	}
	if o.Debounce > 0 && o.MaxWait == 0 {
		o.MaxWait = 10 * o.Debounce
	}
	if o.Debounce == 0 {
		o.MaxWait = 0
	}
	return o, nil
}

// triggered is what a trigger did.
type triggered struct {
	// Ran: no run held the key and the trigger was due, so this call ran fn
	// with its payload (Trigger's error is fn's, or the final write's).
	Ran bool
	// Kept: a run holds the key, or the trigger is not due yet (Debounce,
	// Throttle): the payload is the key's next, replacing an earlier one that
	// had not started, and a run that starts after this call returned will
	// cover it (an acknowledged trigger: ack the message that carried it).
	Kept bool
	// Wait is, for a kept trigger, how long until the next can start at the
	// earliest: the holder's lease left, or the time until it is due.
	Wait time.Duration
	// Fence is the fence of the run this call made (Ran), 0 otherwise.
	Fence uint64
}

// Coalescer runs a key's work, fn(ctx, key, payload), once per burst of
// triggers, with the latest payload, and never loses a trigger that arrives
// while a run holds the key:
//
//   - no run holds the key: Trigger runs fn with its payload, under a lease
//     on the key (the same lease engine as Claims.Do);
//   - a run holds it: the payload is kept as the key's next (a later trigger
//     replaces an earlier one that has not started) and Trigger returns at
//     once (not ran, a nil error);
//   - when a run ends, the key's next runs: handed to the same process by
//     the script that ends the run (atomically, so nobody else can start in
//     between), or, if the holder died, taken by whoever comes next — a
//     Trigger of the key, this process's watch timer, any process's Sweep —
//     once its lease has passed.
//
// So every trigger is covered by a run that started after it arrived, runs of
// one key never overlap (fn's context ends before another run can start), and
// the triggers that arrive during one run cost at most one more run. A run
// whose holder died before it finished is run again: an acknowledged trigger
// is never lost. Modes (CoalesceOptions): keep-last-if-active (the default),
// debounce, throttle; per store or per call.
//
// fn's ctx is the lease's, as in Claims.Do: it carries the Lease
// (LeaseFromContext; its Fence grows with every run of the key) and ends
// before another run of the key can start. A nil error ends the run; an
// error keeps payload as the key's next, retried after
// CoalesceOptions.RetryDelay unless a later trigger replaced it, and an
// error marked Permanent drops it.
//
// Redis: one hash per key (prefix + key, docs/non-go.md "Coalescing"), one
// script per operation: coalesce_trigger, coalesce_take, coalesce_extend,
// coalesce_finish. Each lease carries a fence derived from the server's clock,
// never decreasing for a key; a stale holder can neither start nor clear a
// next (coalesce_finish checks its token and fence). A Coalescer is safe for
// concurrent use; Close stops its timers and background runs.
type Coalescer struct {
	b  coalesceBackend
	fn coalesceFunc
	o  CoalesceOptions
	// timers: this process's watch timers arm themselves (false for a
	// memory Coalescer on an injected clock: Sweep moves it).
	timers bool

	bg     context.Context // background runs' context, cancelled by Close
	stop   context.CancelFunc
	mu     sync.Mutex
	watch  map[string]watchTimer
	closed bool
	wg     sync.WaitGroup
}

type watchTimer struct {
	t  *time.Timer
	at time.Time
}

// coalesceReply is a coalescing script's reply: granted (the caller holds
// the key's lease with fence and runs payload), kept or waiting (wait until
// a take is worth trying), or idle (nothing to run).
type coalesceReply struct {
	granted bool
	idle    bool
	fence   string
	payload []byte
	wait    time.Duration
}

// coalesceBackend runs one coalescing operation: the scripts (Redis) or their
// plain-Go statement (memory). sent receives the send time of the command
// that ran, from which a granted lease counts.
type coalesceBackend interface {
	trigger(ctx context.Context, key, token string, payload []byte, o CoalesceOptions, sent *time.Time) (coalesceReply, error)
	take(ctx context.Context, key, token string, lease time.Duration, sent *time.Time) (coalesceReply, error)
	extend(ctx context.Context, key, token string, lease time.Duration, sent *time.Time) (bool, error)
	finish(ctx context.Context, key, token, fence string, retry bool, o CoalesceOptions, sent *time.Time) (coalesceReply, error)
	// keys calls fn with the keys (without the prefix) that may hold work.
	keys(ctx context.Context, fn func(key string) error) error
	close() error
}

// coalescerArgs checks a constructor's fn and modes.
func coalescerArgs(fn coalesceFunc, o CoalesceOptions) (CoalesceOptions, error) {
	if fn == nil {
		return o, fmt.Errorf("redisonce: coalesce: %w: a nil fn", ErrInvalidArgument)
	}
	return o.withDefaults("coalesce", "")
}

func newCoalescer(b coalesceBackend, fn coalesceFunc, o CoalesceOptions, timers bool) *Coalescer {
	c := &Coalescer{b: b, fn: fn, o: o, timers: timers, watch: map[string]watchTimer{}}
	c.bg, c.stop = context.WithCancel(context.Background())
	return c
}

// Trigger triggers key with payload (at most 4 MiB) in the
// store's modes, or in o's for this call (at most one; its zero fields take
// their defaults, not the store's): see Coalescer.
//
// ran: this call won the key and ran fn with payload (the error is fn's, or
// the final write's); with CoalesceOptions.Background it returns once the
// run started. Not ran and a nil error: the payload was kept as the key's
// next (a run holds the key, or the trigger is not due yet): a run that
// starts later covers it — acknowledge the message that carried it. Not ran
// and an error: the trigger may not have been kept (a network error;
// ErrNotReplicated with WithWaitReplicas: kept on the primary only, and a
// failover may lose it): trigger again, or do not acknowledge. The next runs
// handed to this process go on in the background.
func (c *Coalescer) Trigger(ctx context.Context, key string, payload []byte, o ...CoalesceOptions) (ran bool, err error) {
	if c == nil {
		return false, nilStore("coalesce", key, "Coalescer")
	}
	mode := c.o
	switch {
	case len(o) > 1:
		return false, errorf("coalesce", key, ErrInvalidArgument, "%d CoalesceOptions, want at most one", len(o))
	case len(o) == 1:
		if mode, err = o[0].withDefaults("coalesce", key); err != nil {
			return false, err
		}
	}
	tr, err := c.trigger(ctx, key, payload, mode)
	return tr.Ran, err
}

func (c *Coalescer) trigger(ctx context.Context, key string, payload []byte, o CoalesceOptions) (triggered, error) {
	if err := checkID(ctx, "coalesce", key); err != nil {
		return triggered{}, err
	}
	if len(payload) > maxPayloadLen {
		return triggered{}, errorf("coalesce", key, ErrInvalidArgument, "payload is %d bytes, the limit is %d", len(payload), maxPayloadLen)
	}
	token := newToken()
	// The heartbeat starts before the trigger is sent: a granted lease counts
	// from the send time (see Claims.Do). A background run's lease is the
	// Coalescer's, not the caller's ctx's.
	hctx := ctx
	if o.Background {
		hctx = c.bg
	}
	hb := startHeartbeat(hctx, o.Lease, time.Now(), "coalesce", ErrLeaseLost, c.extendFunc(key, token, o.Lease))
	var sent time.Time
	r, err := c.b.trigger(ctx, key, token, payload, o, &sent)
	if err != nil || !r.granted {
		hb.stop()
	}
	if err != nil {
		// A kept trigger the replicas did not confirm: reported Kept with
		// the error. A granted one is not run: its lease passes, and its
		// payload, kept in the key as the run's, is taken after it.
		if r.granted {
			c.watchKey(key, o.Lease)
			return triggered{}, err
		}
		return triggered{Kept: r.wait > 0, Wait: r.wait}, err
	}
	if !r.granted {
		c.watchKey(key, r.wait)
		return triggered{Kept: true, Wait: r.wait}, nil
	}
	fence, _ := strconv.ParseUint(r.fence, 10, 64)
	g := grant{fence: r.fence, payload: payload, hb: hb, sent: sent}
	if o.Background {
		c.background(key, token, &g, o)
		return triggered{Ran: true, Fence: fence}, nil
	}
	next, fnErr, err := c.runOnce(ctx, key, token, g, o)
	if next != nil {
		c.background(key, token, next, o)
	}
	return triggered{Ran: true, Fence: fence}, errors.Join(fnErr, err)
}

// grant is a run the caller won: its fence and payload, and the heartbeat
// started before the command that granted it (sent).
type grant struct {
	fence   string
	payload []byte
	hb      *heartbeat
	sent    time.Time
}

func (c *Coalescer) extendFunc(key, token string, lease time.Duration) extendFunc {
	return func(ctx context.Context, sent *time.Time) (bool, error) {
		return c.b.extend(ctx, key, token, lease, sent)
	}
}

// runOnce runs fn on g's payload under g's lease, then ends the run
// (coalesce_finish): it returns the next run when the script handed the
// key's next to this caller, fn's error, and the final write's.
//
// The final write is retried on transport failures (retryLost). A retry that
// finds the key no longer held by this run at its fence is the first
// attempt having landed — or the lease passed and another caller took the
// key: either way the key's work is covered (a next handed over by the lost
// attempt stays in the key as its run, and is taken once its lease passes),
// so it is not an error.
func (c *Coalescer) runOnce(ctx context.Context, key, token string, g grant, o CoalesceOptions) (next *grant, fnErr, err error) {
	fence, _ := strconv.ParseUint(g.fence, 10, 64)
	g.hb.confirm(Lease{ID: key, Token: token, Fence: fence}, g.sent)
	retry := false
	defer func() {
		if p := recover(); p != nil {
			// fn panicked: its payload stays the key's next (retried), and
			// the panic goes on.
			g.hb.stop()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
			defer cancel()
			_ = retryLost(fctx, func(ctx context.Context) error {
				_, err := c.b.finish(ctx, key, token, g.fence, true, o, nil)
				return err
			})
			panic(p)
		}
	}()
	fnErr = c.fn(g.hb, key, g.payload)
	g.hb.stop()
	retry = fnErr != nil && !IsPermanent(fnErr)

	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
	defer cancel()
	// A handed-over run's lease counts from the final write's send time.
	hb := startHeartbeat(c.bg, o.Lease, time.Now(), "coalesce", ErrLeaseLost, c.extendFunc(key, token, o.Lease))
	var r coalesceReply
	var sent time.Time
	attempts := 0
	err = retryLost(fctx, func(ctx context.Context) (err error) {
		attempts++
		r, err = c.b.finish(ctx, key, token, g.fence, retry, o, &sent)
		return err
	})
	if err != nil || !r.granted {
		hb.stop()
	}
	switch {
	case errors.Is(err, ErrStaleOwner) && attempts > 1:
		return nil, fnErr, nil
	case errors.Is(err, ErrStaleOwner):
		return nil, fnErr, errorf("coalesce", key, ErrLeaseLost, "the run's lease passed and another caller took the key")
	case err != nil && r.granted:
		// Handed over, but not replicated: not run here; its lease passes
		// and it is taken then.
		c.watchKey(key, o.Lease)
		return nil, fnErr, err
	case err != nil:
		return nil, fnErr, err
	case r.granted:
		return &grant{fence: r.fence, payload: r.payload, hb: hb, sent: sent}, fnErr, nil
	case !r.idle:
		c.watchKey(key, r.wait)
	}
	return nil, fnErr, nil
}

// background runs the nexts handed to this process, one after another,
// until the key has nothing due.
func (c *Coalescer) background(key, token string, g *grant, o CoalesceOptions) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		g.hb.stop() // the lease passes; a take runs the next after it
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		c.runChain(key, token, g, o)
	}()
}

// runChain runs g and every next handed over after it, in the background
// (a panic in fn is recovered there: its payload is retried).
func (c *Coalescer) runChain(key, token string, g *grant, o CoalesceOptions) {
	for g != nil {
		func() {
			defer func() {
				if recover() != nil {
					g = nil
				}
			}()
			g, _, _ = c.runOnce(c.bg, key, token, *g, o)
		}()
	}
}

// watchKey arms this process's timer for key: after wait, it takes the key's
// next if it is due and nobody holds the key (take), so a next whose holder
// died runs without waiting for a Sweep. One timer per key, the earliest.
func (c *Coalescer) watchKey(key string, wait time.Duration) {
	if !c.timers || wait <= 0 {
		return
	}
	// The server counts wait on its clock; a millisecond more lands past it.
	wait += time.Millisecond
	at := time.Now().Add(wait)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if w, ok := c.watch[key]; ok {
		if !w.at.After(at) {
			return
		}
		w.t.Stop()
	}
	c.watch[key] = watchTimer{at: at, t: time.AfterFunc(wait, func() { c.fire(key, at) })}
}

func (c *Coalescer) fire(key string, at time.Time) {
	c.mu.Lock()
	if w, ok := c.watch[key]; ok && w.at.Equal(at) {
		delete(c.watch, key)
	}
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	defer c.wg.Done()
	if _, err := c.takeAndRun(c.bg, key); err != nil && c.bg.Err() == nil && !errors.Is(err, ErrInvalidArgument) {
		// A failed take (the server unreachable): look again after a while.
		c.watchKey(key, c.o.Lease/4)
	}
}

// takeAndRun takes key's next if it is due (coalesce_take) and runs it, and
// the nexts handed over after it, in this goroutine.
func (c *Coalescer) takeAndRun(ctx context.Context, key string) (ran bool, err error) {
	token := newToken()
	hb := startHeartbeat(ctx, c.o.Lease, time.Now(), "coalesce", ErrLeaseLost, c.extendFunc(key, token, c.o.Lease))
	var sent time.Time
	r, err := c.b.take(ctx, key, token, c.o.Lease, &sent)
	if err != nil || !r.granted {
		hb.stop()
	}
	switch {
	case err != nil:
		return false, err
	case r.idle:
		return false, nil
	case !r.granted:
		c.watchKey(key, r.wait)
		return false, nil
	}
	c.runChain(key, token, &grant{fence: r.fence, payload: r.payload, hb: hb, sent: sent}, c.o)
	return true, nil
}

// Sweep runs every due next of the store's keys whose holder is gone (its
// lease passed) or that no run holds: those left by a process that died, or
// that no live process watches. It scans the keys with the prefix (SCAN on
// every node; never KEYS), takes each (coalesce_take) and runs what it took
// in this goroutine, one after another; a next not due yet is left to this
// process's timer. It returns how many runs it started. Run it every little
// while from one or more processes (runs never overlap, however many sweep).
func (c *Coalescer) Sweep(ctx context.Context) (int, error) {
	if c == nil {
		return 0, nilStore("sweep", "", "Coalescer")
	}
	if err := checkCtx(ctx, "sweep", ""); err != nil {
		return 0, err
	}
	runs := 0
	err := c.b.keys(ctx, func(key string) error {
		ran, err := c.takeAndRun(ctx, key)
		if ran {
			runs++
		}
		if err != nil && ctx.Err() != nil {
			return err
		}
		return nil
	})
	return runs, err
}

// Close stops the watch timers, cancels the runs going on in the background
// (their payloads stay in their keys, taken after their leases pass) and waits
// for them, then closes the client if the Coalescer opened it.
func (c *Coalescer) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.closed = true
	for k, w := range c.watch {
		w.t.Stop()
		delete(c.watch, k)
	}
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
	return c.b.close()
}
