package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/redisonce/redisonce/store"
)

// ClaimsHarness tells TestClaims how to make and age a store under test.
type ClaimsHarness struct {
	// New returns an empty store with opts applied, isolated from every other
	// store New returns (a fresh prefix or database). The suite closes it.
	New func(t *testing.T, opts ...store.Option) (*store.Claims, error)
	// Wait lets d pass for the stores New returns: time.Sleep for a store on a
	// real clock, Clock.Advance for a fake one.
	Wait func(d time.Duration)
	// Tick is a duration long enough for the implementation to expire a key
	// reliably (Redis: 100ms); TTLs and leases in the suite are multiples of it.
	Tick time.Duration
}

// TestClaims runs the claims contract against h's stores.
func TestClaims(t *testing.T, h ClaimsHarness) {
	if h.Tick <= 0 {
		h.Tick = 100 * time.Millisecond
	}
	x := &claimsSuite{h: h, ctx: context.Background()}
	for _, c := range claimsCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, x) })
	}
}

// claimsSuite is what every case of TestClaims gets: the harness, and the
// helpers built on it.
type claimsSuite struct {
	h   ClaimsHarness
	ctx context.Context
}

// newStore returns a new store of the harness, closed when t ends.
func (x *claimsSuite) newStore(t *testing.T, opts ...store.Option) *store.Claims {
	t.Helper()
	s, err := x.h.New(t, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// claimsCases are TestClaims' cases, in order: each a named function.
var claimsCases = []struct {
	name string
	run  func(*testing.T, *claimsSuite)
}{
	{"Events", claimsEvents},
	{"ClaimOnce", claimsClaimOnce},
	{"RememberForget", claimsRememberForget},
	{"ClaimMany", claimsClaimMany},
	{"ClaimManyGroups", claimsClaimManyGroups},
	{"ClaimManyRepeatsAcrossTheCut", claimsClaimManyRepeatsAcrossTheCut},
	{"SeenMany", claimsSeenMany},
	{"ClaimManyRefusesBadBatchWhole", claimsClaimManyRefusesBadBatchWhole},
	{"TTL", claimsTTL},
	{"NoTTLByDefault", claimsNoTTLByDefault},
	{"DoRunsOnce", claimsDoRunsOnce},
	{"DoCommitUsesTTL", claimsDoCommitUsesTTL},
	{"DoErrorReleases", claimsDoErrorReleases},
	{"DoPanicReleases", claimsDoPanicReleases},
	{"DoInFlight", claimsDoInFlight},
	{"DoLeaseKeptAlive", claimsDoLeaseKeptAlive},
	{"DoReportsExtensions", claimsDoReportsExtensions},
	{"DoContextDeadline", claimsDoContextDeadline},
	{"DoCommitAfterForget", claimsDoCommitAfterForget},
	{"DoLeaseLostToAnotherConsumer", claimsDoLeaseLostToAnotherConsumer},
	{"DoCancelsFnWhenLeaseLost", claimsDoCancelsFnWhenLeaseLost},
	{"DoOnlyOneOfMany", claimsDoOnlyOneOfMany},
	{"ConcurrentClaimOneWinner", claimsConcurrentClaimOneWinner},
	{"BadInput", claimsBadInput},
	{"BadOptions", claimsBadOptions},
	{"CancelledContext", claimsCancelledContext},
	{"AnyBytesInIDs", claimsAnyBytesInIDs},
}

// claimsEvents is the Events case of TestClaims.
func claimsEvents(t *testing.T, x *claimsSuite) {
	h, newStore := x.h, x.newStore
	testClaimsEvents(t, newStore, h)
}

// claimsClaimOnce is the ClaimOnce case of TestClaims.
func claimsClaimOnce(t *testing.T, x *claimsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	got := []bool{must(t)(s.Claim(ctx, "m1")), must(t)(s.Claim(ctx, "m1")), must(t)(s.Claim(ctx, "m2"))}
	if diff := cmp.Diff([]bool{true, false, true}, got); diff != "" {
		t.Errorf("Claim m1, m1, m2 (-want +got):\n%s", diff)
	}
	if !must(t)(s.Seen(ctx, "m1")) || must(t)(s.Seen(ctx, "m3")) {
		t.Error("Seen(m1) should be true and Seen(m3) false")
	}
}

// claimsRememberForget is the RememberForget case of TestClaims.
func claimsRememberForget(t *testing.T, x *claimsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	noErr(t, s.Remember(ctx, "m"))
	if must(t)(s.Claim(ctx, "m")) {
		t.Error("Claim after Remember won")
	}
	noErr(t, s.Forget(ctx, "m"))
	if must(t)(s.Seen(ctx, "m")) {
		t.Error("Seen after Forget")
	}
	if !must(t)(s.Claim(ctx, "m")) {
		t.Error("Claim after Forget lost")
	}
	noErr(t, s.Forget(ctx, "never-claimed"))
}

// claimsClaimMany is the ClaimMany case of TestClaims.
func claimsClaimMany(t *testing.T, x *claimsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	noErr(t, s.Remember(ctx, "b"))
	got, err := s.ClaimMany(ctx, []string{"a", "b", "a", "c", "c"})
	noErr(t, err)
	if diff := cmp.Diff([]bool{true, false, false, true, false}, got); diff != "" {
		t.Errorf("ClaimMany (-want +got):\n%s", diff)
	}
	got, err = s.ClaimMany(ctx, nil)
	noErr(t, err)
	if diff := cmp.Diff([]bool{}, got); diff != "" {
		t.Errorf("ClaimMany(nil) (-want +got):\n%s", diff)
	}
	for _, id := range []string{"a", "b", "c"} {
		if !must(t)(s.Seen(ctx, id)) {
			t.Errorf("Seen(%q) after ClaimMany = false", id)
		}
	}
}

// claimsClaimManyGroups is the ClaimManyGroups case of TestClaims.
func claimsClaimManyGroups(t *testing.T, x *claimsSuite) {
	ctx, newStore := x.ctx, x.newStore
	// Ids sharing a hash tag form one group on a cluster (one script
	// call); a batch over one call's limit is cut in order, so a
	// duplicate far from its first occurrence still loses.
	s := newStore(t)
	noErr(t, s.Remember(ctx, "{t1}done"))
	ids := []string{"{t1}a", "{t2}a", "{t1}done", "{t1}a", "plain", "{t2}a", "{}x", "{t1}b"}
	want := []bool{true, true, false, false, true, false, true, true}
	for i := range 1200 {
		ids = append(ids, fmt.Sprintf("{big}%d", i%700))
		want = append(want, i < 700)
	}
	got, err := s.ClaimMany(ctx, ids)
	noErr(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClaimMany (-want +got):\n%s", diff)
	}
	seen, err := s.SeenMany(ctx, append(ids, "{t1}never", "never"))
	noErr(t, err)
	wantSeen := make([]bool, len(ids), len(ids)+2)
	for i := range wantSeen {
		wantSeen[i] = true
	}
	if diff := cmp.Diff(append(wantSeen, false, false), seen); diff != "" {
		t.Errorf("SeenMany (-want +got):\n%s", diff)
	}
}

// claimsClaimManyRepeatsAcrossTheCut is the ClaimManyRepeatsAcrossTheCut case of TestClaims.
func claimsClaimManyRepeatsAcrossTheCut(t *testing.T, x *claimsSuite) {
	ctx, newStore := x.ctx, x.newStore
	// First wins however a batch is cut: an id first given at the end
	// of one 500-id call and repeated at the start of the next and far
	// beyond; an id already processed, repeated; every result checked.
	s := newStore(t)
	noErr(t, s.Remember(ctx, "{c}done"))
	var ids []string
	var want []bool
	add := func(id string, w bool) { ids, want = append(ids, id), append(want, w) }
	for i := range 499 {
		add(fmt.Sprintf("{c}%d", i), true)
	}
	add("{c}edge", true) // index 499: the last of the first call
	add("{c}edge", false)
	add("{c}done", false)
	for i := range 700 {
		add(fmt.Sprintf("{c}%d", 1000+i), true)
	}
	add("{c}edge", false)
	add("{c}0", false)
	add("{c}done", false)
	add("{c}1699", false)
	got, err := s.ClaimMany(ctx, ids)
	noErr(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClaimMany (-want +got):\n%s", diff)
	}
	// A read of the same batch answers every occurrence alike.
	seen, err := s.SeenMany(ctx, append(ids, "{c}never", "{c}never"))
	noErr(t, err)
	for i, v := range seen {
		if v != (i < len(ids)) {
			t.Errorf("SeenMany[%d] (%q) = %v, want %v", i, append(ids, "{c}never", "{c}never")[i], v, i < len(ids))
			break
		}
	}
	// Claiming the same batch again claims nothing, repeats included.
	again, err := s.ClaimMany(ctx, ids)
	noErr(t, err)
	for i, v := range again {
		if v {
			t.Errorf("second ClaimMany: ids[%d] %q claimed again", i, ids[i])
			break
		}
	}
}

// claimsSeenMany is the SeenMany case of TestClaims.
func claimsSeenMany(t *testing.T, x *claimsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	noErr(t, s.Remember(ctx, "a"))
	got, err := s.SeenMany(ctx, []string{"a", "b", "a"})
	noErr(t, err)
	if diff := cmp.Diff([]bool{true, false, true}, got); diff != "" {
		t.Errorf("SeenMany (-want +got):\n%s", diff)
	}
	got, err = s.SeenMany(ctx, nil)
	noErr(t, err)
	if diff := cmp.Diff([]bool{}, got); diff != "" {
		t.Errorf("SeenMany(nil) (-want +got):\n%s", diff)
	}
	_, err = s.SeenMany(ctx, []string{"a", ""})
	wantErr(t, err, store.ErrInvalidArgument)
	if must(t)(s.Seen(ctx, "b")) {
		t.Error("SeenMany wrote b")
	}
}

// claimsClaimManyRefusesBadBatchWhole is the ClaimManyRefusesBadBatchWhole case of TestClaims.
func claimsClaimManyRefusesBadBatchWhole(t *testing.T, x *claimsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	_, err := s.ClaimMany(ctx, []string{"ok1", "", "ok2"})
	wantErr(t, err, store.ErrInvalidArgument)
	_, err = s.ClaimMany(ctx, []string{"ok1", strings.Repeat("x", store.MaxIDLen+1)})
	wantErr(t, err, store.ErrInvalidArgument)
	for _, id := range []string{"ok1", "ok2"} {
		if must(t)(s.Seen(ctx, id)) {
			t.Errorf("%q was claimed by a batch that was refused", id)
		}
	}
}

// claimsTTL is the TTL case of TestClaims.
func claimsTTL(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t, store.WithTTL(2*h.Tick))
	if !must(t)(s.Claim(ctx, "m")) {
		t.Fatal("first Claim lost")
	}
	if must(t)(s.Claim(ctx, "m")) {
		t.Fatal("second Claim within the TTL won")
	}
	h.Wait(3 * h.Tick)
	if must(t)(s.Seen(ctx, "m")) {
		t.Error("Seen after the TTL passed")
	}
	if !must(t)(s.Claim(ctx, "m")) {
		t.Error("Claim after the TTL passed lost")
	}
}

// claimsNoTTLByDefault is the NoTTLByDefault case of TestClaims.
func claimsNoTTLByDefault(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	must(t)(s.Claim(ctx, "m"))
	h.Wait(3 * h.Tick)
	if !must(t)(s.Seen(ctx, "m")) {
		t.Error("a claim without TTL expired")
	}
}

// claimsDoRunsOnce is the DoRunsOnce case of TestClaims.
func claimsDoRunsOnce(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	calls := 0
	fn := func(context.Context) error { calls++; return nil }
	ran, err := s.Do(ctx, "m", 10*h.Tick, fn)
	if !ran || err != nil {
		t.Fatalf("first Do = %v, %v; want true, nil", ran, err)
	}
	ran, err = s.Do(ctx, "m", 10*h.Tick, fn)
	if ran || err != nil {
		t.Fatalf("duplicate Do = %v, %v; want false, nil", ran, err)
	}
	if calls != 1 {
		t.Errorf("fn ran %d times, want 1", calls)
	}
	if must(t)(s.Claim(ctx, "m")) {
		t.Error("Claim after a committed Do won")
	}
}

// claimsDoCommitUsesTTL is the DoCommitUsesTTL case of TestClaims.
func claimsDoCommitUsesTTL(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t, store.WithTTL(3*h.Tick))
	_, err := s.Do(ctx, "m", 100*h.Tick, func(context.Context) error { return nil })
	noErr(t, err)
	h.Wait(4 * h.Tick)
	if must(t)(s.Seen(ctx, "m")) {
		t.Error("a committed id outlived the store's TTL (the lease's expiry was kept?)")
	}
}

// claimsDoErrorReleases is the DoErrorReleases case of TestClaims.
func claimsDoErrorReleases(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	boom := errors.New("boom")
	ran, err := s.Do(ctx, "m", 10*h.Tick, func(context.Context) error { return boom })
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("Do = %v, %v; want true, boom", ran, err)
	}
	if must(t)(s.Seen(ctx, "m")) {
		t.Error("a failed Do left its claim")
	}
	ran, err = s.Do(ctx, "m", 10*h.Tick, func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Errorf("retry after failure = %v, %v; want true, nil", ran, err)
	}
}

// claimsDoPanicReleases is the DoPanicReleases case of TestClaims.
func claimsDoPanicReleases(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not propagate")
			}
		}()
		_, _ = s.Do(ctx, "m", 10*h.Tick, func(context.Context) error { panic("handler bug") })
	}()
	if must(t)(s.Seen(ctx, "m")) {
		t.Error("a panicking Do left its claim")
	}
}

// claimsDoInFlight is the DoInFlight case of TestClaims.
func claimsDoInFlight(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	ran, err := s.Do(ctx, "m", 10*h.Tick, func(ctx context.Context) error {
		ran, err := s.Do(ctx, "m", 10*h.Tick, func(context.Context) error {
			t.Error("a duplicate ran while the first delivery was in flight")
			return nil
		})
		if ran || !errors.Is(err, store.ErrInFlight) {
			t.Errorf("duplicate Do in flight = %v, %v; want false, ErrInFlight", ran, err)
		}
		// The error says when to come back: the holder's lease time left.
		if err == nil || !strings.Contains(err.Error(), `"m"`) {
			t.Errorf("duplicate Do in flight: %v does not name m", err)
		}
		if d, ok := store.RetryAfter(err); !ok || d <= 0 || d > 10*h.Tick {
			t.Errorf("RetryAfter = %v, %v; want (0, %v], true", d, ok, 10*h.Tick)
		}
		if must(t)(s.Claim(ctx, "m")) {
			t.Error("Claim of an in-flight id won")
		}
		if !must(t)(s.Seen(ctx, "m")) {
			t.Error("Seen of an in-flight id = false")
		}
		return nil
	})
	if !ran || err != nil {
		t.Fatalf("Do = %v, %v", ran, err)
	}
}

// claimsDoLeaseKeptAlive is the DoLeaseKeptAlive case of TestClaims.
func claimsDoLeaseKeptAlive(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	lease := 2 * h.Tick
	ran, err := s.Do(ctx, "m", lease, func(ctx context.Context) error {
		l, ok := store.LeaseFromContext(ctx)
		if !ok || l.ID != "m" || l.Token == "" || l.Fence != 0 {
			t.Errorf("LeaseFromContext = %+v, %v; want id m, a token, fence 0", l, ok)
		}
		// fn runs past its lease; the heartbeat keeps the lease, so a
		// redelivery meanwhile is still in flight.
		h.Wait(lease + h.Tick)
		ran, err := s.Do(ctx, "m", 10*h.Tick, func(context.Context) error {
			t.Error("a redelivery ran while the first holder was alive")
			return nil
		})
		if ran || !errors.Is(err, store.ErrInFlight) {
			t.Errorf("redelivery past the lease = %v, %v; want false, ErrInFlight", ran, err)
		}
		return ctx.Err()
	})
	if !ran || err != nil {
		t.Errorf("long-running holder's Do = %v, %v; want true, nil", ran, err)
	}
	if !must(t)(s.Seen(ctx, "m")) || must(t)(s.Claim(ctx, "m")) {
		t.Error("the commit did not mark the id processed")
	}
	if _, ok := store.LeaseFromContext(ctx); ok {
		t.Error("LeaseFromContext outside fn = true")
	}
}

// claimsDoReportsExtensions is the DoReportsExtensions case of TestClaims.
func claimsDoReportsExtensions(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	// A caller that must keep a broker's redelivery timer at bay (JetStream's
	// InProgress) hears of every successful extension through store.OnExtend,
	// with the lease fn holds, and of none once Do has returned.
	s := newStore(t)
	lease := 9 * h.Tick // beats every 3 ticks: room for a loaded machine
	var mu sync.Mutex
	var heard []store.Lease
	hctx := store.OnExtend(ctx, func(l store.Lease) {
		mu.Lock()
		heard = append(heard, l)
		mu.Unlock()
	})
	var held store.Lease
	ran, err := s.Do(hctx, "m", lease, func(ctx context.Context) error {
		held, _ = store.LeaseFromContext(ctx)
		// Real time, not h.Wait: the heartbeat runs on the real clock.
		time.Sleep(2 * lease) // 8 beats (every lease/4) are due
		return nil
	})
	if !ran || err != nil {
		t.Fatalf("Do = %v, %v; want true, nil", ran, err)
	}
	mu.Lock()
	n := len(heard)
	for _, l := range heard {
		if l != held {
			t.Errorf("OnExtend got lease %+v, want fn's %+v", l, held)
		}
	}
	mu.Unlock()
	if n < 2 {
		t.Errorf("OnExtend was called %d times over 2 leases, want >= 2 (one per extension, every lease/4)", n)
	}
	time.Sleep(lease)
	mu.Lock()
	if len(heard) != n {
		t.Errorf("OnExtend was called %d times after Do returned", len(heard)-n)
	}
	mu.Unlock()
}

// claimsDoContextDeadline is the DoContextDeadline case of TestClaims.
func claimsDoContextDeadline(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	// fn's context reports the local lease deadline: after the claim was
	// sent, at most a lease after it.
	s := newStore(t)
	lease := 10 * h.Tick
	before := time.Now()
	ran, err := s.Do(ctx, "m", lease, func(ctx context.Context) error {
		if d, ok := ctx.Deadline(); !ok || !d.After(before) || d.After(before.Add(lease)) {
			t.Errorf("ctx.Deadline() = +%v, %v; want within (0, lease %v] of the claim", d.Sub(before), ok, lease)
		}
		return ctx.Err()
	})
	if !ran || err != nil {
		t.Errorf("Do = %v, %v", ran, err)
	}
}

// claimsDoCommitAfterForget is the DoCommitAfterForget case of TestClaims.
func claimsDoCommitAfterForget(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	// The key is gone when the commit runs (forgotten; a lease that
	// expired is the same) and nobody took the id: the commit writes the
	// processed mark instead of giving up.
	ran, err := s.Do(ctx, "m", 10*h.Tick, func(ctx context.Context) error { return s.Forget(ctx, "m") })
	if !ran || err != nil {
		t.Errorf("Do = %v, %v; want true, nil", ran, err)
	}
	if !must(t)(s.Seen(ctx, "m")) || must(t)(s.Claim(ctx, "m")) {
		t.Error("the commit on an absent key did not write the processed mark")
	}
}

// claimsDoLeaseLostToAnotherConsumer is the DoLeaseLostToAnotherConsumer case of TestClaims.
func claimsDoLeaseLostToAnotherConsumer(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	ran, err := s.Do(ctx, "m", 10*h.Tick, func(ctx context.Context) error {
		noErr(t, s.Forget(ctx, "m"))
		// Another consumer processes the message meanwhile.
		ran, err := s.Do(context.Background(), "m", 10*h.Tick, func(context.Context) error { return nil })
		if !ran || err != nil {
			t.Errorf("second consumer's Do = %v, %v; want true, nil", ran, err)
		}
		return nil
	})
	if !ran || !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("first consumer's Do = %v, %v; want true, ErrLeaseLost", ran, err)
	}
	if !must(t)(s.Seen(ctx, "m")) {
		t.Error("the id is no longer processed")
	}
}

// claimsDoCancelsFnWhenLeaseLost is the DoCancelsFnWhenLeaseLost case of TestClaims.
func claimsDoCancelsFnWhenLeaseLost(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	ran, err := s.Do(ctx, "m", 3*h.Tick, func(ctx context.Context) error {
		noErr(t, s.Forget(ctx, "m"))
		// The next heartbeat (every lease/3, in real time) finds the lease
		// gone and cancels fn.
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(10 * time.Second):
			t.Error("fn's context was not cancelled after its lease was lost")
			return nil
		}
	})
	if !ran || !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("Do = %v, %v; want true, an error wrapping ErrLeaseLost", ran, err)
	}
	if must(t)(s.Seen(ctx, "m")) {
		t.Error("a failed fn left a mark")
	}
}

// claimsDoOnlyOneOfMany is the DoOnlyOneOfMany case of TestClaims.
func claimsDoOnlyOneOfMany(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	var runs atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Do(ctx, "m", 50*h.Tick, func(context.Context) error {
				runs.Add(1)
				time.Sleep(time.Millisecond)
				return nil
			})
			if err != nil && !errors.Is(err, store.ErrInFlight) {
				t.Errorf("Do: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times across 16 concurrent deliveries, want 1", n)
	}
}

// claimsConcurrentClaimOneWinner is the ConcurrentClaimOneWinner case of TestClaims.
func claimsConcurrentClaimOneWinner(t *testing.T, x *claimsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	for round := range 20 {
		id := fmt.Sprintf("race-%d", round)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				won, err := s.Claim(ctx, id)
				if err != nil {
					t.Errorf("Claim: %v", err)
				}
				if won {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d winners, want 1", round, n)
		}
	}
}

// claimsBadInput is the BadInput case of TestClaims.
func claimsBadInput(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	long := strings.Repeat("x", store.MaxIDLen+1)
	for _, id := range []string{"", long} {
		_, err := s.Claim(ctx, id)
		wantErr(t, err, store.ErrInvalidArgument)
		_, err = s.Seen(ctx, id)
		wantErr(t, err, store.ErrInvalidArgument)
		wantErr(t, s.Remember(ctx, id), store.ErrInvalidArgument)
		wantErr(t, s.Forget(ctx, id), store.ErrInvalidArgument)
		_, err = s.Do(ctx, id, h.Tick, func(context.Context) error { t.Error("fn ran"); return nil })
		wantErr(t, err, store.ErrInvalidArgument)
	}
	for _, lease := range []time.Duration{0, -time.Second} {
		_, err := s.Do(ctx, "m", lease, func(context.Context) error { t.Error("fn ran"); return nil })
		wantErr(t, err, store.ErrInvalidArgument)
	}
	if must(t)(s.Seen(ctx, "m")) {
		t.Error("a refused Do wrote its id")
	}
	if !must(t)(s.Claim(ctx, strings.Repeat("x", store.MaxIDLen))) {
		t.Error("an id of exactly MaxIDLen bytes was refused")
	}
}

// claimsBadOptions is the BadOptions case of TestClaims.
func claimsBadOptions(t *testing.T, x *claimsSuite) {
	h := x.h
	// A bad option, or one that does not apply to claims, fails New.
	for _, opt := range []store.Option{nil, store.WithTTL(-time.Second), store.WithMaxUnacked(1)} {
		s, err := h.New(t, opt)
		wantErr(t, err, store.ErrInvalidArgument)
		if s != nil {
			t.Errorf("New with a bad option returned a store")
		}
	}
}

// claimsCancelledContext is the CancelledContext case of TestClaims.
func claimsCancelledContext(t *testing.T, x *claimsSuite) {
	h, ctx, newStore := x.h, x.ctx, x.newStore
	s := newStore(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := s.Claim(cctx, "m")
	wantErr(t, err, context.Canceled)
	_, err = s.ClaimMany(cctx, []string{"m"})
	wantErr(t, err, context.Canceled)
	_, err = s.Do(cctx, "m", h.Tick, func(context.Context) error { t.Error("fn ran"); return nil })
	wantErr(t, err, context.Canceled)
	if must(t)(s.Seen(ctx, "m")) {
		t.Error("a call with a cancelled context wrote its id")
	}
}

// claimsAnyBytesInIDs is the AnyBytesInIDs case of TestClaims.
func claimsAnyBytesInIDs(t *testing.T, x *claimsSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	ids := []string{"a\x00b", "{tag}", "}{", "a:b:c", "ünï", " ", "a", "A"}
	for _, id := range ids {
		if !must(t)(s.Claim(ctx, id)) {
			t.Errorf("Claim(%q) lost: ids collide", id)
		}
	}
	for _, id := range ids {
		if !must(t)(s.Seen(ctx, id)) {
			t.Errorf("Seen(%q) = false", id)
		}
	}
	if must(t)(s.Seen(ctx, "a\x00")) || must(t)(s.Seen(ctx, "ab")) {
		t.Error("an id matched a different id")
	}
}

// must fails the test on err and returns v.
func must(t *testing.T) func(bool, error) bool {
	return func(v bool, err error) bool {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error = %v, want %v", err, target)
	}
}
