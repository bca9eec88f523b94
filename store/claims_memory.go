package store

import (
	"context"
	"sync"
	"time"
)

// memClaims is Claims' memory backend: claim.lua, seen.lua, forget.lua,
// extend.lua, commit.lua and release.lua restated in Go on a map, with
// WithClock's clock in place of the server's TIME.
type memClaims struct {
	mu  sync.Mutex
	m   map[string]memClaim
	now func() time.Time
	// fence is the last fence granted (clockFence), under mu.
	fence uint64
}

type memClaim struct {
	value   string    // "1" or "~<token>", as in Redis
	expires time.Time // zero: never
	// running: a Do in this process holds the lease and is extending it, so
	// it does not expire: its owner lives in this process, so a running
	// Do's lease is as if extended continuously (a fake clock moved past it
	// cannot take it away).
	running bool
}

// get returns id's live entry, dropping an expired one. Callers hold mu.
func (b *memClaims) get(id string, now time.Time) (memClaim, bool) {
	e, ok := b.m[id]
	if ok && !e.running && !e.expires.IsZero() && !now.Before(e.expires) {
		delete(b.m, id)
		return memClaim{}, false
	}
	return e, ok
}

// claimLocked is claim.lua: 1 created, 0 processed, -(ms left on the
// lease, at least 1) in flight; and, for a lease ("~<token>") created, its
// fence. Callers hold mu.
func (b *memClaims) claimLocked(id, value string, ttl time.Duration, now time.Time) (int64, uint64) {
	if e, ok := b.get(id, now); ok {
		if e.value[0] == '~' {
			return -max(e.expires.Sub(now).Milliseconds(), 1), 0
		}
		return 0, 0
	}
	b.m[id] = memClaim{value: value, expires: expiryAt(now, ttl), running: value[0] == '~'}
	if value[0] != '~' {
		return 1, 0 // a mark has no fence
	}
	return 1, clockFence(now, &b.fence)
}

func (b *memClaims) claim(_ context.Context, _, id, value string, ttl time.Duration, sent *time.Time) (int64, uint64, error) {
	stamp(sent)
	b.mu.Lock()
	defer b.mu.Unlock()
	n, fence := b.claimLocked(id, value, ttl, b.now())
	return n, fence, nil
}

func (b *memClaims) seen(_ context.Context, id string) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.get(id, b.now())
	return flag(ok), nil
}

func (b *memClaims) forget(_ context.Context, id string) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.get(id, b.now())
	delete(b.m, id)
	return flag(ok), nil
}

func (b *memClaims) extend(_ context.Context, id, token string, lease time.Duration, _ *time.Time) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	e, ok := b.get(id, now)
	if !ok || e.value[0] != '~' || e.value[1:] != token {
		return 0, nil
	}
	e.expires = expiryAt(now, lease)
	b.m[id] = e
	return 1, nil
}

func (b *memClaims) commit(_ context.Context, id, token string, ttl time.Duration) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	reply := int64(1)
	e, ok := b.get(id, now)
	switch {
	case !ok:
		reply = 2
	case e.value == "1":
		return 0, nil
	case e.value[1:] != token:
		return -1, nil
	}
	b.m[id] = memClaim{value: "1", expires: expiryAt(now, ttl)}
	return reply, nil
}

func (b *memClaims) release(_ context.Context, id, token string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.get(id, b.now()); ok && e.value[0] == '~' && e.value[1:] == token {
		delete(b.m, id)
	}
	return nil
}

// batch is claim_many.lua or seen_many.lua: one consistent step for the
// whole batch.
func (b *memClaims) batch(_ context.Context, claim bool, ids []string, ttl time.Duration, read func(int64) (bool, bool), _ *tally, ok []bool) ([]bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out := make([]bool, len(ids))
	for i, id := range ids {
		var n int64
		if claim {
			n, _ = b.claimLocked(id, "1", ttl, now)
		} else {
			_, found := b.get(id, now)
			n = flag(found)
		}
		out[i], _ = read(n)
		if ok != nil {
			ok[i] = true
		}
	}
	return out, nil
}

func (b *memClaims) close() error { return nil }

// flag is a script's 1 or 0.
func flag(ok bool) int64 {
	if ok {
		return 1
	}
	return 0
}

// leaseFlush is a gathering of Batch operations: claim.lua, extend.lua,
// commit.lua and release.lua restated above, for each request in order.
func (b *memClaims) leaseFlush(ctx context.Context, reqs []*leaseReq) {
	sent := time.Now()
	for _, r := range reqs {
		switch r.op {
		case opLease:
			r.n, r.fence, r.err = b.claim(ctx, "do", r.id, r.value, r.arg, nil)
		case opExtend:
			r.n, r.err = b.extend(ctx, r.id, r.value[1:], r.arg, nil)
		case opCommit:
			r.n, r.err = b.commit(ctx, r.id, r.value[1:], r.arg)
		default:
			r.err = b.release(ctx, r.id, r.value[1:])
		}
		r.sent = sent
	}
}
