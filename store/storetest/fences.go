package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
)

// fences checks that each fence in a sequence of grants for one id is
// strictly greater than every fence before it.
type fences struct {
	t    *testing.T
	last uint64
	what string
}

// next records fence f, granted by what, and fails the test when f is 0 or
// not above the fence granted before it.
func (fs *fences) next(what string, f uint64) {
	fs.t.Helper()
	switch {
	case f == 0:
		fs.t.Errorf("%s: fence 0; every lease carries a fence above 0", what)
	case f <= fs.last:
		fs.t.Errorf("%s: fence %d, not above %d granted before (%s): a fence went back", what, f, fs.last, fs.what)
	}
	fs.last, fs.what = max(fs.last, f), what
}

// testClaimsFences: every lease Claims.Do grants for an id carries a fence
// above every fence granted for it before, whatever happened to the id in
// between (released, committed and forgotten, expired).
func testClaimsFences(t *testing.T, newStore func(t *testing.T, opts ...store.Option) *store.Claims, h ClaimsHarness) {
	ctx := context.Background()
	boom := errors.New("boom")
	// do runs Do on id and answers the fence fn saw.
	do := func(t *testing.T, s *store.Claims, id string, fnErr error) uint64 {
		t.Helper()
		var fence uint64
		ran, err := s.Do(ctx, id, 10*h.Tick, func(ctx context.Context) error {
			l, ok := store.LeaseFromContext(ctx)
			if !ok {
				t.Error("no lease in fn's context")
			}
			fence = l.Fence
			return fnErr
		})
		if !ran || !errors.Is(err, fnErr) {
			t.Fatalf("Do(%q) = %v, %v; want true, %v", id, ran, err, fnErr)
		}
		return fence
	}

	t.Run("AcrossReleaseForgetExpiry", func(t *testing.T) {
		s := newStore(t, store.WithTTL(2*h.Tick))
		fs := &fences{t: t}
		fs.next("first Do (failed: released)", do(t, s, "m", boom))
		fs.next("Do after the release (committed)", do(t, s, "m", nil))
		noErr(t, s.Forget(ctx, "m"))
		fs.next("Do after Forget", do(t, s, "m", nil))
		h.Wait(3 * h.Tick)
		if must(t)(s.Seen(ctx, "m")) {
			t.Fatal("the processed mark outlived the store's TTL")
		}
		fs.next("Do after the mark expired", do(t, s, "m", nil))
		// Claim (a mark, no lease) and Forget in between grant no fence and
		// take nothing away.
		noErr(t, s.Forget(ctx, "m"))
		must(t)(s.Claim(ctx, "m"))
		noErr(t, s.Forget(ctx, "m"))
		fs.next("Do after Claim and Forget", do(t, s, "m", nil))
	})

	t.Run("BackToBack", func(t *testing.T) {
		// Grants as close together as one caller can make them (a fake
		// clock that does not move, or the same microsecond on a server):
		// still strictly increasing.
		s := newStore(t)
		fs := &fences{t: t}
		for i := 0; i < 50; i++ {
			fs.next("Do released at once", do(t, s, "m", boom))
		}
		fs.next("Do committed", do(t, s, "m", nil))
		for i := 0; i < 20; i++ {
			noErr(t, s.Forget(ctx, "m"))
			fs.next("Do after Forget at once", do(t, s, "m", nil))
		}
	})

	t.Run("ForgetUnderTheOwner", func(t *testing.T) {
		// The id is forgotten while its owner runs: the next owner's fence is
		// above the first one's, so a downstream check tells them apart.
		s := newStore(t)
		fs := &fences{t: t}
		var inner uint64
		outer := do(t, s, "m", nil)
		fs.next("first Do", outer)
		ran, err := s.Do(ctx, "n", 10*h.Tick, func(ctx context.Context) error {
			l, _ := store.LeaseFromContext(ctx)
			noErr(t, s.Forget(ctx, "n"))
			inner = do(t, s, "n", boom)
			if inner <= l.Fence {
				t.Errorf("the second owner's fence %d is not above the first's %d", inner, l.Fence)
			}
			return nil
		})
		if !ran {
			t.Fatalf("Do(n) = %v, %v", ran, err)
		}
	})
}

// testRecordsFences: every grant of a record (created, or taken over) carries
// a fence above every fence granted for its key before, across a failed Do
// (DeleteFenced), Delete, expiry and takeovers.
func testRecordsFences(t *testing.T, newStore func(t *testing.T, opts ...store.Option) RecordStore, h RecordsHarness) {
	ctx := context.Background()
	tick := h.Tick
	boom := errors.New("boom")
	do := func(t *testing.T, s RecordStore, key string, fnErr error) uint64 {
		t.Helper()
		var fence uint64
		_, replayed, err := s.Do(ctx, key, store.AcquireOptions{Lease: 10 * tick, TTL: 2 * tick}, func(ctx context.Context) ([]byte, error) {
			l, ok := store.LeaseFromContext(ctx)
			if !ok {
				t.Error("no lease in fn's context")
			}
			fence = l.Fence
			return []byte("r"), fnErr
		})
		if replayed || !errors.Is(err, fnErr) {
			t.Fatalf("Do(%q) = replayed %v, %v; want a run, %v", key, replayed, err, fnErr)
		}
		if got, ok, _ := s.Get(ctx, key); fnErr == nil && (!ok || got.Fence != fence) {
			t.Errorf("Do's record: %+v, %v; want fence %d, the one fn saw", got, ok, fence)
		}
		return fence
	}
	acquire := func(t *testing.T, s RecordStore, key string, o store.AcquireOptions) store.Record {
		t.Helper()
		rec, ok, err := s.AcquireWith(ctx, key, o)
		if err != nil || !ok {
			t.Fatalf("AcquireWith(%q) = %+v, %v, %v; want it acquired", key, rec, ok, err)
		}
		return rec
	}

	t.Run("AcrossDeleteExpiryTakeover", func(t *testing.T) {
		s := newStore(t)
		fs := &fences{t: t}
		fs.next("first Do (failed: DeleteFenced)", do(t, s, "k", boom))
		fs.next("Do after the failure (completed)", do(t, s, "k", nil))
		noErr(t, s.Delete(ctx, "k"))
		fs.next("Do after Delete", do(t, s, "k", nil))
		h.Wait(3 * tick)
		if _, ok, _ := s.Get(ctx, "k"); ok {
			t.Fatal("the record outlived its TTL")
		}
		fs.next("Do after the record expired", do(t, s, "k", nil))
		noErr(t, s.Delete(ctx, "k"))

		a := acquire(t, s, "k", store.AcquireOptions{Lease: tick})
		fs.next("AcquireWith (created)", a.Fence)
		h.Wait(2 * tick)
		b := acquire(t, s, "k", store.AcquireOptions{Lease: tick})
		fs.next("AcquireWith (taken over)", b.Fence)
		h.Wait(2 * tick)
		c := acquire(t, s, "k", store.AcquireOptions{Lease: tick})
		fs.next("AcquireWith (taken over again)", c.Fence)
		noErr(t, s.DeleteFenced(ctx, "k", c.Token))
		fs.next("AcquireWith after DeleteFenced", acquire(t, s, "k", store.AcquireOptions{}).Fence)
		// An expiry through Update (a past ExpiresAt deletes the record).
		past := time.Unix(1, 0)
		noErr(t, s.Update(ctx, "k", store.Update{ExpiresAt: &past}))
		fs.next("AcquireWith after Update expired it", acquire(t, s, "k", store.AcquireOptions{}).Fence)
	})

	t.Run("BackToBack", func(t *testing.T) {
		s := newStore(t)
		fs := &fences{t: t}
		for i := 0; i < 50; i++ {
			fs.next("Do failed at once", do(t, s, "k", boom))
		}
		for i := 0; i < 20; i++ {
			fs.next("AcquireWith", acquire(t, s, "k", store.AcquireOptions{}).Fence)
			noErr(t, s.Delete(ctx, "k"))
		}
	})
}
