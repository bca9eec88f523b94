package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/redisonce/redisonce/store"
)

// RecordStore is what TestRecords checks: the methods of *store.Records, which
// a store built over one (the Postgres records of integrations/postgres) has
// too.
type RecordStore interface {
	Acquire(ctx context.Context, key string, ttl time.Duration) (store.Record, bool, error)
	AcquireWith(ctx context.Context, key string, o store.AcquireOptions) (store.Record, bool, error)
	Get(ctx context.Context, key string) (store.Record, bool, error)
	Update(ctx context.Context, key string, u store.Update) error
	Delete(ctx context.Context, key string) error
	DeleteFenced(ctx context.Context, key, token string) error
	Do(ctx context.Context, key string, o store.AcquireOptions, fn func(context.Context) ([]byte, error)) ([]byte, bool, error)
	Close() error
}

// RecordsHarness tells TestRecords how to make and age a store under test.
type RecordsHarness struct {
	// New returns an empty store with opts applied, isolated from every other
	// store New returns (a fresh prefix or database). The suite closes it.
	New func(t *testing.T, opts ...store.Option) (*store.Records, error)
	// NewStore, when set, is used instead of New: for a store built over a
	// *store.Records rather than one (the Postgres records of
	// integrations/postgres).
	NewStore func(t *testing.T, opts ...store.Option) (RecordStore, error)
	// DoMakesOwnCalls says that the store's Do makes calls of its own on the
	// store that reports its events (a store over another, as the Postgres
	// records renew the lease before their commit): the subtests that check
	// Do's events one by one are skipped; the other event subtests run.
	DoMakesOwnCalls bool
	// Wait lets d pass for the stores New returns: time.Sleep for a store on a
	// real clock, Clock.Advance for a fake one.
	Wait func(d time.Duration)
	// Now is the stores' clock, to check the times in records against: the
	// fake clock's Now, or time.Now for Redis on the same machine. Default
	// time.Now.
	Now func() time.Time
	// Tick is a duration long enough for the implementation to expire a key or
	// pass a lease reliably (Redis: 100ms); TTLs and leases in the suite are
	// multiples of it, and times read from the store may differ from Now by up
	// to half of it. Default 100ms.
	Tick time.Duration
}

// TestRecords runs the idempotency records contract against h's stores.
func TestRecords(t *testing.T, h RecordsHarness) {
	if h.Tick <= 0 {
		h.Tick = 100 * time.Millisecond
	}
	if h.Now == nil {
		h.Now = time.Now
	}
	x := &recordsSuite{h: h, ctx: context.Background(), tick: h.Tick,
		near: cmpopts.EquateApproxTime(h.Tick / 2), doOpts: store.AcquireOptions{Lease: 100 * h.Tick}}
	for _, c := range recordsCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, x) })
	}
}

// recordsSuite is what every case of TestRecords gets: the harness, and the
// helpers built on it.
type recordsSuite struct {
	h    RecordsHarness
	ctx  context.Context
	tick time.Duration
	near cmp.Option // times equal give or take half a tick
	// doOpts are the Do cases' options: a lease no case outlives.
	doOpts store.AcquireOptions
}

// newStore returns a new store of the harness, closed when t ends.
func (x *recordsSuite) newStore(t *testing.T, opts ...store.Option) RecordStore {
	t.Helper()
	var s RecordStore
	var err error
	if x.h.NewStore != nil {
		s, err = x.h.NewStore(t, opts...)
	} else {
		s, err = x.h.New(t, opts...)
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// within checks that got is want, give or take half a tick.
func (x *recordsSuite) within(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if got.IsZero() != want.IsZero() || !cmp.Equal(got, want, x.near) {
		t.Errorf("%s = %v, want %v (± %v)", what, got, want, x.tick/2)
	}
}

// result is a Do fn that returns s.
func (x *recordsSuite) result(s string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return []byte(s), nil }
}

func statusPtr(s store.Status) *store.Status { return &s }
func bytesPtr(b string) *[]byte              { p := []byte(b); return &p }
func timePtr(t time.Time) *time.Time         { return &t }

// recordsCases are TestRecords' cases, in order: each a named function.
var recordsCases = []struct {
	name string
	run  func(*testing.T, *recordsSuite)
}{
	{"Events", recordsEvents},
	{"Fences", recordsFences},
	{"SeedExample", recordsSeedExample},
	{"AcquireExisting", recordsAcquireExisting},
	{"GetMissing", recordsGetMissing},
	{"UpdateMissingCreatesNothing", recordsUpdateMissingCreatesNothing},
	{"DeleteAndAcquireAgain", recordsDeleteAndAcquireAgain},
	{"TTL", recordsTTL},
	{"StoreTTLIsTheDefault", recordsStoreTTLIsTheDefault},
	{"DefaultTTLIs24h", recordsDefaultTTLIs24h},
	{"ZeroTTLNeverExpires", recordsZeroTTLNeverExpires},
	{"UpdateMovesExpiry", recordsUpdateMovesExpiry},
	{"UpdateZeroExpiryPersists", recordsUpdateZeroExpiryPersists},
	{"UpdatePastExpiryDeletes", recordsUpdatePastExpiryDeletes},
	{"LeaseTakeoverFencesTheStalledOwner", recordsLeaseTakeoverFencesTheStalledOwner},
	{"TakeoverAgainAndAgain", recordsTakeoverAgainAndAgain},
	{"NoLeaseIsNeverTakenOver", recordsNoLeaseIsNeverTakenOver},
	{"FinishedRecordsAreNotTakenOver", recordsFinishedRecordsAreNotTakenOver},
	{"OwnerKeepsARecordUntilTakenOver", recordsOwnerKeepsARecordUntilTakenOver},
	{"UpdateMovesTheLease", recordsUpdateMovesTheLease},
	{"UnfencedUpdate", recordsUnfencedUpdate},
	{"UpdatedAtMoves", recordsUpdatedAtMoves},
	{"Fingerprint", recordsFingerprint},
	{"FingerprintEmptySideIsNotChecked", recordsFingerprintEmptySideIsNotChecked},
	{"TokenNeverShownToOthers", recordsTokenNeverShownToOthers},
	{"PayloadsAreBinarySafe", recordsPayloadsAreBinarySafe},
	{"UpdateBadInputChangesNothing", recordsUpdateBadInputChangesNothing},
	{"BadInput", recordsBadInput},
	{"BadOptions", recordsBadOptions},
	{"CancelledContext", recordsCancelledContext},
	{"AnyBytesInKeys", recordsAnyBytesInKeys},
	{"ConcurrentAcquireOneWinner", recordsConcurrentAcquireOneWinner},
	{"DoRunsOnceAndReplays", recordsDoRunsOnceAndReplays},
	{"DoEmptyResult", recordsDoEmptyResult},
	{"DoInFlight", recordsDoInFlight},
	{"DoPermanentFailureIsStoredAndReplayed", recordsDoPermanentFailureIsStoredAndReplayed},
	{"DoErrorDeletes", recordsDoErrorDeletes},
	{"DoRetryableErrorDeletes", recordsDoRetryableErrorDeletes},
	{"DoPanicDeletes", recordsDoPanicDeletes},
	{"DoLeaseKeptAlive", recordsDoLeaseKeptAlive},
	{"DoContextDeadline", recordsDoContextDeadline},
	{"DoStalledOwnerCannotOverwrite", recordsDoStalledOwnerCannotOverwrite},
	{"DoStalledOwnerFailureCannotOverwrite", recordsDoStalledOwnerFailureCannotOverwrite},
	{"DoRecreatesRemovedRecord", recordsDoRecreatesRemovedRecord},
	{"DoCancelsFnWhenRecordLost", recordsDoCancelsFnWhenRecordLost},
	{"DoFingerprint", recordsDoFingerprint},
	{"DoResultTooLong", recordsDoResultTooLong},
	{"DoLongErrorTextIsCut", recordsDoLongErrorTextIsCut},
	{"DoStoresDespiteCancelledContext", recordsDoStoresDespiteCancelledContext},
	{"DoTTL", recordsDoTTL},
	{"DoWaitReplaysTheFirstResult", recordsDoWaitReplaysTheFirstResult},
	{"DoWaitGivesUpInFlight", recordsDoWaitGivesUpInFlight},
	{"DoWaitRunsWhenTheFirstGivesBack", recordsDoWaitRunsWhenTheFirstGivesBack},
	{"DoWaitNegative", recordsDoWaitNegative},
	{"DoOutlivesAShortTTL", recordsDoOutlivesAShortTTL},
	{"LeasePastTheTTLKeepsTheRecord", recordsLeasePastTheTTLKeepsTheRecord},
	{"UpdateRestoresTheRetention", recordsUpdateRestoresTheRetention},
	{"DoOnlyOneOfMany", recordsDoOnlyOneOfMany},
}

// recordsFences is the Fences case of TestRecords.
func recordsFences(t *testing.T, x *recordsSuite) { testRecordsFences(t, x.newStore, x.h) }

// recordsEvents is the Events case of TestRecords.
func recordsEvents(t *testing.T, x *recordsSuite) {
	h, newStore := x.h, x.newStore
	testRecordsEvents(t, newStore, h)
}

// recordsSeedExample is the SeedExample case of TestRecords.
func recordsSeedExample(t *testing.T, x *recordsSuite) {
	h, ctx, newStore, within := x.h, x.ctx, x.newStore, x.within
	s := newStore(t)
	start := h.Now()
	rec, acquired, err := s.Acquire(ctx, "export:123", 24*time.Hour)
	noErr(t, err)
	if !acquired {
		t.Fatal("the first Acquire did not acquire")
	}
	if rec.Key != "export:123" || rec.Status != store.StatusPending || rec.Token == "" || rec.Fence == 0 ||
		rec.Payload != nil || !rec.LeaseUntil.IsZero() || rec.Fingerprint != "" {
		t.Errorf("acquired record = %+v; want key export:123, pending, a token, a fence, no payload, lease or fingerprint", rec)
	}
	within(t, "CreatedAt", rec.CreatedAt, start)
	if !rec.UpdatedAt.Equal(rec.CreatedAt) || !rec.ExpiresAt.Equal(rec.CreatedAt.Add(24*time.Hour)) {
		t.Errorf("UpdatedAt %v, ExpiresAt %v; want CreatedAt %v and CreatedAt + 24h", rec.UpdatedAt, rec.ExpiresAt, rec.CreatedAt)
	}

	status := store.StatusCompleted
	payload := []byte("export-id")
	noErr(t, s.Update(ctx, "export:123", store.Update{Status: &status, Payload: &payload}))

	got, ok, err := s.Get(ctx, "export:123")
	noErr(t, err)
	if !ok {
		t.Fatal("Get after Update found nothing")
	}
	want := rec
	want.Status, want.Payload, want.Token, want.UpdatedAt = store.StatusCompleted, []byte("export-id"), "", got.UpdatedAt
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get after Update (-want +got):\n%s", diff)
	}
	if got.UpdatedAt.Before(got.CreatedAt) {
		t.Errorf("UpdatedAt %v before CreatedAt %v", got.UpdatedAt, got.CreatedAt)
	}
}

// recordsAcquireExisting is the AcquireExisting case of TestRecords.
func recordsAcquireExisting(t *testing.T, x *recordsSuite) {
	tick, newStore := x.tick, x.newStore
	s := newStore(t)
	first := mustAcquire(t, s, "k", store.AcquireOptions{TTL: 100 * tick}, true)
	second := mustAcquire(t, s, "k", store.AcquireOptions{TTL: time.Hour, Lease: tick}, false)
	want := first
	want.Token = ""
	if diff := cmp.Diff(want, second); diff != "" {
		t.Errorf("second acquire, want the first record without its token (-want +got):\n%s", diff)
	}
	if got := mustGet(t, s, "k", true); !cmp.Equal(want, got) {
		t.Errorf("Get = %+v, want %+v", got, want)
	}
}

// recordsGetMissing is the GetMissing case of TestRecords.
func recordsGetMissing(t *testing.T, x *recordsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	rec, ok, err := s.Get(ctx, "nope")
	if ok || err != nil || !cmp.Equal(rec, store.Record{}) {
		t.Errorf("Get(missing) = %+v, %v, %v; want Record{}, false, nil", rec, ok, err)
	}
}

// recordsUpdateMissingCreatesNothing is the UpdateMissingCreatesNothing case of TestRecords.
func recordsUpdateMissingCreatesNothing(t *testing.T, x *recordsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	wantErr(t, s.Update(ctx, "nope", store.Update{Status: statusPtr(store.StatusCompleted)}), store.ErrNotFound)
	wantErr(t, s.Update(ctx, "nope", store.Update{Payload: bytesPtr("x"), Token: "tok"}), store.ErrNotFound)
	mustGet(t, s, "nope", false)
}

// recordsDeleteAndAcquireAgain is the DeleteAndAcquireAgain case of TestRecords.
func recordsDeleteAndAcquireAgain(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore := x.ctx, x.tick, x.newStore
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{Lease: 100 * tick}, true)
	noErr(t, s.Update(ctx, "k", store.Update{Status: statusPtr(store.StatusCompleted), Token: a.Token}))
	noErr(t, s.Delete(ctx, "k"))
	mustGet(t, s, "k", false)
	noErr(t, s.Delete(ctx, "k"))
	noErr(t, s.DeleteFenced(ctx, "k", a.Token))
	b := mustAcquire(t, s, "k", store.AcquireOptions{}, true)
	if b.Fence <= a.Fence || b.Token == a.Token || b.Status != store.StatusPending {
		t.Errorf("acquire after Delete = %+v; want a new pending record, a fence above %d, a new token", b, a.Fence)
	}
}

// recordsTTL is the TTL case of TestRecords.
func recordsTTL(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore := x.h, x.ctx, x.tick, x.newStore
	s := newStore(t)
	rec := mustAcquire(t, s, "k", store.AcquireOptions{TTL: 2 * tick}, true)
	if !rec.ExpiresAt.Equal(rec.CreatedAt.Add(2 * tick)) {
		t.Errorf("ExpiresAt = %v, want CreatedAt + %v = %v", rec.ExpiresAt, 2*tick, rec.CreatedAt.Add(2*tick))
	}
	mustAcquire(t, s, "k", store.AcquireOptions{TTL: 2 * tick}, false)
	h.Wait(3 * tick)
	mustGet(t, s, "k", false)
	wantErr(t, s.Update(ctx, "k", store.Update{Status: statusPtr(store.StatusCompleted)}), store.ErrNotFound)
	if again := mustAcquire(t, s, "k", store.AcquireOptions{}, true); again.Fence <= rec.Fence {
		t.Errorf("acquire after expiry: fence %d, want one above the expired record's %d", again.Fence, rec.Fence)
	}
}

// recordsStoreTTLIsTheDefault is the StoreTTLIsTheDefault case of TestRecords.
func recordsStoreTTLIsTheDefault(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore := x.h, x.ctx, x.tick, x.newStore
	s := newStore(t, store.WithTTL(2*tick))
	rec, acquired, err := s.Acquire(ctx, "k", 0)
	noErr(t, err)
	if !acquired || !rec.ExpiresAt.Equal(rec.CreatedAt.Add(2*tick)) {
		t.Errorf("Acquire(ttl 0) with WithTTL(%v) = %+v, %v; want ExpiresAt = CreatedAt + TTL", 2*tick, rec, acquired)
	}
	rec = mustAcquire(t, s, "other", store.AcquireOptions{TTL: 50 * tick}, true)
	if !rec.ExpiresAt.Equal(rec.CreatedAt.Add(50 * tick)) {
		t.Errorf("an explicit TTL did not override the store's: ExpiresAt %v, CreatedAt %v", rec.ExpiresAt, rec.CreatedAt)
	}
	h.Wait(3 * tick)
	mustGet(t, s, "k", false)
	mustGet(t, s, "other", true)
}

// recordsDefaultTTLIs24h is the DefaultTTLIs24h case of TestRecords.
func recordsDefaultTTLIs24h(t *testing.T, x *recordsSuite) {
	newStore := x.newStore
	s := newStore(t)
	rec := mustAcquire(t, s, "k", store.AcquireOptions{}, true)
	if got := rec.ExpiresAt.Sub(rec.CreatedAt); got != store.DefaultRecordsTTL {
		t.Errorf("ExpiresAt - CreatedAt = %v, want %v", got, store.DefaultRecordsTTL)
	}
}

// recordsZeroTTLNeverExpires is the ZeroTTLNeverExpires case of TestRecords.
func recordsZeroTTLNeverExpires(t *testing.T, x *recordsSuite) {
	h, tick, newStore := x.h, x.tick, x.newStore
	s := newStore(t, store.WithTTL(0))
	rec := mustAcquire(t, s, "k", store.AcquireOptions{}, true)
	if !rec.ExpiresAt.IsZero() {
		t.Errorf("ExpiresAt = %v, want zero (never)", rec.ExpiresAt)
	}
	h.Wait(3 * tick)
	mustGet(t, s, "k", true)
}

// recordsUpdateMovesExpiry is the UpdateMovesExpiry case of TestRecords.
func recordsUpdateMovesExpiry(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore, near := x.h, x.ctx, x.tick, x.newStore, x.near
	s := newStore(t)
	rec := mustAcquire(t, s, "k", store.AcquireOptions{}, true)
	at := rec.CreatedAt.Add(2 * tick)
	noErr(t, s.Update(ctx, "k", store.Update{ExpiresAt: &at}))
	// Update sends a duration from now, which the store adds to its own
	// clock (Redis: TIME): the deadline is at, within the call's time.
	if got := mustGet(t, s, "k", true); !cmp.Equal(got.ExpiresAt, at, near) || got.Status != store.StatusPending {
		t.Errorf("after Update(ExpiresAt %v): %+v", at, got)
	}
	h.Wait(3 * tick)
	mustGet(t, s, "k", false)
}

// recordsUpdateZeroExpiryPersists is the UpdateZeroExpiryPersists case of TestRecords.
func recordsUpdateZeroExpiryPersists(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore := x.h, x.ctx, x.tick, x.newStore
	s := newStore(t)
	mustAcquire(t, s, "k", store.AcquireOptions{TTL: 2 * tick}, true)
	noErr(t, s.Update(ctx, "k", store.Update{ExpiresAt: &time.Time{}}))
	if got := mustGet(t, s, "k", true); !got.ExpiresAt.IsZero() {
		t.Errorf("ExpiresAt after Update(zero) = %v, want zero", got.ExpiresAt)
	}
	h.Wait(3 * tick)
	mustGet(t, s, "k", true)
}

// recordsUpdatePastExpiryDeletes is the UpdatePastExpiryDeletes case of TestRecords.
func recordsUpdatePastExpiryDeletes(t *testing.T, x *recordsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	rec := mustAcquire(t, s, "k", store.AcquireOptions{}, true)
	for _, at := range []time.Time{rec.CreatedAt.Add(-time.Second), time.Unix(0, 0), time.Unix(-5, 0)} {
		noErr(t, s.Update(ctx, "k", store.Update{ExpiresAt: &at, Token: rec.Token}))
		mustGet(t, s, "k", false)
		rec = mustAcquire(t, s, "k", store.AcquireOptions{}, true)
	}
}

// recordsLeaseTakeoverFencesTheStalledOwner is the LeaseTakeoverFencesTheStalledOwner case of TestRecords.
func recordsLeaseTakeoverFencesTheStalledOwner(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore, within := x.h, x.ctx, x.tick, x.newStore, x.within
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{Lease: 2 * tick, TTL: 100 * tick}, true)
	if !a.LeaseUntil.Equal(a.CreatedAt.Add(2 * tick)) {
		t.Errorf("LeaseUntil = %v, want CreatedAt + %v", a.LeaseUntil, 2*tick)
	}
	b := mustAcquire(t, s, "k", store.AcquireOptions{Lease: 2 * tick}, false)
	if b.Status != store.StatusPending || b.Fence != a.Fence || b.Token != "" || !b.LeaseUntil.Equal(a.LeaseUntil) {
		t.Errorf("acquire within the lease = %+v; want a's pending record without a token", b)
	}
	h.Wait(3 * tick)
	start := h.Now()
	c := mustAcquire(t, s, "k", store.AcquireOptions{Lease: 100 * tick}, true)
	if c.Fence <= a.Fence || c.Token == "" || c.Token == a.Token || c.Status != store.StatusPending {
		t.Errorf("takeover = %+v; want a fence above %d and a new token", c, a.Fence)
	}
	if !c.CreatedAt.Equal(a.CreatedAt) || !c.ExpiresAt.Equal(a.ExpiresAt) {
		t.Errorf("takeover changed CreatedAt/ExpiresAt: %v/%v, was %v/%v", c.CreatedAt, c.ExpiresAt, a.CreatedAt, a.ExpiresAt)
	}
	within(t, "takeover UpdatedAt", c.UpdatedAt, start)
	if !c.LeaseUntil.Equal(c.UpdatedAt.Add(100 * tick)) {
		t.Errorf("takeover LeaseUntil = %v, want UpdatedAt + %v", c.LeaseUntil, 100*tick)
	}

	before := mustGet(t, s, "k", true)
	wantErr(t, s.Update(ctx, "k", store.Update{Status: statusPtr(store.StatusCompleted), Payload: bytesPtr("A"), Token: a.Token}), store.ErrStaleOwner)
	wantErr(t, s.Update(ctx, "k", store.Update{ExpiresAt: &time.Time{}, Token: a.Token}), store.ErrStaleOwner)
	wantErr(t, s.DeleteFenced(ctx, "k", a.Token), store.ErrStaleOwner)
	if diff := cmp.Diff(before, mustGet(t, s, "k", true)); diff != "" {
		t.Errorf("the stalled owner changed the record (-before +after):\n%s", diff)
	}

	noErr(t, s.Update(ctx, "k", store.Update{Status: statusPtr(store.StatusCompleted), Payload: bytesPtr("C"), Token: c.Token}))
	got := mustGet(t, s, "k", true)
	if got.Status != store.StatusCompleted || string(got.Payload) != "C" || !got.LeaseUntil.IsZero() || got.Fence != c.Fence {
		t.Errorf("after the new owner's update: %+v; want completed, C, no lease, fence %d", got, c.Fence)
	}
	wantErr(t, s.DeleteFenced(ctx, "k", a.Token), store.ErrStaleOwner)
	noErr(t, s.DeleteFenced(ctx, "k", c.Token))
	mustGet(t, s, "k", false)
}

// recordsTakeoverAgainAndAgain is the TakeoverAgainAndAgain case of TestRecords.
func recordsTakeoverAgainAndAgain(t *testing.T, x *recordsSuite) {
	h, tick, newStore := x.h, x.tick, x.newStore
	s := newStore(t)
	tokens := map[string]bool{}
	var fence uint64
	for i := 1; i <= 3; i++ {
		rec := mustAcquire(t, s, "k", store.AcquireOptions{Lease: tick}, true)
		if rec.Fence <= fence || tokens[rec.Token] {
			t.Errorf("acquire %d: fence %d token %q; want a fence above %d and a fresh token", i, rec.Fence, rec.Token, fence)
		}
		tokens[rec.Token], fence = true, rec.Fence
		h.Wait(2 * tick)
	}
}

// recordsNoLeaseIsNeverTakenOver is the NoLeaseIsNeverTakenOver case of TestRecords.
func recordsNoLeaseIsNeverTakenOver(t *testing.T, x *recordsSuite) {
	h, tick, newStore := x.h, x.tick, x.newStore
	s := newStore(t)
	mustAcquire(t, s, "k", store.AcquireOptions{}, true)
	h.Wait(3 * tick)
	if rec := mustAcquire(t, s, "k", store.AcquireOptions{Lease: tick}, false); rec.Status != store.StatusPending {
		t.Errorf("status = %q, want pending", rec.Status)
	}
}

// recordsFinishedRecordsAreNotTakenOver is the FinishedRecordsAreNotTakenOver case of TestRecords.
func recordsFinishedRecordsAreNotTakenOver(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore := x.h, x.ctx, x.tick, x.newStore
	s := newStore(t)
	fences := map[store.Status]uint64{}
	for _, st := range []store.Status{store.StatusCompleted, store.StatusFailed, "custom"} {
		key := "k-" + string(st)
		a := mustAcquire(t, s, key, store.AcquireOptions{Lease: 2 * tick}, true)
		fences[st] = a.Fence
		// LeaseUntil is ignored: a status other than pending clears the lease.
		noErr(t, s.Update(ctx, key, store.Update{Status: &st, LeaseUntil: timePtr(a.CreatedAt.Add(time.Hour)), Token: a.Token}))
		if got := mustGet(t, s, key, true); got.Status != st || !got.LeaseUntil.IsZero() {
			t.Errorf("after Update(status %q): %+v; want that status and no lease", st, got)
		}
	}
	h.Wait(3 * tick)
	for _, st := range []store.Status{store.StatusCompleted, store.StatusFailed, "custom"} {
		if rec := mustAcquire(t, s, "k-"+string(st), store.AcquireOptions{Lease: tick}, false); rec.Status != st || rec.Fence != fences[st] {
			t.Errorf("acquire of a %s record = %+v", st, rec)
		}
	}
}

// recordsOwnerKeepsARecordUntilTakenOver is the OwnerKeepsARecordUntilTakenOver case of TestRecords.
func recordsOwnerKeepsARecordUntilTakenOver(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore := x.h, x.ctx, x.tick, x.newStore
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{Lease: tick}, true)
	h.Wait(2 * tick)
	noErr(t, s.Update(ctx, "k", store.Update{Payload: bytesPtr("progress"), Token: a.Token}))
	noErr(t, s.Update(ctx, "k", store.Update{Status: statusPtr(store.StatusCompleted), Token: a.Token}))
	if got := mustGet(t, s, "k", true); got.Status != store.StatusCompleted || string(got.Payload) != "progress" {
		t.Errorf("got %+v", got)
	}
}

// recordsUpdateMovesTheLease is the UpdateMovesTheLease case of TestRecords.
func recordsUpdateMovesTheLease(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore, near := x.h, x.ctx, x.tick, x.newStore, x.near
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{Lease: 2 * tick}, true)
	until := a.CreatedAt.Add(100 * tick)
	noErr(t, s.Update(ctx, "k", store.Update{LeaseUntil: &until, Token: a.Token}))
	// A duration from now on the store's clock, as for ExpiresAt.
	if got := mustGet(t, s, "k", true); !cmp.Equal(got.LeaseUntil, until, near) {
		t.Errorf("LeaseUntil = %v, want %v", got.LeaseUntil, until)
	}
	h.Wait(3 * tick)
	mustAcquire(t, s, "k", store.AcquireOptions{Lease: tick}, false)
	// A passed deadline hands the record to the next acquire at once.
	noErr(t, s.Update(ctx, "k", store.Update{LeaseUntil: timePtr(a.CreatedAt), Token: a.Token}))
	if b := mustAcquire(t, s, "k", store.AcquireOptions{Lease: tick}, true); b.Fence <= a.Fence {
		t.Errorf("takeover after the lease was moved back: fence %d, want one above %d", b.Fence, a.Fence)
	}
	// Zero removes the lease.
	c := mustAcquire(t, s, "z", store.AcquireOptions{Lease: tick}, true)
	noErr(t, s.Update(ctx, "z", store.Update{LeaseUntil: &time.Time{}, Token: c.Token}))
	h.Wait(2 * tick)
	if got := mustAcquire(t, s, "z", store.AcquireOptions{Lease: tick}, false); !got.LeaseUntil.IsZero() {
		t.Errorf("LeaseUntil = %v, want zero", got.LeaseUntil)
	}
}

// recordsUnfencedUpdate is the UnfencedUpdate case of TestRecords.
func recordsUnfencedUpdate(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore := x.ctx, x.tick, x.newStore
	s := newStore(t)
	mustAcquire(t, s, "k", store.AcquireOptions{Lease: 100 * tick}, true)
	noErr(t, s.Update(ctx, "k", store.Update{Status: statusPtr(store.StatusFailed), Payload: bytesPtr("oops")}))
	if got := mustGet(t, s, "k", true); got.Status != store.StatusFailed || string(got.Payload) != "oops" {
		t.Errorf("got %+v", got)
	}
	noErr(t, s.Delete(ctx, "k"))
	mustGet(t, s, "k", false)
}

// recordsUpdatedAtMoves is the UpdatedAtMoves case of TestRecords.
func recordsUpdatedAtMoves(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore, within := x.h, x.ctx, x.tick, x.newStore, x.within
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{}, true)
	h.Wait(2 * tick)
	start := h.Now()
	noErr(t, s.Update(ctx, "k", store.Update{Payload: bytesPtr("p")}))
	got := mustGet(t, s, "k", true)
	within(t, "UpdatedAt", got.UpdatedAt, start)
	if !got.CreatedAt.Equal(a.CreatedAt) || !got.UpdatedAt.After(a.CreatedAt) {
		t.Errorf("CreatedAt %v UpdatedAt %v; want CreatedAt kept (%v) and UpdatedAt after it", got.CreatedAt, got.UpdatedAt, a.CreatedAt)
	}
}

// recordsFingerprint is the Fingerprint case of TestRecords.
func recordsFingerprint(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore := x.ctx, x.tick, x.newStore
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{Fingerprint: "A", Lease: 100 * tick}, true)
	if a.Fingerprint != "A" {
		t.Errorf("Fingerprint = %q, want A", a.Fingerprint)
	}
	if rec := mustAcquire(t, s, "k", store.AcquireOptions{Fingerprint: "A"}, false); rec.Fingerprint != "A" {
		t.Errorf("same fingerprint: %+v", rec)
	}
	if rec := mustAcquire(t, s, "k", store.AcquireOptions{}, false); rec.Fingerprint != "A" {
		t.Errorf("no fingerprint: %+v", rec)
	}
	before := mustGet(t, s, "k", true)
	_, _, err := s.AcquireWith(ctx, "k", store.AcquireOptions{Fingerprint: "B"})
	wantErr(t, err, store.ErrFingerprintMismatch)
	noErr(t, s.Update(ctx, "k", store.Update{Status: statusPtr(store.StatusCompleted), Token: a.Token}))
	_, _, err = s.AcquireWith(ctx, "k", store.AcquireOptions{Fingerprint: "B", Lease: tick})
	wantErr(t, err, store.ErrFingerprintMismatch)
	before.Status, before.UpdatedAt, before.LeaseUntil = store.StatusCompleted, mustGet(t, s, "k", true).UpdatedAt, time.Time{}
	if diff := cmp.Diff(before, mustGet(t, s, "k", true)); diff != "" {
		t.Errorf("a mismatched acquire changed the record (-want +got):\n%s", diff)
	}
}

// recordsFingerprintEmptySideIsNotChecked is the FingerprintEmptySideIsNotChecked case of TestRecords.
func recordsFingerprintEmptySideIsNotChecked(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore := x.h, x.ctx, x.tick, x.newStore
	s := newStore(t)
	mustAcquire(t, s, "k", store.AcquireOptions{Lease: tick}, true)
	if rec := mustAcquire(t, s, "k", store.AcquireOptions{Fingerprint: "B"}, false); rec.Fingerprint != "" {
		t.Errorf("a read adopted a fingerprint: %+v", rec)
	}
	h.Wait(2 * tick)
	// A takeover adopts the first non-empty fingerprint...
	if rec := mustAcquire(t, s, "k", store.AcquireOptions{Fingerprint: "X", Lease: tick}, true); rec.Fingerprint != "X" {
		t.Errorf("takeover fingerprint = %q, want X", rec.Fingerprint)
	}
	// ...which then sticks.
	_, _, err := s.AcquireWith(ctx, "k", store.AcquireOptions{Fingerprint: "Y"})
	wantErr(t, err, store.ErrFingerprintMismatch)
	h.Wait(2 * tick)
	if rec := mustAcquire(t, s, "k", store.AcquireOptions{Lease: tick}, true); rec.Fingerprint != "X" {
		t.Errorf("a takeover without a fingerprint dropped it: %q", rec.Fingerprint)
	}
}

// recordsTokenNeverShownToOthers is the TokenNeverShownToOthers case of TestRecords.
func recordsTokenNeverShownToOthers(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore := x.ctx, x.tick, x.newStore
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{Lease: 100 * tick}, true)
	if a.Token == "" {
		t.Fatal("the owner got no token")
	}
	if rec := mustAcquire(t, s, "k", store.AcquireOptions{}, false); rec.Token != "" {
		t.Errorf("a non-owner's acquire got token %q", rec.Token)
	}
	if rec := mustGet(t, s, "k", true); rec.Token != "" {
		t.Errorf("Get shows token %q", rec.Token)
	}
	noErr(t, s.Update(ctx, "k", store.Update{Status: statusPtr(store.StatusCompleted)}))
	if rec := mustGet(t, s, "k", true); rec.Token != "" {
		t.Errorf("Get after Update shows token %q", rec.Token)
	}
}

// recordsPayloadsAreBinarySafe is the PayloadsAreBinarySafe case of TestRecords.
func recordsPayloadsAreBinarySafe(t *testing.T, x *recordsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{}, true)
	p := []byte("a\x00b\xff\r\n:{}")
	big := bytes.Repeat([]byte{0, 1, 2, 0xfe}, store.MaxRecordPayloadLen/4)
	st := store.Status(strings.Repeat("s", maxStatusLen))
	for _, payload := range [][]byte{p, big, {}} {
		noErr(t, s.Update(ctx, "k", store.Update{Payload: &payload, Status: &st, Token: a.Token}))
		got := mustGet(t, s, "k", true)
		if !bytes.Equal(got.Payload, payload) || got.Status != st {
			t.Errorf("payload of %d bytes came back as %d bytes, status %q", len(payload), len(got.Payload), got.Status)
		}
	}
	if got := mustGet(t, s, "k", true); got.Payload != nil {
		t.Errorf("an empty payload reads as %#v, want nil", got.Payload)
	}
}

// recordsUpdateBadInputChangesNothing is the UpdateBadInputChangesNothing case of TestRecords.
func recordsUpdateBadInputChangesNothing(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore := x.ctx, x.tick, x.newStore
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{Lease: 100 * tick}, true)
	before := mustGet(t, s, "k", true)
	long := make([]byte, store.MaxRecordPayloadLen+1)
	for name, u := range map[string]store.Update{
		"nothing":       {},
		"token only":    {Token: a.Token},
		"empty status":  {Status: statusPtr("")},
		"long status":   {Status: statusPtr(store.Status(strings.Repeat("s", maxStatusLen+1)))},
		"long payload":  {Payload: &long, Status: statusPtr(store.StatusCompleted)},
		"long token":    {Status: statusPtr(store.StatusCompleted), Token: strings.Repeat("t", maxTokenLen+1)},
		"far expiry":    {ExpiresAt: timePtr(time.Date(40000, 1, 1, 0, 0, 0, 0, time.UTC))},
		"far lease":     {LeaseUntil: timePtr(time.Date(40000, 1, 1, 0, 0, 0, 0, time.UTC))},
		"fenced + long": {Payload: &long, Token: a.Token},
	} {
		if err := s.Update(ctx, "k", u); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("Update(%s) = %v, want ErrInvalidArgument", name, err)
		}
	}
	if diff := cmp.Diff(before, mustGet(t, s, "k", true)); diff != "" {
		t.Errorf("a refused Update changed the record (-before +after):\n%s", diff)
	}
}

// recordsBadInput is the BadInput case of TestRecords.
func recordsBadInput(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore := x.ctx, x.tick, x.newStore
	s := newStore(t)
	fn := func(context.Context) ([]byte, error) { t.Error("fn ran"); return nil, nil }
	long := strings.Repeat("x", store.MaxIDLen+1)
	for _, key := range []string{"", long} {
		_, _, err := s.Acquire(ctx, key, 0)
		wantErr(t, err, store.ErrInvalidArgument)
		_, _, err = s.AcquireWith(ctx, key, store.AcquireOptions{})
		wantErr(t, err, store.ErrInvalidArgument)
		_, _, err = s.Get(ctx, key)
		wantErr(t, err, store.ErrInvalidArgument)
		wantErr(t, s.Update(ctx, key, store.Update{Status: statusPtr(store.StatusCompleted)}), store.ErrInvalidArgument)
		wantErr(t, s.Delete(ctx, key), store.ErrInvalidArgument)
		wantErr(t, s.DeleteFenced(ctx, key, "tok"), store.ErrInvalidArgument)
		_, _, err = s.Do(ctx, key, store.AcquireOptions{Lease: tick}, fn)
		wantErr(t, err, store.ErrInvalidArgument)
	}
	for name, o := range map[string]store.AcquireOptions{
		"negative TTL":     {TTL: -time.Second},
		"negative lease":   {Lease: -time.Second},
		"long fingerprint": {Fingerprint: strings.Repeat("f", 256+1)},
	} {
		_, _, err := s.AcquireWith(ctx, "m", o)
		if !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("AcquireWith(%s) = %v, want ErrInvalidArgument", name, err)
		}
		if o.Lease == 0 {
			o.Lease = tick
		}
		if _, _, err := s.Do(ctx, "m", o, fn); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("Do(%s) = %v, want ErrInvalidArgument", name, err)
		}
	}
	_, _, err := s.Acquire(ctx, "m", -time.Second)
	wantErr(t, err, store.ErrInvalidArgument)
	for _, lease := range []time.Duration{0, -time.Second} {
		_, _, err := s.Do(ctx, "m", store.AcquireOptions{Lease: lease}, fn)
		wantErr(t, err, store.ErrInvalidArgument)
	}
	for _, tok := range []string{"", strings.Repeat("t", maxTokenLen+1)} {
		wantErr(t, s.DeleteFenced(ctx, "m", tok), store.ErrInvalidArgument)
	}
	mustGet(t, s, "m", false)
	mustAcquire(t, s, strings.Repeat("x", store.MaxIDLen), store.AcquireOptions{Fingerprint: strings.Repeat("f", 256)}, true)
}

// recordsBadOptions is the BadOptions case of TestRecords.
func recordsBadOptions(t *testing.T, x *recordsSuite) {
	h := x.h
	// A bad option, or one that does not apply to records, fails New.
	for _, opt := range []store.Option{nil, store.WithTTL(-time.Second), store.WithMaxUnacked(1)} {
		var (
			got bool
			err error
		)
		if h.NewStore != nil {
			var s RecordStore
			s, err = h.NewStore(t, opt)
			got = s != nil
		} else {
			var s *store.Records
			s, err = h.New(t, opt)
			got = s != nil
		}
		wantErr(t, err, store.ErrInvalidArgument)
		if got {
			t.Errorf("New with a bad option returned a store")
		}
	}
}

// recordsCancelledContext is the CancelledContext case of TestRecords.
func recordsCancelledContext(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore := x.ctx, x.tick, x.newStore
	s := newStore(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err := s.Acquire(cctx, "m", 0)
	wantErr(t, err, context.Canceled)
	_, _, err = s.Get(cctx, "m")
	wantErr(t, err, context.Canceled)
	wantErr(t, s.Update(cctx, "m", store.Update{Status: statusPtr(store.StatusCompleted)}), context.Canceled)
	wantErr(t, s.Delete(cctx, "m"), context.Canceled)
	_, _, err = s.Do(cctx, "m", store.AcquireOptions{Lease: tick}, func(context.Context) ([]byte, error) { t.Error("fn ran"); return nil, nil })
	wantErr(t, err, context.Canceled)
	mustGet(t, s, "m", false)
}

// recordsAnyBytesInKeys is the AnyBytesInKeys case of TestRecords.
func recordsAnyBytesInKeys(t *testing.T, x *recordsSuite) {
	newStore := x.newStore
	s := newStore(t)
	keys := []string{"a\x00b", "{tag}", "}{", "a:b:c", "ünï", " ", "a", "A"}
	for _, k := range keys {
		mustAcquire(t, s, k, store.AcquireOptions{}, true)
	}
	for _, k := range keys {
		if rec := mustGet(t, s, k, true); rec.Key != k {
			t.Errorf("Get(%q).Key = %q", k, rec.Key)
		}
	}
	mustGet(t, s, "a\x00", false)
	mustGet(t, s, "ab", false)
}

// recordsConcurrentAcquireOneWinner is the ConcurrentAcquireOneWinner case of TestRecords.
func recordsConcurrentAcquireOneWinner(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore := x.ctx, x.tick, x.newStore
	s := newStore(t)
	for round := range 20 {
		key := fmt.Sprintf("race-%d", round)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, acquired, err := s.AcquireWith(ctx, key, store.AcquireOptions{Lease: 100 * tick})
				if err != nil {
					t.Errorf("AcquireWith: %v", err)
				}
				if acquired {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d acquired, want 1", round, n)
		}
	}
}

// recordsDoRunsOnceAndReplays is the DoRunsOnceAndReplays case of TestRecords.
func recordsDoRunsOnceAndReplays(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	s := newStore(t)
	calls := 0
	fn := func(context.Context) ([]byte, error) { calls++; return []byte("r1"), nil }
	res, replayed, err := s.Do(ctx, "k", doOpts, fn)
	if string(res) != "r1" || replayed || err != nil {
		t.Fatalf("first Do = %q, %v, %v; want r1, false, nil", res, replayed, err)
	}
	for range 2 {
		res, replayed, err = s.Do(ctx, "k", doOpts, fn)
		if string(res) != "r1" || !replayed || err != nil {
			t.Fatalf("retry = %q, %v, %v; want r1, true, nil", res, replayed, err)
		}
	}
	if calls != 1 {
		t.Errorf("fn ran %d times, want 1", calls)
	}
	got := mustGet(t, s, "k", true)
	if got.Status != store.StatusCompleted || string(got.Payload) != "r1" || !got.LeaseUntil.IsZero() || got.Fence == 0 {
		t.Errorf("record after Do = %+v; want completed, r1, no lease, a fence", got)
	}
}

// recordsDoEmptyResult is the DoEmptyResult case of TestRecords.
func recordsDoEmptyResult(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts, result := x.ctx, x.newStore, x.doOpts, x.result
	s := newStore(t)
	_, _, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) { return nil, nil })
	noErr(t, err)
	res, replayed, err := s.Do(ctx, "k", doOpts, result("not again"))
	if len(res) != 0 || !replayed || err != nil {
		t.Errorf("retry = %q, %v, %v; want empty, true, nil", res, replayed, err)
	}
}

// recordsDoInFlight is the DoInFlight case of TestRecords.
func recordsDoInFlight(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore, doOpts := x.ctx, x.tick, x.newStore, x.doOpts
	s := newStore(t)
	res, _, err := s.Do(ctx, "k", doOpts, func(ctx context.Context) ([]byte, error) {
		res, replayed, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) {
			t.Error("a retry ran while the first request was in flight")
			return nil, nil
		})
		if res != nil || replayed || !errors.Is(err, store.ErrInFlight) {
			t.Errorf("retry in flight = %q, %v, %v; want nil, false, ErrInFlight", res, replayed, err)
		}
		// The error says when to come back: the holder's lease time left
		// (from the record's lease deadline; a margin for the clocks).
		if err == nil || !strings.Contains(err.Error(), `"k"`) {
			t.Errorf("retry in flight: %v does not name k", err)
		}
		if d, ok := store.RetryAfter(err); !ok || d <= 0 || d > doOpts.Lease+tick {
			t.Errorf("RetryAfter = %v, %v; want (0, %v], true", d, ok, doOpts.Lease+tick)
		}
		return []byte("first"), nil
	})
	if string(res) != "first" || err != nil {
		t.Fatalf("Do = %q, %v", res, err)
	}
}

// recordsDoPermanentFailureIsStoredAndReplayed is the DoPermanentFailureIsStoredAndReplayed case of TestRecords.
func recordsDoPermanentFailureIsStoredAndReplayed(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts, result := x.ctx, x.newStore, x.doOpts, x.result
	s := newStore(t)
	boom := errors.New("boom: card declined")
	res, replayed, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) { return nil, fmt.Errorf("charge: %w", store.Permanent(boom)) })
	if res != nil || replayed || !errors.Is(err, boom) {
		t.Fatalf("Do = %q, %v, %v; want nil, false, boom", res, replayed, err)
	}
	got := mustGet(t, s, "k", true)
	if got.Status != store.StatusFailed || string(got.Payload) != "charge: "+boom.Error() || !got.LeaseUntil.IsZero() {
		t.Errorf("record = %+v; want failed with the error text and no lease", got)
	}
	res, replayed, err = s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) {
		t.Error("fn ran again for a failed record")
		return nil, nil
	})
	if string(res) != "charge: "+boom.Error() || !replayed || !errors.Is(err, store.ErrFailed) || !strings.HasSuffix(err.Error(), boom.Error()) {
		t.Errorf("retry = %q, %v, %v; want the error text, true, ErrFailed ending with it", res, replayed, err)
	}
	// Deleting the failed record lets the next Do run fn.
	noErr(t, s.Delete(ctx, "k"))
	if res, replayed, err := s.Do(ctx, "k", doOpts, result("ok")); string(res) != "ok" || replayed || err != nil {
		t.Errorf("Do after Delete = %q, %v, %v", res, replayed, err)
	}
}

// recordsDoErrorDeletes is the DoErrorDeletes case of TestRecords.
func recordsDoErrorDeletes(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts, result := x.ctx, x.newStore, x.doOpts, x.result
	for _, fail := range []error{
		errors.New("provider: 503"),
		fmt.Errorf("handler: %w", context.Canceled),
		context.DeadlineExceeded,
		store.Permanent(context.Canceled), // a context error is never stored
		store.Retryable(store.Permanent(errors.New("overridden"))),
	} {
		s := newStore(t)
		_, replayed, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) { return nil, fail })
		if replayed || !errors.Is(err, fail) {
			t.Fatalf("Do failing with %v = %v, %v; want false, the error", fail, replayed, err)
		}
		mustGet(t, s, "k", false)
		if res, replayed, err := s.Do(ctx, "k", doOpts, result("ok")); string(res) != "ok" || replayed || err != nil {
			t.Errorf("retry after %v = %q, %v, %v; want ok, false, nil", fail, res, replayed, err)
		}
	}
	if store.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
}

// recordsDoRetryableErrorDeletes is the DoRetryableErrorDeletes case of TestRecords.
func recordsDoRetryableErrorDeletes(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts, result := x.ctx, x.newStore, x.doOpts, x.result
	s := newStore(t)
	boom := errors.New("upstream timeout")
	_, replayed, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) {
		return nil, fmt.Errorf("charge: %w", store.Retryable(boom))
	})
	if replayed || !errors.Is(err, boom) {
		t.Fatalf("Do = %v, %v; want false, boom", replayed, err)
	}
	mustGet(t, s, "k", false)
	if res, replayed, err := s.Do(ctx, "k", doOpts, result("ok")); string(res) != "ok" || replayed || err != nil {
		t.Errorf("retry = %q, %v, %v; want ok, false, nil", res, replayed, err)
	}
	if store.Retryable(nil) != nil {
		t.Error("Retryable(nil) != nil")
	}
}

// recordsDoPanicDeletes is the DoPanicDeletes case of TestRecords.
func recordsDoPanicDeletes(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	s := newStore(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not propagate")
			}
		}()
		_, _, _ = s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) { panic("handler bug") })
	}()
	mustGet(t, s, "k", false)
}

// recordsDoLeaseKeptAlive is the DoLeaseKeptAlive case of TestRecords.
func recordsDoLeaseKeptAlive(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore, doOpts := x.h, x.ctx, x.tick, x.newStore, x.doOpts
	s := newStore(t)
	lease := 2 * tick
	var fence uint64
	res, replayed, err := s.Do(ctx, "k", store.AcquireOptions{Lease: lease}, func(ctx context.Context) ([]byte, error) {
		l, ok := store.LeaseFromContext(ctx)
		if !ok || l.ID != "k" || l.Token == "" || l.Fence == 0 {
			t.Errorf("LeaseFromContext = %+v, %v; want key k, a token, a fence", l, ok)
		}
		fence = l.Fence
		// fn runs past its lease; the heartbeat keeps it, so a retry
		// meanwhile is still in flight.
		h.Wait(lease + tick)
		_, _, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) {
			t.Error("a retry ran while the first owner was alive")
			return nil, nil
		})
		wantErr(t, err, store.ErrInFlight)
		return []byte("A"), ctx.Err()
	})
	if string(res) != "A" || replayed || err != nil {
		t.Errorf("long-running owner's Do = %q, %v, %v; want A, false, nil", res, replayed, err)
	}
	if got := mustGet(t, s, "k", true); got.Status != store.StatusCompleted || string(got.Payload) != "A" || got.Fence != fence {
		t.Errorf("record = %+v; want completed A, fence %d (the lease's)", got, fence)
	}
}

// recordsDoContextDeadline is the DoContextDeadline case of TestRecords.
func recordsDoContextDeadline(t *testing.T, x *recordsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	// fn's context reports the local lease deadline: after the acquire
	// was sent, at most a lease after it.
	s := newStore(t)
	lease := 10 * h.Tick
	before := time.Now()
	_, _, err := s.Do(ctx, "k", store.AcquireOptions{Lease: lease}, func(ctx context.Context) ([]byte, error) {
		if d, ok := ctx.Deadline(); !ok || !d.After(before) || d.After(before.Add(lease)) {
			t.Errorf("ctx.Deadline() = +%v, %v; want within (0, lease %v] of the acquire", d.Sub(before), ok, lease)
		}
		return []byte("r"), ctx.Err()
	})
	if err != nil {
		t.Errorf("Do = %v", err)
	}
}

// recordsDoStalledOwnerCannotOverwrite is the DoStalledOwnerCannotOverwrite case of TestRecords.
func recordsDoStalledOwnerCannotOverwrite(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts, result := x.ctx, x.newStore, x.doOpts, x.result
	s := newStore(t)
	res, replayed, err := s.Do(ctx, "k", doOpts, func(ctx context.Context) ([]byte, error) {
		// This owner loses the record (removed, as a lease that ran out
		// and was taken over would be) and another caller completes it first.
		noErr(t, s.Delete(ctx, "k"))
		res, replayed, err := s.Do(context.Background(), "k", doOpts, result("B"))
		if string(res) != "B" || replayed || err != nil {
			t.Errorf("second owner's Do = %q, %v, %v; want B, false, nil", res, replayed, err)
		}
		return []byte("A"), nil
	})
	if string(res) != "A" || replayed || !errors.Is(err, store.ErrStaleOwner) {
		t.Errorf("stalled owner's Do = %q, %v, %v; want A, false, ErrStaleOwner", res, replayed, err)
	}
	got := mustGet(t, s, "k", true)
	if got.Status != store.StatusCompleted || string(got.Payload) != "B" {
		t.Errorf("record = %+v; want the second owner's result B", got)
	}
	if res, replayed, err := s.Do(ctx, "k", doOpts, result("C")); string(res) != "B" || !replayed || err != nil {
		t.Errorf("later Do = %q, %v, %v; want B, true, nil", res, replayed, err)
	}
}

// recordsDoStalledOwnerFailureCannotOverwrite is the DoStalledOwnerFailureCannotOverwrite case of TestRecords.
func recordsDoStalledOwnerFailureCannotOverwrite(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts, result := x.ctx, x.newStore, x.doOpts, x.result
	s := newStore(t)
	_, _, err := s.Do(ctx, "k", doOpts, func(ctx context.Context) ([]byte, error) {
		noErr(t, s.Delete(ctx, "k"))
		_, _, err := s.Do(context.Background(), "k", doOpts, result("B"))
		noErr(t, err)
		return nil, errors.New("late failure")
	})
	wantErr(t, err, store.ErrStaleOwner)
	if got := mustGet(t, s, "k", true); got.Status != store.StatusCompleted || string(got.Payload) != "B" {
		t.Errorf("record = %+v; want the second owner's result B", got)
	}
}

// recordsDoRecreatesRemovedRecord is the DoRecreatesRemovedRecord case of TestRecords.
func recordsDoRecreatesRemovedRecord(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	s := newStore(t)
	// The record is gone when the final write runs (deleted; one that
	// expired is the same) and nobody acquired the key since: the final
	// write stores the outcome instead of giving up.
	res, _, err := s.Do(ctx, "k", doOpts, func(ctx context.Context) ([]byte, error) {
		return []byte("A"), s.Delete(ctx, "k")
	})
	if string(res) != "A" || err != nil {
		t.Errorf("Do = %q, %v; want A, nil", res, err)
	}
	if got := mustGet(t, s, "k", true); got.Status != store.StatusCompleted || string(got.Payload) != "A" {
		t.Errorf("record = %+v; want completed A", got)
	}
}

// recordsDoCancelsFnWhenRecordLost is the DoCancelsFnWhenRecordLost case of TestRecords.
func recordsDoCancelsFnWhenRecordLost(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore, doOpts := x.ctx, x.tick, x.newStore, x.doOpts
	s := newStore(t)
	var other store.Record
	_, _, err := s.Do(ctx, "k", store.AcquireOptions{Lease: 3 * tick}, func(ctx context.Context) ([]byte, error) {
		l, _ := store.LeaseFromContext(ctx)
		noErr(t, s.Delete(ctx, "k"))
		rec, ok, err := s.AcquireWith(context.Background(), "k", doOpts) // another owner
		if !ok || err != nil {
			t.Errorf("AcquireWith = %v, %v", ok, err)
		}
		if other = rec; rec.Fence <= l.Fence {
			t.Errorf("the other owner's fence %d is not above the first owner's %d", rec.Fence, l.Fence)
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(10 * time.Second):
			t.Error("fn's context was not cancelled after its record was taken")
			return nil, nil
		}
	})
	wantErr(t, err, store.ErrStaleOwner)
	if got := mustGet(t, s, "k", true); got.Status != store.StatusPending || got.Fence != other.Fence {
		t.Errorf("record = %+v; want the other owner's pending record (fence %d)", got, other.Fence)
	}
}

// recordsDoFingerprint is the DoFingerprint case of TestRecords.
func recordsDoFingerprint(t *testing.T, x *recordsSuite) {
	ctx, tick, newStore, result := x.ctx, x.tick, x.newStore, x.result
	s := newStore(t)
	o := store.AcquireOptions{Lease: 100 * tick, Fingerprint: "sha256:aaa"}
	_, _, err := s.Do(ctx, "k", o, result("A"))
	noErr(t, err)
	other := o
	other.Fingerprint = "sha256:bbb"
	_, _, err = s.Do(ctx, "k", other, func(context.Context) ([]byte, error) { t.Error("fn ran"); return nil, nil })
	wantErr(t, err, store.ErrFingerprintMismatch)
	if res, replayed, err := s.Do(ctx, "k", o, result("B")); string(res) != "A" || !replayed || err != nil {
		t.Errorf("same fingerprint = %q, %v, %v; want A, true, nil", res, replayed, err)
	}
}

// recordsDoResultTooLong is the DoResultTooLong case of TestRecords.
func recordsDoResultTooLong(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	s := newStore(t)
	big := make([]byte, store.MaxRecordPayloadLen+1)
	res, _, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) { return big, nil })
	if len(res) != len(big) || !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("Do = %d bytes, %v; want the result and ErrInvalidArgument", len(res), err)
	}
	_, replayed, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) { t.Error("fn ran again"); return nil, nil })
	if !replayed || !errors.Is(err, store.ErrFailed) {
		t.Errorf("retry = %v, %v; want true, ErrFailed", replayed, err)
	}
}

// recordsDoLongErrorTextIsCut is the DoLongErrorTextIsCut case of TestRecords.
func recordsDoLongErrorTextIsCut(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	s := newStore(t)
	_, _, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) {
		return nil, store.Permanent(errors.New(strings.Repeat("e", store.MaxRecordPayloadLen+10)))
	})
	if err == nil {
		t.Fatal("Do = nil error")
	}
	if got := mustGet(t, s, "k", true); got.Status != store.StatusFailed || len(got.Payload) != store.MaxRecordPayloadLen {
		t.Errorf("record: status %q, payload %d bytes; want failed, %d", got.Status, len(got.Payload), store.MaxRecordPayloadLen)
	}
}

// recordsDoStoresDespiteCancelledContext is the DoStoresDespiteCancelledContext case of TestRecords.
func recordsDoStoresDespiteCancelledContext(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	s := newStore(t)
	cctx, cancel := context.WithCancel(ctx)
	res, _, err := s.Do(cctx, "k", doOpts, func(context.Context) ([]byte, error) {
		cancel() // the client went away after the effect happened
		return []byte("done"), nil
	})
	if string(res) != "done" || err != nil {
		t.Fatalf("Do = %q, %v", res, err)
	}
	if got := mustGet(t, s, "k", true); got.Status != store.StatusCompleted {
		t.Errorf("status = %q, want completed", got.Status)
	}
}

// recordsDoTTL is the DoTTL case of TestRecords.
func recordsDoTTL(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore, result := x.h, x.ctx, x.tick, x.newStore, x.result
	s := newStore(t)
	o := store.AcquireOptions{TTL: 2 * tick, Lease: tick}
	_, _, err := s.Do(ctx, "k", o, result("A"))
	noErr(t, err)
	if rec := mustGet(t, s, "k", true); !rec.ExpiresAt.Equal(rec.CreatedAt.Add(2 * tick)) {
		t.Errorf("ExpiresAt = %v, want CreatedAt + TTL", rec.ExpiresAt)
	}
	h.Wait(3 * tick)
	if res, replayed, err := s.Do(ctx, "k", o, result("B")); string(res) != "B" || replayed || err != nil {
		t.Errorf("Do after the TTL = %q, %v, %v; want B, false, nil", res, replayed, err)
	}
}

// recordsDoWaitReplaysTheFirstResult is the DoWaitReplaysTheFirstResult case of TestRecords.
func recordsDoWaitReplaysTheFirstResult(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	// 8 duplicates wait (AcquireOptions.Wait) while the first runs; the
	// first finishes 1.1 s after they started waiting, just after their
	// first bounded re-read (1 s): each must be answered by the push,
	// well before the next re-read (2 s), with the first's result
	// replayed; fn runs once.
	s := newStore(t)
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	first := make(chan error, 1)
	go func() {
		_, _, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) {
			runs.Add(1)
			close(started)
			<-release
			return []byte("first"), nil
		})
		first <- err
	}()
	<-started
	wait := doOpts
	wait.Wait = 10 * time.Second
	const n = 8
	var wg sync.WaitGroup
	done := make([]time.Time, n)
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, replayed, err := s.Do(ctx, "k", wait, func(context.Context) ([]byte, error) {
				runs.Add(1)
				return []byte("duplicate ran"), nil
			})
			done[i] = time.Now()
			if string(res) != "first" || !replayed || err != nil {
				t.Errorf("waiter %d: Do = %q, %v, %v; want the first's result replayed", i, res, replayed, err)
			}
		}()
	}
	time.Sleep(1100 * time.Millisecond)
	released := time.Now()
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("the first Do: %v", err)
	}
	for i, d := range done {
		if lat := d.Sub(released); lat < 0 || lat > 600*time.Millisecond {
			t.Errorf("waiter %d answered %v after the first finished (it began waiting %v before); a push answers within 600 ms, the next re-read comes 900 ms after", i, lat, released.Sub(t0))
		}
	}
	if r := runs.Load(); r != 1 {
		t.Errorf("fn ran %d times, want 1", r)
	}
}

// recordsDoWaitGivesUpInFlight is the DoWaitGivesUpInFlight case of TestRecords.
func recordsDoWaitGivesUpInFlight(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	// The first runs past the wait: ErrInFlight once Wait has passed,
	// not before, and not long after (a re-read never oversleeps it).
	s := newStore(t)
	started, release := make(chan struct{}), make(chan struct{})
	go s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) {
		close(started)
		<-release
		return []byte("late"), nil
	})
	defer close(release)
	<-started
	wait := doOpts
	wait.Wait = 1500 * time.Millisecond
	t0 := time.Now()
	res, replayed, err := s.Do(ctx, "k", wait, func(context.Context) ([]byte, error) {
		t.Error("a waiter ran fn while the first was in flight")
		return nil, nil
	})
	took := time.Since(t0)
	if res != nil || replayed || !errors.Is(err, store.ErrInFlight) {
		t.Errorf("Do = %q, %v, %v; want ErrInFlight", res, replayed, err)
	}
	if took < wait.Wait || took > wait.Wait+time.Second {
		t.Errorf("gave up after %v, want %v to %v", took, wait.Wait, wait.Wait+time.Second)
	}
}

// recordsDoWaitRunsWhenTheFirstGivesBack is the DoWaitRunsWhenTheFirstGivesBack case of TestRecords.
func recordsDoWaitRunsWhenTheFirstGivesBack(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	// The first fails (a retryable error: the record is deleted): the
	// waiter is answered by running fn itself, at once.
	s := newStore(t)
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, _, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return nil, errors.New("provider down")
		})
		first <- err
	}()
	<-started
	wait := doOpts
	wait.Wait = 10 * time.Second
	relc := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		relc <- time.Now()
		close(release)
	}()
	res, replayed, err := s.Do(ctx, "k", wait, func(context.Context) ([]byte, error) {
		return []byte("second"), nil
	})
	lat := time.Since(<-relc)
	if string(res) != "second" || replayed || err != nil {
		t.Errorf("Do = %q, %v, %v; want fn's own result", res, replayed, err)
	}
	if err := <-first; err == nil || err.Error() != "provider down" {
		t.Errorf("the first Do: %v", err)
	}
	if lat > 600*time.Millisecond {
		t.Errorf("the waiter ran %v after the first gave the key back; its re-read would come 700 ms after", lat)
	}
}

// recordsDoWaitNegative is the DoWaitNegative case of TestRecords.
func recordsDoWaitNegative(t *testing.T, x *recordsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	_, _, err := s.Do(ctx, "k", store.AcquireOptions{Lease: time.Second, Wait: -time.Second}, func(context.Context) ([]byte, error) {
		t.Error("fn ran with a negative wait")
		return nil, nil
	})
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("Do with Wait -1s: %v, want ErrInvalidArgument", err)
	}
	mustGet(t, s, "k", false)
}

// recordsDoOutlivesAShortTTL is the DoOutlivesAShortTTL case of TestRecords.
func recordsDoOutlivesAShortTTL(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore, within, result := x.h, x.ctx, x.tick, x.newStore, x.within, x.result
	// A TTL shorter than the lease and than fn's run: the record stays
	// while its owner runs (a retry is in flight, a read finds it), and
	// the final write gives it its retention again, from then.
	s := newStore(t)
	ttl := tick
	o := store.AcquireOptions{TTL: ttl, Lease: 3 * tick}
	res, replayed, err := s.Do(ctx, "k", o, func(ctx context.Context) ([]byte, error) {
		for range 3 {
			h.Wait(2 * tick) // 6 ticks in all: past the TTL and the first lease
			if got, ok, err := s.Get(ctx, "k"); err != nil || !ok || got.Status != store.StatusPending {
				t.Errorf("the owner's record while it runs = %+v, %v, %v; want it pending", got, ok, err)
			}
			_, _, err := s.Do(ctx, "k", o, func(context.Context) ([]byte, error) {
				t.Error("a retry ran while the first owner was alive")
				return nil, nil
			})
			wantErr(t, err, store.ErrInFlight)
		}
		return []byte("A"), ctx.Err()
	})
	if string(res) != "A" || replayed || err != nil {
		t.Fatalf("Do = %q, %v, %v; want A, false, nil", res, replayed, err)
	}
	done := h.Now()
	got := mustGet(t, s, "k", true)
	if got.Status != store.StatusCompleted || string(got.Payload) != "A" || got.Fence == 0 {
		t.Errorf("record = %+v; want completed A, a fence", got)
	}
	within(t, "ExpiresAt after a run longer than the TTL", got.ExpiresAt, done.Add(ttl))
	if res, replayed, err := s.Do(ctx, "k", o, result("B")); string(res) != "A" || !replayed || err != nil {
		t.Errorf("Do after the run = %q, %v, %v; want the replay A, true, nil", res, replayed, err)
	}
	h.Wait(2 * ttl)
	mustGet(t, s, "k", false)
}

// recordsLeasePastTheTTLKeepsTheRecord is the LeasePastTheTTLKeepsTheRecord case of TestRecords.
func recordsLeasePastTheTTLKeepsTheRecord(t *testing.T, x *recordsSuite) {
	h, tick, newStore := x.h, x.tick, x.newStore
	// The expiry rule outside Do: a lease that runs past the TTL keeps
	// the pending record until the lease passes; then it expires.
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{TTL: tick, Lease: 4 * tick}, true)
	if !a.ExpiresAt.Equal(a.CreatedAt.Add(tick)) {
		t.Errorf("ExpiresAt = %v, want CreatedAt + TTL: the retention asked for", a.ExpiresAt)
	}
	h.Wait(2 * tick)
	if got := mustGet(t, s, "k", true); got.Status != store.StatusPending || got.Fence != a.Fence {
		t.Errorf("record past its TTL, within its lease = %+v; want it pending, fence %d", got, a.Fence)
	}
	mustAcquire(t, s, "k", store.AcquireOptions{Lease: tick}, false)
	h.Wait(3 * tick)
	mustGet(t, s, "k", false)
	if b := mustAcquire(t, s, "k", store.AcquireOptions{TTL: tick, Lease: tick}, true); b.Fence <= a.Fence {
		t.Errorf("acquire after the lease and the TTL passed: fence %d, want one above %d (a new record)", b.Fence, a.Fence)
	}
}

// recordsUpdateRestoresTheRetention is the UpdateRestoresTheRetention case of TestRecords.
func recordsUpdateRestoresTheRetention(t *testing.T, x *recordsSuite) {
	h, ctx, tick, newStore, within := x.h, x.ctx, x.tick, x.newStore, x.within
	// A lease moved past the TTL by Update keeps the record; the write
	// that ends the lease after the TTL ran out gives it the TTL again.
	s := newStore(t)
	a := mustAcquire(t, s, "k", store.AcquireOptions{TTL: 2 * tick, Lease: tick}, true)
	noErr(t, s.Update(ctx, "k", store.Update{LeaseUntil: timePtr(h.Now().Add(6 * tick)), Token: a.Token}))
	h.Wait(4 * tick)
	mustGet(t, s, "k", true)
	start := h.Now()
	noErr(t, s.Update(ctx, "k", store.Update{Status: statusPtr(store.StatusCompleted), Payload: bytesPtr("A"), Token: a.Token}))
	got := mustGet(t, s, "k", true)
	if got.Status != store.StatusCompleted || !got.LeaseUntil.IsZero() {
		t.Errorf("after the final write: %+v; want completed without a lease", got)
	}
	within(t, "ExpiresAt after the final write", got.ExpiresAt, start.Add(2*tick))
	h.Wait(3 * tick)
	mustGet(t, s, "k", false)
}

// recordsDoOnlyOneOfMany is the DoOnlyOneOfMany case of TestRecords.
func recordsDoOnlyOneOfMany(t *testing.T, x *recordsSuite) {
	ctx, newStore, doOpts := x.ctx, x.newStore, x.doOpts
	s := newStore(t)
	var runs atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, replayed, err := s.Do(ctx, "k", doOpts, func(context.Context) ([]byte, error) {
				runs.Add(1)
				time.Sleep(time.Millisecond)
				return []byte("once"), nil
			})
			switch {
			case errors.Is(err, store.ErrInFlight):
			case err != nil:
				t.Errorf("Do: %v", err)
			case string(res) != "once":
				t.Errorf("Do = %q, %v", res, replayed)
			}
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times across 16 concurrent requests, want 1", n)
	}
}

// mustAcquire acquires key with o and checks whether it was acquired.
func mustAcquire(t *testing.T, s RecordStore, key string, o store.AcquireOptions, wantAcquired bool) store.Record {
	t.Helper()
	rec, acquired, err := s.AcquireWith(context.Background(), key, o)
	if err != nil {
		t.Fatalf("AcquireWith(%q): %v", key, err)
	}
	if acquired != wantAcquired {
		t.Fatalf("AcquireWith(%q) acquired = %v, want %v (record %+v)", key, acquired, wantAcquired, rec)
	}
	if rec.Key != key {
		t.Errorf("AcquireWith(%q).Key = %q", key, rec.Key)
	}
	if (rec.Token != "") != acquired {
		t.Errorf("AcquireWith(%q): acquired %v with token %q", key, acquired, rec.Token)
	}
	return rec
}

// mustGet reads key and checks whether it exists.
func mustGet(t *testing.T, s RecordStore, key string, wantFound bool) store.Record {
	t.Helper()
	rec, ok, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if ok != wantFound {
		t.Fatalf("Get(%q) found = %v, want %v (record %+v)", key, ok, wantFound, rec)
	}
	if !ok && !cmp.Equal(rec, store.Record{}) {
		t.Errorf("Get(%q) of a missing record = %+v, want Record{}", key, rec)
	}
	return rec
}
