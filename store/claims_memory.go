package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// MemoryClaims is the in-memory reference implementation of ClaimStore, with the
// same behaviour as Claims (the storetest suite checks both). It is for tests and
// single-process programs; it is safe for concurrent use. WithClock sets its clock.
type MemoryClaims struct {
	mu  sync.Mutex
	m   map[string]memClaim
	ttl time.Duration
	now func() time.Time
	err error
}

type memClaim struct {
	value   string    // "1" or "~<token>", as in Redis
	expires time.Time // zero: never
	// running: a Do in this process holds the lease and is extending it, so
	// it does not expire (see Do).
	running bool
}

var _ ClaimStore = (*MemoryClaims)(nil)

// NewMemoryClaims returns an empty in-memory claims store. Options: WithTTL
// (default 0: never expire), WithClock (default time.Now).
func NewMemoryClaims(opts ...Option) *MemoryClaims {
	cfg := newConfig(DefaultClaimsPrefix, opts)
	return &MemoryClaims{m: map[string]memClaim{}, ttl: cfg.ttl, now: cfg.now, err: cfg.err}
}

// get returns id's live entry, dropping an expired one. Callers hold mu.
func (s *MemoryClaims) get(id string, now time.Time) (memClaim, bool) {
	e, ok := s.m[id]
	if ok && !e.running && !e.expires.IsZero() && !now.Before(e.expires) {
		delete(s.m, id)
		return memClaim{}, false
	}
	return e, ok
}

// claim is claim.lua: 1 created, 0 processed, -1 in flight.
func (s *MemoryClaims) claim(id, value string, ttl time.Duration, running bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if e, ok := s.get(id, now); ok {
		if strings.HasPrefix(e.value, "~") {
			return -1
		}
		return 0
	}
	s.m[id] = memClaim{value: value, expires: expiryAt(now, ttl), running: running}
	return 1
}

// Claim is Claims.Claim.
func (s *MemoryClaims) Claim(ctx context.Context, id string) (bool, error) {
	if err := s.check(ctx, "claim", id); err != nil {
		return false, err
	}
	return s.claim(id, "1", s.ttl, false) == 1, nil
}

// ClaimMany is Claims.ClaimMany.
func (s *MemoryClaims) ClaimMany(ctx context.Context, ids []string) ([]bool, error) {
	for _, id := range ids {
		if err := s.check(ctx, "claim", id); err != nil {
			return nil, err
		}
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		out[i] = s.claim(id, "1", s.ttl, false) == 1
	}
	return out, nil
}

// Seen is Claims.Seen.
func (s *MemoryClaims) Seen(ctx context.Context, id string) (bool, error) {
	if err := s.check(ctx, "seen", id); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.get(id, s.now())
	return ok, nil
}

// SeenMany is Claims.SeenMany: one consistent read of every id.
func (s *MemoryClaims) SeenMany(ctx context.Context, ids []string) ([]bool, error) {
	for _, id := range ids {
		if err := s.check(ctx, "seen", id); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]bool, len(ids))
	for i, id := range ids {
		_, out[i] = s.get(id, now)
	}
	return out, nil
}

// Remember is Claims.Remember.
func (s *MemoryClaims) Remember(ctx context.Context, id string) error {
	_, err := s.Claim(ctx, id)
	return err
}

// Forget is Claims.Forget.
func (s *MemoryClaims) Forget(ctx context.Context, id string) error {
	if err := s.check(ctx, "forget", id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
	return nil
}

// Do is Claims.Do. Its owner lives in this process, so a running Do's lease
// never expires here (as if extended continuously; a fake clock moved past it
// cannot take it away); the heartbeat still runs every lease/3, moves the
// expiry and cancels fn's context when the lease is lost (a Forget).
func (s *MemoryClaims) Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, error) {
	if err := s.check(ctx, "do", id); err != nil {
		return false, err
	}
	if lease <= 0 {
		return false, errorf("do", id, ErrInvalidArgument, "lease %v must be > 0", lease)
	}
	token := newToken()
	held := "~" + token
	switch s.claim(id, held, lease, true) {
	case 0:
		return false, nil
	case -1:
		return false, fmt.Errorf("redisonce: do %q: %w", id, ErrInFlight)
	}
	return true, runLeased(ctx, id, token, lease, fn,
		func(context.Context) (bool, error) { // extend.lua
			s.mu.Lock()
			defer s.mu.Unlock()
			now := s.now()
			e, ok := s.get(id, now)
			if !ok || e.value != held {
				return false, nil
			}
			e.expires = expiryAt(now, lease)
			s.m[id] = e
			return true, nil
		},
		func(context.Context) (int64, error) { // commit.lua
			s.mu.Lock()
			defer s.mu.Unlock()
			now := s.now()
			reply := int64(1)
			e, ok := s.get(id, now)
			switch {
			case !ok:
				reply = 2
			case e.value == "1":
				return 0, nil
			case e.value != held:
				return -1, nil
			}
			s.m[id] = memClaim{value: "1", expires: expiryAt(now, s.ttl)}
			return reply, nil
		},
		func(context.Context) error { // release.lua
			s.mu.Lock()
			defer s.mu.Unlock()
			if e, ok := s.get(id, s.now()); ok && e.value == held {
				delete(s.m, id)
			}
			return nil
		})
}

// Close does nothing; it is there to satisfy ClaimStore.
func (s *MemoryClaims) Close() error { return nil }

func (s *MemoryClaims) check(ctx context.Context, op, id string) error {
	if s.err != nil {
		return s.err
	}
	return checkID(ctx, op, id)
}
