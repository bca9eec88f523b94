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

// redisRecords is Records' Redis backend: one string per key, prefix+key
// (a versioned header of created_ms, updated_ms, expires_ms (0 = never),
// lease_ms (0 = no lease), fence, status, fp and token, then the payload;
// acquire.lua's header describes it). Every operation is one script
// (acquire.lua, get.lua, update.lua, renew.lua, delete.lua); every time in a
// record comes from the server's TIME, and a record's expiry is its key's
// expiry, except that a pending owner's lease past expires_ms keeps the key
// until the lease passes (renew.lua's header states the rule).
type redisRecords struct {
	redisStore
	// ttlMS and leaseMS remember the last TTL and lease rendered for acquire,
	// so a caller passing the same options every time allocates no string.
	ttlMS, leaseMS msCache
	waits          waiters // Do's waiters (AcquireOptions.Wait)
}

func (b *redisRecords) acquire(ctx context.Context, op, key string, o AcquireOptions, token string, _ bool, sent *time.Time) (Record, int64, error) {
	return parseAcquired(op, key, b.execSent(ctx, scriptAcquire, b.key(key), sent, b.ttlMS.ms(o.TTL), token, o.Fingerprint, b.leaseMS.ms(o.Lease)))
}

// parseAcquired reads acquire.lua's {acquired, record...}: the flag 0 (not
// acquired), 1 (created) or 2 (taken over), a token exactly when acquired,
// and a fence above 0; with ErrNotReplicated when its replicas did not
// confirm it.
func parseAcquired(op, key string, r reply) (Record, int64, error) {
	arr, err := replyArray(op, key, r, 10)
	if err != nil {
		return Record{}, acquiredNot, err
	}
	if !arr[0].IsInt64() {
		return Record{}, acquiredNot, errorf(op, key, ErrUnexpectedReply, "acquired flag is %s", arr[0].String())
	}
	got, _ := arr[0].AsInt64()
	if got != acquiredNot && got != acquiredNew && got != acquiredTakeover {
		return Record{}, acquiredNot, errorf(op, key, ErrUnexpectedReply, "acquired flag is %d", got)
	}
	rec, err := parseRecord(op, key, arr[1:])
	if err != nil {
		return Record{}, acquiredNot, err
	}
	if (got != acquiredNot) != (rec.Token != "") {
		return Record{}, acquiredNot, errorf(op, key, ErrUnexpectedReply, "acquired=%d with token %q", got, rec.Token)
	}
	if rec.Fence == 0 {
		return Record{}, acquiredNot, errorf(op, key, ErrUnexpectedReply, "fence 0")
	}
	return rec, got, r.replicated(op, key)
}

func (b *redisRecords) get(ctx context.Context, key string) (Record, bool, error) {
	r := b.exec(ctx, scriptGet, b.key(key))
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

func (b *redisRecords) update(ctx context.Context, op, key string, f updateFields) error {
	// update.lua answers 1 (updated) or 0 (an ExpiresAt in the past deleted
	// the record): nothing else travels back.
	n, err := replyInt(op, key, b.exec(ctx, scriptUpdate, b.key(key), f.args()...))
	if err != nil {
		return err
	}
	if n != 0 && n != 1 {
		return errorf(op, key, ErrUnexpectedReply, "want 0 or 1, got %d", n)
	}
	return nil
}

// del is delete.lua; unfenced (token "") it also removes a key that does
// not hold a record.
// complete is recordsBackend.complete: complete.lua.
func (b *redisRecords) complete(ctx context.Context, op, key, token string, status Status, payload []byte) error {
	n, err := replyInt(op, key, b.exec(ctx, scriptComplete, b.key(key), token, string(status), rueidis.BinaryString(payload)))
	if err == nil && n != 1 {
		err = errorf(op, key, ErrUnexpectedReply, "want 1, got %d", n)
	}
	return err
}

func (b *redisRecords) del(ctx context.Context, op, key, token string) (bool, error) {
	n, err := replyInt(op, key, b.exec(ctx, scriptDelete, b.key(key), token))
	return n == 1, err
}

// clock is this process's clock. A record's lease deadline is the server's
// (TIME), so the time left RetryAfter reports is off by the skew
// between the two clocks.
func (*redisRecords) clock() time.Time { return time.Now() }

func (b *redisRecords) renew(ctx context.Context, key, token string, lease time.Duration, sent *time.Time) (int64, error) {
	return replyInt("renew", key, b.execSent(ctx, scriptRenew, b.key(key), sent, token, b.leaseMS.ms(lease)))
}

// args is update.lua's ARGV for f.
func (f updateFields) args() []string {
	args := make([]string, 1, 9)
	args[0] = f.token
	if f.status != "" {
		args = append(args, "status", f.status)
	}
	if f.setPayload {
		args = append(args, "payload", rueidis.BinaryString(f.payload))
	}
	// update.lua takes durations from the server's TIME: the absolute times
	// become time.Until, rounded up (a past time stays past: negative).
	if f.setExp {
		args = append(args, "expires_in_ms", untilMS(f.expiresAt))
	}
	if f.setLease {
		args = append(args, "lease_in_ms", untilMS(f.leaseUntil))
	}
	return args
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
