package store

import (
	"context"
	"sync"
	"time"
)

// memRecords is Records' memory backend: acquire.lua, get.lua, update.lua,
// renew.lua and delete.lua restated in Go on a map, with WithClock's clock in
// place of the server's TIME. Expired records are dropped when they are next
// touched.
type memRecords struct {
	mu  sync.Mutex
	m   map[string]*memRecord
	now func() time.Time
	// fence is the last fence granted (clockFence), under mu.
	fence uint64
	// waits are the channels waiters (AcquireOptions.Wait) block on, by key:
	// closed by the write that ends the pending record.
	waits map[string]chan struct{}
}

// memRecord is a stored record: times in ms since the epoch, 0 = none.
type memRecord struct {
	status                           string
	payload                          []byte
	created, updated, expires, lease int64
	fence                            uint64
	fp, token                        string
	// running is the token of a Do in this process that holds the lease and
	// renews it: while it is the record's token, the lease does not pass.
	running string
}

// nowMS is the clock in ms, as TIME gives it to the scripts.
func (s *memRecords) nowMS() int64 { return s.now().UnixMilli() }

// live returns key's record, dropping an expired one. Callers hold mu.
func (s *memRecords) live(key string, now int64) (*memRecord, bool) {
	r, ok := s.m[key]
	if ok && !r.held() && r.expires != 0 && now >= max(r.expires, r.pendingLease()) {
		delete(s.m, key)
		return nil, false
	}
	return r, ok
}

// The records' expiry rule (renew.lua's header): a record expires at
// expires, or at its lease while it is pending with a lease past it; a
// record a running Do holds (held) does not expire, as its lease does not
// pass. A write that leaves no live lease after expires has passed gives the
// record its retention (expires - created) again from now.

// pendingLease is the lease that keeps a pending record alive, 0 for others.
func (r *memRecord) pendingLease() int64 {
	if r.status != string(StatusPending) {
		return 0
	}
	return r.lease
}

// held reports whether a running Do in this process holds r.
func (r *memRecord) held() bool {
	return r.status == string(StatusPending) && r.running != "" && r.running == r.token
}

// rearm applies the rule's last sentence after a write at now.
func (r *memRecord) rearm(now int64) {
	if r.expires != 0 && r.expires <= now && r.pendingLease() <= now && !r.held() {
		r.expires = now + max(r.expires-r.created, 1)
	}
}

// record copies r out; the token only for its owner.
func (r *memRecord) record(key string, withToken bool) Record {
	rec := Record{
		Key:         key,
		Status:      Status(r.status),
		CreatedAt:   msTime(r.created),
		UpdatedAt:   msTime(r.updated),
		ExpiresAt:   msTime(r.expires),
		LeaseUntil:  msTime(r.lease),
		Fence:       r.fence,
		Fingerprint: r.fp,
	}
	if len(r.payload) > 0 {
		rec.Payload = append([]byte(nil), r.payload...)
	}
	if withToken {
		rec.Token = r.token
	}
	return rec
}

// acquire is acquire.lua, with token the new owner token.
func (s *memRecords) acquire(_ context.Context, op, key string, o AcquireOptions, token string, held bool, sent *time.Time) (Record, int64, error) {
	stamp(sent)
	s.mu.Lock()
	defer s.mu.Unlock()
	clock := s.now()
	now := clock.UnixMilli()
	var leaseUntil int64
	if o.Lease > 0 {
		leaseUntil = now + durMS(o.Lease)
	}
	if r, ok := s.live(key, now); ok {
		if o.Fingerprint != "" && r.fp != "" && o.Fingerprint != r.fp {
			return Record{}, acquiredNot, errorf(op, key, ErrFingerprintMismatch, "the key was acquired with a different fingerprint")
		}
		// acquire.lua: a record at the largest fence (19 nines) is never taken over.
		if r.status != string(StatusPending) || r.lease == 0 || r.lease > now || r.running == r.token || r.fence >= maxFence {
			return r.record(key, false), acquiredNot, nil
		}
		r.token, r.lease, r.updated = token, leaseUntil, now
		if held {
			r.running = token
		}
		// max(fence + 1, the clock's): + 1 wins only over a fence ahead of the clock.
		r.fence = max(r.fence+1, clockFence(clock, &s.fence))
		if r.fp == "" {
			r.fp = o.Fingerprint
		}
		return r.record(key, true), acquiredTakeover, nil
	}
	r := &memRecord{
		status:  string(StatusPending),
		created: now, updated: now, lease: leaseUntil,
		fence: clockFence(clock, &s.fence), fp: o.Fingerprint, token: token,
	}
	if held {
		r.running = token
	}
	if o.TTL > 0 {
		r.expires = now + durMS(o.TTL)
	}
	s.m[key] = r
	return r.record(key, true), acquiredNew, nil
}

func (s *memRecords) get(_ context.Context, key string) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.live(key, s.nowMS())
	if !ok {
		return Record{}, false, nil
	}
	return r.record(key, false), true, nil
}

// update is update.lua.
func (s *memRecords) update(_ context.Context, op, key string, f updateFields) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowMS()
	r, ok := s.live(key, now)
	if !ok {
		return errorf(op, key, ErrNotFound, "no such record")
	}
	if f.token != "" && f.token != r.token {
		return errorf(op, key, ErrStaleOwner, "the record has another owner")
	}
	if f.setExp && f.expires != 0 && f.expires <= now {
		delete(s.m, key)
		s.notify(key)
		return nil
	}
	if f.status != "" {
		r.status = f.status
	}
	if f.setPayload {
		r.payload = append([]byte(nil), f.payload...)
	}
	if f.setExp {
		r.expires = f.expires
	}
	if f.setLease {
		r.lease = f.lease
	}
	if r.status != string(StatusPending) {
		r.lease = 0
		s.notify(key)
	}
	r.updated = now
	r.rearm(now)
	return nil
}

// complete is complete.lua: a fenced update of a final status and a small
// payload (memory is never full here).
func (s *memRecords) complete(ctx context.Context, op, key, token string, status Status, payload []byte) error {
	return s.update(ctx, op, key, updateFields{status: string(status), payload: payload, setPayload: true, token: token})
}

// del is delete.lua: fenced by token, or unconditional with "".
func (s *memRecords) del(_ context.Context, op, key, token string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.live(key, s.nowMS())
	if !ok {
		return false, nil
	}
	if token != "" && r.token != token {
		return false, errorf(op, key, ErrStaleOwner, "the record has another owner")
	}
	delete(s.m, key)
	s.notify(key)
	return true, nil
}

// clock is the store's clock (WithClock).
func (s *memRecords) clock() time.Time { return s.now() }

// renew is renew.lua.
func (s *memRecords) renew(_ context.Context, key, token string, lease time.Duration, _ *time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowMS()
	r, ok := s.live(key, now)
	if !ok {
		return 0, nil
	}
	if r.status != string(StatusPending) || r.token != token {
		return -1, nil
	}
	r.lease = now + durMS(lease)
	return 1, nil
}

func (s *memRecords) close() error { return nil }
