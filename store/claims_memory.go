package store

import (
	"context"
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
	// fence is the last fence granted (clockFence), under mu.
	fence uint64
	err   error
	ev    events
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
	return &MemoryClaims{m: map[string]memClaim{}, ttl: cfg.ttl, now: cfg.now, err: cfg.err, ev: newEvents("claims", cfg)}
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

// claim is claim.lua: 1 created, 0 processed, -(ms left on the lease, at
// least 1) in flight; and, for a lease ("~<token>") created, its fence.
func (s *MemoryClaims) claim(id, value string, ttl time.Duration, running bool) (int64, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if e, ok := s.get(id, now); ok {
		if strings.HasPrefix(e.value, "~") {
			return -max(e.expires.Sub(now).Milliseconds(), 1), 0
		}
		return 0, 0
	}
	s.m[id] = memClaim{value: value, expires: expiryAt(now, ttl), running: running}
	if value == "1" {
		return 1, 0 // a mark has no fence
	}
	return 1, clockFence(now, &s.fence)
}

// Claim is Claims.Claim.
func (s *MemoryClaims) Claim(ctx context.Context, id string) (bool, error) {
	if s == nil {
		return false, nilStore("claim", id, "MemoryClaims")
	}
	return s.claimOp(ctx, "claim", id)
}

// claimOp is Claim, reported as op.
func (s *MemoryClaims) claimOp(ctx context.Context, op, id string) (bool, error) {
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	var n int64
	err := s.check(ctx, "claim", id)
	if err == nil {
		n, _ = s.claim(id, "1", s.ttl, false)
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, op, "", id, 1, outcome(err, claimOutcome(n)), start, err)
	}
	return n == 1, err
}

// ClaimMany is Claims.ClaimMany.
func (s *MemoryClaims) ClaimMany(ctx context.Context, ids []string) ([]bool, error) {
	if s == nil {
		return nil, nilStore("claim_many", "", "MemoryClaims")
	}
	var tally *tally
	if s.ev.obs != nil {
		tally = newTally(OutcomeClaimed, OutcomeDuplicate, OutcomeInFlight)
		defer func() { tally.report(ctx, &s.ev, "claim_many", "", "", len(ids)) }()
	}
	if len(ids) == 0 {
		if err := s.checkBatch(ctx, "claim"); err != nil {
			tally.fail(err)
			return nil, err
		}
	}
	for _, id := range ids {
		if err := s.check(ctx, "claim", id); err != nil {
			tally.fail(err)
			return nil, err
		}
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		n, _ := s.claim(id, "1", s.ttl, false)
		tally.add(claimOutcome(n))
		out[i] = n == 1
	}
	return out, nil
}

// Seen is Claims.Seen.
func (s *MemoryClaims) Seen(ctx context.Context, id string) (bool, error) {
	if s == nil {
		return false, nilStore("seen", id, "MemoryClaims")
	}
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	ok, err := false, s.check(ctx, "seen", id)
	if err == nil {
		s.mu.Lock()
		_, ok = s.get(id, s.now())
		s.mu.Unlock()
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, "seen", "", id, 1, outcome(err, seenOutcome(ok)), start, err)
	}
	return ok, err
}

// SeenMany is Claims.SeenMany: one consistent read of every id.
func (s *MemoryClaims) SeenMany(ctx context.Context, ids []string) ([]bool, error) {
	if s == nil {
		return nil, nilStore("seen_many", "", "MemoryClaims")
	}
	var tally *tally
	if s.ev.obs != nil {
		tally = newTally(OutcomeSeen, OutcomeNotSeen)
		defer func() { tally.report(ctx, &s.ev, "seen_many", "", "", len(ids)) }()
	}
	if len(ids) == 0 {
		if err := s.checkBatch(ctx, "seen"); err != nil {
			tally.fail(err)
			return nil, err
		}
	}
	for _, id := range ids {
		if err := s.check(ctx, "seen", id); err != nil {
			tally.fail(err)
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]bool, len(ids))
	for i, id := range ids {
		_, out[i] = s.get(id, now)
		tally.add(seenOutcome(out[i]))
	}
	return out, nil
}

// Remember is Claims.Remember.
func (s *MemoryClaims) Remember(ctx context.Context, id string) error {
	if s == nil {
		return nilStore("remember", id, "MemoryClaims")
	}
	_, err := s.claimOp(ctx, "remember", id)
	return err
}

// Forget is Claims.Forget.
func (s *MemoryClaims) Forget(ctx context.Context, id string) error {
	if s == nil {
		return nilStore("forget", id, "MemoryClaims")
	}
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	ok, err := false, s.check(ctx, "forget", id)
	if err == nil {
		s.mu.Lock()
		_, ok = s.get(id, s.now())
		delete(s.m, id)
		s.mu.Unlock()
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, "forget", "", id, 1, outcome(err, found(ok, OutcomeForgotten)), start, err)
	}
	return err
}

// Do is Claims.Do. Its owner lives in this process, so a running Do's lease
// never expires here (as if extended continuously; a fake clock moved past it
// cannot take it away); the heartbeat still runs every lease/4, moves the
// expiry and cancels fn's context when the lease is lost (a Forget), and
// fn's context has the same local lease deadline (by the real clock, not a
// fake one) as Claims.Do's.
func (s *MemoryClaims) Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (ran bool, err error) {
	if s == nil {
		return false, nilStore("do", id, "MemoryClaims")
	}
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
func (s *MemoryClaims) do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, Outcome, error) {
	if err := s.check(ctx, "do", id); err != nil {
		return false, outcome(err, OutcomeError), err
	}
	if fn == nil {
		return false, OutcomeInvalid, errorf("do", id, ErrInvalidArgument, "nil fn")
	}
	if lease <= 0 {
		return false, OutcomeInvalid, errorf("do", id, ErrInvalidArgument, "lease %v must be > 0", lease)
	}
	token := newToken()
	held := "~" + token
	sent := time.Now() // the local lease deadline counts from here
	n, fence := s.claim(id, held, lease, true)
	switch {
	case n == 0:
		return false, OutcomeDuplicate, nil
	case n < 0:
		return false, OutcomeInFlight, inFlight("do", id, time.Duration(-n)*time.Millisecond)
	}
	extend := extendFunc(func(context.Context, *time.Time) (bool, error) { // extend.lua
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
	})
	if s.ev.obs != nil {
		extend = s.ev.observeExtend(id, "", OutcomeLeaseLost, extend)
	}
	hb := startHeartbeat(ctx, lease, sent, "do", ErrLeaseLost, extend)
	hb.confirm(Lease{ID: id, Token: token, Fence: fence}, sent)
	out, err := runLeased(ctx, hb, id, fn,
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
	return true, out, err
}

// Close does nothing; it is there to satisfy ClaimStore.
func (s *MemoryClaims) Close() error { return nil }

// checkBatch validates the options and the context of an empty batch.
func (s *MemoryClaims) checkBatch(ctx context.Context, op string) error {
	if s.err != nil {
		return s.err
	}
	return checkCtx(ctx, op, "")
}

func (s *MemoryClaims) check(ctx context.Context, op, id string) error {
	if s.err != nil {
		return s.err
	}
	return checkID(ctx, op, id)
}
