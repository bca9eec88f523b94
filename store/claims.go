package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// DefaultClaimsPrefix is the key prefix of Claims unless WithPrefix says
// otherwise; it and the value "1" keep the data compatible with consumers that
// dedupe with `SET bq:idemp:<id> 1 NX PX ttl`.
const DefaultClaimsPrefix = "bq:idemp:"

var (
	scriptClaim   = mustScript("claim")
	scriptSeen    = mustScript("seen")
	scriptForget  = mustScript("forget")
	scriptCommit  = mustScript("commit")
	scriptRelease = mustScript("release")
	scriptExtend  = mustScript("extend")
)

// ClaimStore is what Claims and MemoryClaims implement; storetest.TestClaims
// checks any implementation against the contract.
type ClaimStore interface {
	Claim(ctx context.Context, id string) (bool, error)
	ClaimMany(ctx context.Context, ids []string) ([]bool, error)
	Seen(ctx context.Context, id string) (bool, error)
	Remember(ctx context.Context, id string) error
	Forget(ctx context.Context, id string) error
	Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (ran bool, err error)
	Close() error
}

// Claims dedupes message ids in Redis: key prefix+id holds "1" once the message
// is processed, or "~<token>" while a consumer running Do holds a lease on it.
// It is safe for concurrent use.
type Claims struct {
	c      rueidis.Client
	owned  bool
	prefix string
	ttl    string // decimal ms, "0" = never expire
	err    error
	// leaseMS remembers the last lease Do rendered: callers pass the same one.
	leaseMS msCache
	ev      events
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
	return &Claims{c: c, prefix: cfg.prefix, ttl: ms(cfg.ttl), err: cfg.err, ev: newEvents("claims", cfg)}
}

// OpenClaims connects to url (redis://, rediss://, unix://; see rueidis.ParseURL)
// with ClientOptions and returns a claims store that owns the client: Close
// closes it. An invalid option fails here, before connecting; errors show the
// URL without its password.
func OpenClaims(url string, opts ...Option) (*Claims, error) {
	s := NewClaims(nil, opts...) // options are checked before connecting
	if s.err != nil {
		return nil, s.err
	}
	c, err := openClient(url)
	if err != nil {
		return nil, err
	}
	s.c, s.owned = c, true
	return s, nil
}

// openClient connects to url with ClientOptions, the one place where the
// stores' client settings live.
func openClient(url string) (rueidis.Client, error) {
	opt, err := ClientOptions(url)
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, openError(url, err)
	}
	return c, nil
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
		n, err = replyInt("claim", id, scriptClaim.exec(ctx, s.c, s.prefix+id, s.ttl, "1"))
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, op, "claim", id, 1, outcome(err, claimOutcome(n)), start, err)
	}
	return n == 1, err
}

// ClaimMany claims every id in one round trip (a pipelined batch of EVALSHA, one
// per id; on a cluster the ids may live on different nodes). The result holds,
// per id, what Claim would have returned; of duplicates inside one batch the
// first wins. Every id is validated before anything is sent. When some entries
// fail (a connection error), the error names the first and the others' results
// are still filled in.
func (s *Claims) ClaimMany(ctx context.Context, ids []string) ([]bool, error) {
	var tally *claimTally
	if s.ev.obs != nil {
		tally = &claimTally{start: time.Now()}
		defer func() { tally.report(ctx, &s.ev, "claim_many", "claim", len(ids)) }()
	}
	for _, id := range ids {
		if err := s.check(ctx, "claim", id); err != nil {
			tally.fail(err)
			return nil, err
		}
	}
	if len(ids) == 0 {
		return []bool{}, nil
	}
	calls := make([]call, len(ids))
	args := []string{s.ttl, "1"}
	keys := s.keys(ids)
	for i := range ids {
		calls[i] = call{s: scriptClaim, key: keys[i], args: args}
	}
	out := make([]bool, len(ids))
	var first error
	for i, r := range execMulti(ctx, s.c, calls) {
		n, err := replyInt("claim", ids[i], r)
		if err != nil && first == nil {
			first = err
		}
		tally.add(n, err)
		out[i] = n == 1
	}
	return out, first
}

// Seen reports whether id is claimed, processed or in flight.
func (s *Claims) Seen(ctx context.Context, id string) (bool, error) {
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	var n int64
	err := s.check(ctx, "seen", id)
	if err == nil {
		n, err = replyInt("seen", id, scriptSeen.exec(ctx, s.c, s.prefix+id))
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, "seen", "seen", id, 1, outcome(err, seenOutcome(n == 1)), start, err)
	}
	return n == 1, err
}

// Remember marks id processed; it is Claim without the answer (and, like
// Claim, a mark taken whatever the effect does).
func (s *Claims) Remember(ctx context.Context, id string) error {
	_, err := s.claim(ctx, "remember", id)
	return err
}

// Forget removes id's claim, processed or in flight, so it can be claimed again.
// Forgetting an unknown id is not an error.
func (s *Claims) Forget(ctx context.Context, id string) error {
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	var n int64
	err := s.check(ctx, "forget", id)
	if err == nil {
		n, err = replyInt("forget", id, scriptForget.exec(ctx, s.c, s.prefix+id))
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
//     since the holder may yet fail;
//   - otherwise fn runs, and while it runs the lease is extended every
//     lease/3 (extend.lua, fenced by the token), so a live consumer never
//     loses it however long fn takes. fn's context carries the Lease
//     (LeaseFromContext). If an extension finds the lease lost (the id was
//     forgotten, or taken by another consumer) fn's context is cancelled with
//     a cause wrapping ErrLeaseLost (context.Cause); a network error is
//     retried until the lease would actually have run out.
//   - If fn fails (or panics) the lease is released so a redelivery can retry,
//     and fn's error is returned with ran = true.
//   - If fn succeeds the lease is committed into a processed mark with the
//     store's TTL. The commit is never refused for memory (commit.lua carries
//     allow-oom); one that finds the key absent (the lease expired and nobody
//     took the id) writes the mark and succeeds. Only a key held by another
//     consumer's lease, or already processed by another consumer, returns
//     (true, ErrLeaseLost): the effect may have run twice.
//
// A commit whose connection is lost is retried; a retry that finds the mark
// already there is taken as its own earlier attempt having landed, and
// succeeds. (The mark is a plain "1", so this cannot be told apart from
// another consumer having processed the id in the same instant — possible
// only if this consumer's lease had run out just before, which the heartbeat
// prevents.)
//
// A consumer that crashes holding a lease stops extending it and lets it
// expire, and the next delivery runs fn: pick a lease a little longer than the
// longest pause you accept before a redelivery takes over (seconds, not the
// length of fn). lease must be > 0.
func (s *Claims) Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (ran bool, err error) {
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
	if lease <= 0 {
		return false, OutcomeInvalid, errorf("do", id, ErrInvalidArgument, "lease %v must be > 0", lease)
	}
	value := newLeaseValue()
	token := value[1:] // the token shares the value's string
	key := s.prefix + id
	leaseMS := s.leaseMS.ms(lease)
	n, err := replyInt("do", id, scriptClaim.exec(ctx, s.c, key, leaseMS, value))
	if err != nil {
		return false, outcome(err, OutcomeError), err
	}
	switch n {
	case 0:
		return false, OutcomeDuplicate, nil
	case -1:
		return false, OutcomeInFlight, fmt.Errorf("redisonce: do %q: %w", id, ErrInFlight)
	}
	extend := func(ctx context.Context) (bool, error) {
		n, err := replyInt("extend", id, scriptExtend.exec(ctx, s.c, key, token, leaseMS))
		return n == 1, err
	}
	if s.ev.obs != nil {
		extend = s.ev.observeExtend(id, "extend", OutcomeLeaseLost, extend)
	}
	out, err := runLeased(ctx, id, token, lease, fn, extend,
		func(ctx context.Context) (int64, error) {
			return replyInt("commit", id, scriptCommit.exec(ctx, s.c, key, token, s.ttl))
		},
		func(ctx context.Context) error {
			_, err := replyInt("release", id, scriptRelease.exec(ctx, s.c, key, token))
			return err
		})
	return true, out, err
}

// runLeased is Do after a won claim, shared by Claims and MemoryClaims: run fn
// with the lease kept alive (keepAlive), then commit on success or release on
// failure or panic. Commit and release run even when ctx is already
// cancelled, bounded by a short timeout, and are retried when their
// connection is lost (retryLost). commit returns commit.lua's reply.
func runLeased(ctx context.Context, id, token string, lease time.Duration, fn func(context.Context) error,
	extend extendFunc, commit func(context.Context) (int64, error), release func(context.Context) error) (out Outcome, err error) {
	hb := keepAlive(ctx, lease, Lease{ID: id, Token: token}, "do", ErrLeaseLost, extend)
	done := false
	defer func() {
		if done {
			return
		}
		// fn panicked: give the id back before the panic goes on.
		hb.stop()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = retryLost(rctx, release)
	}()
	fnErr := fn(hb)
	done = true
	hb.stop()
	if fnErr != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := retryLost(rctx, release); rerr != nil {
			// The lease will expire on its own; report both.
			return OutcomeError, errors.Join(fnErr, rerr)
		}
		return OutcomeReleased, fnErr
	}
	// The effect has happened: commit even if ctx was cancelled meanwhile, so a
	// redelivery does not run it again.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var n int64
	attempts := 0
	err = retryLost(cctx, func(ctx context.Context) (err error) {
		attempts++
		n, err = commit(ctx)
		return err
	})
	if err != nil {
		return outcome(err, OutcomeError), err
	}
	switch {
	case n == 1 || n == 2:
		return OutcomeCommitted, nil
	case n == 0 && attempts > 1:
		// A retry after a lost connection found the mark: the first attempt landed.
		return OutcomeCommitted, nil
	case n == 0:
		return OutcomeLeaseLost, errorf("do", id, ErrLeaseLost, "another consumer processed the id")
	default:
		return OutcomeLeaseLost, errorf("do", id, ErrLeaseLost, "another consumer holds the id")
	}
}

// Close closes the client if the store opened it (OpenClaims); for a store made
// with NewClaims it does nothing.
func (s *Claims) Close() error {
	if s.owned {
		s.c.Close()
	}
	return nil
}

func (s *Claims) check(ctx context.Context, op, id string) error {
	if s.err != nil {
		return s.err
	}
	return checkID(ctx, op, id)
}

// keys returns prefix+id for every id, all cut from one string: one
// allocation for a whole batch instead of one per key.
func (s *Claims) keys(ids []string) []string {
	return prefixKeys(s.prefix, ids)
}

// prefixKeys returns prefix+id for every id as substrings of one string.
func prefixKeys(prefix string, ids []string) []string {
	n := 0
	for _, id := range ids {
		n += len(prefix) + len(id)
	}
	var b strings.Builder
	b.Grow(n)
	for _, id := range ids {
		b.WriteString(prefix)
		b.WriteString(id)
	}
	all := b.String()
	keys := make([]string, len(ids))
	off := 0
	for i, id := range ids {
		end := off + len(prefix) + len(id)
		keys[i] = all[off:end]
		off = end
	}
	return keys
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

// newToken returns 32 lower-case hex characters from crypto/rand.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	return hex.EncodeToString(b[:])
}
