package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
)

// The batched lease engine (Claims.Batch, Batch.Do, Batch.Close): every
// property of Do, held per id when many ids share script calls.
func init() {
	claimsCases = append(claimsCases, []struct {
		name string
		run  func(*testing.T, *claimsSuite)
	}{
		{"BatchPerIDOutcomes", claimsBatchPerIDOutcomes},
		{"BatchInFlight", claimsBatchInFlight},
		{"BatchCloseGivesBack", claimsBatchCloseGivesBack},
		{"BatchDoneContextGivesBack", claimsBatchDoneContextGivesBack},
		{"BatchConcurrentOnce", claimsBatchConcurrentOnce},
		{"BatchLeaseLostOneID", claimsBatchLeaseLostOneID},
		{"BatchKeptAlive", claimsBatchKeptAlive},
		{"BatchBadInput", claimsBatchBadInput},
		{"BatchOnExtend", claimsBatchOnExtend},
		{"BatchIdleGivenBack", claimsBatchIdleGivenBack},
	}...)
}

// claimsBatchPerIDOutcomes: one Batch of ids with different fates; each id
// gets its own lease (token, fence) and its own outcome, and a repeated id
// is claimed once (first wins).
func claimsBatchPerIDOutcomes(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	if _, err := s.Claim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	b, err := s.Batch(ctx, []string{"a", "b", "c", "a", "d"}, 10*time.Second)
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	defer b.Close()
	leases := map[string]store.Lease{}
	run := func(id string, fail error) (bool, error) {
		return b.Do(ctx, id, func(ctx context.Context) error {
			l, ok := store.LeaseFromContext(ctx)
			if !ok || l.ID != id || l.Fence == 0 || l.Token == "" {
				t.Errorf("Do(%s): lease %+v, %v", id, l, ok)
			}
			leases[id] = l
			return fail
		})
	}
	if ran, err := run("a", nil); !ran || err != nil {
		t.Errorf("Do(a) = %v, %v; want true, nil", ran, err)
	}
	if ran, err := run("b", nil); ran || err != nil {
		t.Errorf("Do(b), processed before = %v, %v; want false, nil", ran, err)
	}
	boom := errors.New("boom")
	if ran, err := run("c", boom); !ran || !errors.Is(err, boom) {
		t.Errorf("Do(c) failing = %v, %v; want true, boom", ran, err)
	}
	if ran, err := run("a", nil); ran || err != nil {
		t.Errorf("Do(a) again = %v, %v; want false, nil (first wins)", ran, err)
	}
	if ran, err := run("d", nil); !ran || err != nil {
		t.Errorf("Do(d) = %v, %v; want true, nil", ran, err)
	}
	if leases["a"].Token == leases["d"].Token || leases["a"].Fence == leases["d"].Fence {
		t.Errorf("a and d share a token or a fence: %+v %+v", leases["a"], leases["d"])
	}
	// c failed: only c was given back; a and d are processed.
	for id, want := range map[string]bool{"a": false, "c": true, "d": false} {
		if got, err := s.Claim(ctx, id); err != nil || got != want {
			t.Errorf("Claim(%s) after the batch = %v, %v; want %v", id, got, err, want)
		}
	}
}

// claimsBatchInFlight: an id another Do holds is in flight for the Batch,
// and fn does not run.
func claimsBatchInFlight(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	hold, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Do(ctx, "x", 10*time.Second, func(context.Context) error { close(hold); <-release; return nil })
	}()
	<-hold
	b, err := s.Batch(ctx, []string{"x"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ran, err := b.Do(ctx, "x", func(context.Context) error { t.Error("fn ran on an id in flight"); return nil })
	if ran || !errors.Is(err, store.ErrInFlight) {
		t.Errorf("Do(x) in flight = %v, %v; want false, ErrInFlight", ran, err)
	}
	if d, ok := store.RetryAfter(err); !ok || d <= 0 || d > 10*time.Second {
		t.Errorf("RetryAfter = %v, %v; want the holder's lease left", d, ok)
	}
	close(release)
	<-done
	noErr(t, b.Close())
}

// claimsBatchCloseGivesBack: Close releases the leases no Do ran, at once.
func claimsBatchCloseGivesBack(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	b, err := s.Batch(ctx, []string{"p", "q", "r"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ran, err := b.Do(ctx, "p", func(context.Context) error { return nil }); !ran || err != nil {
		t.Fatalf("Do(p) = %v, %v", ran, err)
	}
	// Held, not run: another caller finds q in flight.
	if ran, err := s.Do(ctx, "q", time.Second, func(context.Context) error { return nil }); ran || !errors.Is(err, store.ErrInFlight) {
		t.Errorf("Do(q) while the batch holds it = %v, %v; want ErrInFlight", ran, err)
	}
	noErr(t, b.Close())
	for id, want := range map[string]bool{"p": false, "q": true, "r": true} {
		if got, err := s.Claim(ctx, id); err != nil || got != want {
			t.Errorf("Claim(%s) after Close = %v, %v; want %v", id, got, err, want)
		}
	}
	// A Do after Close claims its id again (processed now).
	if ran, err := b.Do(ctx, "q", func(context.Context) error { return nil }); ran || err != nil {
		t.Errorf("Do(q) after Close = %v, %v; want false, nil", ran, err)
	}
}

// claimsBatchDoneContextGivesBack: a Do called with a done ctx gives its
// id's lease back and does not run fn.
func claimsBatchDoneContextGivesBack(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	b, err := s.Batch(ctx, []string{"e"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ran, err := b.Do(cctx, "e", func(context.Context) error { t.Error("fn ran"); return nil })
	if ran || !errors.Is(err, context.Canceled) {
		t.Errorf("Do with a done ctx = %v, %v; want false, context.Canceled", ran, err)
	}
	if got, err := s.Claim(ctx, "e"); err != nil || !got {
		t.Errorf("Claim(e) after the give-back = %v, %v; want true", got, err)
	}
	noErr(t, b.Close())
}

// claimsBatchConcurrentOnce: many goroutines over two Batches that share ids
// run each id's fn exactly once, and every id ends processed.
func claimsBatchConcurrentOnce(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	const n = 120
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("{g%d}id%d", i%3, i)
	}
	runs := make([]atomic.Int32, n)
	var wg sync.WaitGroup
	for range 2 {
		b, err := s.Batch(ctx, ids, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			wg.Go(func() {
				for {
					_, err := b.Do(ctx, id, func(context.Context) error { runs[i].Add(1); return nil })
					if !errors.Is(err, store.ErrInFlight) {
						noErr(t, err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
		defer func() { noErr(t, b.Close()) }()
	}
	wg.Wait()
	for i := range runs {
		if got := runs[i].Load(); got != 1 {
			t.Errorf("%s ran %d times, want 1", ids[i], got)
		}
	}
	seen, err := s.SeenMany(ctx, ids)
	noErr(t, err)
	for i, ok := range seen {
		if !ok {
			t.Errorf("%s not processed", ids[i])
		}
	}
}

// claimsBatchLeaseLostOneID: of three ids run at once, one loses its lease
// to another consumer mid-run (forgotten and claimed): only that id's Do
// reports ErrLeaseLost; the others commit.
func claimsBatchLeaseLostOneID(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	b, err := s.Batch(ctx, []string{"l1", "l2", "l3"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	errs := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	started := make(chan struct{}, 3)
	taken := make(chan struct{})
	for _, id := range []string{"l1", "l2", "l3"} {
		wg.Go(func() {
			_, err := b.Do(ctx, id, func(context.Context) error { started <- struct{}{}; <-taken; return nil })
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		})
	}
	for range 3 {
		<-started
	}
	noErr(t, s.Forget(ctx, "l2"))
	if ok, err := s.Claim(ctx, "l2"); !ok || err != nil {
		t.Fatalf("the other consumer's Claim(l2) = %v, %v", ok, err)
	}
	close(taken)
	wg.Wait()
	if !errors.Is(errs["l2"], store.ErrLeaseLost) {
		t.Errorf("Do(l2) = %v; want ErrLeaseLost", errs["l2"])
	}
	if errs["l1"] != nil || errs["l3"] != nil {
		t.Errorf("Do(l1), Do(l3) = %v, %v; want nil (another id's loss is not theirs)", errs["l1"], errs["l3"])
	}
}

// claimsBatchKeptAlive: a fn that runs for several leases keeps its id,
// through the gathered extensions, while another caller tries to take it.
func claimsBatchKeptAlive(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	lease := 4 * x.h.Tick
	b, err := s.Batch(ctx, []string{"k"}, lease)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var others atomic.Int32
	ran, err := b.Do(ctx, "k", func(fctx context.Context) error {
		for end := time.Now().Add(3 * lease); time.Now().Before(end); {
			x.h.Wait(lease / 4)
			if ok, _ := s.Do(ctx, "k", lease, func(context.Context) error { return nil }); ok {
				others.Add(1)
			}
			if fctx.Err() != nil {
				return fctx.Err()
			}
		}
		return nil
	})
	if !ran || err != nil || others.Load() != 0 {
		t.Errorf("Do(k) = %v, %v with %d other runs; want true, nil, 0", ran, err, others.Load())
	}
}

// claimsBatchBadInput: a bad id, lease or context is refused before
// anything is written.
func claimsBatchBadInput(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	cases := map[string]func() error{
		"empty id": func() error { _, err := s.Batch(ctx, []string{"ok1", ""}, time.Second); return err },
		"long id": func() error {
			_, err := s.Batch(ctx, []string{"ok1", string(make([]byte, store.MaxIDLen+1))}, time.Second)
			return err
		},
		"zero lease": func() error { _, err := s.Batch(ctx, []string{"ok1"}, 0); return err },
		"nil ctx": func() error {
			_, err := s.Batch(nil, []string{"ok1"}, time.Second) //nolint:staticcheck // the nil context is the point
			return err
		},
	}
	for name, f := range cases {
		wantErr(t, f(), store.ErrInvalidArgument)
		if seen, err := s.Seen(ctx, "ok1"); err != nil || seen {
			t.Errorf("%s: ok1 was written (Seen %v, %v)", name, seen, err)
		}
	}
	b, err := s.Batch(ctx, nil, time.Second)
	noErr(t, err)
	_, err = b.Do(ctx, "ok1", nil)
	wantErr(t, err, store.ErrInvalidArgument)
	_, err = b.Do(ctx, "", func(context.Context) error { return nil })
	wantErr(t, err, store.ErrInvalidArgument)
	var nb *store.Batch
	_, err = nb.Do(ctx, "ok1", func(context.Context) error { return nil })
	wantErr(t, err, store.ErrInvalidArgument)
	var ns *store.Claims
	_, err = ns.Batch(ctx, []string{"ok1"}, time.Second)
	wantErr(t, err, store.ErrInvalidArgument)
	if seen, err := s.Seen(ctx, "ok1"); err != nil || seen {
		t.Errorf("ok1 was written (Seen %v, %v)", seen, err)
	}
}

// claimsBatchOnExtend: Do's ctx's OnExtend hook is called after the
// gathered extensions of the lease Claims.Batch took, with that lease.
func claimsBatchOnExtend(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	lease := 4 * x.h.Tick
	b, err := s.Batch(ctx, []string{"o"}, lease)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mu sync.Mutex
	var got []store.Lease
	hctx := store.OnExtend(ctx, func(l store.Lease) { mu.Lock(); got = append(got, l); mu.Unlock() })
	var held store.Lease
	ran, err := b.Do(hctx, "o", func(ctx context.Context) error {
		held, _ = store.LeaseFromContext(ctx)
		time.Sleep(2 * lease) // real time: the heartbeat runs on the real clock
		return ctx.Err()
	})
	if !ran || err != nil {
		t.Fatalf("Do = %v, %v", ran, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("OnExtend never called through two leases")
	}
	for _, l := range got {
		if l != held {
			t.Errorf("OnExtend got %+v, want the lease fn holds %+v", l, held)
		}
	}
}

// claimsBatchIdleGivenBack: a lease Claims.Batch took that no Do runs is
// kept for a lease, then given back: another caller can take the id.
func claimsBatchIdleGivenBack(t *testing.T, x *claimsSuite) {
	ctx, s := x.ctx, x.newStore(t)
	lease := 3 * x.h.Tick
	b, err := s.Batch(ctx, []string{"i"}, lease)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if ran, err := s.Do(ctx, "i", lease, func(context.Context) error { return nil }); ran || !errors.Is(err, store.ErrInFlight) {
		t.Errorf("Do(i) while the batch holds it = %v, %v; want ErrInFlight", ran, err)
	}
	var ran bool
	for end := time.Now().Add(20 * lease); !ran && time.Now().Before(end); {
		time.Sleep(x.h.Tick / 2) // real time: the idle timer runs on the real clock
		ran, err = s.Do(ctx, "i", lease, func(context.Context) error { return nil })
		if err != nil && !errors.Is(err, store.ErrInFlight) {
			t.Fatal(err)
		}
	}
	if !ran {
		t.Fatalf("the idle lease was never given back")
	}
	// The Batch's Do claims again, and finds it processed.
	if ran, err := b.Do(ctx, "i", func(context.Context) error { return nil }); ran || err != nil {
		t.Errorf("the Batch's Do after the give-back = %v, %v; want false, nil", ran, err)
	}
}
