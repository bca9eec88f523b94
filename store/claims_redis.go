package store

import (
	"context"
	"time"
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

// redisClaims is Claims' Redis backend: one script per operation on
// prefix+id.
type redisClaims struct {
	redisStore
	// ttlMS and leaseMS render the TTL and Do's lease for the scripts:
	// callers pass the same ones every time, so no string is allocated.
	ttlMS, leaseMS msCache
}

func (b *redisClaims) claim(ctx context.Context, op, id, value string, ttl time.Duration, sent *time.Time) (int64, error) {
	ms := &b.ttlMS
	if value[0] == '~' {
		ms = &b.leaseMS
	}
	return replyInt(op, id, b.execSent(ctx, scriptClaim, b.key(id), sent, ms.ms(ttl), value))
}

func (b *redisClaims) seen(ctx context.Context, id string) (int64, error) {
	return replyInt("seen", id, b.exec(ctx, scriptSeen, b.key(id)))
}

func (b *redisClaims) forget(ctx context.Context, id string) (int64, error) {
	return replyInt("forget", id, b.exec(ctx, scriptForget, b.key(id)))
}

func (b *redisClaims) extend(ctx context.Context, id, token string, lease time.Duration, sent *time.Time) (int64, error) {
	return replyInt("extend", id, b.execSent(ctx, scriptExtend, b.key(id), sent, token, b.leaseMS.ms(lease)))
}

func (b *redisClaims) commit(ctx context.Context, id, token string, ttl time.Duration) (int64, error) {
	return replyInt("commit", id, b.exec(ctx, scriptCommit, b.key(id), token, b.ttlMS.ms(ttl)))
}

func (b *redisClaims) release(ctx context.Context, id, token string) error {
	_, err := replyInt("release", id, b.exec(ctx, scriptRelease, b.key(id), token))
	return err
}
