package store

import (
	"context"
	"sync"
	"time"
)

// MemoryRecords is the in-memory reference implementation of RecordStore, with
// the same behaviour as Records (the storetest suite checks both): it restates
// acquire.lua, get.lua, update.lua and delete.lua in Go, with WithClock's clock
// in place of the server's TIME. It is for tests and single-process programs;
// it is safe for concurrent use. Expired records are dropped when they are next
// touched.
type MemoryRecords struct {
	mu  sync.Mutex
	m   map[string]*memRecord
	ttl time.Duration
	now func() time.Time
	err error
	ev  events
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

var (
	_ RecordStore = (*MemoryRecords)(nil)
	_ recordOps   = (*MemoryRecords)(nil)
)

// NewMemoryRecords returns an empty in-memory records store. Options: WithTTL
// (default DefaultRecordsTTL, 24 hours; 0: never expire), WithClock (default
// time.Now).
func NewMemoryRecords(opts ...Option) *MemoryRecords {
	cfg := newConfig(DefaultRecordsPrefix, opts)
	return &MemoryRecords{m: map[string]*memRecord{}, ttl: cfg.recordsTTL(), now: cfg.now, err: cfg.err, ev: newEvents("records", cfg)}
}

// nowMS is the clock in ms, as TIME gives it to the scripts.
func (s *MemoryRecords) nowMS() int64 { return s.now().UnixMilli() }

// live returns key's record, dropping an expired one. Callers hold mu.
func (s *MemoryRecords) live(key string, now int64) (*memRecord, bool) {
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

// Acquire is Records.Acquire.
func (s *MemoryRecords) Acquire(ctx context.Context, key string, ttl time.Duration) (Record, bool, error) {
	if s == nil {
		return Record{}, false, nilStore("acquire", key, "MemoryRecords")
	}
	return s.AcquireWith(ctx, key, AcquireOptions{TTL: ttl})
}

// AcquireWith is Records.AcquireWith.
func (s *MemoryRecords) AcquireWith(ctx context.Context, key string, o AcquireOptions) (Record, bool, error) {
	if s == nil {
		return Record{}, false, nilStore("acquire", key, "MemoryRecords")
	}
	if s.ev.obs == nil {
		return s.acquire(ctx, "acquire", key, o, newToken(), nil)
	}
	start := time.Now()
	rec, ok, err := s.acquire(ctx, "acquire", key, o, newToken(), nil)
	s.ev.report(ctx, "acquire", "", key, 1, outcome(err, acquireOutcome(ok, rec.Fence)), start, err)
	return rec, ok, err
}

// acquire is acquire.lua, with token the new owner token.
func (s *MemoryRecords) acquire(ctx context.Context, op, key string, o AcquireOptions, token string, sent *time.Time) (Record, bool, error) {
	if err := s.check(ctx, op, key); err != nil {
		return Record{}, false, err
	}
	if err := o.check(op, key); err != nil {
		return Record{}, false, err
	}
	if o.TTL == 0 {
		o.TTL = s.ttl
	}
	stamp(sent)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowMS()
	var leaseUntil int64
	if o.Lease > 0 {
		leaseUntil = now + durMS(o.Lease)
	}
	if r, ok := s.live(key, now); ok {
		if o.Fingerprint != "" && r.fp != "" && o.Fingerprint != r.fp {
			return Record{}, false, errorf(op, key, ErrFingerprintMismatch, "the key was acquired with a different fingerprint")
		}
		// acquire.lua: a record at the largest fence (19 nines) is never taken over.
		if r.status != string(StatusPending) || r.lease == 0 || r.lease > now || r.running == r.token || r.fence >= MaxFence {
			return r.record(key, false), false, nil
		}
		r.token, r.lease, r.updated = token, leaseUntil, now
		if op == "do" {
			r.running = token
		}
		r.fence++
		if r.fp == "" {
			r.fp = o.Fingerprint
		}
		return r.record(key, true), true, nil
	}
	r := &memRecord{
		status:  string(StatusPending),
		created: now, updated: now, lease: leaseUntil,
		fence: 1, fp: o.Fingerprint, token: token,
	}
	if op == "do" {
		r.running = token
	}
	if o.TTL > 0 {
		r.expires = now + durMS(o.TTL)
	}
	s.m[key] = r
	return r.record(key, true), true, nil
}

// Get is Records.Get.
func (s *MemoryRecords) Get(ctx context.Context, key string) (Record, bool, error) {
	if s == nil {
		return Record{}, false, nilStore("get", key, "MemoryRecords")
	}
	if s.ev.obs == nil {
		return s.get(ctx, key)
	}
	start := time.Now()
	rec, ok, err := s.get(ctx, key)
	s.ev.report(ctx, "get", "", key, 1, outcome(err, found(ok, OutcomeRead)), start, err)
	return rec, ok, err
}

func (s *MemoryRecords) get(ctx context.Context, key string) (Record, bool, error) {
	if err := s.check(ctx, "get", key); err != nil {
		return Record{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.live(key, s.nowMS())
	if !ok {
		return Record{}, false, nil
	}
	return r.record(key, false), true, nil
}

// Update is Records.Update.
func (s *MemoryRecords) Update(ctx context.Context, key string, u Update) error {
	if s == nil {
		return nilStore("update", key, "MemoryRecords")
	}
	if s.ev.obs == nil {
		return s.update(ctx, "update", key, u)
	}
	start := time.Now()
	err := s.update(ctx, "update", key, u)
	s.ev.report(ctx, "update", "", key, 1, outcome(err, OutcomeUpdated), start, err)
	return err
}

// update is update.lua.
func (s *MemoryRecords) update(ctx context.Context, op, key string, u Update) error {
	if err := s.check(ctx, op, key); err != nil {
		return err
	}
	f, err := u.fields(op, key)
	if err != nil {
		return err
	}
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
	if f.status != nil {
		r.status = *f.status
	}
	if f.payload != nil {
		r.payload = append([]byte(nil), *f.payload...)
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

// Delete is Records.Delete.
func (s *MemoryRecords) Delete(ctx context.Context, key string) error {
	if s == nil {
		return nilStore("delete", key, "MemoryRecords")
	}
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	ok, err := false, s.check(ctx, "delete", key)
	if err == nil {
		s.mu.Lock()
		_, ok = s.live(key, s.nowMS())
		delete(s.m, key)
		s.notify(key)
		s.mu.Unlock()
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, "delete", "", key, 1, outcome(err, found(ok, OutcomeDeleted)), start, err)
	}
	return err
}

// DeleteFenced is Records.DeleteFenced.
func (s *MemoryRecords) DeleteFenced(ctx context.Context, key, token string) error {
	if s == nil {
		return nilStore("delete_fenced", key, "MemoryRecords")
	}
	if s.ev.obs == nil {
		_, err := s.deleteFenced(ctx, "delete", key, token)
		return err
	}
	start := time.Now()
	ok, err := s.deleteFenced(ctx, "delete", key, token)
	s.ev.report(ctx, "delete", "", key, 1, outcome(err, found(ok, OutcomeDeleted)), start, err)
	return err
}

// deleteFenced is delete.lua with a token.
func (s *MemoryRecords) deleteFenced(ctx context.Context, op, key, token string) (bool, error) {
	if err := s.check(ctx, op, key); err != nil {
		return false, err
	}
	if err := checkToken(op, key, token); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.live(key, s.nowMS())
	if !ok {
		return false, nil
	}
	if r.token != token {
		return false, errorf(op, key, ErrStaleOwner, "the record has another owner")
	}
	delete(s.m, key)
	s.notify(key)
	return true, nil
}

// complete is complete.lua: a fenced update of status and a small payload
// (memory is never full here).
func (s *MemoryRecords) complete(ctx context.Context, op, key, token string, status Status, payload []byte) error {
	if err := s.check(ctx, op, key); err != nil {
		return err
	}
	if err := checkSmall(op, key, token, status, payload); err != nil {
		return err
	}
	return s.update(ctx, op, key, Update{Status: &status, Payload: &payload, Token: token})
}

// renew is renew.lua.
// clock is recordOps.clock: the store's clock (WithClock).
func (s *MemoryRecords) clock() time.Time { return s.now() }

func (s *MemoryRecords) renew(_ context.Context, key, token string, lease time.Duration, _ *time.Time) (int64, error) {
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

// Do is Records.Do. Its owner lives in this process, so a running Do's lease
// never passes here (as if renewed continuously; a fake clock moved past it
// cannot take the record over); the heartbeat still runs every o.Lease/4,
// moves LeaseUntil and cancels fn's context when the record is lost (a Delete).
func (s *MemoryRecords) Do(ctx context.Context, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	if s == nil {
		return nil, false, nilStore("do", key, "MemoryRecords")
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
func (s *MemoryRecords) do(ctx context.Context, key string, o AcquireOptions, fn func(context.Context) ([]byte, error)) ([]byte, bool, Outcome, error) {
	if err := s.check(ctx, "do", key); err != nil {
		return nil, false, outcome(err, OutcomeError), err
	}
	return doRecord(ctx, s, &s.ev, "", "", key, o, fn)
}

// Close does nothing; it is there to satisfy RecordStore.
func (s *MemoryRecords) Close() error { return nil }

func (s *MemoryRecords) check(ctx context.Context, op, key string) error {
	if s.err != nil {
		return s.err
	}
	return checkID(ctx, op, key)
}
