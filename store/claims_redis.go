package store

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

var (
	scriptClaim   = mustScript("claim")
	scriptSeen    = mustScript("seen")
	scriptForget  = mustScript("forget")
	scriptCommit  = mustScript("commit")
	scriptRelease = mustScript("release")
	scriptExtend  = mustScript("extend")

	scriptClaimMany = mustScript("claim_many")
	scriptSeenMany  = mustScript("seen_many")
)

// Claims dedupes message ids in Redis: key prefix+id holds "1" once the message
// is processed, or "~<token>" while a consumer running Do holds a lease on it.
// It is safe for concurrent use.
type Claims struct {
	redisStore
	ttl time.Duration // 0 = never expire
	// ttlMS and leaseMS render ttl and Do's lease for the scripts; callers
	// pass the same lease every time, so no string is allocated for it.
	ttlMS, leaseMS msCache
	ev             events
}

var _ ClaimStore = (*Claims)(nil)

// NewClaims returns a claims store on a client the caller keeps: Close does not
// close it. Options: WithPrefix (default "bq:idemp:"), WithTTL (default 0: a
// processed id is remembered forever, and its key is never freed; set a TTL a
// little longer than the longest time a message may be redelivered). An
// invalid option is returned by every call (OpenClaims fails with it instead).
//
// For the performance measured in BENCHMARKS.md, build the client from
// ClientOptions (DisableCache: true, MaxFlushDelay: 20µs), as OpenClaims does:
// the store never uses client-side caching.
func NewClaims(c rueidis.Client, opts ...Option) *Claims {
	cfg := newConfig(DefaultClaimsPrefix, opts)
	return &Claims{redisStore: newRedisStore(c, cfg), ttl: cfg.ttl, ev: newEvents("claims", cfg)}
}

// OpenClaims connects to url (redis://, rediss://, unix://, or a Sentinel
// deployment with ?addr=...&master_set=NAME) with ClientOptions and returns
// a claims store that owns the client: Close
// closes it. An invalid option fails here, before connecting; errors show the
// URL without its password.
func OpenClaims(url string, opts ...Option) (*Claims, error) {
	s := NewClaims(nil, opts...)
	if err := s.open(url); err != nil {
		return nil, err
	}
	return s, nil
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
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	var n int64
	err := s.check(ctx, "claim", id)
	if err == nil {
		n, err = replyInt("claim", id, s.exec(ctx, scriptClaim, s.key(id), s.ttlMS.ms(s.ttl), "1"))
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, op, "claim", id, 1, outcome(err, claimOutcome(n)), start, err)
	}
	return n == 1, err
}

// Seen reports whether id is claimed, processed or in flight.
func (s *Claims) Seen(ctx context.Context, id string) (bool, error) {
	if s == nil {
		return false, nilStore("seen", id, "Claims")
	}
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	var n int64
	err := s.check(ctx, "seen", id)
	if err == nil {
		n, err = replyInt("seen", id, s.exec(ctx, scriptSeen, s.key(id)))
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, "seen", "seen", id, 1, outcome(err, seenOutcome(n == 1)), start, err)
	}
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
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	var n int64
	err := s.check(ctx, "forget", id)
	if err == nil {
		n, err = replyInt("forget", id, s.exec(ctx, scriptForget, s.key(id)))
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, "forget", "forget", id, 1, outcome(err, found(n == 1, OutcomeForgotten)), start, err)
	}
	return err
}

// Do applies fn's effect exactly once per id across every consumer (as long
// as fn itself completes or fails as a whole), and guarantees a message is
// never dropped because a consumer crashed:
//
//   - it claims id with a lease ("~<token>" expiring after lease);
//   - an id already processed: (false, nil), ack the message;
//   - an id another consumer holds: (false, ErrInFlight), redeliver it later,
//     since the holder may yet fail. The error is an *InFlightError: its
//     RetryAfter (or store.RetryAfter(err)) is the time left on the holder's
//     lease, the delay worth giving the redelivery;
//   - otherwise fn runs, and while it runs the lease is extended every
//     lease/4 (extend.lua, fenced by the token), so a live consumer never
//     loses it however long fn takes. fn's context carries the Lease
//     (LeaseFromContext: the token, and a fence above every fence granted
//     for the id before, for a downstream check) and never outlives the
//     lease: Do keeps a local
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
	if s.ev.obs == nil {
		ran, _, err = s.do(ctx, id, lease, fn)
		return ran, err
	}
	start, out := time.Now(), OutcomeReleased // a panic in fn releases the id
	defer func() { s.ev.report(ctx, "do", "", id, 1, out, start, err) }()
	ran, out, err = s.do(ctx, id, lease, fn)
	return ran, err
}

// do is Do, with its outcome.
func (s *Claims) do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, Outcome, error) {
	if err := s.check(ctx, "do", id); err != nil {
		return false, outcome(err, OutcomeError), err
	}
	if fn == nil {
		return false, OutcomeInvalid, errorf("do", id, ErrInvalidArgument, "nil fn")
	}
	if lease <= 0 {
		return false, OutcomeInvalid, errorf("do", id, ErrInvalidArgument, "lease %v must be > 0", lease)
	}
	value := newLeaseValue()
	token := value[1:] // the token shares the value's string
	key := s.key(id)
	leaseMS := s.leaseMS.ms(lease)
	extend := extendFunc(func(ctx context.Context, sent *time.Time) (bool, error) {
		n, err := replyInt("extend", id, s.execSent(ctx, scriptExtend, key, sent, token, leaseMS))
		return n == 1, err
	})
	if s.ev.obs != nil {
		extend = s.ev.observeExtend(id, "extend", OutcomeLeaseLost, extend)
	}
	// The heartbeat starts before the claim is sent: the local lease deadline
	// counts from the send time, and on a slow link the first extension may
	// have to leave before the claim's reply is back.
	hb := startHeartbeat(ctx, lease, time.Now(), "do", ErrLeaseLost, extend)
	var sent time.Time
	n, fence, err := replyClaimed("do", id, s.execSent(ctx, scriptClaim, key, &sent, leaseMS, value))
	if err != nil || n != 1 {
		hb.stop()
	}
	if err != nil {
		return false, outcome(err, OutcomeError), err
	}
	switch {
	case n == 0:
		return false, OutcomeDuplicate, nil
	case n < 0:
		// claim.lua answers -(ms left on the holder's lease)
		return false, OutcomeInFlight, inFlight("do", id, time.Duration(-n)*time.Millisecond)
	}
	hb.confirm(Lease{ID: id, Token: token, Fence: fence}, sent)
	out, err := runLeased(ctx, hb, id, fn,
		func(ctx context.Context) (int64, error) {
			return replyInt("commit", id, s.exec(ctx, scriptCommit, key, token, s.ttlMS.ms(s.ttl)))
		},
		func(ctx context.Context) error {
			_, err := replyInt("release", id, s.exec(ctx, scriptRelease, key, token))
			return err
		})
	return true, out, err
}
