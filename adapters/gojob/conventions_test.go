package gojob_test

// go-job's conventions the adapter honours, and the differences from
// go-job's own stores it documents, on the memory and the Redis stores.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goliatone/go-job/queue/idempotency"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

var ctx = context.Background()

func mustAcquire(t *testing.T, s interface {
	Acquire(context.Context, string, time.Duration) (idempotency.Record, bool, error)
}, key string, ttl time.Duration) idempotency.Record {
	t.Helper()
	rec, acquired, err := s.Acquire(ctx, key, ttl)
	if err != nil || !acquired {
		t.Fatalf("Acquire(%q, %v) = %v, %v; want a new record", key, ttl, acquired, err)
	}
	return rec
}

func ptr[T any](v T) *T { return &v }

// A ttl <= 0 keeps the record forever, as go-job's stores do, even when the
// records store has a default TTL of its own.
func TestNonPositiveTTLNeverExpires(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, clock := tg.setup(t, store.WithTTL(tg.d(time.Second)))
		for _, ttl := range []time.Duration{-1, 0} {
			key := "k" + ttl.String()
			if rec := mustAcquire(t, s, key, ttl); !rec.ExpiresAt.IsZero() {
				t.Errorf("ttl %v: Acquire's ExpiresAt %v, want none", ttl, rec.ExpiresAt)
			}
			clock.Advance(tg.d(2 * time.Second))
			rec, found, err := s.Get(ctx, key)
			if err != nil || !found || !rec.ExpiresAt.IsZero() {
				t.Errorf("ttl %v: Get = %+v, %v, %v; want the record, without expiry", ttl, rec, found, err)
			}
		}
		// A positive ttl is the record's, not the store's.
		rec := mustAcquire(t, s, "k", tg.d(time.Minute))
		if got := rec.ExpiresAt.Sub(rec.CreatedAt); got != tg.d(time.Minute).Round(time.Millisecond) {
			t.Errorf("ttl %v: ExpiresAt - CreatedAt = %v", tg.d(time.Minute), got)
		}
	})
}

// An empty status is "pending" (idempotency.DefaultStatus).
func TestEmptyStatusIsPending(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := tg.setup(t)
		mustAcquire(t, s, "k", tg.d(time.Minute))
		if err := s.Update(ctx, "k", idempotency.Update{Status: ptr(idempotency.StatusCompleted)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, "k", idempotency.Update{Status: ptr(idempotency.Status(""))}); err != nil {
			t.Fatalf("Update with an empty status: %v", err)
		}
		if rec, _, _ := s.Get(ctx, "k"); rec.Status != idempotency.StatusPending {
			t.Errorf("status %q after an empty one, want pending", rec.Status)
		}
	})
}

// An Update whose ExpiresAt is at or before now deletes the record and
// answers ErrNotFound, as go-job's Redis and SQL stores do; a zero ExpiresAt
// removes the expiry.
func TestUpdateExpiry(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, clock := tg.setup(t)
		for i, at := range []time.Duration{-time.Second, 0} {
			if tg.name == "redis" && at == 0 {
				continue // "now" is the server's: the memory clock checks it exactly
			}
			key := "past" + string(rune('0'+i))
			mustAcquire(t, s, key, tg.d(time.Minute))
			err := s.Update(ctx, key, idempotency.Update{Status: ptr(idempotency.StatusCompleted), ExpiresAt: ptr(clock.Now().Add(at))})
			if !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("Update with ExpiresAt now%+v = %v, want idempotency.ErrNotFound", at, err)
			}
			if _, found, err := s.Get(ctx, key); found || err != nil {
				t.Errorf("after an Update into the past: found %v, %v; want the record gone", found, err)
			}
		}
		mustAcquire(t, s, "never", tg.d(time.Second))
		if err := s.Update(ctx, "never", idempotency.Update{ExpiresAt: ptr(time.Time{})}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(tg.d(2 * time.Second))
		if rec, found, err := s.Get(ctx, "never"); !found || err != nil || !rec.ExpiresAt.IsZero() {
			t.Errorf("after ExpiresAt = zero: %+v, %v, %v; want the record, no expiry", rec, found, err)
		}
	})
}

// A missing record is idempotency.ErrNotFound, and store.ErrNotFound too.
func TestUpdateMissing(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := tg.setup(t)
		err := s.Update(ctx, "missing", idempotency.Update{Status: ptr(idempotency.StatusCompleted)})
		if !errors.Is(err, idempotency.ErrNotFound) || !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Update of a missing key = %v, want idempotency.ErrNotFound wrapping store.ErrNotFound", err)
		}
		if _, found, err := s.Get(ctx, "missing"); found || err != nil {
			t.Errorf("Update of a missing key created it (%v, %v)", found, err)
		}
	})
}

// Difference: an Update with no field changes nothing, not even UpdatedAt
// (go-job's stores rewrite the record with a new UpdatedAt). A missing
// record is still ErrNotFound.
func TestUpdateNoField(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, clock := tg.setup(t)
		before := mustAcquire(t, s, "k", tg.d(time.Minute))
		clock.Advance(tg.d(time.Second))
		if err := s.Update(ctx, "k", idempotency.Update{}); err != nil {
			t.Fatalf("empty Update: %v", err)
		}
		after, _, _ := s.Get(ctx, "k")
		if !after.UpdatedAt.Equal(before.UpdatedAt) || after.Status != before.Status {
			t.Errorf("empty Update changed the record: %+v -> %+v", before, after)
		}
		if err := s.Update(ctx, "missing", idempotency.Update{}); !errors.Is(err, idempotency.ErrNotFound) {
			t.Errorf("empty Update of a missing key = %v, want idempotency.ErrNotFound", err)
		}
	})
}

// Difference: times have millisecond precision (go-job keeps nanoseconds):
// CreatedAt is cut to the ms, ExpiresAt rounded up.
func TestMillisecondPrecision(t *testing.T) {
	c := newManualClock(time.Date(2024, 1, 1, 0, 0, 0, 123_456_789, time.UTC))
	s := gojobStore(must.Store(store.NewMemoryRecords(store.WithClock(c.Now))), c)
	rec := mustAcquire(t, s, "k", 1500*time.Microsecond)
	wantCreated := time.Date(2024, 1, 1, 0, 0, 0, 123_000_000, time.UTC)
	if !rec.CreatedAt.Equal(wantCreated) || !rec.UpdatedAt.Equal(wantCreated) {
		t.Errorf("CreatedAt %v, UpdatedAt %v; want both %v", rec.CreatedAt, rec.UpdatedAt, wantCreated)
	}
	if want := wantCreated.Add(2 * time.Millisecond); !rec.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt %v, want %v (1.5 ms rounded up)", rec.ExpiresAt, want)
	}
	at := time.Date(2030, 1, 1, 0, 0, 0, 1, time.UTC)
	if err := s.Update(ctx, "k", idempotency.Update{ExpiresAt: &at}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Get(ctx, "k"); !got.ExpiresAt.Equal(at.Truncate(time.Millisecond).Add(time.Millisecond)) {
		t.Errorf("ExpiresAt %v after setting %v, want it rounded up to the ms", got.ExpiresAt, at)
	}
}

// Differences: a key is at most store.MaxIDLen bytes and a payload at most
// store.MaxRecordPayloadLen (go-job's Redis store allows Redis's 512 MB):
// more is ErrInvalidArgument and changes nothing — except a failed status's
// payload (an error text), cut to the limit. An empty key is an error
// everywhere, as with go-job.
func TestLimits(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := tg.setup(t)
		long := strings.Repeat("k", store.MaxIDLen+1)
		if _, _, err := s.Acquire(ctx, long, time.Minute); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("Acquire of a %d-byte key = %v, want ErrInvalidArgument", len(long), err)
		}
		mustAcquire(t, s, strings.Repeat("k", store.MaxIDLen), tg.d(time.Minute))

		mustAcquire(t, s, "k", tg.d(time.Minute))
		big := make([]byte, store.MaxRecordPayloadLen+1)
		err := s.Update(ctx, "k", idempotency.Update{Status: ptr(idempotency.StatusCompleted), Payload: &big})
		if !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("Update with a %d-byte payload = %v, want ErrInvalidArgument", len(big), err)
		}
		if rec, _, _ := s.Get(ctx, "k"); rec.Status != idempotency.StatusPending || rec.Payload != nil {
			t.Errorf("a refused Update changed the record: %+v", rec.Status)
		}
		if err := s.Update(ctx, "k", idempotency.Update{Status: ptr(idempotency.StatusFailed), Payload: &big}); err != nil {
			t.Fatalf("failed Update with a long error text: %v", err)
		}
		if rec, _, _ := s.Get(ctx, "k"); rec.Status != idempotency.StatusFailed || len(rec.Payload) != store.MaxRecordPayloadLen {
			t.Errorf("failed record: status %q, %d payload bytes; want failed, %d", rec.Status, len(rec.Payload), store.MaxRecordPayloadLen)
		}

		if _, _, err := s.Acquire(ctx, "", time.Minute); err == nil {
			t.Error("Acquire of an empty key succeeded")
		}
		if _, _, err := s.Get(ctx, ""); err == nil {
			t.Error("Get of an empty key succeeded")
		}
		if err := s.Update(ctx, "", idempotency.Update{Status: ptr(idempotency.StatusCompleted)}); err == nil {
			t.Error("Update of an empty key succeeded")
		}
		if err := s.Delete(ctx, ""); err == nil {
			t.Error("Delete of an empty key succeeded")
		}
	})
}

// go-job's flow, as its TaskCommander and Enqueue use the store: acquire,
// run, record completed or failed with a fresh expiry; a duplicate sees the
// outcome; the replace policy resets a record to pending with no payload.
func TestGoJobFlow(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, clock := tg.setup(t)
		mustAcquire(t, s, "job", tg.d(time.Hour))
		failed, text := idempotency.StatusFailed, []byte("boom")
		if err := s.Update(ctx, "job", idempotency.Update{Status: &failed, Payload: &text, ExpiresAt: ptr(clock.Now().Add(tg.d(time.Hour)))}); err != nil {
			t.Fatal(err)
		}
		rec, acquired, err := s.Acquire(ctx, "job", tg.d(time.Hour))
		if err != nil || acquired || rec.Status != idempotency.StatusFailed || string(rec.Payload) != "boom" || rec.Key != "job" {
			t.Errorf("duplicate: %+v, %v, %v; want the failed record", rec, acquired, err)
		}
		pending, empty := idempotency.StatusPending, []byte(nil)
		if err := s.Update(ctx, "job", idempotency.Update{Status: &pending, Payload: &empty, ExpiresAt: ptr(clock.Now().Add(tg.d(time.Hour)))}); err != nil {
			t.Fatal(err)
		}
		if rec, _, _ := s.Get(ctx, "job"); rec.Status != idempotency.StatusPending || rec.Payload != nil {
			t.Errorf("after replace: %+v", rec)
		}
	})
}
