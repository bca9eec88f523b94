package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// DefaultRecordsPrefix is the key prefix of Records unless WithPrefix says
// otherwise: a record lives in the hash "idempotency:<key>".
const DefaultRecordsPrefix = "idempotency:"

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
	// MaxStatusLen is the longest status, in bytes; a status is never empty.
	MaxStatusLen = 64
	// MaxFingerprintLen is the longest request fingerprint, in bytes: room for
	// a hex or base64 digest of the request, not for the request itself.
	MaxFingerprintLen = 256
	// MaxTokenLen is the longest owner token, in bytes. The stores mint 32 hex
	// characters; non-Go callers may use any 1..MaxTokenLen bytes.
	MaxTokenLen = 256
)

// maxMS is the largest millisecond value the scripts accept (15 digits, about
// the year 33658): Lua numbers are exact below 2^53.
const maxMS = 999_999_999_999_999

var (
	scriptAcquire = mustScript("acquire")
	scriptGet     = mustScript("get")
	scriptUpdate  = mustScript("update")
	scriptDelete  = mustScript("delete")
	scriptRenew   = mustScript("renew")
)

// ErrFailed is returned by Do for a key whose record is failed: an earlier run
// of fn returned an error marked with Permanent, stored as the record's
// payload. Do does not run fn again for that key until the record expires or
// is deleted; the error's text ends with the stored one.
var ErrFailed = errors.New("failed")

// Status is a record's lifecycle state. The three constants are the ones the
// stores give meaning to; Update may store any other 1..MaxStatusLen bytes.
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
	// ExpiresAt is when the record expires; zero: never. For Records it is the
	// Redis key's expiry (PEXPIREAT).
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
	// Status sets the status (1..MaxStatusLen bytes). Any status other than
	// StatusPending clears the lease, whatever LeaseUntil says.
	Status *Status
	// Payload sets the payload (at most MaxRecordPayloadLen bytes).
	Payload *[]byte
	// ExpiresAt moves the record's expiry; a pointer to the zero time removes
	// it (the record never expires), a time at or before now expires the record
	// at once (it is deleted and Update returns nil). The Redis store sends
	// update.lua a duration, time.Until(ExpiresAt) rounded up to the ms, which
	// the script adds to the server's TIME: the expiry follows the server's
	// clock, as every lease and TTL does.
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
	// takeover does not extend it). Default 0: the store's WithTTL, itself
	// default DefaultRecordsTTL (24 hours). Negative values are invalid.
	TTL time.Duration
	// Lease is how long the caller owns a new record, or one it takes over,
	// while it does the work. Once the lease passes, the next acquire of the
	// pending record takes it over with a new token and Fence + 1, and the
	// former owner's fenced Update and DeleteFenced fail with ErrStaleOwner.
	// Default 0: no lease, a pending record is never taken over (it waits for
	// its TTL or an Update). Negative values are invalid; Do needs Lease > 0.
	Lease time.Duration
	// Fingerprint identifies the request made with the key (a digest of its
	// method, path and body, say), at most MaxFingerprintLen bytes. When the
	// record and the caller both have a non-empty fingerprint and they differ,
	// the acquire fails with ErrFingerprintMismatch and changes nothing. An
	// empty fingerprint on either side is not checked; a record created without
	// one adopts the first non-empty fingerprint of a caller that takes it over.
	Fingerprint string
}

// RecordStore is what Records and MemoryRecords implement;
// storetest.TestRecords checks any implementation against the contract. The
// first five methods are the seed's idempotency store contract.
type RecordStore interface {
	// Acquire is AcquireWith(ctx, key, AcquireOptions{TTL: ttl}).
	Acquire(ctx context.Context, key string, ttl time.Duration) (Record, bool, error)
	// AcquireWith creates key's record, pending and owned by the caller
	// (true), or takes over a pending one whose lease passed (true), or
	// returns the existing record without its token (false).
	AcquireWith(ctx context.Context, key string, o AcquireOptions) (Record, bool, error)
	// Get returns key's record without its token; (Record{}, false, nil)
	// when it is missing or expired.
	Get(ctx context.Context, key string) (Record, bool, error)
	// Update changes key's record: ErrNotFound when it is missing (nothing is
	// created), ErrStaleOwner when u.Token is set and not the owner's.
	Update(ctx context.Context, key string, u Update) error
	// Delete removes key's record, whoever owns it; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// DeleteFenced removes key's record only if token is its owner's token:
	// ErrStaleOwner otherwise; a missing key is not an error.
	DeleteFenced(ctx context.Context, key, token string) error
	// Do runs fn at most once per key across every caller and replays its result.
	Do(ctx context.Context, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error)
	// Close releases the store's resources.
	Close() error
}

// recordOps are the operations Do is built on, with the op name used in errors.
type recordOps interface {
	acquire(ctx context.Context, op, key string, o AcquireOptions) (Record, bool, error)
	update(ctx context.Context, op, key string, u Update) error
	deleteFenced(ctx context.Context, op, key, token string) (bool, error)
	// renew is renew.lua: 1 renewed, 0 absent, -1 another owner or not pending.
	renew(ctx context.Context, key, token string, lease time.Duration) (int64, error)
}

// Records keeps idempotency records in Redis: one hash per key, prefix+key,
// with the fields status, payload, created_ms, updated_ms, expires_ms (0 =
// never), lease_ms (0 = no lease), fence, fp and token. Every operation is one
// script (acquire.lua, get.lua, update.lua, delete.lua); every time in a record
// comes from the server's TIME, and a record's expiry is its key's expiry. It is
// safe for concurrent use.
//
// Keys holding something other than a record hash (the seed's JSON strings,
// say) make Acquire, Get, Update and DeleteFenced fail with ErrUnexpectedReply;
// Delete removes them.
type Records struct {
	c      rueidis.Client
	owned  bool
	prefix string
	ttl    time.Duration
	err    error
	// ttlMS and leaseMS remember the last TTL and lease rendered for acquire,
	// so a caller passing the same options every time allocates no string.
	ttlMS, leaseMS msCache
	ev             events
}

var (
	_ RecordStore = (*Records)(nil)
	_ recordOps   = (*Records)(nil)
)

// NewRecords returns a records store on a client the caller keeps: Close does
// not close it. Options: WithPrefix (default "idempotency:"), WithTTL (default
// DefaultRecordsTTL, 24 hours; WithTTL(0): records acquired with TTL 0 never
// expire). An invalid option is returned by every call (OpenRecords fails
// with it instead).
//
// For the performance measured in BENCHMARKS.md, build the client from
// ClientOptions (DisableCache: true, MaxFlushDelay: 20µs), as OpenRecords does:
// the store never uses client-side caching.
func NewRecords(c rueidis.Client, opts ...Option) *Records {
	cfg := newConfig(DefaultRecordsPrefix, opts)
	return &Records{c: c, prefix: cfg.prefix, ttl: cfg.recordsTTL(), err: cfg.err, ev: newEvents("records", cfg)}
}

// OpenRecords connects to url (redis://, rediss://, unix://; see
// rueidis.ParseURL) with ClientOptions and returns a records store that owns
// the client: Close closes it.
func OpenRecords(url string, opts ...Option) (*Records, error) {
	s := NewRecords(nil, opts...) // options are checked before connecting
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

// Acquire creates key's record, pending, expiring after ttl (0: the store's
// WithTTL, default 24 hours), and returns it with true; an existing unexpired
// record is returned with false. It is AcquireWith(ctx, key,
// AcquireOptions{TTL: ttl}), without a lease.
func (s *Records) Acquire(ctx context.Context, key string, ttl time.Duration) (Record, bool, error) {
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
	if s.ev.obs == nil {
		return s.acquire(ctx, "acquire", key, o)
	}
	start := time.Now()
	rec, ok, err := s.acquire(ctx, "acquire", key, o)
	s.ev.report(ctx, "acquire", "acquire", key, 1, outcome(err, acquireOutcome(ok, rec.Fence)), start, err)
	return rec, ok, err
}

func (s *Records) acquire(ctx context.Context, op, key string, o AcquireOptions) (Record, bool, error) {
	if err := s.check(ctx, op, key); err != nil {
		return Record{}, false, err
	}
	if err := o.check(op, key); err != nil {
		return Record{}, false, err
	}
	if o.TTL == 0 {
		o.TTL = s.ttl
	}
	r := scriptAcquire.exec(ctx, s.c, s.prefix+key, s.ttlMS.ms(o.TTL), newToken(), o.Fingerprint, s.leaseMS.ms(o.Lease))
	arr, err := replyArray(op, key, r, 10)
	if err != nil {
		return Record{}, false, err
	}
	if !arr[0].IsInt64() {
		return Record{}, false, errorf(op, key, ErrUnexpectedReply, "acquired flag is %s", arr[0].String())
	}
	acquired, _ := arr[0].AsInt64()
	if acquired != 0 && acquired != 1 {
		return Record{}, false, errorf(op, key, ErrUnexpectedReply, "acquired flag is %d", acquired)
	}
	rec, err := parseRecord(op, key, arr[1:])
	if err != nil {
		return Record{}, false, err
	}
	if (acquired == 1) != (rec.Token != "") {
		return Record{}, false, errorf(op, key, ErrUnexpectedReply, "acquired=%d with token %q", acquired, rec.Token)
	}
	return rec, acquired == 1, nil
}

// Get returns key's record, without its token, and true; (Record{}, false,
// nil) when there is none or it expired. It runs get.lua with EVALSHA_RO, so a
// replica may serve it.
func (s *Records) Get(ctx context.Context, key string) (Record, bool, error) {
	if s.ev.obs == nil {
		return s.get(ctx, key)
	}
	start := time.Now()
	rec, ok, err := s.get(ctx, key)
	s.ev.report(ctx, "get", "get", key, 1, outcome(err, found(ok, OutcomeRead)), start, err)
	return rec, ok, err
}

func (s *Records) get(ctx context.Context, key string) (Record, bool, error) {
	if err := s.check(ctx, "get", key); err != nil {
		return Record{}, false, err
	}
	r := scriptGet.exec(ctx, s.c, s.prefix+key)
	if rueidis.IsRedisNil(r.Error()) {
		return Record{}, false, nil
	}
	arr, err := replyArray("get", key, r, 9)
	if err != nil {
		return Record{}, false, err
	}
	rec, err := parseRecord("get", key, arr)
	if err != nil {
		return Record{}, false, err
	}
	return rec, true, nil
}

// Update applies u to key's record in one script and sets UpdatedAt to now:
// ErrNotFound when the record is missing (nothing is created), ErrStaleOwner
// when u.Token is set and the record has another owner (nothing changes). A
// status other than pending clears the lease. An owner whose lease passed
// keeps the record, and may still update it, until another caller takes it over.
func (s *Records) Update(ctx context.Context, key string, u Update) error {
	if s.ev.obs == nil {
		return s.update(ctx, "update", key, u)
	}
	start := time.Now()
	err := s.update(ctx, "update", key, u)
	s.ev.report(ctx, "update", "update", key, 1, outcome(err, OutcomeUpdated), start, err)
	return err
}

func (s *Records) update(ctx context.Context, op, key string, u Update) error {
	if err := s.check(ctx, op, key); err != nil {
		return err
	}
	args, err := u.args(op, key)
	if err != nil {
		return err
	}
	r := scriptUpdate.exec(ctx, s.c, s.prefix+key, args...)
	if rueidis.IsRedisNil(r.Error()) {
		return nil // expired at once by an ExpiresAt in the past
	}
	arr, err := replyArray(op, key, r, 9)
	if err != nil {
		return err
	}
	// Only checked: the caller does not get the record, so the payload is not copied.
	_, err = parseRecordOpt(op, key, arr, false)
	return err
}

// Delete removes key's record, whoever owns it; a missing
// key is not an error. It also removes a key that does not hold a record.
func (s *Records) Delete(ctx context.Context, key string) error {
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	var n int64
	err := s.check(ctx, "delete", key)
	if err == nil {
		n, err = replyInt("delete", key, scriptDelete.exec(ctx, s.c, s.prefix+key, ""))
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, "delete", "delete", key, 1, outcome(err, found(n == 1, OutcomeDeleted)), start, err)
	}
	return err
}

// DeleteFenced removes key's record only if token (from the Record that
// AcquireWith returned) is still its owner's: ErrStaleOwner when another
// caller took the record over, and nothing is deleted. A missing key is not an
// error. token must be 1..MaxTokenLen bytes.
func (s *Records) DeleteFenced(ctx context.Context, key, token string) error {
	if s.ev.obs == nil {
		_, err := s.deleteFenced(ctx, "delete", key, token)
		return err
	}
	start := time.Now()
	ok, err := s.deleteFenced(ctx, "delete", key, token)
	s.ev.report(ctx, "delete", "delete", key, 1, outcome(err, found(ok, OutcomeDeleted)), start, err)
	return err
}

// deleteFenced is DeleteFenced; true when it removed the record.
func (s *Records) deleteFenced(ctx context.Context, op, key, token string) (bool, error) {
	if err := s.check(ctx, op, key); err != nil {
		return false, err
	}
	if err := checkToken(op, key, token); err != nil {
		return false, err
	}
	n, err := replyInt(op, key, scriptDelete.exec(ctx, s.c, s.prefix+key, token))
	return n == 1, err
}

func (s *Records) renew(ctx context.Context, key, token string, lease time.Duration) (int64, error) {
	return replyInt("renew", key, scriptRenew.exec(ctx, s.c, s.prefix+key, token, s.leaseMS.ms(lease)))
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
//     ErrInFlight; retry later;
//   - a different fingerprint under the same key: ErrFingerprintMismatch;
//   - otherwise the caller owns the record and fn runs, with the lease
//     renewed every o.Lease/3 (renew.lua, fenced by the token) so a live
//     owner never loses it however long fn takes, and the Lease (token and
//     fence) in fn's context (LeaseFromContext). If a renewal finds the record
//     taken over or removed, fn's context is cancelled with a cause wrapping
//     ErrStaleOwner (context.Cause); a network error is retried until the
//     lease would actually have run out.
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
// whose connection is lost is retried: it is idempotent, as the record keeps
// its owner's token. The final write runs even when ctx is cancelled, bounded
// by 5 seconds.
//
// A caller that crashes stops renewing, and the next Do takes the record
// over once o.Lease passes: pick a lease of a few seconds, not the length of
// fn. Under a full Redis (maxmemory, noeviction) the final write, which stores
// the payload, is refused; Do returns that error and the next Do runs fn again
// after the lease.
func (s *Records) Do(ctx context.Context, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	if s.ev.obs == nil {
		result, replayed, _, err = s.do(ctx, key, o, fn)
		return result, replayed, err
	}
	start, out := time.Now(), OutcomeReleased // a panic in fn deletes the record
	defer func() { s.ev.report(ctx, "do", "", key, 1, out, start, err) }()
	result, replayed, out, err = s.do(ctx, key, o, fn)
	return result, replayed, err
}

// do is Do, with its outcome.
func (s *Records) do(ctx context.Context, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) ([]byte, bool, Outcome, error) {
	if err := s.check(ctx, "do", key); err != nil {
		return nil, false, outcome(err, OutcomeError), err
	}
	return doRecord(ctx, s, &s.ev, "acquire", "renew", key, o, fn)
}

// Close closes the client if the store opened it (OpenRecords); for a store
// made with NewRecords it does nothing.
func (s *Records) Close() error {
	if s.owned {
		s.c.Close()
	}
	return nil
}

func (s *Records) check(ctx context.Context, op, key string) error {
	if s.err != nil {
		return s.err
	}
	return checkID(ctx, op, key)
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

// storeFailure says whether Do stores fn's error as a failed record.
func storeFailure(err error) bool {
	var p permanentError
	var r retryableError
	return errors.As(err, &p) && !errors.As(err, &r) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// doRecord is Do after the key and ctx were checked, shared by Records and
// MemoryRecords.
func doRecord(ctx context.Context, s recordOps, ev *events, acquireScript, renewScript, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, out Outcome, err error) {
	if o.Lease <= 0 {
		return nil, false, OutcomeInvalid, errorf("do", key, ErrInvalidArgument, "lease %v must be > 0", o.Lease)
	}
	var start time.Time
	if ev.obs != nil {
		start = time.Now()
	}
	rec, acquired, err := s.acquire(ctx, "do", key, o)
	if err != nil {
		return nil, false, outcome(err, OutcomeError), err
	}
	if ev.obs != nil && acquired && rec.Fence > 1 {
		// a takeover is worth an alert of its own: report it apart
		ev.report(ctx, "acquire", acquireScript, key, 1, OutcomeTakenOver, start, nil)
	}
	if !acquired {
		switch rec.Status {
		case StatusPending:
			return nil, false, OutcomeInFlight, fmt.Errorf("redisonce: do %q: %w", key, ErrInFlight)
		case StatusFailed:
			return rec.Payload, true, OutcomeReplayed, errorf("do", key, ErrFailed, "%s", rec.Payload)
		default:
			return rec.Payload, true, OutcomeReplayed, nil
		}
	}
	token := rec.Token
	renew := extendFunc(func(ctx context.Context) (bool, error) {
		n, err := s.renew(ctx, key, token, o.Lease)
		return n == 1, err
	})
	if ev.obs != nil {
		renew = ev.observeExtend(key, renewScript, OutcomeStaleOwner, renew)
	}
	del := func(ctx context.Context) error {
		_, err := s.deleteFenced(ctx, "do", key, token)
		return err
	}
	hb := keepAlive(ctx, o.Lease, Lease{ID: key, Token: token, Fence: rec.Fence}, "do", ErrStaleOwner, renew)
	finished := false
	defer func() {
		if finished {
			return
		}
		// fn panicked: give the key back before the panic goes on.
		hb.stop()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = retryLost(dctx, del)
	}()
	result, fnErr := fn(hb)
	finished = true
	hb.stop()

	// The effect has happened: record it even if ctx was cancelled meanwhile,
	// and again when the connection was lost under the write (retryLost): the
	// fenced write is idempotent.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// final stores status and payload, fenced by the token; a record found
	// gone is created again (acquire), unless another caller got there first.
	final := func(status Status, payload []byte) error {
		err := retryLost(wctx, func(ctx context.Context) error {
			return s.update(ctx, "do", key, Update{Status: &status, Payload: &payload, Token: token})
		})
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		again, ok, err := s.acquire(wctx, "do", key, o)
		if err != nil {
			return err
		}
		if !ok {
			return errorf("do", key, ErrLeaseLost, "the record was removed and another caller acquired the key")
		}
		return retryLost(wctx, func(ctx context.Context) error {
			return s.update(ctx, "do", key, Update{Status: &status, Payload: &payload, Token: again.Token})
		})
	}
	if fnErr != nil {
		if !storeFailure(fnErr) {
			if err := retryLost(wctx, del); err != nil {
				return nil, false, outcome(err, OutcomeError), errors.Join(fnErr, err)
			}
			return nil, false, OutcomeReleased, fnErr
		}
		text := []byte(fnErr.Error())
		if len(text) > MaxRecordPayloadLen {
			text = text[:MaxRecordPayloadLen]
		}
		if err := final(StatusFailed, text); err != nil {
			return nil, false, outcome(err, OutcomeError), errors.Join(fnErr, err)
		}
		return nil, false, OutcomeFailed, fnErr
	}
	if len(result) > MaxRecordPayloadLen {
		tooLong := errorf("do", key, ErrInvalidArgument, "fn's result is %d bytes, the limit is %d", len(result), MaxRecordPayloadLen)
		if err := final(StatusFailed, []byte(tooLong.Error())); err != nil {
			return result, false, outcome(err, OutcomeError), errors.Join(tooLong, err)
		}
		return result, false, OutcomeFailed, tooLong
	}
	if err := final(StatusCompleted, result); err != nil {
		return result, false, outcome(err, OutcomeError), err
	}
	return result, false, OutcomeCompleted, nil
}

// check validates acquire options before anything is sent.
func (o AcquireOptions) check(op, key string) error {
	switch {
	case o.TTL < 0:
		return errorf(op, key, ErrInvalidArgument, "negative TTL %v", o.TTL)
	case o.Lease < 0:
		return errorf(op, key, ErrInvalidArgument, "negative lease %v", o.Lease)
	case len(o.Fingerprint) > MaxFingerprintLen:
		return errorf(op, key, ErrInvalidArgument, "fingerprint is %d bytes, the limit is %d", len(o.Fingerprint), MaxFingerprintLen)
	}
	return nil
}

func checkToken(op, key, token string) error {
	if token == "" || len(token) > MaxTokenLen {
		return errorf(op, key, ErrInvalidArgument, "token must be 1..%d bytes, got %d", MaxTokenLen, len(token))
	}
	return nil
}

// updateFields is u checked and converted to the scripts' units: ms since the
// epoch, 0 = none.
type updateFields struct {
	status           *string
	payload          *[]byte
	expires, lease   int64
	setExp, setLease bool
	token            string
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
		if st == "" || len(st) > MaxStatusLen {
			return f, errorf(op, key, ErrInvalidArgument, "status must be 1..%d bytes, got %d", MaxStatusLen, len(st))
		}
		f.status = &st
	}
	if u.Payload != nil {
		if len(*u.Payload) > MaxRecordPayloadLen {
			return f, errorf(op, key, ErrInvalidArgument, "payload is %d bytes, the limit is %d", len(*u.Payload), MaxRecordPayloadLen)
		}
		f.payload = u.Payload
	}
	var ok bool
	if u.ExpiresAt != nil {
		if f.expires, ok = atMS(*u.ExpiresAt); !ok {
			return f, errorf(op, key, ErrInvalidArgument, "ExpiresAt %v is out of range", *u.ExpiresAt)
		}
		f.setExp = true
	}
	if u.LeaseUntil != nil {
		if f.lease, ok = atMS(*u.LeaseUntil); !ok {
			return f, errorf(op, key, ErrInvalidArgument, "LeaseUntil %v is out of range", *u.LeaseUntil)
		}
		f.setLease = true
	}
	return f, nil
}

// args is update.lua's ARGV for u.
func (u Update) args(op, key string) ([]string, error) {
	f, err := u.fields(op, key)
	if err != nil {
		return nil, err
	}
	args := make([]string, 1, 9)
	args[0] = f.token
	if f.status != nil {
		args = append(args, "status", *f.status)
	}
	if f.payload != nil {
		args = append(args, "payload", rueidis.BinaryString(*f.payload))
	}
	// update.lua takes durations from the server's TIME: the absolute times
	// become time.Until, rounded up (a past time stays past: negative).
	if f.setExp {
		args = append(args, "expires_in_ms", untilMS(*u.ExpiresAt))
	}
	if f.setLease {
		args = append(args, "lease_in_ms", untilMS(*u.LeaseUntil))
	}
	return args, nil
}

// MaxFence is the largest fence a record holds: 9999999999999999999, the
// largest decimal of 19 digits (the scripts keep fences canonical and within
// uint64). A pending record at MaxFence whose lease passed is not taken over.
const MaxFence uint64 = 9999999999999999999

// untilMS is t as update.lua's duration from now in ms: "0" for the zero time
// (none); else time.Until(t) rounded up to a ms, at least 1 for a time still
// ahead and at most -1 for one at or before now (past: a past ExpiresAt
// deletes the record, a past LeaseUntil leaves it open to takeover), capped at
// 15 digits either way.
func untilMS(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	d := time.Until(t)
	ms := int64(d / time.Millisecond) // toward zero: up for a negative d
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	if d <= 0 && ms == 0 {
		ms = -1
	}
	const limit = 999999999999999
	ms = max(min(ms, limit), -limit)
	return strconv.FormatInt(ms, 10)
}

// atMS converts an instant to ms since the epoch, rounded up; the zero time is
// 0 ("none"). An instant at or before the epoch is 1 ms, "long past", never 0.
func atMS(t time.Time) (int64, bool) {
	if t.IsZero() {
		return 0, true
	}
	m := t.UnixMilli()
	if t.After(time.UnixMilli(m)) {
		m++
	}
	if m < 1 {
		m = 1
	}
	return m, m <= maxMS
}

// msTime converts the scripts' ms since the epoch to a UTC time; 0 is the zero time.
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// replyArray reads an array reply of exactly n elements, mapping script errors
// to sentinels.
func replyArray(op, key string, r rueidis.RedisResult, n int) ([]rueidis.RedisMessage, error) {
	if err := r.Error(); err != nil {
		return nil, opError(op, key, err)
	}
	m, err := r.ToMessage()
	if err != nil {
		return nil, opError(op, key, err)
	}
	arr, err := m.ToArray()
	if err != nil {
		return nil, errorf(op, key, ErrUnexpectedReply, "want an array reply, got %s", m.String())
	}
	if len(arr) != n {
		return nil, errorf(op, key, ErrUnexpectedReply, "want %d elements, got %d", n, len(arr))
	}
	return arr, nil
}

// parseRecord reads the scripts' record reply: status, payload, created_ms,
// updated_ms, expires_ms, lease_ms, fence, fp, token. The four times are
// integers (a decimal string is accepted too); the rest are strings, the fence
// a decimal uint64.
func parseRecord(op, key string, a []rueidis.RedisMessage) (Record, error) {
	return parseRecordOpt(op, key, a, true)
}

// parseRecordOpt is parseRecord; withPayload false leaves Payload nil (no copy).
func parseRecordOpt(op, key string, a []rueidis.RedisMessage, withPayload bool) (Record, error) {
	var s [9]string
	var t [4]int64
	for i := range s {
		if i >= 2 && i < 6 && a[i].IsInt64() {
			n, err := a[i].AsInt64()
			if err != nil || n < 0 {
				return Record{}, errorf(op, key, ErrUnexpectedReply, "record element %d is %s, want ms", i+1, a[i].String())
			}
			t[i-2] = n
			continue
		}
		v, err := a[i].ToString()
		if err != nil {
			return Record{}, errorf(op, key, ErrUnexpectedReply, "record element %d is %s", i+1, a[i].String())
		}
		s[i] = v
		if i >= 2 && i < 6 {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return Record{}, errorf(op, key, ErrUnexpectedReply, "record element %d is %q, want ms", i+1, v)
			}
			t[i-2] = n
		}
	}
	fence, err := strconv.ParseUint(s[6], 10, 64)
	if err != nil {
		return Record{}, errorf(op, key, ErrUnexpectedReply, "fence is %q", s[6])
	}
	if s[0] == "" {
		return Record{}, errorf(op, key, ErrUnexpectedReply, "empty status")
	}
	var payload []byte
	if withPayload {
		payload = payloadBytes(s[1])
	}
	return Record{
		Key:         key,
		Status:      Status(s[0]),
		Payload:     payload,
		CreatedAt:   msTime(t[0]),
		UpdatedAt:   msTime(t[1]),
		ExpiresAt:   msTime(t[2]),
		LeaseUntil:  msTime(t[3]),
		Fence:       fence,
		Fingerprint: s[7],
		Token:       s[8],
	}, nil
}

// payloadBytes is a stored payload as a Record holds it: nil when empty.
func payloadBytes(p string) []byte {
	if p == "" {
		return nil
	}
	return []byte(p)
}
