// Package gojob is go-job's idempotency store (the interface
// github.com/goliatone/go-job/queue/idempotency.Store, as of go-job v0.19.0)
// over a redisonce records store: go-job's enqueue deduplication and its
// workers' shared deduplication (worker.WithIdempotencyStore,
// command.EnqueueOptions.IdempotencyStore) then keep their records in
// redisonce's records, where every operation is one atomic script.
//
//	rs, err := store.OpenRecords("redis://localhost:6379/0", store.WithPrefix("gojob:idempotency:"))
//	...
//	w := worker.NewWorker(dequeuer, worker.WithIdempotencyStore(gojob.NewStore(rs), 24*time.Hour))
//
// It follows go-job's conventions:
//
//   - Acquire(ctx, key, ttl) with ttl <= 0 keeps the record forever, as
//     go-job's stores do (redisonce alone would apply its WithTTL);
//   - an empty status in an Update is "pending" (idempotency.DefaultStatus);
//   - an Update whose ExpiresAt is at or before now deletes the record and
//     returns idempotency.ErrNotFound, as go-job's Redis and SQL stores do;
//   - a missing record is idempotency.ErrNotFound (errors.Is also matches
//     store.ErrNotFound).
//
// Where redisonce differs from go-job's stores, and a test documents it:
//
//   - times have millisecond precision and come from the Redis server's
//     clock (TIME), not the caller's; ExpiresAt is rounded up to the ms;
//   - an Update with no field at all checks that the record exists
//     (idempotency.ErrNotFound if not) and changes nothing, UpdatedAt
//     included (go-job's stores rewrite the record to move UpdatedAt);
//   - a key is at most store.MaxIDLen (1 KiB) and a payload at most
//     store.MaxRecordPayloadLen (1 MiB): more is an error wrapping
//     store.ErrInvalidArgument, except the payload of a "failed" Update (an
//     error text), which is cut to the limit;
//   - a key under the store's prefix that holds go-job's own JSON string (its
//     Redis store writes "idempotency:<key>", the same key as redisonce's
//     default prefix "idempotency:") makes Acquire, Get and Update fail with
//     store.ErrUnexpectedReply, unless WithLegacy reads it: see README.md for
//     the migration.
package gojob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/goliatone/go-job/queue/idempotency"

	"github.com/redisonce/redisonce/store"
)

// Store is go-job's idempotency.Store over a redisonce *store.Records
// (store.Records on Redis, store.MemoryRecords in tests). It is safe for
// concurrent use.
type Store struct {
	rs     *store.Records
	legacy idempotency.Store
	now    func() time.Time
}

var _ idempotency.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithLegacy sets the store the application used before (go-job's Redis or
// SQL store) for a migration: records missing from redisonce are looked up
// there (Acquire and Get), an Update or Delete of a key that only the legacy
// store has goes there, and a key holding go-job's JSON string under the
// same Redis key is read through it. Default nil: no legacy store.
func WithLegacy(legacy idempotency.Store) Option {
	return func(s *Store) { s.legacy = legacy }
}

// WithClock sets the clock Update uses to tell an ExpiresAt in the past. It
// must be the store's clock: the same function given to
// store.NewMemoryRecords with store.WithClock; a Redis store runs on the
// server's TIME, which time.Now (the default) approximates.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// NewStore returns go-job's idempotency.Store over rs. The Store does not own
// rs: closing rs is the caller's business. With a nil rs every call returns
// store.ErrInvalidArgument.
func NewStore(rs *store.Records, opts ...Option) *Store {
	s := &Store{rs: rs, now: time.Now}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

// check refuses a Store without records, a nil context and an empty
// key (ErrInvalidArgument) before anything is read.
func (s *Store) check(ctx context.Context, key string) error {
	switch {
	case s == nil || s.rs == nil:
		return fmt.Errorf("redisonce/gojob: %w: a nil *store.Records", store.ErrInvalidArgument)
	case ctx == nil:
		return fmt.Errorf("redisonce/gojob: %w: nil context", store.ErrInvalidArgument)
	case key == "":
		return errKeyRequired()
	}
	return nil
}

// errKeyRequired is go-job's own text for an empty key.
func errKeyRequired() error {
	return fmt.Errorf("idempotency key required: %w", store.ErrInvalidArgument)
}

// notFound is idempotency.ErrNotFound carrying the store's error (which
// wraps store.ErrNotFound) for errors.Is on either.
func notFound(err error) error {
	if err == nil {
		return idempotency.ErrNotFound
	}
	return fmt.Errorf("%w: %w", idempotency.ErrNotFound, err)
}

// toRecord converts a redisonce record.
func toRecord(r store.Record) idempotency.Record {
	return idempotency.Record{
		Key:       r.Key,
		Status:    idempotency.DefaultStatus(idempotency.Status(r.Status)),
		Payload:   r.Payload,
		ExpiresAt: r.ExpiresAt,
		CreatedAt: r.CreatedAt,
		UpdatedAt: r.UpdatedAt,
	}
}

// Acquire creates key's record, pending, expiring after ttl (ttl <= 0:
// never), and returns it with true; an existing unexpired record is returned
// with false. With WithLegacy, a record the legacy store still holds is
// returned with false first.
func (s *Store) Acquire(ctx context.Context, key string, ttl time.Duration) (idempotency.Record, bool, error) {
	if err := s.check(ctx, key); err != nil {
		return idempotency.Record{}, false, err
	}
	if s.legacy != nil {
		rec, found, err := s.legacy.Get(ctx, key)
		if err != nil && !isWrongType(err) { // the key holds a redisonce record, not a legacy one
			return idempotency.Record{}, false, err
		}
		if err == nil && found {
			return rec, false, nil
		}
	}
	o := store.AcquireOptions{}
	if ttl > 0 {
		o.TTL = ttl
	}
	rec, acquired, err := s.rs.AcquireWith(ctx, key, o)
	if err != nil {
		return idempotency.Record{}, false, err
	}
	if acquired && ttl <= 0 && !rec.ExpiresAt.IsZero() {
		// go-job keeps a record acquired without a ttl forever, redisonce
		// gives it the store's TTL: remove the expiry, fenced by our token.
		// If that fails, give the key back rather than hold it half-made.
		never := time.Time{}
		if err := s.rs.Update(ctx, key, store.Update{ExpiresAt: &never, Token: rec.Token}); err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return idempotency.Record{}, false, errors.Join(err, s.rs.DeleteFenced(dctx, key, rec.Token))
		}
		rec.ExpiresAt = time.Time{}
	}
	return toRecord(rec), acquired, nil
}

// Get returns key's record and true, or false when it is missing or expired.
func (s *Store) Get(ctx context.Context, key string) (idempotency.Record, bool, error) {
	if err := s.check(ctx, key); err != nil {
		return idempotency.Record{}, false, err
	}
	rec, found, err := s.rs.Get(ctx, key)
	if s.legacy != nil && (err == nil && !found || isWrongType(err)) {
		return s.legacy.Get(ctx, key)
	}
	if err != nil || !found {
		return idempotency.Record{}, false, err
	}
	return toRecord(rec), true, nil
}

// Update applies u to key's record: idempotency.ErrNotFound when there is
// none. An empty status is "pending"; an ExpiresAt at or before now deletes
// the record and returns idempotency.ErrNotFound; a pointer to the zero time
// removes the expiry. An Update with no field changes nothing (see the
// package documentation).
func (s *Store) Update(ctx context.Context, key string, u idempotency.Update) error {
	if err := s.check(ctx, key); err != nil {
		return err
	}
	if u.Status == nil && u.Payload == nil && u.ExpiresAt == nil {
		_, found, err := s.Get(ctx, key)
		if err != nil {
			return err
		}
		if !found {
			return notFound(nil)
		}
		return nil
	}
	var su store.Update
	failed := false
	if u.Status != nil {
		st := store.Status(idempotency.DefaultStatus(*u.Status))
		su.Status = &st
		failed = st == store.StatusFailed
	}
	if u.Payload != nil {
		p := *u.Payload
		if len(p) > store.MaxRecordPayloadLen && failed {
			p = p[:store.MaxRecordPayloadLen] // an error text: keep its head
		}
		su.Payload = &p
	}
	past := false
	if u.ExpiresAt != nil {
		e := *u.ExpiresAt
		su.ExpiresAt = &e
		past = !e.IsZero() && !e.After(s.now())
	}
	err := s.rs.Update(ctx, key, su)
	if s.legacy != nil && (errors.Is(err, store.ErrNotFound) || isWrongType(err)) {
		return s.legacy.Update(ctx, key, u)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound(err)
	case err != nil:
		return err
	case past:
		return notFound(nil) // the update expired the record, as with go-job
	}
	return nil
}

// Delete removes key's record; a missing key is not an error. With
// WithLegacy it is removed from the legacy store too.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.check(ctx, key); err != nil {
		return err
	}
	err := s.rs.Delete(ctx, key)
	if s.legacy != nil {
		err = errors.Join(err, s.legacy.Delete(ctx, key))
	}
	return err
}

// isWrongType: the key holds a value the reader did not write — go-job's
// JSON string read by redisonce (store.ErrUnexpectedReply), or a redisonce
// record read by go-job's Redis store: a record string (binary, starting
// "ro1 ") fails its JSON decoding, and a key of another type answers Redis's
// WRONGTYPE (whatever its client). A legacy JSON string that does not decode is thus
// read by redisonce too, which refuses it (ErrUnexpectedReply): an error
// either way, nothing overwritten.
func isWrongType(err error) bool {
	var syntax *json.SyntaxError
	return err != nil && (errors.Is(err, store.ErrUnexpectedReply) || errors.As(err, &syntax) ||
		strings.Contains(err.Error(), "WRONGTYPE"))
}
