package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/redis/rueidis"
)

// DefaultClaimsPrefix is the key prefix of Claims unless WithPrefix says
// otherwise; it and the value "1" keep the data compatible with consumers that
// dedupe with `SET bq:idemp:<id> 1 NX PX ttl`.
const DefaultClaimsPrefix = "bq:idemp:"

// Claims dedupes message ids: key prefix+id holds "1" once the message is
// processed, or "~<token>" while a consumer running Do holds a lease on it.
// NewClaims and OpenClaims keep them in Redis, NewMemoryClaims in this
// process; both run the same Go code around their backend, so validation,
// events and the Do flow are the same. It is safe for concurrent use.
type Claims struct {
	core
	b   claimsBackend
	ttl time.Duration // 0 = never expire
	// gather sends the operations of every Batch of the store.
	gather gatherer
}

// claimsBackend is where Claims' keys live: Redis (one script per method)
// or memory (the same statements in Go). It only runs the operation; the
// arguments were checked by Claims. Replies are the scripts' integers.
type claimsBackend interface {
	// claim is claim.lua: value ("1", or "~<token>" for Do's lease) under
	// id for ttl (0: no expiry); 1 created, 0 processed, -(ms left on the
	// holder's lease) in flight, and, for a lease created, its fence (above
	// every fence granted for id before). sent, when not nil, receives the
	// time the command that ran was sent. op names the operation in errors.
	claim(ctx context.Context, op, id, value string, ttl time.Duration, sent *time.Time) (n int64, fence uint64, err error)
	// seen is seen.lua: 1 claimed, processed or in flight, else 0.
	seen(ctx context.Context, id string) (int64, error)
	// forget is forget.lua: 1 removed, 0 absent.
	forget(ctx context.Context, id string) (int64, error)
	// extend is extend.lua: 1 the lease is token's and now runs lease
	// from now, else 0.
	extend(ctx context.Context, id, token string, lease time.Duration, sent *time.Time) (int64, error)
	// commit is commit.lua: 1 token's lease became "1" with ttl, 2 the key
	// was absent and "1" was written, 0 the key holds "1", -1 another lease.
	commit(ctx context.Context, id, token string, ttl time.Duration) (int64, error)
	// release is release.lua: the key is deleted if it holds token's lease.
	release(ctx context.Context, id, token string) error
	// leaseFlush runs one gathering of Batch operations (each request's op
	// on its id), as one round trip of calls grouped by operation and hash
	// slot, and fills in every request's reply, send time and error.
	leaseFlush(ctx context.Context, reqs []*leaseReq)
	// batch runs claim.lua (claim true, with ttl) or seen.lua over distinct,
	// checked ids as ClaimMany and SeenMany describe, passing every reply
	// to read; ok (when not nil) is set for every id read without an error.
	batch(ctx context.Context, claim bool, ids []string, ttl time.Duration, read func(int64) (result, valid bool), t *tally, ok []bool) ([]bool, error)
	close() error
}

// NewClaims returns a claims store on a client the caller keeps: Close does not
// close it. Options: WithPrefix (default "bq:idemp:"), WithTTL (default 0: a
// processed id is remembered forever, and its key is never freed; set a TTL a
// little longer than the longest time a message may be redelivered),
// WithWaitReplicas, WithObserver. An invalid option, one that does not
// apply (Option), or a nil client fails here.
//
// For the performance measured in BENCHMARKS.md, build the client from
// ClientOptions (DisableCache: true, MaxFlushDelay: 20µs), as OpenClaims does:
// the store never uses client-side caching.
func NewClaims(c rueidis.Client, opts ...Option) (*Claims, error) {
	cfg, err := redisConfig("claims", DefaultClaimsPrefix, c, opts)
	if err != nil {
		return nil, err
	}
	b := &redisClaims{redisStore: newRedisStore(c, cfg, false)}
	return newClaimsOn(newCore("claims", cfg, true), b, cfg.ttl), nil
}

// OpenClaims connects to url (redis://, rediss://, unix://, or a Sentinel
// deployment with ?addr=...&master_set=NAME) with ClientOptions and returns
// a claims store that owns the client: Close
// closes it. An invalid option fails here, before connecting; errors show the
// URL without its password.
func OpenClaims(url string, opts ...Option) (*Claims, error) {
	cfg, c, err := openRedis("claims", DefaultClaimsPrefix, url, opts)
	if err != nil {
		return nil, err
	}
	b := &redisClaims{redisStore: newRedisStore(c, cfg, true)}
	return newClaimsOn(newCore("claims", cfg, true), b, cfg.ttl), nil
}

// NewMemoryClaims returns an empty claims store in this process's memory,
// with the same behaviour as a Redis one (the storetest suite checks both):
// for tests and single-process programs. Options: WithTTL (default 0: never
// expire), WithClock (default time.Now), WithObserver.
func NewMemoryClaims(opts ...Option) (*Claims, error) {
	cfg, err := memoryConfig("claims", DefaultClaimsPrefix, opts)
	if err != nil {
		return nil, err
	}
	b := &memClaims{m: map[string]memClaim{}, now: cfg.now}
	return newClaimsOn(newCore("claims", cfg, false), b, cfg.ttl), nil
}

// newClaimsOn returns a Claims on backend b.
func newClaimsOn(c core, b claimsBackend, ttl time.Duration) *Claims {
	return &Claims{core: c, b: b, ttl: ttl, gather: gatherer{b: b, delay: batchDelay}}
}

// Close closes the client if the store opened it (OpenClaims); for a store
// made with NewClaims or NewMemoryClaims it does nothing. On a nil *Claims
// it returns nil: there is nothing to close.
func (s *Claims) Close() error {
	if s == nil {
		return nil
	}
	return s.b.close()
}

// Claim marks id processed if no one has claimed it, and reports whether it
// did: true for the first delivery, false for an id already processed or in
// flight. It stores "1" under prefix+id with the store's TTL, the data of a
// `SET key 1 NX PX ttl` dedupe.
//
// Claim is a dedupe mark taken BEFORE the effect: if the effect then fails,
// or the process dies, the id is still marked and every redelivery is
// dropped. Use it for effects that are idempotent themselves or cheap to
// lose; use Do to apply an effect exactly once. Do not retry a Claim that
// failed with a network error and treat its false as a duplicate: the first
// call may have landed, and the message would be dropped (Do has no such
// window: a retry of Do after a network error finds the lease and answers
// ErrInFlight until it expires).
func (s *Claims) Claim(ctx context.Context, id string) (bool, error) {
	if s == nil {
		return false, nilStore("claim", id, "Claims")
	}
	return s.claim(ctx, "claim", id)
}

// claim is Claim, reported as op.
func (s *Claims) claim(ctx context.Context, op, id string) (bool, error) {
	var n int64
	err := s.observe(ctx, op, "claim", id, func() (Outcome, error) {
		err := s.check(ctx, "claim", id)
		if err == nil {
			n, _, err = s.b.claim(ctx, "claim", id, "1", s.ttl, nil)
		}
		return claimOutcome(n), err
	})
	return n == 1, err
}

// Seen reports whether id is claimed, processed or in flight.
func (s *Claims) Seen(ctx context.Context, id string) (bool, error) {
	if s == nil {
		return false, nilStore("seen", id, "Claims")
	}
	var n int64
	err := s.observe(ctx, "seen", "seen", id, func() (Outcome, error) {
		err := s.check(ctx, "seen", id)
		if err == nil {
			n, err = s.b.seen(ctx, id)
		}
		return seenOutcome(n == 1), err
	})
	return n == 1, err
}

// Remember marks id processed; it is Claim without the answer (and, like
// Claim, a mark taken whatever the effect does).
func (s *Claims) Remember(ctx context.Context, id string) error {
	if s == nil {
		return nilStore("remember", id, "Claims")
	}
	_, err := s.claim(ctx, "remember", id)
	return err
}

// Forget removes id's claim, processed or in flight, so it can be claimed again.
// Forgetting an unknown id is not an error.
func (s *Claims) Forget(ctx context.Context, id string) error {
	if s == nil {
		return nilStore("forget", id, "Claims")
	}
	return s.observe(ctx, "forget", "forget", id, func() (Outcome, error) {
		var n int64
		err := s.check(ctx, "forget", id)
		if err == nil {
			n, err = s.b.forget(ctx, id)
		}
		return found(n == 1, outForgotten), err
	})
}

// Do applies fn's effect exactly once per id across every consumer (as long
// as fn itself completes or fails as a whole), and guarantees a message is
// never dropped because a consumer crashed:
//
//   - it claims id with a lease ("~<token>" expiring after lease);
//   - an id already processed: (false, nil), ack the message;
//   - an id another consumer holds: (false, ErrInFlight), redeliver it later,
//     since the holder may yet fail. RetryAfter(err) is the time left on
//     the holder's lease, the delay worth giving the redelivery;
//   - otherwise fn runs, and while it runs the lease is extended every
//     lease/4 (extend.lua, fenced by the token), so a live consumer never
//     loses it however long fn takes. fn's context carries the Lease
//     (LeaseFromContext) and never outlives the lease: Do keeps a local
//     lease deadline (the send time of the last successful claim or
//     extension, plus lease, minus 1% and up to 20 ms), cancels fn's context
//     there with a cause wrapping ErrLeaseLost (context.Cause) unless an
//     extension moved it, and reports it as ctx.Deadline(); ctx.Err() reads
//     the clock, so fn sees the loss at once after a pause. An extension
//     that finds the lease lost (the id was forgotten, or taken by another
//     consumer) cancels it at once; one that fails is retried while the
//     deadline lasts. With a round trip up to lease/2 the lease holds.
//   - If fn fails (or panics) the lease is released so a redelivery can retry,
//     and fn's error is returned with ran = true.
//   - If fn succeeds the lease is committed into a processed mark with the
//     store's TTL. The commit is never refused for memory (commit.lua carries
//     allow-oom); one that finds the key absent (the lease expired and nobody
//     took the id) writes the mark and succeeds. Only a key held by another
//     consumer's lease, or already processed by another consumer, returns
//     (true, ErrLeaseLost): the effect may have run twice.
//
// A commit that fails on the way (a lost connection, a failed redial) is
// retried for up to 5 seconds. A retry that finds the mark already there
// succeeds only when the mark is provably this commit's own earlier attempt:
// the lease was never found lost and the retry's reply came back before the
// local lease deadline, so it ran while nobody else could have held the id.
// Otherwise the mark, a plain "1", may be another consumer's, and Do returns
// (true, ErrLeaseLost).
//
// A consumer that crashes holding a lease stops extending it and lets it
// expire, and the next delivery runs fn: pick a lease a little longer than the
// longest pause you accept before a redelivery takes over (seconds, not the
// length of fn). lease must be > 0.
func (s *Claims) Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (ran bool, err error) {
	if s == nil {
		return false, nilStore("do", id, "Claims")
	}
	err = s.observeDo(ctx, id, func() (out Outcome, err error) {
		ran, out, err = s.do(ctx, id, lease, fn)
		return out, err
	})
	return ran, err
}

// do is Do, with its outcome.
func (s *Claims) do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, Outcome, error) {
	if err := s.check(ctx, "do", id); err != nil {
		return false, outcome(err, outError), err
	}
	if fn == nil {
		return false, outInvalid, errorf("do", id, ErrInvalidArgument, "nil fn")
	}
	return s.doOn(ctx, s.b, id, lease, fn, nil)
}

// commit is Do's final write after fn succeeded: commit.lua, under ctx (the
// final write's own budget), retried on transport failures (retryLost).
// deadline and lost are the lease as the heartbeat last knew it.
//
// Which commit replies are a success, and why each is sound:
//   - 1: the key held this Do's "~<token>", which nobody else writes: the
//     lease was never taken, and the mark is ours.
//   - 2: the key was absent (the lease expired and nobody holds the id): no
//     other caller's effect is marked done, so ours is the one recorded. (A
//     caller that took the id meanwhile and failed released it; its effect
//     failed as a whole.)
//   - 0 on the first attempt: another caller processed the id: ErrLeaseLost.
//   - 0 after a retry: "1" is there, and it is our own earlier attempt only
//     if nobody else could have taken the id before the attempt that found
//     it ran. That is provable when the heartbeat never found the lease lost
//     and that attempt's reply came back before the local lease deadline:
//     the attempt ran before its reply, so before the server could let the
//     lease go (the deadline is the send time of the last successful claim or
//     extension plus the lease, minus the clock-rate margin), while the key
//     still held our token or the mark our own commit wrote. Otherwise
//     another caller may have taken the id over, run and committed, and a
//     success would hide a double effect: ErrLeaseLost.
//   - -1: another caller's lease: ErrLeaseLost.
func (s *Claims) commit(ctx context.Context, ops leaseOps, id, token string, deadline time.Time, lost bool) (Outcome, error) {
	var n int64
	var answered time.Time
	attempts := 0
	err := retryLost(ctx, func(ctx context.Context) (err error) {
		attempts++
		n, err = ops.commit(ctx, id, token, s.ttl)
		answered = time.Now()
		return err
	})
	if err != nil {
		return outcome(err, outError), err
	}
	switch {
	case n == 1 || n == 2:
		return outCommitted, nil
	case n == 0 && attempts > 1 && !lost && answered.Before(deadline):
		// A retry found the mark while the lease was provably still ours:
		// the first attempt landed.
		return outCommitted, nil
	case n == 0 && attempts > 1:
		return outLeaseLost, errorf("do", id, ErrLeaseLost, "a retried commit found the id processed after the lease may have passed: another consumer may have processed it too")
	case n == 0:
		return outLeaseLost, errorf("do", id, ErrLeaseLost, "another consumer processed the id")
	default:
		return outLeaseLost, errorf("do", id, ErrLeaseLost, "another consumer holds the id")
	}
}

// newLeaseValue returns "~" and a newToken in one allocation.
func newLeaseValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	var v [1 + 32]byte
	v[0] = '~'
	hex.Encode(v[1:], b[:])
	return string(v[:])
}
