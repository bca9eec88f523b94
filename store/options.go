package store

import (
	"fmt"
	"time"
)

// Option configures a store. A store's constructor fails with
// ErrInvalidArgument on an invalid option, and on one that does not apply to
// it: WithMaxUnacked outside an Outbox, WithClock on a Redis store (they run
// on the server's clock), WithWaitReplicas on a memory store (it has no
// replicas).
type Option func(*config)

type config struct {
	prefix   string
	ttl      time.Duration
	ttlSet   bool
	now      func() time.Time
	maxUnack int      // Outbox: the most unacked messages per connection, 0 = unbounded
	observer Observer // nil: no events
	err      error    // the first invalid option

	waitReplicas int           // WithWaitReplicas: replicas per write, 0 = none
	waitTimeout  time.Duration // WithWaitReplicas: WAIT's timeout

	// The options given that apply to some stores only, by name.
	clockSet, maxUnackSet, waitSet bool
}

// validFor is the error of a constructor of store on backend ("redis" or
// "memory") given cfg: the first invalid option, or the first that does not
// apply.
func (c config) validFor(store, backend string) error {
	switch {
	case c.err != nil:
		return c.err
	case c.maxUnackSet && store != "outbox":
		return fmt.Errorf("redisonce: WithMaxUnacked: %w: only an Outbox has a tail to bound", ErrInvalidArgument)
	case c.clockSet && backend == "redis":
		return fmt.Errorf("redisonce: WithClock: %w: a Redis store runs on the server's clock (TIME); WithClock is for memory stores", ErrInvalidArgument)
	case c.waitSet && backend == "memory":
		return fmt.Errorf("redisonce: WithWaitReplicas: %w: a memory store has no replicas", ErrInvalidArgument)
	}
	return nil
}

// WithPrefix sets the key prefix; a key is prefix + id, built in Go, so the
// prefix may hold a hash tag like "{app}:". Defaults: Claims "bq:idemp:",
// Outbox "gateway:outbox:", Records "idempotency:". At most maxPrefixLen
// bytes (so that every key fits the scripts' redisonce.MaxKeyLen); a longer
// one is invalid.
func WithPrefix(p string) Option {
	return func(c *config) { c.prefix = p }
}

// WithTTL sets how long a key lives after a write. Claims: the dedupe window of a
// processed id; default 0: a processed id is remembered forever (its key is
// never freed: set a TTL a little longer than the broker's longest
// redelivery, e.g. 7 days). Records: the lifetime of a record acquired with a
// zero AcquireOptions.TTL (or Acquire's ttl 0), counted from its creation;
// default DefaultRecordsTTL (24 hours); WithTTL(0): records never expire.
// Negative values are invalid. Sub-millisecond
// durations round up to 1 ms so that a positive TTL never becomes "no expiry".
func WithTTL(d time.Duration) Option {
	return func(c *config) {
		if d < 0 && c.err == nil {
			c.err = fmt.Errorf("redisonce: WithTTL(%v): %w: negative duration", d, ErrInvalidArgument)
		}
		c.ttl, c.ttlSet = d, true
	}
}

// WithClock sets the clock of a memory store (NewMemoryClaims,
// NewMemoryRecords...), for tests that move time by hand. Default time.Now.
// Redis stores always use the server's clock (TIME): their constructors
// refuse it.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now, c.clockSet = now, true }
}

// WithMaxUnacked bounds an Outbox connection's unacknowledged tail: an Append of
// a new message while the tail holds n messages fails with ErrOutboxFull and
// writes nothing (an idempotent retry of an id already in the tail still
// succeeds). Default 0: unbounded. Negative values are invalid. Outbox only.
func WithMaxUnacked(n int) Option {
	return func(c *config) {
		if n < 0 && c.err == nil {
			c.err = fmt.Errorf("redisonce: WithMaxUnacked(%d): %w: negative limit", n, ErrInvalidArgument)
		}
		c.maxUnack, c.maxUnackSet = n, true
	}
}

// WithWaitReplicas makes every write of a Redis store wait until n replicas
// have it: each write script is sent with `WAIT n timeout` behind it, in one
// round trip on one connection, and a write that fewer than n replicas
// confirmed within timeout returns ErrNotReplicated (wrapped, with the
// operation's results: the write DID happen on the primary, but a failover
// before the replicas catch up may undo it) — never a silent success. This is
// what keeps an acknowledged write through a Sentinel or cluster failover
// (Redis replicates asynchronously); see docs/failover.md and docs/guarantees.md.
//
// Writes are every operation but Seen, Unacked/Tail and Get (read-only
// scripts never wait), including Claim and Acquire calls that find the key
// already there, ClaimMany and AckMany (one WAIT per hash slot of the batch),
// and the Do flows' claim, commit, release, update and delete — but not their
// lease heartbeats (an extension lost in a failover only shortens the lease,
// and the final write is fenced and waits). A Do whose claim is not confirmed
// returns ErrNotReplicated before running fn (its lease expires on its own);
// one whose final write is not confirmed returns it after fn ran. A write now
// takes a dedicated pooled connection (rueidis runs every DoMulti holding a
// blocking command that way) and at least one replica round trip: see
// BENCHMARKS.md for the cost.
//
// Default n = 0: no WAIT. n > 0 needs timeout > 0 (WAIT 0 would block for
// ever; sub-millisecond timeouts round up to 1 ms); a negative n or, with
// n > 0, a timeout <= 0 is invalid. Redis stores only: a memory store has
// no replicas.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(c *config) {
		if (n < 0 || (n > 0 && timeout <= 0)) && c.err == nil {
			c.err = fmt.Errorf("redisonce: WithWaitReplicas(%d, %v): %w: want n >= 0 and, with n > 0, a timeout > 0",
				n, timeout, ErrInvalidArgument)
		}
		c.waitReplicas, c.waitTimeout, c.waitSet = n, timeout, true
	}
}

func newConfig(defaultPrefix string, opts []Option) config {
	c := config{prefix: defaultPrefix, now: time.Now}
	for i, o := range opts {
		if o == nil {
			if c.err == nil {
				c.err = fmt.Errorf("redisonce: option %d: %w: a nil Option", i, ErrInvalidArgument)
			}
			continue
		}
		o(&c)
	}
	if len(c.prefix) > maxPrefixLen && c.err == nil {
		c.err = fmt.Errorf("redisonce: WithPrefix: %w: the prefix is %d bytes, the limit is %d", ErrInvalidArgument, len(c.prefix), maxPrefixLen)
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}
