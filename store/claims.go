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
	c      redisClient
	owned  bool
	prefix string
	ttl    string // decimal ms, "0" = never expire
	err    error
	// leaseMS remembers the last lease Do rendered: callers pass the same one.
	leaseMS msCache
}

var _ ClaimStore = (*Claims)(nil)

// NewClaims returns a claims store on a client the caller keeps: Close does not
// close it. Options: WithPrefix (default "bq:idemp:"), WithTTL (default 0: a
// processed id is remembered forever).
//
// For the performance measured in BENCHMARKS.md, build the client from
// ClientOptions (DisableCache: true, MaxFlushDelay: 20µs), as OpenClaims does:
// the store never uses client-side caching.
func NewClaims(c rueidis.Client, opts ...Option) *Claims {
	cfg := newConfig(DefaultClaimsPrefix, opts)
	return &Claims{c: newRedisClient(c, cfg), prefix: cfg.prefix, ttl: ms(cfg.ttl), err: cfg.err}
}

// OpenClaims connects to url (redis://, rediss://, unix://; see rueidis.ParseURL)
// with ClientOptions and returns a claims store that owns the client: Close
// closes it.
func OpenClaims(url string, opts ...Option) (*Claims, error) {
	c, err := openClient(url)
	if err != nil {
		return nil, err
	}
	s := NewClaims(c, opts...)
	if s.err != nil {
		c.Close()
		return nil, s.err
	}
	s.owned = true
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
		return nil, fmt.Errorf("redisonce: open %q: %w", url, err)
	}
	return c, nil
}

// Claim marks id processed if no one has claimed it: true means this is the
// first delivery and the caller should apply its effect. It returns false for an
// id already processed or in flight. Claim is the seed contract: it stores "1"
// under prefix+id with the store's TTL.
func (s *Claims) Claim(ctx context.Context, id string) (bool, error) {
	if err := s.check(ctx, "claim", id); err != nil {
		return false, err
	}
	n, err := replyInt("claim", id, scriptClaim.exec(ctx, s.c, s.prefix+id, s.ttl, "1"))
	return n == 1, err
}

// ClaimMany claims every id in one round trip (a pipelined batch of EVALSHA, one
// per id; on a cluster the ids may live on different nodes). The result holds,
// per id, what Claim would have returned; of duplicates inside one batch the
// first wins. Every id is validated before anything is sent. When some entries
// fail (a connection error), the error names the first and the others' results
// are still filled in.
func (s *Claims) ClaimMany(ctx context.Context, ids []string) ([]bool, error) {
	for _, id := range ids {
		if err := s.check(ctx, "claim", id); err != nil {
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
		out[i] = n == 1
	}
	return out, first
}

// Seen reports whether id is claimed, processed or in flight.
func (s *Claims) Seen(ctx context.Context, id string) (bool, error) {
	if err := s.check(ctx, "seen", id); err != nil {
		return false, err
	}
	n, err := replyInt("seen", id, scriptSeen.exec(ctx, s.c, s.prefix+id))
	return n == 1, err
}

// Remember marks id processed; it is Claim without the answer.
func (s *Claims) Remember(ctx context.Context, id string) error {
	_, err := s.Claim(ctx, id)
	return err
}

// Forget removes id's claim, processed or in flight, so it can be claimed again.
// Forgetting an unknown id is not an error.
func (s *Claims) Forget(ctx context.Context, id string) error {
	if err := s.check(ctx, "forget", id); err != nil {
		return err
	}
	_, err := replyInt("forget", id, scriptForget.exec(ctx, s.c, s.prefix+id))
	return err
}

// Do applies fn's effect at most once per id across every consumer, and
// guarantees a message is never dropped because a consumer crashed:
//
//   - it claims id with a lease ("~<token>" expiring after lease);
//   - an id already processed: (false, nil), ack the message;
//   - an id another consumer holds: (false, ErrInFlight), redeliver it later,
//     since the holder may yet fail;
//   - otherwise fn runs. If fn fails (or panics) the lease is released so a
//     redelivery can retry, and fn's error is returned with ran = true. If fn
//     succeeds the lease is committed into a processed mark with the store's TTL;
//     a commit that finds the lease gone (it expired and another consumer took
//     the id, or it was forgotten) returns (true, ErrLeaseLost).
//
// A consumer that crashes holding a lease simply lets it expire, and the next
// delivery runs fn. Pick a lease longer than fn's longest run: past it, a second
// consumer may run fn concurrently. lease must be > 0.
func (s *Claims) Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (ran bool, err error) {
	if err := s.check(ctx, "do", id); err != nil {
		return false, err
	}
	if lease <= 0 {
		return false, errorf("do", id, ErrInvalidArgument, "lease %v must be > 0", lease)
	}
	value := newLeaseValue()
	token := value[1:] // the token shares the value's string
	key := s.prefix + id
	n, err := replyInt("do", id, scriptClaim.exec(ctx, s.c, key, s.leaseMS.ms(lease), value))
	if err != nil {
		return false, err
	}
	switch n {
	case 0:
		return false, nil
	case -1:
		return false, fmt.Errorf("redisonce: do %q: %w", id, ErrInFlight)
	}
	return true, runLeased(ctx, id, fn,
		func(ctx context.Context) (bool, error) {
			n, err := replyInt("commit", id, scriptCommit.exec(ctx, s.c, key, token, s.ttl))
			return n == 1, err
		},
		func(ctx context.Context) error {
			_, err := replyInt("release", id, scriptRelease.exec(ctx, s.c, key, token))
			return err
		})
}

// runLeased is Do after a won claim, shared by Claims and MemoryClaims: run fn,
// then commit on success or release on failure or panic. Commit and release run
// even when ctx is already cancelled, bounded by a short timeout, and are
// retried when their connection is lost (retryLost).
func runLeased(ctx context.Context, id string, fn func(context.Context) error,
	commit func(context.Context) (bool, error), release func(context.Context) error) (err error) {
	done := false
	defer func() {
		if done {
			return
		}
		// fn panicked: give the id back before the panic goes on.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = retryLost(rctx, release)
	}()
	fnErr := fn(ctx)
	done = true
	if fnErr != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := retryLost(rctx, release); rerr != nil {
			// The lease will expire on its own; report both.
			return errors.Join(fnErr, rerr)
		}
		return fnErr
	}
	// The effect has happened: commit even if ctx was cancelled meanwhile, so a
	// redelivery does not run it again.
	// A commit whose connection was lost is retried: if the first one did
	// happen, the retry finds "1" and reports ErrLeaseLost, which still tells
	// the caller the message is processed.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var ok bool
	err = retryLost(cctx, func(ctx context.Context) (err error) {
		ok, err = commit(ctx)
		return err
	})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("redisonce: do %q: %w", id, ErrLeaseLost)
	}
	return nil
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
