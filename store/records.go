package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// DefaultRecordsPrefix is the key prefix of Records unless WithPrefix says
// otherwise: a record lives in the string "idempotency:<key>".
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
	// MaxSmallPayloadLen is the largest payload Do's final write stores when
	// Redis is out of memory (maxmemory under noeviction): that write
	// (complete.lua) runs anyway, so an effect that happened is recorded, and
	// grows memory by at most this much. A larger result is then not stored:
	// the record is marked failed with a note saying so.
	MaxSmallPayloadLen = 1024
)

// MaxFence is the largest fence a record holds: 9999999999999999999, the
// largest decimal of 19 digits (the scripts keep fences canonical and within
// uint64). A pending record at MaxFence whose lease passed is not taken over.
const MaxFence uint64 = 9999999999999999999

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
	// Status sets the status (1..MaxStatusLen bytes). Any status other than
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
	// method, path and body, say), at most MaxFingerprintLen bytes. When the
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
	// acquire takes token, the new owner token (newToken), as an argument:
	// Do's heartbeat renews with it before the acquire's reply is back.
	// sent, when not nil, receives the time the command that ran was sent.
	acquire(ctx context.Context, op, key string, o AcquireOptions, token string, sent *time.Time) (Record, bool, error)
	update(ctx context.Context, op, key string, u Update) error
	get(ctx context.Context, key string) (Record, bool, error)
	// complete is complete.lua: the fenced final write of a small outcome
	// (payload at most MaxSmallPayloadLen), which Redis runs even when
	// memory is full.
	complete(ctx context.Context, op, key, token string, status Status, payload []byte) error
	deleteFenced(ctx context.Context, op, key, token string) (bool, error)
	// renew is renew.lua: 1 renewed, 0 absent, -1 another owner or not pending.
	renew(ctx context.Context, key, token string, lease time.Duration, sent *time.Time) (int64, error)
	// waitDone waits for key's pending record to change, calling again (the
	// next acquire) whenever it may have (its final write was notified, or
	// it is no longer pending), and at least every waitRecheck, until again
	// returns true or until passes; ctx's error when ctx ends.
	waitDone(ctx context.Context, key string, until time.Time, again func() bool) error
	// clock is the time a record's LeaseUntil is read against, for the
	// time left an *InFlightError reports.
	clock() time.Time
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

// doRecord is Do after the key and ctx were checked, shared by Records and
// MemoryRecords.
//
// ev reports the flow's lease renewals ("extend", with renewScript) and a
// takeover ("acquire" taken_over, with acquireScript); the flow's outcome is
// returned for the caller's "do" event.
func doRecord(ctx context.Context, s recordOps, ev *events, acquireScript, renewScript, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, out Outcome, err error) {
	if err := checkCtx(ctx, "do", key); err != nil {
		return nil, false, outcome(err, OutcomeError), err
	}
	if fn == nil {
		return nil, false, OutcomeInvalid, errorf("do", key, ErrInvalidArgument, "nil fn")
	}
	if o.Lease <= 0 {
		return nil, false, OutcomeInvalid, errorf("do", key, ErrInvalidArgument, "lease %v must be > 0", o.Lease)
	}
	var start time.Time
	if ev.obs != nil {
		start = time.Now()
	}
	token := newToken()
	renew := extendFunc(func(ctx context.Context, sent *time.Time) (bool, error) {
		n, err := s.renew(ctx, key, token, o.Lease, sent)
		return n == 1, err
	})
	if ev.obs != nil {
		renew = ev.observeExtend(key, renewScript, OutcomeStaleOwner, renew)
	}
	// The heartbeat starts before the acquire is sent: the local lease
	// deadline counts from the send time (see heartbeat).
	var (
		hb       *heartbeat
		sent     time.Time
		rec      Record
		acquired bool
	)
	// try acquires the key, its heartbeat started before the acquire is
	// sent: the local lease deadline counts from the send time (see
	// heartbeat), and stopped again unless the key was acquired.
	try := func() error {
		hb = startHeartbeat(ctx, o.Lease, time.Now(), "do", ErrStaleOwner, renew)
		var err error
		rec, acquired, err = s.acquire(ctx, "do", key, o, token, &sent)
		if err != nil || !acquired {
			hb.stop()
		}
		return err
	}
	err = try()
	if isOOM(err) {
		// Memory is full (maxmemory, noeviction): Redis refuses acquire.lua,
		// which may create a record, up front. A record already there is
		// still answered from a read: replayed, ErrFailed or ErrInFlight.
		if r, ok, gerr := s.get(ctx, key); gerr == nil && ok {
			rec, err = r, nil
			if o.Fingerprint != "" && r.Fingerprint != "" && o.Fingerprint != r.Fingerprint {
				err = errorf("do", key, ErrFingerprintMismatch, "the key was acquired with a different fingerprint")
			}
		}
	}
	if err == nil && !acquired && rec.Status == StatusPending && o.Wait > 0 {
		// In flight: wait for the owner's final write, then look again
		// (each look a fresh acquire, with a heartbeat of its own if it
		// takes the key: the owner gave it back, or its lease ran out).
		var aerr error
		err = s.waitDone(ctx, key, time.Now().Add(o.Wait), func() bool {
			aerr = try()
			return aerr != nil || acquired || rec.Status != StatusPending
		})
		switch {
		case acquired: // the last look took the key: go on, whatever ended the wait
			err = nil
		case err == nil:
			err = aerr
		}
	}
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
			return nil, false, OutcomeInFlight, inFlight("do", key, leaseLeft(rec.LeaseUntil, s.clock()))
		case StatusFailed:
			return rec.Payload, true, OutcomeReplayed, errorf("do", key, ErrFailed, "%s", rec.Payload)
		default:
			return rec.Payload, true, OutcomeReplayed, nil
		}
	}
	del := func(ctx context.Context) error {
		_, err := s.deleteFenced(ctx, "do", key, token)
		return err
	}
	hb.confirm(Lease{ID: key, Token: token, Fence: rec.Fence}, sent)
	finished := false
	defer func() {
		if finished {
			return
		}
		// fn panicked: give the key back before the panic goes on.
		hb.stop()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
		defer cancel()
		_ = retryLost(dctx, del)
	}()
	result, fnErr := fn(hb)
	finished = true

	// The effect has happened: record it even if ctx was cancelled meanwhile,
	// and again on a transport failure under the write (retryLost): the
	// fenced write is idempotent. A retried update that succeeds is sound
	// whatever the first attempt did: it applied because the record still
	// holds this Do's token, and a takeover would have replaced the token.
	// The heartbeat goes on meanwhile, so the record stays this owner's
	// through an outage as long as the lease lasts, and the write is retried
	// for as long as the lease is held (see heldFor).
	wctx, cancel := heldFor(context.WithoutCancel(ctx), hb)
	defer cancel()
	defer hb.stop()
	// final stores status and payload, fenced by the token; a record found
	// gone is created again (acquire), unless another caller got there first.
	final := func(status Status, payload []byte) error {
		err := retryLostPaced(wctx, outcomePause, func(ctx context.Context) error {
			return s.update(ctx, "do", key, Update{Status: &status, Payload: &payload, Token: token})
		})
		if isOOM(err) {
			return completeSmall(wctx, s, key, token, status, payload, err)
		}
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		// The record is gone (expired or deleted) and nobody holds the key:
		// writing the outcome again records the only effect that completed
		// (a caller that acquired the key meanwhile and failed deleted it).
		again, ok, err := s.acquire(wctx, "do", key, o, newToken(), nil)
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
	if fnErr != nil && !storeFailure(fnErr) {
		if err := retryLost(wctx, del); err != nil {
			return nil, false, outcome(err, OutcomeError), errors.Join(fnErr, err)
		}
		return nil, false, OutcomeReleased, fnErr
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
	if err := final(status, payload); err != nil {
		out := outcome(err, OutcomeError)
		if retErr != nil {
			err = errors.Join(retErr, err)
		}
		return ret, false, out, err
	}
	if status == StatusFailed {
		return ret, false, OutcomeFailed, retErr
	}
	return ret, false, OutcomeCompleted, retErr
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
	case len(o.Fingerprint) > MaxFingerprintLen:
		return errorf(op, key, ErrInvalidArgument, "fingerprint is %d bytes, the limit is %d", len(o.Fingerprint), MaxFingerprintLen)
	}
	return nil
}

// checkSmall checks complete.lua's arguments.
func checkSmall(op, key, token string, status Status, payload []byte) error {
	if err := checkToken(op, key, token); err != nil {
		return err
	}
	switch {
	case status == "" || len(status) > MaxStatusLen || status == StatusPending:
		return errorf(op, key, ErrInvalidArgument, "status must be 1..%d bytes, not pending", MaxStatusLen)
	case len(payload) > MaxSmallPayloadLen:
		return errorf(op, key, ErrInvalidArgument, "payload is %d bytes, the limit is %d", len(payload), MaxSmallPayloadLen)
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
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ")
}

// completeSmall is Do's final write when Redis refused the full one for
// memory (oom): complete.lua, which runs anyway, stores the outcome if it
// fits in MaxSmallPayloadLen, else marks the record failed with a note that
// the result was not stored, so that no later Do runs fn again (it gets
// ErrFailed with the note) and the caller gets an error wrapping oom.
func completeSmall(ctx context.Context, s recordOps, key, token string, status Status, payload []byte, oom error) error {
	write := func(status Status, payload []byte) error {
		return retryLost(ctx, func(ctx context.Context) error {
			return s.complete(ctx, "do", key, token, status, payload)
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
