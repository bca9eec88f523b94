package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/redisonce/redisonce/store"
)

// eventLog is a store.Observer that keeps what it hears.
type eventLog struct {
	mu     sync.Mutex
	events []store.Event
}

func (l *eventLog) Observe(_ context.Context, e store.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// take returns the events heard since the last take.
func (l *eventLog) take() []store.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.events
	l.events = nil
	return e
}

// event is what the suites compare of a store.Event: the fields every
// implementation must agree on. Script, Start and Duration are checked by
// checkEvents; Err is compared with errors.Is.
type event struct {
	Op      string
	Outcome store.Outcome
	Key     string
	N       int
	Err     error // nil: none; else errors.Is(e.Err, Err) must hold
}

// anyErr stands for an error that need not be a sentinel (fn's own error).
var anyErr = errors.New("any error")

// checkEvents compares the events l heard since the last call with want, and
// checks what every event must have: the store's name, one non-empty prefix
// for all, a start time, a duration >= 0, and a script that is either none (a
// memory twin, a flow) or the one the operation runs.
func checkEvents(t *testing.T, l *eventLog, storeName string, scripts map[string]string, want ...event) {
	t.Helper()
	got := l.take()
	view := make([]event, len(got))
	for i, e := range got {
		view[i] = event{Op: e.Op, Outcome: e.Outcome, Key: e.Key, N: e.N}
		if i < len(want) && want[i].Err != nil && e.Err != nil &&
			(want[i].Err == anyErr || errors.Is(e.Err, want[i].Err)) {
			view[i].Err = want[i].Err
		} else if e.Err != nil {
			view[i].Err = e.Err
		}
		if e.Store != storeName {
			t.Errorf("event %d (%s): Store = %q, want %q", i, e.Op, e.Store, storeName)
		}
		if e.Prefix == "" || e.Prefix != got[0].Prefix {
			t.Errorf("event %d (%s): Prefix = %q, want the store's prefix (first event: %q)", i, e.Op, e.Prefix, got[0].Prefix)
		}
		if e.Start.IsZero() || e.Duration < 0 {
			t.Errorf("event %d (%s): Start %v, Duration %v", i, e.Op, e.Start, e.Duration)
		}
		if s, ok := scripts[e.Op]; e.Script != "" && (!ok || e.Script != s) {
			t.Errorf("event %d (%s): Script = %q, want %q or none", i, e.Op, e.Script, s)
		}
	}
	if diff := cmp.Diff(want, view, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// claimsScripts is the script each claims operation runs, when it runs one.
var claimsScripts = map[string]string{
	"claim": "claim", "claim_many": "claim_many", "remember": "claim", "seen": "seen", "forget": "forget",
	"seen_many": "seen_many",
	"extend":    "extend",
}

func testClaimsEvents(t *testing.T, newStore func(t *testing.T, opts ...store.Option) *store.Claims, h ClaimsHarness) {
	ctx := context.Background()
	check := func(t *testing.T, l *eventLog, want ...event) {
		t.Helper()
		checkEvents(t, l, "claims", claimsScripts, want...)
	}

	t.Run("Ops", func(t *testing.T) {
		l := &eventLog{}
		s := newStore(t, store.WithObserver(l))
		must(t)(s.Claim(ctx, "m1"))
		must(t)(s.Claim(ctx, "m1"))
		_, err := s.ClaimMany(ctx, []string{"m1", "m2", "m3", "m2"})
		noErr(t, err)
		_, err = s.SeenMany(ctx, []string{"m1", "m9", "m2"})
		noErr(t, err)
		_, err = s.SeenMany(ctx, nil) // sends nothing, reports nothing
		noErr(t, err)
		must(t)(s.Seen(ctx, "m1"))
		must(t)(s.Seen(ctx, "m9"))
		noErr(t, s.Remember(ctx, "m4"))
		noErr(t, s.Remember(ctx, "m4"))
		noErr(t, s.Forget(ctx, "m4"))
		noErr(t, s.Forget(ctx, "m4"))
		_, err = s.Claim(ctx, "")
		wantErr(t, err, store.ErrInvalidArgument)
		_, err = s.ClaimMany(ctx, []string{"ok", ""})
		wantErr(t, err, store.ErrInvalidArgument)
		_, err = s.SeenMany(ctx, []string{"m1", "", "m2"})
		wantErr(t, err, store.ErrInvalidArgument)
		check(t, l,
			event{Op: "claim", Outcome: store.Outcome("claimed"), Key: "m1", N: 1},
			event{Op: "claim", Outcome: store.Outcome("duplicate"), Key: "m1", N: 1},
			event{Op: "claim_many", Outcome: store.Outcome("claimed"), N: 2},
			event{Op: "claim_many", Outcome: store.Outcome("duplicate"), N: 2},
			event{Op: "seen_many", Outcome: store.Outcome("seen"), N: 2},
			event{Op: "seen_many", Outcome: store.Outcome("not_seen"), N: 1},
			event{Op: "seen", Outcome: store.Outcome("seen"), Key: "m1", N: 1},
			event{Op: "seen", Outcome: store.Outcome("not_seen"), Key: "m9", N: 1},
			event{Op: "remember", Outcome: store.Outcome("claimed"), Key: "m4", N: 1},
			event{Op: "remember", Outcome: store.Outcome("duplicate"), Key: "m4", N: 1},
			event{Op: "forget", Outcome: store.Outcome("forgotten"), Key: "m4", N: 1},
			event{Op: "forget", Outcome: store.Outcome("not_found"), Key: "m4", N: 1},
			event{Op: "claim", Outcome: store.Outcome("invalid"), Key: "", N: 1, Err: store.ErrInvalidArgument},
			event{Op: "claim_many", Outcome: store.Outcome("invalid"), N: 2, Err: store.ErrInvalidArgument},
			event{Op: "seen_many", Outcome: store.Outcome("invalid"), N: 3, Err: store.ErrInvalidArgument},
		)
	})

	t.Run("Do", func(t *testing.T) {
		l := &eventLog{}
		s := newStore(t, store.WithObserver(l))
		ok := func(context.Context) error { return nil }
		boom := errors.New("boom")
		lease := 10 * h.Tick
		_, err := s.Do(ctx, "d1", lease, ok)
		noErr(t, err)
		_, err = s.Do(ctx, "d1", lease, ok)
		noErr(t, err)
		_, err = s.Do(ctx, "d2", lease, func(context.Context) error { return boom })
		wantErr(t, err, boom)
		_, err = s.Do(ctx, "d3", lease, func(ctx context.Context) error {
			_, err := s.Do(ctx, "d3", lease, ok)
			wantErr(t, err, store.ErrInFlight)
			_, err = s.Claim(ctx, "d3")
			return err
		})
		noErr(t, err)
		_, err = s.Do(ctx, "d4", lease, func(ctx context.Context) error {
			noErr(t, s.Forget(ctx, "d4"))
			_, err := s.Claim(ctx, "d4") // as another consumer would, once the lease is gone
			return err
		})
		wantErr(t, err, store.ErrLeaseLost)
		_, err = s.Do(ctx, "d5", 0, ok)
		wantErr(t, err, store.ErrInvalidArgument)
		check(t, l,
			event{Op: "do", Outcome: store.Outcome("committed"), Key: "d1", N: 1},
			event{Op: "do", Outcome: store.Outcome("duplicate"), Key: "d1", N: 1},
			event{Op: "do", Outcome: store.Outcome("released"), Key: "d2", N: 1, Err: anyErr},
			event{Op: "do", Outcome: store.Outcome("in_flight"), Key: "d3", N: 1, Err: store.ErrInFlight},
			event{Op: "claim", Outcome: store.Outcome("in_flight"), Key: "d3", N: 1},
			event{Op: "do", Outcome: store.Outcome("committed"), Key: "d3", N: 1},
			event{Op: "forget", Outcome: store.Outcome("forgotten"), Key: "d4", N: 1},
			event{Op: "claim", Outcome: store.Outcome("claimed"), Key: "d4", N: 1},
			event{Op: "do", Outcome: store.Outcome("lease_lost"), Key: "d4", N: 1, Err: store.ErrLeaseLost},
			event{Op: "do", Outcome: store.Outcome("invalid"), Key: "d5", N: 1, Err: store.ErrInvalidArgument},
		)
	})

	// A Do that outlives a third of its lease extends it, and says so; one
	// whose lease is lost hears it from its next extension.
	t.Run("DoExtends", func(t *testing.T) {
		l := &eventLog{}
		s := newStore(t, store.WithObserver(l))
		lease := 3 * h.Tick
		_, err := s.Do(ctx, "e1", lease, func(context.Context) error {
			time.Sleep(lease / 2) // the heartbeat runs on the real clock
			return nil
		})
		noErr(t, err)
		got := l.take()
		if n := len(got); n < 2 || got[n-1].Op != "do" || got[n-1].Outcome != store.Outcome("committed") {
			t.Fatalf("events %+v; want extensions, then do committed", got)
		}
		for _, e := range got[:len(got)-1] {
			if e.Op != "extend" || e.Outcome != store.Outcome("extended") || e.Key != "e1" || e.Err != nil {
				t.Errorf("event %+v; want extend e1 extended", e)
			}
		}

		_, err = s.Do(ctx, "e2", lease, func(ctx context.Context) error {
			noErr(t, s.Forget(ctx, "e2"))
			<-ctx.Done() // cancelled by the extension that finds the lease gone
			return context.Cause(ctx)
		})
		wantErr(t, err, store.ErrLeaseLost)
		check(t, l,
			event{Op: "forget", Outcome: store.Outcome("forgotten"), Key: "e2", N: 1},
			event{Op: "extend", Outcome: store.Outcome("lease_lost"), Key: "e2", N: 1},
			event{Op: "do", Outcome: store.Outcome("released"), Key: "e2", N: 1, Err: store.ErrLeaseLost},
		)
	})
}

// outboxScripts is the script each outbox operation runs.
var outboxScripts = map[string]string{
	"append": "append", "unacked": "unacked", "tail": "unacked", "ack": "ack", "ack_many": "ack",
	"advance": "advance", "drop": "drop", "append_many": "append_many",
}

func testOutboxEvents(t *testing.T, newStore func(t *testing.T, opts ...store.Option) *store.Outbox) {
	ctx := context.Background()
	l := &eventLog{}
	s := newStore(t, store.WithObserver(l), store.WithMaxUnacked(2))
	id1, _, err := s.Append(ctx, "c1", []byte("p1"))
	noErr(t, err)
	_, err = s.AppendWithID(ctx, "c1", "m2", []byte("p2"))
	noErr(t, err)
	_, err = s.AppendWithID(ctx, "c1", "m2", []byte("p2"))
	noErr(t, err)
	_, err = s.AppendWithID(ctx, "c1", "m3", []byte("p3"))
	wantErr(t, err, store.ErrOutboxFull)
	_, err = s.Unacked(ctx, "c1")
	noErr(t, err)
	_, err = s.Tail(ctx, "c2")
	noErr(t, err)
	noErr(t, s.Ack(ctx, "c1", "m2", 1))
	noErr(t, s.Ack(ctx, "c1", "m2", 1))
	_, err = s.AckMany(ctx, "c1", []string{id1, "m9", "m8"}, 1)
	noErr(t, err)
	_, err = s.AckMany(ctx, "c1", nil, 1) // sends nothing, reports nothing
	noErr(t, err)
	wantErr(t, s.Ack(ctx, "c1", "m2", 0), store.ErrStaleOwner)
	noErr(t, s.AdvanceGeneration(ctx, "c1", 5))
	noErr(t, s.AdvanceGeneration(ctx, "c1", 5))
	noErr(t, s.DropConn(ctx, "c1"))
	noErr(t, s.DropConn(ctx, "c1"))
	_, _, err = s.Append(ctx, "", []byte("p"))
	wantErr(t, err, store.ErrInvalidArgument)
	_, err = s.AppendMany(ctx, "c3", []store.Outgoing{{ID: "a"}, {ID: "b"}})
	noErr(t, err)
	_, err = s.AppendMany(ctx, "c3", []store.Outgoing{{ID: "a"}, {ID: "x"}}) // 3 do not fit under 2
	wantErr(t, err, store.ErrOutboxFull)
	_, err = s.AppendMany(ctx, "c3", []store.Outgoing{{ID: "b"}, {ID: "a"}})
	noErr(t, err)
	_, err = s.AppendMany(ctx, "c3", nil) // sends nothing, reports nothing
	noErr(t, err)
	noErr(t, s.Ack(ctx, "c3", "a", 0))
	_, err = s.AppendMany(ctx, "c3", []store.Outgoing{{ID: "b"}, {ID: "y"}})
	noErr(t, err)
	_, err = s.AppendMany(ctx, "c3", []store.Outgoing{{ID: "_bad"}})
	wantErr(t, err, store.ErrInvalidArgument)
	checkEvents(t, l, "outbox", outboxScripts,
		event{Op: "append", Outcome: store.Outcome("appended"), Key: "c1", N: 1},
		event{Op: "append", Outcome: store.Outcome("appended"), Key: "c1", N: 1},
		event{Op: "append", Outcome: store.Outcome("retried_append"), Key: "c1", N: 1},
		event{Op: "append", Outcome: store.Outcome("full"), Key: "c1", N: 1, Err: store.ErrOutboxFull},
		event{Op: "unacked", Outcome: store.Outcome("read"), Key: "c1", N: 1},
		event{Op: "tail", Outcome: store.Outcome("read"), Key: "c2", N: 1},
		event{Op: "ack", Outcome: store.Outcome("acked"), Key: "c1", N: 1},
		event{Op: "ack", Outcome: store.Outcome("not_found"), Key: "c1", N: 1},
		event{Op: "ack_many", Outcome: store.Outcome("acked"), Key: "c1", N: 1},
		event{Op: "ack_many", Outcome: store.Outcome("not_found"), Key: "c1", N: 2},
		event{Op: "ack", Outcome: store.Outcome("stale_owner"), Key: "c1", N: 1, Err: store.ErrStaleOwner},
		event{Op: "advance", Outcome: store.Outcome("advanced"), Key: "c1", N: 1},
		event{Op: "advance", Outcome: store.Outcome("unchanged"), Key: "c1", N: 1},
		event{Op: "drop", Outcome: store.Outcome("dropped"), Key: "c1", N: 1},
		event{Op: "drop", Outcome: store.Outcome("not_found"), Key: "c1", N: 1},
		event{Op: "append", Outcome: store.Outcome("invalid"), Key: "", N: 1, Err: store.ErrInvalidArgument},
		event{Op: "append_many", Outcome: store.Outcome("appended"), Key: "c3", N: 2},
		event{Op: "append_many", Outcome: store.Outcome("full"), Key: "c3", N: 2, Err: store.ErrOutboxFull},
		event{Op: "append_many", Outcome: store.Outcome("retried_append"), Key: "c3", N: 2},
		event{Op: "ack", Outcome: store.Outcome("acked"), Key: "c3", N: 1},
		event{Op: "append_many", Outcome: store.Outcome("appended"), Key: "c3", N: 1},
		event{Op: "append_many", Outcome: store.Outcome("retried_append"), Key: "c3", N: 1},
		event{Op: "append_many", Outcome: store.Outcome("invalid"), Key: "c3", N: 1, Err: store.ErrInvalidArgument},
	)
}

// recordsScripts is the script each records operation runs.
var recordsScripts = map[string]string{
	"acquire": "acquire", "get": "get", "update": "update", "delete": "delete", "extend": "renew",
}

func testRecordsEvents(t *testing.T, newStore func(t *testing.T, opts ...store.Option) *store.Records, h RecordsHarness) {
	ctx := context.Background()
	check := func(t *testing.T, l *eventLog, want ...event) {
		t.Helper()
		checkEvents(t, l, "records", recordsScripts, want...)
	}

	t.Run("Ops", func(t *testing.T) {
		l := &eventLog{}
		s := newStore(t, store.WithObserver(l))
		o := store.AcquireOptions{Lease: 2 * h.Tick, Fingerprint: "f1"}
		first := mustAcquire(t, s, "k1", o, true)
		mustAcquire(t, s, "k1", o, false)
		_, _, err := s.AcquireWith(ctx, "k1", store.AcquireOptions{Lease: 2 * h.Tick, Fingerprint: "f2"})
		wantErr(t, err, store.ErrFingerprintMismatch)
		h.Wait(3 * h.Tick)
		second := mustAcquire(t, s, "k1", o, true)
		mustGet(t, s, "k1", true)
		mustGet(t, s, "k9", false)
		done := store.StatusCompleted
		wantErr(t, s.Update(ctx, "k1", store.Update{Status: &done, Token: first.Token}), store.ErrStaleOwner)
		noErr(t, s.Update(ctx, "k1", store.Update{Status: &done, Token: second.Token}))
		wantErr(t, s.Update(ctx, "k9", store.Update{Status: &done}), store.ErrNotFound)
		wantErr(t, s.DeleteFenced(ctx, "k1", first.Token), store.ErrStaleOwner)
		noErr(t, s.DeleteFenced(ctx, "k1", second.Token))
		noErr(t, s.Delete(ctx, "k1"))
		_, _, err = s.Acquire(ctx, "k2", 0)
		noErr(t, err)
		noErr(t, s.Delete(ctx, "k2"))
		_, _, err = s.Get(ctx, "")
		wantErr(t, err, store.ErrInvalidArgument)
		check(t, l,
			event{Op: "acquire", Outcome: store.Outcome("acquired"), Key: "k1", N: 1},
			event{Op: "acquire", Outcome: store.Outcome("existing"), Key: "k1", N: 1},
			event{Op: "acquire", Outcome: store.Outcome("mismatch"), Key: "k1", N: 1, Err: store.ErrFingerprintMismatch},
			event{Op: "acquire", Outcome: store.Outcome("taken_over"), Key: "k1", N: 1},
			event{Op: "get", Outcome: store.Outcome("read"), Key: "k1", N: 1},
			event{Op: "get", Outcome: store.Outcome("not_found"), Key: "k9", N: 1},
			event{Op: "update", Outcome: store.Outcome("stale_owner"), Key: "k1", N: 1, Err: store.ErrStaleOwner},
			event{Op: "update", Outcome: store.Outcome("updated"), Key: "k1", N: 1},
			event{Op: "update", Outcome: store.Outcome("not_found"), Key: "k9", N: 1, Err: store.ErrNotFound},
			event{Op: "delete", Outcome: store.Outcome("stale_owner"), Key: "k1", N: 1, Err: store.ErrStaleOwner},
			event{Op: "delete", Outcome: store.Outcome("deleted"), Key: "k1", N: 1},
			event{Op: "delete", Outcome: store.Outcome("not_found"), Key: "k1", N: 1},
			event{Op: "acquire", Outcome: store.Outcome("acquired"), Key: "k2", N: 1},
			event{Op: "delete", Outcome: store.Outcome("deleted"), Key: "k2", N: 1},
			event{Op: "get", Outcome: store.Outcome("invalid"), Key: "", N: 1, Err: store.ErrInvalidArgument},
		)
	})

	t.Run("Do", func(t *testing.T) {
		l := &eventLog{}
		s := newStore(t, store.WithObserver(l))
		o := store.AcquireOptions{Lease: 10 * h.Tick, Fingerprint: "f1"}
		ok := func(context.Context) ([]byte, error) { return []byte("r"), nil }
		boom := errors.New("boom")
		_, _, err := s.Do(ctx, "d1", o, ok)
		noErr(t, err)
		_, _, err = s.Do(ctx, "d1", o, ok)
		noErr(t, err)
		_, _, err = s.Do(ctx, "d2", o, func(context.Context) ([]byte, error) { return nil, boom })
		wantErr(t, err, boom)
		_, _, err = s.Do(ctx, "d3", o, func(context.Context) ([]byte, error) { return nil, store.Permanent(boom) })
		wantErr(t, err, boom)
		_, _, err = s.Do(ctx, "d3", o, ok)
		wantErr(t, err, store.ErrFailed)
		_, _, err = s.Do(ctx, "d4", o, func(ctx context.Context) ([]byte, error) {
			_, _, err := s.Do(ctx, "d4", o, ok)
			wantErr(t, err, store.ErrInFlight)
			return nil, nil
		})
		noErr(t, err)
		_, _, err = s.Do(ctx, "d5", store.AcquireOptions{}, ok)
		wantErr(t, err, store.ErrInvalidArgument)
		_, _, err = s.Do(ctx, "d6", o, func(ctx context.Context) ([]byte, error) {
			noErr(t, s.Delete(ctx, "d6"))
			mustAcquire(t, s, "d6", o, true) // another caller owns it now
			return []byte("r"), nil
		})
		wantErr(t, err, store.ErrStaleOwner)
		_, _, err = s.Do(ctx, "d1", store.AcquireOptions{Lease: o.Lease, Fingerprint: "other"}, ok)
		wantErr(t, err, store.ErrFingerprintMismatch)
		mustAcquire(t, s, "d7", store.AcquireOptions{Lease: 2 * h.Tick, Fingerprint: "f1"}, true) // an owner that dies
		h.Wait(3 * h.Tick)
		_, _, err = s.Do(ctx, "d7", o, ok)
		noErr(t, err)
		check(t, l,
			event{Op: "do", Outcome: store.Outcome("completed"), Key: "d1", N: 1},
			event{Op: "do", Outcome: store.Outcome("replayed"), Key: "d1", N: 1},
			event{Op: "do", Outcome: store.Outcome("released"), Key: "d2", N: 1, Err: anyErr},
			event{Op: "do", Outcome: store.Outcome("failed"), Key: "d3", N: 1, Err: anyErr},
			event{Op: "do", Outcome: store.Outcome("replayed"), Key: "d3", N: 1, Err: store.ErrFailed},
			event{Op: "do", Outcome: store.Outcome("in_flight"), Key: "d4", N: 1, Err: store.ErrInFlight},
			event{Op: "do", Outcome: store.Outcome("completed"), Key: "d4", N: 1},
			event{Op: "do", Outcome: store.Outcome("invalid"), Key: "d5", N: 1, Err: store.ErrInvalidArgument},
			event{Op: "delete", Outcome: store.Outcome("deleted"), Key: "d6", N: 1},
			event{Op: "acquire", Outcome: store.Outcome("acquired"), Key: "d6", N: 1},
			event{Op: "do", Outcome: store.Outcome("stale_owner"), Key: "d6", N: 1, Err: store.ErrStaleOwner},
			event{Op: "do", Outcome: store.Outcome("mismatch"), Key: "d1", N: 1, Err: store.ErrFingerprintMismatch},
			event{Op: "acquire", Outcome: store.Outcome("acquired"), Key: "d7", N: 1},
			event{Op: "acquire", Outcome: store.Outcome("taken_over"), Key: "d7", N: 1},
			event{Op: "do", Outcome: store.Outcome("completed"), Key: "d7", N: 1},
		)
	})

	// A Do that outlives a third of its lease renews it, and says so; one
	// whose record is lost hears it from its next renewal.
	t.Run("DoExtends", func(t *testing.T) {
		l := &eventLog{}
		s := newStore(t, store.WithObserver(l))
		o := store.AcquireOptions{Lease: 3 * h.Tick}
		_, _, err := s.Do(ctx, "e1", o, func(context.Context) ([]byte, error) {
			time.Sleep(o.Lease / 2) // the heartbeat runs on the real clock
			return nil, nil
		})
		noErr(t, err)
		got := l.take()
		if n := len(got); n < 2 || got[n-1].Op != "do" || got[n-1].Outcome != store.Outcome("completed") {
			t.Fatalf("events %+v; want renewals, then do completed", got)
		}
		for _, e := range got[:len(got)-1] {
			if e.Op != "extend" || e.Outcome != store.Outcome("extended") || e.Key != "e1" || e.Err != nil {
				t.Errorf("event %+v; want extend e1 extended", e)
			}
		}

		_, _, err = s.Do(ctx, "e2", o, func(ctx context.Context) ([]byte, error) {
			noErr(t, s.Delete(ctx, "e2"))
			<-ctx.Done() // cancelled by the renewal that finds the record gone
			return nil, context.Cause(ctx)
		})
		wantErr(t, err, store.ErrStaleOwner)
		check(t, l,
			event{Op: "delete", Outcome: store.Outcome("deleted"), Key: "e2", N: 1},
			event{Op: "extend", Outcome: store.Outcome("stale_owner"), Key: "e2", N: 1},
			event{Op: "do", Outcome: store.Outcome("released"), Key: "e2", N: 1, Err: store.ErrStaleOwner},
		)
	})
}
