package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// defaultRecordsPrefix is the key prefix of Records unless WithPrefix says
// otherwise: a record lives in the string "idempotency:<key>".
const defaultRecordsPrefix = "idempotency:"

// DefaultRecordsTTL is how long a record lives unless WithTTL or
// AcquireOptions.TTL says otherwise: 24 hours, the retention of Stripe's
// idempotency keys. A client retrying later than that runs the request again.
const DefaultRecordsTTL = 24 * time.Hour

// Limits of a record, checked in Go (ErrInvalidArgument, nothing sent) and again
// by the scripts (BADARG, nothing written). Keys are limited by MaxIDLen.
const (
	// MaxRecordPayloadLen is the largest payload a record stores: 1 MiB. A stored
	// result is replayed on every retry, so it should stay small; put a large
	// result elsewhere and store a reference to it.
	MaxRecordPayloadLen = 1 << 20
	// maxStatusLen is the longest status, in bytes; a status is never empty.
	maxStatusLen = 64
	// maxFingerprintLen is the longest request fingerprint, in bytes: room for
	// a hex or base64 digest of the request, not for the request itself.
	maxFingerprintLen = 256
	// maxTokenLen is the longest owner token, in bytes. The stores mint 32 hex
	// characters; non-Go callers may use any 1..maxTokenLen bytes.
	maxTokenLen = 256
	// MaxSmallPayloadLen is the largest payload Do's final write stores when
	// Redis is out of memory (maxmemory under noeviction): that write
	// (complete.lua) runs anyway, so an effect that happened is recorded, and
	// grows memory by at most this much. A larger result is then not stored:
	// the record is marked failed with a note saying so.
	MaxSmallPayloadLen = 1024
)

// maxFence is the largest fence a record holds: 9999999999999999999, the
// largest decimal of 19 digits (the scripts keep fences canonical and within
// uint64). A pending record at maxFence whose lease passed is not taken over.
const maxFence uint64 = 9999999999999999999

// ErrFailed is returned by Do for a key whose record is failed: an earlier run
// of fn returned an error marked with Permanent, stored as the record's
// payload. Do does not run fn again for that key until the record expires or
// is deleted; the error's text ends with the stored one.
var ErrFailed = errors.New("failed")

// Status is a record's lifecycle state. The three constants are the ones the
// stores give meaning to; Update may store any other 1..maxStatusLen bytes.
type Status string

// The statuses of a record.
const (
	// StatusPending: the work is in progress (or was abandoned); a pending
	// record with a lease is taken over by the next acquire once the lease passes.
	StatusPending Status = "pending"
	// StatusCompleted: the work is done and Payload holds its result.
	StatusCompleted Status = "completed"
	// StatusFailed: the work failed and Payload holds the error text.
	StatusFailed Status = "failed"
)

// Record is one idempotency record. Times have millisecond precision and come
// from the store's clock (the Redis server's TIME for Records); a zero time
// means "none".
type Record struct {
	// Key is the caller's key, without the store's prefix.
	Key string
	// Status is the record's state.
	Status Status
	// Payload is the stored result (or error text), at most MaxRecordPayloadLen bytes.
	Payload []byte
	// ExpiresAt is when the record expires (its retention); zero: never. While
	// the record is pending with a lease that runs past ExpiresAt it lives
	// until the lease passes instead, so a live owner never loses it to
	// expiry; a final write after ExpiresAt passed moves ExpiresAt to the
	// record's retention (ExpiresAt - CreatedAt) from then. For Records it is
	// the Redis key's expiry (PEXPIREAT), or LeaseUntil in that case.
	ExpiresAt time.Time
	// CreatedAt is when the record was created; a takeover keeps it.
	CreatedAt time.Time
	// UpdatedAt is when the record was last written (created, taken over or updated).
	UpdatedAt time.Time
	// LeaseUntil is when the current owner's lease passes; zero: no lease (the
	// record is not pending, or was acquired without one).
	LeaseUntil time.Time
	// Fence counts the acquisitions of this incarnation of the record: 1 when it
	// is created, +1 on every takeover. It restarts at 1 when the record is
	// deleted or expires and is created again.
	Fence uint64
	// Token is the owner's token. It is set only in the Record returned to the
	// caller that acquired it (acquired == true); reads and other callers get "".
	Token string
	// Fingerprint is the request fingerprint the record was acquired with ("" = none).
	Fingerprint string
}

// Update is a partial change to a record; nil fields are left as they are, and
// at least one of Status, Payload, ExpiresAt and LeaseUntil must be set.
type Update struct {
	// Status sets the status (1..maxStatusLen bytes). Any status other than
	// StatusPending clears the lease, whatever LeaseUntil says.
	Status *Status
	// Payload sets the payload (at most MaxRecordPayloadLen bytes).
	Payload *[]byte
	// ExpiresAt moves the record's expiry; a pointer to the zero time removes
	// it (the record never expires), a time at or before now expires the record
	// at once (it is deleted and Update returns nil). A pending record whose
	// lease runs past a new ExpiresAt still lives until the lease passes
	// (Record.ExpiresAt). The Redis store sends update.lua a duration,
	// time.Until(ExpiresAt) rounded up to the ms, which the script adds to
	// the server's TIME: the expiry follows the server's clock, as every
	// lease and TTL does.
	ExpiresAt *time.Time
	// LeaseUntil moves the pending owner's lease deadline; a pointer to the zero
	// time removes the lease. Sent as a duration from now, like ExpiresAt.
	LeaseUntil *time.Time
	// Token fences the update: when set, it applies only if Token is the
	// record's current owner token, else ErrStaleOwner and nothing changes.
	// Empty: unfenced.
	Token string
}

// AcquireOptions says how to acquire a record.
type AcquireOptions struct {
	// TTL is how long a new record lives, counted from its creation (a
	// takeover does not extend it). A pending record whose lease runs past
	// it lives until the lease passes (see Record.ExpiresAt): a TTL shorter
	// than the lease or than Do's fn never expires a record under its live
	// owner, and Do's result is then kept for TTL from its final write.
	// Default 0: the store's WithTTL, itself default DefaultRecordsTTL (24
	// hours). Negative values are invalid.
	TTL time.Duration
	// Lease is how long the caller owns a new record, or one it takes over,
	// while it does the work. Once the lease passes, the next acquire of the
	// pending record takes it over with a new token and Fence + 1, and the
	// former owner's fenced Update and DeleteFenced fail with ErrStaleOwner.
	// Default 0: no lease, a pending record is never taken over (it waits for
	// its TTL or an Update). Negative values are invalid; Do needs Lease > 0.
	Lease time.Duration
	// Fingerprint identifies the request made with the key (a digest of its
	// method, path and body, say), at most 256 bytes. When the
	// record and the caller both have a non-empty fingerprint and they differ,
	// the acquire fails with ErrFingerprintMismatch and changes nothing. An
	// empty fingerprint on either side is not checked; a record created without
	// one adopts the first non-empty fingerprint of a caller that takes it over.
	Fingerprint string
	// Wait is how long Do waits, when the key is in flight under another
	// owner, for that owner to finish: then Do answers as it would have
	// after it (the stored result, replayed; or fn runs, if the owner gave
	// the key back or it expired), and ErrInFlight only once Wait has passed
	// with the record still pending. The wait is pushed, not polled: the
	// owner's final write notifies the waiters (Records: a shard-channel
	// message, SSUBSCRIBE/SPUBLISH on the record's own key, see watch.lua),
	// and a waiter reads the record again at least once a second in case a
	// notice is missed (an expiry, an unfenced Delete, a lost connection).
	// Default 0: no wait, ErrInFlight at once. Negative values are invalid.
	// Do only; AcquireWith ignores it.
	Wait time.Duration
}

// Retryable marks fn's error as transient for Do: Do deletes the record
// (fenced by its token) so that the next Do for the key runs fn again. This is
// what Do does with every error not marked Permanent, so Retryable only
// documents intent — or overrides a Permanent mark deeper in the chain. Do
// returns the marked error; errors.Is and errors.As see through the mark.
// Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return retryableError{err}
}

type retryableError struct{ err error }

func (e retryableError) Error() string { return e.err.Error() }
func (e retryableError) Unwrap() error { return e.err }

// Permanent marks fn's error as final for Do: the record is stored as failed
// with the error's text as payload, Do returns the error, and every later Do
// for the key replays the text with ErrFailed instead of running fn, until the
// record expires or is deleted — for an outcome that a retry of the same
// request must see again (a declined card, a validation failure). A context
// error (context.Canceled, context.DeadlineExceeded) is never stored, marked
// or not; nor is an error also marked Retryable. errors.Is and errors.As see
// through the mark. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err is marked Permanent (and not also
// Retryable), and is not a context error: what Records.Do stores as failed.
// Integrations use it for their failure policy (the streams runner
// dead-letters such an entry at once; JetStream terminates it; Kafka sends it
// to the dead-letter function).
func IsPermanent(err error) bool { return storeFailure(err) }

// storeFailure says whether Do stores fn's error as a failed record.
func storeFailure(err error) bool {
	var p permanentError
	var r retryableError
	return errors.As(err, &p) && !errors.As(err, &r) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// leaseLeft is the time from now to a pending record's lease deadline, at
// least 1 ms (the holder's lease may be extended meanwhile); 0 when the record
// has no lease (it never expires).
func leaseLeft(until, now time.Time) time.Duration {
	if until.IsZero() {
		return 0
	}
	return max(until.Sub(now), time.Millisecond)
}

// Records keeps idempotency records, one per key: in Redis (NewRecords,
// OpenRecords; one string per key, prefix+key, every time in a record from
// the server's TIME) or in this process (NewMemoryRecords), with the same
// behaviour. Keys holding anything a records script did not write make
// Acquire, Get, Update and DeleteFenced fail with ErrUnexpectedReply; Delete
// removes them. It is safe for concurrent use.
type Records struct {
	core
	b   recordsBackend
	ttl time.Duration
}

// recordsBackend is where Records' records live: Redis (one script per
// method) or memory (the same statements in Go). It only runs the
// operation; the arguments were checked by Records. op names the operation
// in errors.
type recordsBackend interface {
	// acquire is acquire.lua with token the new owner token (minted by the
	// caller: Do's heartbeat renews with it before the reply is back) and
	// o.TTL already resolved; held says a Do in this process will renew the
	// lease. sent, when not nil, receives the time the command that ran
	// was sent.
	// It answers acquiredNot, acquiredNew or acquiredTakeover.
	acquire(ctx context.Context, op, key string, o AcquireOptions, token string, held bool, sent *time.Time) (Record, int64, error)
	// get is get.lua: the record without its token, or false.
	get(ctx context.Context, key string) (Record, bool, error)
	// update is update.lua with f, an Update checked and converted.
	update(ctx context.Context, op, key string, f updateFields) error
	// complete is complete.lua: the fenced final write of a small outcome
	// (checked by checkSmall), which Redis runs even when memory is full.
	complete(ctx context.Context, op, key, token string, status Status, payload []byte) error
	// del is delete.lua: fenced by token, or unconditional with "". True
	// when it removed a record.
	del(ctx context.Context, op, key, token string) (bool, error)
	// renew is renew.lua: 1 renewed, 0 absent, -1 another owner or not pending.
	renew(ctx context.Context, key, token string, lease time.Duration, sent *time.Time) (int64, error)
	// waitDone waits for key's pending record to change, calling again (the
	// next acquire) whenever it may have (its final write was notified, or
	// it is no longer pending), and at least every waitRecheck, until again
	// returns true or until passes; ctx's error when ctx ends.
	waitDone(ctx context.Context, key string, until time.Time, again func() bool) error
	// clock is the time a record's LeaseUntil is read against, for the
	// time left RetryAfter reports.
	clock() time.Time
	close() error
}

// NewRecords returns a records store on a client the caller keeps: Close does
// not close it. Options: WithPrefix (default "idempotency:"), WithTTL (default
// DefaultRecordsTTL, 24 hours; WithTTL(0): records acquired with TTL 0 never
// expire), WithWaitReplicas, WithObserver. An invalid option, one that does
// not apply (Option), or a nil client fails here.
//
// For the performance measured in BENCHMARKS.md, build the client from
// ClientOptions (DisableCache: true, MaxFlushDelay: 20µs), as OpenRecords does:
// the store never uses client-side caching.
func NewRecords(c rueidis.Client, opts ...Option) (*Records, error) {
	cfg, err := redisConfig("records", defaultRecordsPrefix, c, opts)
	if err != nil {
		return nil, err
	}
	b := &redisRecords{redisStore: newRedisStore(c, cfg, false)}
	return &Records{core: newCore("records", cfg, true), b: b, ttl: cfg.recordsTTL()}, nil
}

// OpenRecords connects to url (redis://, rediss://, unix://, or a Sentinel
// deployment with ?addr=...&master_set=NAME) with ClientOptions and returns a records store that owns
// the client: Close closes it.
func OpenRecords(url string, opts ...Option) (*Records, error) {
	cfg, c, err := openRedis("records", defaultRecordsPrefix, url, opts)
	if err != nil {
		return nil, err
	}
	b := &redisRecords{redisStore: newRedisStore(c, cfg, true)}
	return &Records{core: newCore("records", cfg, true), b: b, ttl: cfg.recordsTTL()}, nil
}

// NewMemoryRecords returns an empty records store in this process's memory,
// with the same behaviour as a Redis one (the storetest suite checks both),
// WithClock's clock in place of the server's TIME: for tests and
// single-process programs. Expired records are dropped when they are next
// touched. Options: WithTTL (default DefaultRecordsTTL, 24 hours; 0: never
// expire), WithClock (default time.Now), WithObserver.
func NewMemoryRecords(opts ...Option) (*Records, error) {
	cfg, err := memoryConfig("records", defaultRecordsPrefix, opts)
	if err != nil {
		return nil, err
	}
	b := &memRecords{m: map[string]*memRecord{}, now: cfg.now}
	return &Records{core: newCore("records", cfg, false), b: b, ttl: cfg.recordsTTL()}, nil
}

// Close closes the client if the store opened it (OpenRecords); for a store
// made with NewRecords or NewMemoryRecords it does nothing. On a nil
// *Records it returns nil.
func (s *Records) Close() error {
	if s == nil {
		return nil
	}
	return s.b.close()
}

// Acquire creates key's record, pending, expiring after ttl (0: the store's
// WithTTL, default 24 hours), and returns it with true; an existing unexpired
// record is returned with false. It is AcquireWith(ctx, key,
// AcquireOptions{TTL: ttl}), without a lease.
func (s *Records) Acquire(ctx context.Context, key string, ttl time.Duration) (Record, bool, error) {
	if s == nil {
		return Record{}, false, nilStore("acquire", key, "Records")
	}
	return s.AcquireWith(ctx, key, AcquireOptions{TTL: ttl})
}

// AcquireWith acquires key's record in one script:
//
//   - no record: it is created, pending, with a new owner token, Fence 1, a
//     lease of o.Lease and an expiry of o.TTL, and returned with true;
//   - a pending record whose lease has passed: it is taken over (new token,
//     Fence + 1, a new lease; status, payload, creation and expiry kept) and
//     returned with true;
//   - any other record: returned unchanged with false and without its token;
//   - o.Fingerprint differs from the record's: ErrFingerprintMismatch.
//
// The returned Record's Token (set only with true) fences the caller's Update
// and DeleteFenced.
func (s *Records) AcquireWith(ctx context.Context, key string, o AcquireOptions) (Record, bool, error) {
	if s == nil {
		return Record{}, false, nilStore("acquire", key, "Records")
	}
	var rec Record
	var got int64
	err := s.observe(ctx, "acquire", "acquire", key, func() (Outcome, error) {
		var err error
		rec, got, err = s.acquire(ctx, "acquire", key, o, newToken(), false, nil)
		return acquireOutcome(got), err
	})
	return rec, got != acquiredNot, err
}

// acquire is AcquireWith with token the new owner token (minted by the caller:
// Do's heartbeat starts before the acquire is sent).
func (s *Records) acquire(ctx context.Context, op, key string, o AcquireOptions, token string, held bool, sent *time.Time) (Record, int64, error) {
	if err := s.check(ctx, op, key); err != nil {
		return Record{}, acquiredNot, err
	}
	if err := o.check(op, key); err != nil {
		return Record{}, acquiredNot, err
	}
	if o.TTL == 0 {
		o.TTL = s.ttl
	}
	return s.b.acquire(ctx, op, key, o, token, held, sent)
}

// Get returns key's record, without its token, and true; (Record{}, false,
// nil) when there is none or it expired. It runs get.lua with EVALSHA_RO, so a
// replica may serve it.
func (s *Records) Get(ctx context.Context, key string) (Record, bool, error) {
	if s == nil {
		return Record{}, false, nilStore("get", key, "Records")
	}
	var rec Record
	var ok bool
	err := s.observe(ctx, "get", "get", key, func() (Outcome, error) {
		err := s.check(ctx, "get", key)
		if err == nil {
			rec, ok, err = s.b.get(ctx, key)
		}
		return found(ok, outRead), err
	})
	return rec, ok, err
}

// Update applies u to key's record in one script and sets UpdatedAt to now:
// ErrNotFound when the record is missing (nothing is created), ErrStaleOwner
// when u.Token is set and the record has another owner (nothing changes). A
// status other than pending clears the lease. An owner whose lease passed
// keeps the record, and may still update it, until another caller takes it over.
func (s *Records) Update(ctx context.Context, key string, u Update) error {
	if s == nil {
		return nilStore("update", key, "Records")
	}
	return s.observe(ctx, "update", "update", key, func() (Outcome, error) {
		return outUpdated, s.update(ctx, "update", key, u)
	})
}

func (s *Records) update(ctx context.Context, op, key string, u Update) error {
	if err := s.check(ctx, op, key); err != nil {
		return err
	}
	f, err := u.fields(op, key)
	if err != nil {
		return err
	}
	return s.b.update(ctx, op, key, f)
}

// Delete removes key's record, whoever owns it; a missing
// key is not an error. It also removes a key that does not hold a record.
func (s *Records) Delete(ctx context.Context, key string) error {
	if s == nil {
		return nilStore("delete", key, "Records")
	}
	return s.observe(ctx, "delete", "delete", key, func() (Outcome, error) {
		ok, err := false, s.check(ctx, "delete", key)
		if err == nil {
			ok, err = s.b.del(ctx, "delete", key, "")
		}
		return found(ok, outDeleted), err
	})
}

// DeleteFenced removes key's record only if token (from the Record that
// AcquireWith returned) is still its owner's: ErrStaleOwner when another
// caller took the record over, and nothing is deleted. A missing key is not an
// error. token must be 1..maxTokenLen bytes.
func (s *Records) DeleteFenced(ctx context.Context, key, token string) error {
	if s == nil {
		return nilStore("delete_fenced", key, "Records")
	}
	return s.observe(ctx, "delete", "delete", key, func() (Outcome, error) {
		ok, err := s.deleteFenced(ctx, "delete", key, token)
		return found(ok, outDeleted), err
	})
}

// deleteFenced is DeleteFenced; true when it removed the record.
func (s *Records) deleteFenced(ctx context.Context, op, key, token string) (bool, error) {
	if err := s.check(ctx, op, key); err != nil {
		return false, err
	}
	if err := checkToken(op, key, token); err != nil {
		return false, err
	}
	return s.b.del(ctx, op, key, token)
}

// Do runs fn at most once per key across every process sharing the store, and
// replays its result to every retry — the flow of an API taking an
// Idempotency-Key, or a queue deduplicating enqueues:
//
//   - acquire key with o (o.Lease must be > 0: it bounds how long a crashed
//     caller blocks the key);
//   - a completed record: its payload is returned with replayed = true, and fn
//     does not run; any status other than pending and failed (set by Update)
//     is replayed the same way;
//   - a failed record: its payload (fn's error text) is returned with replayed
//     = true and an error wrapping ErrFailed; fn does not run again until the
//     record expires or is deleted;
//   - a pending record under another owner's live lease (or without a lease):
//     ErrInFlight; retry later. RetryAfter(err) is the time to the lease's
//     deadline (measured against this
//     process's clock; 0 for a record without a lease). With o.Wait > 0, Do
//     first waits up to o.Wait for that owner's final write and answers as
//     after it: it subscribes to the record's shard channel (SSUBSCRIBE
//     prefix+key), marks the record watched (watch.lua) and the final write
//     publishes (update.lua, delete.lua); nothing is polled, but the record
//     is read again at least once a second in case a notice is missed (an
//     expiry, an unfenced Delete). A final write on a record nobody waits for
//     publishes nothing; a waiter needs Redis >= 7.0 (sharded pub/sub) and,
//     under an ACL, ssubscribe, sunsubscribe and the channels of the prefix;
//   - a different fingerprint under the same key: ErrFingerprintMismatch;
//   - otherwise the caller owns the record and fn runs, with the lease
//     renewed every o.Lease/4 (renew.lua, fenced by the token) so a live
//     owner never loses it however long fn takes, and the Lease (token and
//     fence) in fn's context (LeaseFromContext). fn's context never outlives
//     the lease, as in Claims.Do: it is cancelled at the local lease deadline
//     (the send time of the last successful acquire or renewal, plus
//     o.Lease, minus 1% and up to 20 ms; ctx.Deadline() reports it, ctx.Err()
//     reads the clock) with a cause wrapping ErrStaleOwner (context.Cause),
//     or at once when a renewal finds the record taken over or removed; a
//     renewal that fails is retried while the deadline lasts.
//   - fn's result is stored as completed and returned.
//   - fn's error deletes the record (fenced by the token), so the next Do runs
//     fn again, and is returned as is — whatever it is: a provider's 503, a
//     context.Canceled because the client hung up, a bug. Only an error marked
//     with Permanent (and not a context error) is stored as failed, with the
//     error text (cut to MaxRecordPayloadLen) as payload, and replayed to
//     every later Do with ErrFailed until the record expires or is deleted.
//   - a panic deletes the record and goes on.
//   - A result longer than MaxRecordPayloadLen cannot be stored: the record
//     is marked failed and Do returns the result with ErrInvalidArgument.
//
// The final write is fenced by the owner's token: if another caller took the
// record over (possible only when renewals failed for a whole lease, or after
// an Update that moved the lease), Do returns fn's result with ErrStaleOwner
// and the new owner's record is left alone. A final write that finds the
// record gone (it expired, or was deleted, and nobody acquired the key since)
// creates it again with fn's outcome (fence 1, the TTL counted from now); if
// another caller acquired the key in between, ErrLeaseLost. A final write
// that fails on the way (a lost connection, a failed redial) is retried: it
// is idempotent, and a retry that applies proves the record still holds this
// owner's token, so nobody took it over. The final write runs even when ctx is
// cancelled, with the lease still renewed while it does: it is retried
// through an outage for as long as the lease is held (the local lease
// deadline, which every renewal moves; at least 5 seconds), so a Redis
// paused or restarted for less than the lease leaves the outcome stored, not
// a pending record the next Do would run again.
//
// A caller that crashes stops renewing, and the next Do takes the record
// over once o.Lease passes: pick a lease of a few seconds, not the length of
// fn. Under a full Redis (maxmemory, noeviction) Redis refuses update.lua,
// and the final write goes through complete.lua, which runs anyway
// (allow-oom): it stores a result of at most MaxSmallPayloadLen (1 KiB) as
// usual; a larger one is not stored, the record is marked failed with a note
// saying so (every later Do returns ErrFailed with it, fn does not run
// again), and Do returns the result with an error wrapping Redis's OOM.
// Meanwhile Redis refuses acquire.lua (it may create a record): Do then
// answers a key that holds a record from a read — the stored result
// replayed, ErrFailed, or ErrInFlight — and only a new key gets the OOM
// error.
//
// A store made with NewMemoryRecords runs the same flow; its owner lives in
// this process, so a running Do's lease never passes there (as if renewed
// continuously; a fake clock moved past it cannot take the record over).
func (s *Records) Do(ctx context.Context, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	if s == nil {
		return nil, false, nilStore("do", key, "Records")
	}
	err = s.observeDo(ctx, key, func() (out Outcome, err error) {
		result, replayed, out, err = s.do(ctx, key, o, fn)
		return out, err
	})
	return result, replayed, err
}

// do is Do, with its outcome.
func (s *Records) do(ctx context.Context, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, out Outcome, err error) {
	if err := s.check(ctx, "do", key); err != nil {
		return nil, false, outcome(err, outError), err
	}
	if fn == nil {
		return nil, false, outInvalid, errorf("do", key, ErrInvalidArgument, "nil fn")
	}
	if o.Lease <= 0 {
		return nil, false, outInvalid, errorf("do", key, ErrInvalidArgument, "lease %v must be > 0", o.Lease)
	}
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	token := newToken()
	// finishing: fn has returned and the heartbeat goes on through the
	// give-back or the final write (runLease's hold). A renewal that finds
	// the record no longer pending or gone then meets that write's own
	// doing (or a restart that lost the record, which the final write
	// creates again): not a loss to report; a takeover shows in the fenced
	// write's ErrStaleOwner.
	var finishing atomic.Bool
	renew := extendFunc(func(ctx context.Context, sent *time.Time) (bool, error) {
		n, err := s.b.renew(ctx, key, token, o.Lease, sent)
		if err == nil && n != 1 && finishing.Load() {
			return true, nil
		}
		return n == 1, err
	})
	if s.ev.obs != nil {
		renew = s.ev.observeExtend(key, "renew", outStaleOwner, renew)
	}
	// try acquires the key with a lease (takeLease: its heartbeat started
	// before the acquire is sent, and stopped again unless it won). What it
	// took is a value, not variables try shares with the wait below: those
	// would live on the heap for every Do.
	try := func() (t taken, err error) {
		t.hb, t.sent, err = takeLease(ctx, o.Lease, ErrStaleOwner, renew, func(sent *time.Time) (bool, error) {
			var err error
			t.rec, t.got, err = s.acquire(ctx, "do", key, o, token, true, sent)
			return t.got != acquiredNot, err
		})
		return t, err
	}
	t, err := try()
	if isOOM(err) {
		// Memory is full (maxmemory, noeviction): Redis refuses acquire.lua,
		// which may create a record, up front. A record already there is
		// still answered from a read: replayed, ErrFailed or ErrInFlight.
		if r, ok, gerr := s.b.get(ctx, key); gerr == nil && ok {
			t.rec, err = r, nil
			if o.Fingerprint != "" && r.Fingerprint != "" && o.Fingerprint != r.Fingerprint {
				err = errorf("do", key, ErrFingerprintMismatch, "the key was acquired with a different fingerprint")
			}
		}
	}
	if err == nil && t.got == acquiredNot && t.rec.Status == StatusPending && o.Wait > 0 {
		// In flight: wait for the owner's final write, then look again
		// (each look a fresh acquire, with a heartbeat of its own if it
		// takes the key: the owner gave it back, or its lease ran out).
		var aerr error
		last := t
		err = s.b.waitDone(ctx, key, time.Now().Add(o.Wait), func() bool {
			last, aerr = try()
			return aerr != nil || last.got != acquiredNot || last.rec.Status != StatusPending
		})
		t = last
		switch {
		case t.got != acquiredNot: // the last look took the key: go on, whatever ended the wait
			err = nil
		case err == nil:
			err = aerr
		}
	}
	if err != nil {
		return nil, false, outcome(err, outError), err
	}
	rec := t.rec
	if s.ev.obs != nil && t.got == acquiredTakeover {
		// a takeover is worth an alert of its own: report it apart
		s.ev.report(ctx, "acquire", "acquire", key, 1, outTakenOver, start, nil)
	}
	if t.got == acquiredNot {
		switch rec.Status {
		case StatusPending:
			return nil, false, outInFlight, inFlight("do", key, leaseLeft(rec.LeaseUntil, s.b.clock()))
		case StatusFailed:
			return rec.Payload, true, outReplayed, errorf("do", key, ErrFailed, "%s", rec.Payload)
		default:
			return rec.Payload, true, outReplayed, nil
		}
	}
	giveBack := func(ctx context.Context) error {
		_, err := s.deleteFenced(ctx, "do", key, token)
		return err
	}
	var ret []byte // what Do returns: nil unless the final write ran
	out, err = runLease(ctx, t.hb, Lease{ID: key, Token: token, Fence: rec.Fence}, t.sent, true,
		func(ctx context.Context) (err error) {
			result, err = fn(ctx)
			finishing.Store(true)
			return err
		}, giveBack, storeFailure,
		func(ctx context.Context, fnErr error, _ time.Time, _ bool) (out Outcome, err error) {
			ret, out, err = s.final(ctx, key, o, token, result, fnErr)
			return out, err
		})
	return ret, false, out, err
}

// taken is one acquire of Records.Do: the lease's heartbeat, the acquire's
// send time, the record and acquire's answer (acquiredNot, acquiredNew or
// acquiredTakeover).
type taken struct {
	hb   *heartbeat
	sent time.Time
	rec  Record
	got  int64
}

// final is Do's final write after fn returned (result, fnErr), fnErr nil or
// one to store (storeFailure), under ctx (the final write's own budget); it
// returns what Do returns. The write is retried on a transport failure
// (retryLost): the fenced write is idempotent, and a retried update that
// succeeds is sound whatever the first attempt did: it applied because the
// record still holds this Do's token, and a takeover would have replaced
// the token. A record found gone is created again (acquire), unless another
// caller got there first.
func (s *Records) final(ctx context.Context, key string, o AcquireOptions, token string, result []byte, fnErr error) ([]byte, Outcome, error) {
	write := func(status Status, payload []byte) error {
		// The Update{Status, Payload, Token} Records.update would check and
		// convert, built converted: status is final, payload within
		// MaxRecordPayloadLen and token minted here, and status and payload
		// stay off the heap.
		f := updateFields{status: string(status), payload: payload, setPayload: true, token: token}
		err := retryLostPaced(ctx, outcomePause, func(ctx context.Context) error {
			return s.b.update(ctx, "do", key, f)
		})
		if isOOM(err) {
			return s.completeSmall(ctx, key, token, status, payload, err)
		}
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		// The record is gone (expired or deleted) and nobody holds the key:
		// writing the outcome again records the only effect that completed
		// (a caller that acquired the key meanwhile and failed deleted it).
		again, got, err := s.acquire(ctx, "do", key, o, newToken(), false, nil)
		if err != nil {
			return err
		}
		if got == acquiredNot {
			return errorf("do", key, ErrLeaseLost, "the record was removed and another caller acquired the key")
		}
		f.token = again.Token
		return retryLost(ctx, func(ctx context.Context) error {
			return s.b.update(ctx, "do", key, f)
		})
	}
	// What to store, and what to return once it is stored: fn's result; or a
	// Permanent error's text (cut to the limit); or, for a result too long to
	// store, that error's text, returning the result with the error.
	status, payload, ret, retErr := StatusCompleted, result, result, error(nil)
	switch {
	case fnErr != nil:
		text := []byte(fnErr.Error())
		if len(text) > MaxRecordPayloadLen {
			text = text[:MaxRecordPayloadLen]
		}
		status, payload, ret, retErr = StatusFailed, text, nil, fnErr
	case len(result) > MaxRecordPayloadLen:
		tooLong := errorf("do", key, ErrInvalidArgument, "fn's result is %d bytes, the limit is %d", len(result), MaxRecordPayloadLen)
		status, payload, retErr = StatusFailed, []byte(tooLong.Error()), tooLong
	}
	if err := write(status, payload); err != nil {
		out := outcome(err, outError)
		if retErr != nil {
			err = errors.Join(retErr, err)
		}
		return ret, out, err
	}
	if status == StatusFailed {
		return ret, outFailed, retErr
	}
	return ret, outCompleted, retErr
}

// check validates acquire options before anything is sent.
func (o AcquireOptions) check(op, key string) error {
	switch {
	case o.TTL < 0:
		return errorf(op, key, ErrInvalidArgument, "negative TTL %v", o.TTL)
	case o.Lease < 0:
		return errorf(op, key, ErrInvalidArgument, "negative lease %v", o.Lease)
	case o.Wait < 0:
		return errorf(op, key, ErrInvalidArgument, "negative wait %v", o.Wait)
	case len(o.Fingerprint) > maxFingerprintLen:
		return errorf(op, key, ErrInvalidArgument, "fingerprint is %d bytes, the limit is %d", len(o.Fingerprint), maxFingerprintLen)
	}
	return nil
}

// checkSmall checks complete.lua's arguments.
func checkSmall(op, key, token string, status Status, payload []byte) error {
	if err := checkToken(op, key, token); err != nil {
		return err
	}
	switch {
	case status == "" || len(status) > maxStatusLen || status == StatusPending:
		return errorf(op, key, ErrInvalidArgument, "status must be 1..%d bytes, not pending", maxStatusLen)
	case len(payload) > MaxSmallPayloadLen:
		return errorf(op, key, ErrInvalidArgument, "payload is %d bytes, the limit is %d", len(payload), MaxSmallPayloadLen)
	}
	return nil
}

func checkToken(op, key, token string) error {
	if token == "" || len(token) > maxTokenLen {
		return errorf(op, key, ErrInvalidArgument, "token must be 1..%d bytes, got %d", maxTokenLen, len(token))
	}
	return nil
}

// updateFields is u checked and converted to the scripts' units: ms since the
// epoch, 0 = none (and the times as given: the Redis backend sends durations
// from now). The status is held as a value: converting it allocates nothing.
type updateFields struct {
	status                string // "": unchanged
	payload               []byte
	setPayload            bool
	expires, lease        int64
	expiresAt, leaseUntil time.Time
	setExp, setLease      bool
	token                 string
}

func (u Update) fields(op, key string) (updateFields, error) {
	f := updateFields{token: u.Token}
	if u.Token != "" {
		if err := checkToken(op, key, u.Token); err != nil {
			return f, err
		}
	}
	if u.Status == nil && u.Payload == nil && u.ExpiresAt == nil && u.LeaseUntil == nil {
		return f, errorf(op, key, ErrInvalidArgument, "nothing to update")
	}
	if u.Status != nil {
		st := string(*u.Status)
		if st == "" || len(st) > maxStatusLen {
			return f, errorf(op, key, ErrInvalidArgument, "status must be 1..%d bytes, got %d", maxStatusLen, len(st))
		}
		f.status = st
	}
	if u.Payload != nil {
		if len(*u.Payload) > MaxRecordPayloadLen {
			return f, errorf(op, key, ErrInvalidArgument, "payload is %d bytes, the limit is %d", len(*u.Payload), MaxRecordPayloadLen)
		}
		f.payload, f.setPayload = *u.Payload, true
	}
	var ok bool
	if u.ExpiresAt != nil {
		if f.expires, ok = atMS(*u.ExpiresAt); !ok {
			return f, errorf(op, key, ErrInvalidArgument, "ExpiresAt %v is out of range", *u.ExpiresAt)
		}
		f.expiresAt, f.setExp = *u.ExpiresAt, true
	}
	if u.LeaseUntil != nil {
		if f.lease, ok = atMS(*u.LeaseUntil); !ok {
			return f, errorf(op, key, ErrInvalidArgument, "LeaseUntil %v is out of range", *u.LeaseUntil)
		}
		f.leaseUntil, f.setLease = *u.LeaseUntil, true
	}
	return f, nil
}

// recordsTTL is the Records' TTL: WithTTL's when given, else DefaultRecordsTTL.
func (c config) recordsTTL() time.Duration {
	if c.ttlSet {
		return c.ttl
	}
	return DefaultRecordsTTL
}

// outcomePause is the longest pause between attempts of Do's outcome write
// (retryLostPaced).
const outcomePause = 50 * time.Millisecond

// isOOM reports whether err is Redis's refusal of a write script when
// maxmemory is reached under noeviction (an "OOM ..." error reply).
func isOOM(err error) bool {
	if err == nil { // the common case, without errors.As's allocation
		return false
	}
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ")
}

// completeSmall is Do's final write when Redis refused the full one for
// memory (oom): complete.lua, which runs anyway, stores the outcome if it
// fits in MaxSmallPayloadLen, else marks the record failed with a note that
// the result was not stored, so that no later Do runs fn again (it gets
// ErrFailed with the note) and the caller gets an error wrapping oom.
func (s *Records) completeSmall(ctx context.Context, key, token string, status Status, payload []byte, oom error) error {
	write := func(status Status, payload []byte) error {
		if err := checkSmall("do", key, token, status, payload); err != nil {
			return err
		}
		return retryLostPaced(ctx, outcomePause, func(ctx context.Context) error {
			return s.b.complete(ctx, "do", key, token, status, payload)
		})
	}
	if len(payload) <= MaxSmallPayloadLen {
		return write(status, payload)
	}
	note := fmt.Sprintf("the result (%d bytes) was not stored: Redis was out of memory (maxmemory) at the final write", len(payload))
	if err := write(StatusFailed, []byte(note)); err != nil {
		return errors.Join(oom, err)
	}
	return fmt.Errorf("redisonce: do %q: %s; the record is failed with that note, so the key does not run again: %w", key, note, oom)
}
