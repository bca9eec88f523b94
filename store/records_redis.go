package store

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

var (
	scriptAcquire  = mustScript("acquire")
	scriptGet      = mustScript("get")
	scriptUpdate   = mustScript("update")
	scriptDelete   = mustScript("delete")
	scriptRenew    = mustScript("renew")
	scriptComplete = mustScript("complete")
)

// Records keeps idempotency records in Redis: one string per key, prefix+key
// (layout 1, README "Key layout": a versioned header of created_ms,
// updated_ms, expires_ms (0 = never), lease_ms (0 = no lease), fence, status,
// fp and token, then the payload). Every operation is one script
// (acquire.lua, get.lua, update.lua, renew.lua, delete.lua); every time in a
// record comes from the server's TIME, and a record's expiry is its key's
// expiry, except that a pending owner's lease past expires_ms keeps the key
// until the lease passes (renew.lua's header states the rule). It is safe
// for concurrent use.
//
// A record in layout 0, the nine-field hash written before issue 23, is read
// the same, and rewritten in layout 1 by the next write to it. Keys holding
// anything else (the seed's JSON strings, say) make Acquire, Get, Update and
// DeleteFenced fail with ErrUnexpectedReply; Delete removes them.
type Records struct {
	redisStore
	ttl time.Duration
	// ttlMS and leaseMS remember the last TTL and lease rendered for acquire,
	// so a caller passing the same options every time allocates no string.
	ttlMS, leaseMS msCache
	ev             events
	waits          waiters // Do's waiters (AcquireOptions.Wait)
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
	return &Records{redisStore: newRedisStore(c, cfg), ttl: cfg.recordsTTL(), ev: newEvents("records", cfg)}
}

// OpenRecords connects to url (redis://, rediss://, unix://, or a Sentinel
// deployment with ?addr=...&master_set=NAME) with ClientOptions and returns a records store that owns
// the client: Close closes it.
func OpenRecords(url string, opts ...Option) (*Records, error) {
	s := NewRecords(nil, opts...)
	if err := s.open(url); err != nil {
		return nil, err
	}
	return s, nil
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
	if s.ev.obs == nil {
		return s.acquire(ctx, "acquire", key, o, newToken(), nil)
	}
	start := time.Now()
	rec, ok, err := s.acquire(ctx, "acquire", key, o, newToken(), nil)
	s.ev.report(ctx, "acquire", "acquire", key, 1, outcome(err, acquireOutcome(ok, rec.Fence)), start, err)
	return rec, ok, err
}

// acquire is AcquireWith with token the new owner token (minted by the caller:
// Do's heartbeat starts before the acquire is sent).
func (s *Records) acquire(ctx context.Context, op, key string, o AcquireOptions, token string, sent *time.Time) (Record, bool, error) {
	if err := s.check(ctx, op, key); err != nil {
		return Record{}, false, err
	}
	if err := o.check(op, key); err != nil {
		return Record{}, false, err
	}
	if o.TTL == 0 {
		o.TTL = s.ttl
	}
	return parseAcquired(op, key, s.execSent(ctx, scriptAcquire, s.key(key), sent, s.ttlMS.ms(o.TTL), token, o.Fingerprint, s.leaseMS.ms(o.Lease)))
}

// parseAcquired reads acquire.lua's {acquired, record...}: the flag 0 or 1,
// and a token exactly when acquired; with ErrNotReplicated when its replicas
// did not confirm it.
func parseAcquired(op, key string, r reply) (Record, bool, error) {
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
	return rec, acquired == 1, r.replicated(op, key)
}

// Get returns key's record, without its token, and true; (Record{}, false,
// nil) when there is none or it expired. It runs get.lua with EVALSHA_RO, so a
// replica may serve it.
func (s *Records) Get(ctx context.Context, key string) (Record, bool, error) {
	if s == nil {
		return Record{}, false, nilStore("get", key, "Records")
	}
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
	r := s.exec(ctx, scriptGet, s.key(key))
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
	if s == nil {
		return nilStore("update", key, "Records")
	}
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
	// update.lua answers 1 (updated) or 0 (an ExpiresAt in the past deleted
	// the record): nothing else travels back.
	n, err := replyInt(op, key, s.exec(ctx, scriptUpdate, s.key(key), args...))
	if err != nil {
		return err
	}
	if n != 0 && n != 1 {
		return errorf(op, key, ErrUnexpectedReply, "want 0 or 1, got %d", n)
	}
	return nil
}

// Delete removes key's record, whoever owns it; a missing
// key is not an error. It also removes a key that does not hold a record.
func (s *Records) Delete(ctx context.Context, key string) error {
	if s == nil {
		return nilStore("delete", key, "Records")
	}
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	var n int64
	err := s.check(ctx, "delete", key)
	if err == nil {
		n, err = replyInt("delete", key, s.exec(ctx, scriptDelete, s.key(key), ""))
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
	if s == nil {
		return nilStore("delete_fenced", key, "Records")
	}
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
	n, err := replyInt(op, key, s.exec(ctx, scriptDelete, s.key(key), token))
	return n == 1, err
}

// clock is recordOps.clock: this process's clock. A record's lease deadline
// is the server's (TIME), so the time left an *InFlightError reports is off
// by the skew between the two clocks.
func (*Records) clock() time.Time { return time.Now() }

// complete is recordOps.complete: complete.lua.
func (s *Records) complete(ctx context.Context, op, key, token string, status Status, payload []byte) error {
	if err := s.check(ctx, op, key); err != nil {
		return err
	}
	if err := checkSmall(op, key, token, status, payload); err != nil {
		return err
	}
	n, err := replyInt(op, key, s.exec(ctx, scriptComplete, s.key(key), token, string(status), rueidis.BinaryString(payload)))
	if err == nil && n != 1 {
		err = errorf(op, key, ErrUnexpectedReply, "want 1, got %d", n)
	}
	return err
}

func (s *Records) renew(ctx context.Context, key, token string, lease time.Duration, sent *time.Time) (int64, error) {
	return replyInt("renew", key, s.execSent(ctx, scriptRenew, s.key(key), sent, token, s.leaseMS.ms(lease)))
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
//     ErrInFlight; retry later. The error is an *InFlightError whose
//     RetryAfter is the time to the lease's deadline (measured against this
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
func (s *Records) Do(ctx context.Context, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	if s == nil {
		return nil, false, nilStore("do", key, "Records")
	}
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

// parseRecord reads the scripts' record reply: status, payload, created_ms,
// updated_ms, expires_ms, lease_ms, fence, fp, token. The four times are
// integers (a decimal string is accepted too); the rest are strings, the fence
// a decimal uint64.
func parseRecord(op, key string, a []rueidis.RedisMessage) (Record, error) {
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
		v, err := replyString(&a[i])
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
	return Record{
		Key:         key,
		Status:      Status(s[0]),
		Payload:     payloadBytes(s[1]),
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
