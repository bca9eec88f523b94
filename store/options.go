package store

import (
	"fmt"
	"time"
)

// Option configures a store. Options that do not apply to a store are ignored
// by it (WithMaxUnacked on Claims, for example).
type Option func(*config)

type config struct {
	prefix    string
	prefixSet bool
	ttl       time.Duration
	ttlSet    bool
	now       func() time.Time
	maxUnack  int      // Outbox: the most unacked messages per connection, 0 = unbounded
	observer  Observer // nil: no events
	err       error    // the first invalid option, returned by every call
}

// WithPrefix sets the key prefix; a key is prefix + id, built in Go, so the
// prefix may hold a hash tag like "{app}:". Defaults: Claims "bq:idemp:",
// Outbox "gateway:outbox:", Records "idempotency:".
func WithPrefix(p string) Option {
	return func(c *config) { c.prefix, c.prefixSet = p, true }
}

// WithTTL sets how long a key lives after a write. Claims: the dedupe window of a
// processed id; default 0: a processed id is remembered forever (its key is
// never freed: set a TTL a little longer than the broker's longest
// redelivery, e.g. 7 days). Records: the lifetime of a record acquired with a
// zero AcquireOptions.TTL (or Acquire's ttl 0), counted from its creation;
// default DefaultRecordsTTL (24 hours); WithTTL(0): records never expire.
// Negative values are invalid: Open* fails with ErrInvalidArgument, and a
// store made with New* returns that error from every call. Sub-millisecond
// durations round up to 1 ms so that a positive TTL never becomes "no expiry".
func WithTTL(d time.Duration) Option {
	return func(c *config) {
		if d < 0 && c.err == nil {
			c.err = fmt.Errorf("redisonce: WithTTL(%v): %w: negative duration", d, ErrInvalidArgument)
		}
		c.ttl, c.ttlSet = d, true
	}
}

// WithClock sets the clock of an in-memory store (MemoryClaims, MemoryRecords...), for tests
// that move time by hand. Default time.Now. Redis stores always use the server's
// clock (TIME) and ignore it.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// WithMaxUnacked bounds an Outbox connection's unacknowledged tail: an Append of
// a new message while the tail holds n messages fails with ErrOutboxFull and
// writes nothing (an idempotent retry of an id already in the tail still
// succeeds). Default 0: unbounded. Negative values are invalid: OpenOutbox
// fails with ErrInvalidArgument, and an Outbox made with NewOutbox returns that
// error from every call. Other stores ignore it.
func WithMaxUnacked(n int) Option {
	return func(c *config) {
		if n < 0 && c.err == nil {
			c.err = fmt.Errorf("redisonce: WithMaxUnacked(%d): %w: negative limit", n, ErrInvalidArgument)
		}
		c.maxUnack = n
	}
}

func newConfig(defaultPrefix string, opts []Option) config {
	c := config{prefix: defaultPrefix, now: time.Now}
	for _, o := range opts {
		o(&c)
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}
