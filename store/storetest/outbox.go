package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/redisonce/redisonce/store"
)

// OutboxHarness tells TestOutbox how to make and age a store under test.
type OutboxHarness struct {
	// New returns an empty store with opts applied, isolated from every other
	// store New returns (a fresh prefix or database). The suite closes it.
	New func(t *testing.T, opts ...store.Option) (*store.Outbox, error)
	// Wait lets d pass for the stores New returns: time.Sleep for a store on a
	// real clock, Clock.Advance for a fake one.
	Wait func(d time.Duration)
	// Tick is a duration long enough for the implementation to expire a key
	// reliably (Redis: 100ms); TTLs in the suite are multiples of it.
	Tick time.Duration
}

// TestOutbox runs the outbox contract against h's stores.
func TestOutbox(t *testing.T, h OutboxHarness) {
	if h.Tick <= 0 {
		h.Tick = 100 * time.Millisecond
	}
	x := &outboxSuite{h: h, ctx: context.Background()}
	for _, c := range outboxCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, x) })
	}
}

// outboxSuite is what every case of TestOutbox gets: the harness, and the
// helpers built on it.
type outboxSuite struct {
	h   OutboxHarness
	ctx context.Context
}

// newStore returns a new store of the harness, closed when t ends.
func (x *outboxSuite) newStore(t *testing.T, opts ...store.Option) *store.Outbox {
	t.Helper()
	s, err := x.h.New(t, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// appendAll appends payloads to conn under the ids "m1", "m2"... and checks
// each was created.
func (x *outboxSuite) appendAll(t *testing.T, s *store.Outbox, conn string, payloads ...string) []store.Appended {
	t.Helper()
	out := make([]store.Appended, len(payloads))
	for i, p := range payloads {
		a, err := s.AppendWithID(x.ctx, conn, fmt.Sprintf("m%d", i+1), []byte(p))
		noErr(t, err)
		if !a.Created {
			t.Fatalf("AppendWithID(m%d) on a new id: Created = false", i+1)
		}
		out[i] = a
	}
	return out
}

// tail is conn's Tail.
func (x *outboxSuite) tail(t *testing.T, s *store.Outbox, conn string) store.Tail {
	t.Helper()
	tl, err := s.Tail(x.ctx, conn)
	noErr(t, err)
	return tl
}

// wantTail compares conn's unacked messages with want, "id=payload@seq".
func (x *outboxSuite) wantTail(t *testing.T, s *store.Outbox, conn string, want ...string) {
	t.Helper()
	msgs, err := s.Unacked(x.ctx, conn)
	noErr(t, err)
	got := make([]string, len(msgs))
	for i, m := range msgs {
		got[i] = fmt.Sprintf("%s=%s@%d", m.ID, m.Payload, m.Seq)
	}
	if want == nil {
		want = []string{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Unacked(%q) (-want +got):\n%s", conn, diff)
	}
}

// outboxCases are TestOutbox' cases, in order: each a named function.
var outboxCases = []struct {
	name string
	run  func(*testing.T, *outboxSuite)
}{
	{"Events", outboxEvents},
	{"AppendUnackedInOrder", outboxAppendUnackedInOrder},
	{"MintedIDs", outboxMintedIDs},
	{"UnknownConnIsEmpty", outboxUnknownConnIsEmpty},
	{"AckRemoves", outboxAckRemoves},
	{"SeqContinuesAfterDrain", outboxSeqContinuesAfterDrain},
	{"AckFencing", outboxAckFencing},
	{"AckUnknownConnCreatesNothing", outboxAckUnknownConnCreatesNothing},
	{"AdvanceGeneration", outboxAdvanceGeneration},
	{"AdvanceBeforeFirstAppend", outboxAdvanceBeforeFirstAppend},
	{"GenerationsFullUint64", outboxGenerationsFullUint64},
	{"AppendWithIDIdempotent", outboxAppendWithIDIdempotent},
	{"MaxUnacked", outboxMaxUnacked},
	{"AppendMany", outboxAppendMany},
	{"AppendManyAllOrNothing", outboxAppendManyAllOrNothing},
	{"AckMany", outboxAckMany},
	{"AckManyLarge", outboxAckManyLarge},
	{"DropConn", outboxDropConn},
	{"EpochPerIncarnation", outboxEpochPerIncarnation},
	{"TTL", outboxTTL},
	{"AdvanceRearmsTTL", outboxAdvanceRearmsTTL},
	{"NoTTLByDefault", outboxNoTTLByDefault},
	{"BinaryPayloads", outboxBinaryPayloads},
	{"MessageIDs", outboxMessageIDs},
	{"AnyBytesInConnIDs", outboxAnyBytesInConnIDs},
	{"BadInput", outboxBadInput},
	{"BadOptions", outboxBadOptions},
	{"CancelledContext", outboxCancelledContext},
	{"ReconnectElsewhere", outboxReconnectElsewhere},
	{"ConcurrentAppends", outboxConcurrentAppends},
	{"TakeoverRace", outboxTakeoverRace},
}

// outboxEvents is the Events case of TestOutbox.
func outboxEvents(t *testing.T, x *outboxSuite) {
	newStore := x.newStore
	testOutboxEvents(t, newStore)
}

// outboxAppendUnackedInOrder is the AppendUnackedInOrder case of TestOutbox.
func outboxAppendUnackedInOrder(t *testing.T, x *outboxSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	var ids []string
	for i := 1; i <= 5; i++ {
		id, seq, err := s.Append(ctx, "c1", []byte(fmt.Sprintf("p%d", i)))
		noErr(t, err)
		if seq != uint64(i) {
			t.Errorf("Append #%d: seq = %d, want %d", i, seq, i)
		}
		ids = append(ids, id)
	}
	msgs, err := s.Unacked(ctx, "c1")
	noErr(t, err)
	var want []store.Message
	for i, id := range ids {
		want = append(want, store.Message{ID: id, Seq: uint64(i + 1), Payload: []byte(fmt.Sprintf("p%d", i+1))})
	}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("Unacked (-want +got):\n%s", diff)
	}
	// Connections are independent: each has its own seq line.
	_, seq, err := s.Append(ctx, "c2", []byte("x"))
	noErr(t, err)
	if seq != 1 {
		t.Errorf("first Append on another connection: seq = %d, want 1", seq)
	}
}

// outboxMintedIDs is the MintedIDs case of TestOutbox.
func outboxMintedIDs(t *testing.T, x *outboxSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for range 50 {
		id, _, err := s.Append(ctx, "c", nil)
		noErr(t, err)
		if !hex32.MatchString(id) {
			t.Errorf("minted id %q is not 32 lower-case hex characters", id)
		}
		if seen[id] {
			t.Errorf("minted id %q twice", id)
		}
		seen[id] = true
	}
}

// outboxUnknownConnIsEmpty is the UnknownConnIsEmpty case of TestOutbox.
func outboxUnknownConnIsEmpty(t *testing.T, x *outboxSuite) {
	ctx, newStore, tail := x.ctx, x.newStore, x.tail
	s := newStore(t)
	msgs, err := s.Unacked(ctx, "ghost")
	noErr(t, err)
	if len(msgs) != 0 {
		t.Errorf("Unacked of an unknown connection = %v", msgs)
	}
	if diff := cmp.Diff(store.Tail{}, tail(t, s, "ghost")); diff != "" {
		t.Errorf("Tail of an unknown connection (-want +got):\n%s", diff)
	}
}

// outboxAckRemoves is the AckRemoves case of TestOutbox.
func outboxAckRemoves(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, wantTail := x.ctx, x.newStore, x.appendAll, x.wantTail
	s := newStore(t)
	appendAll(t, s, "c", "a", "b", "c")
	noErr(t, s.Ack(ctx, "c", "m2", 0))
	wantTail(t, s, "c", "m1=a@1", "m3=c@3")
	noErr(t, s.Ack(ctx, "c", "m2", 0))      // again: not an error
	noErr(t, s.Ack(ctx, "c", "unknown", 0)) // never appended: not an error
	wantTail(t, s, "c", "m1=a@1", "m3=c@3")
}

// outboxSeqContinuesAfterDrain is the SeqContinuesAfterDrain case of TestOutbox.
func outboxSeqContinuesAfterDrain(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, tail, wantTail := x.ctx, x.newStore, x.appendAll, x.tail, x.wantTail
	s := newStore(t)
	first := appendAll(t, s, "c", "a", "b")
	n, err := s.AckMany(ctx, "c", []string{"m1", "m2"}, 0)
	noErr(t, err)
	if n != 2 {
		t.Errorf("AckMany removed %d, want 2", n)
	}
	wantTail(t, s, "c")
	tl := tail(t, s, "c")
	if tl.Epoch != first[0].Epoch {
		t.Errorf("a drained connection's Tail.Epoch = %d, want %d (it still exists)", tl.Epoch, first[0].Epoch)
	}
	a, err := s.AppendWithID(ctx, "c", "m3", []byte("c"))
	noErr(t, err)
	if a.Seq != 3 || a.Epoch != first[0].Epoch {
		t.Errorf("Append after draining = seq %d epoch %d, want seq 3 epoch %d", a.Seq, a.Epoch, first[0].Epoch)
	}
}

// outboxAckFencing is the AckFencing case of TestOutbox.
func outboxAckFencing(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, tail, wantTail := x.ctx, x.newStore, x.appendAll, x.tail, x.wantTail
	s := newStore(t)
	appendAll(t, s, "c", "a", "b", "c", "d")
	noErr(t, s.Ack(ctx, "c", "m1", 5)) // above the floor 0: raises it
	if g := tail(t, s, "c").Generation; g != 5 {
		t.Errorf("Generation after an ack at 5 = %d", g)
	}
	wantErr(t, s.Ack(ctx, "c", "m2", 4), store.ErrStaleOwner)
	_, err := s.AckMany(ctx, "c", []string{"m2", "m3"}, 0)
	wantErr(t, err, store.ErrStaleOwner)
	wantTail(t, s, "c", "m2=b@2", "m3=c@3", "m4=d@4")
	if g := tail(t, s, "c").Generation; g != 5 {
		t.Errorf("a stale ack changed the floor to %d", g)
	}
	noErr(t, s.Ack(ctx, "c", "m2", 5)) // equal: accepted
	noErr(t, s.Ack(ctx, "c", "m3", 6)) // above: accepted, raises
	wantErr(t, s.Ack(ctx, "c", "m4", 5), store.ErrStaleOwner)
	wantErr(t, s.Ack(ctx, "c", "unknown", 5), store.ErrStaleOwner) // fenced even for an absent id
	wantTail(t, s, "c", "m4=d@4")
	if g := tail(t, s, "c").Generation; g != 6 {
		t.Errorf("Generation = %d, want 6", g)
	}
}

// outboxAckUnknownConnCreatesNothing is the AckUnknownConnCreatesNothing case of TestOutbox.
func outboxAckUnknownConnCreatesNothing(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, tail := x.ctx, x.newStore, x.appendAll, x.tail
	s := newStore(t)
	noErr(t, s.Ack(ctx, "ghost", "m1", 7))
	n, err := s.AckMany(ctx, "ghost", []string{"m1", "m2"}, 9)
	noErr(t, err)
	if n != 0 {
		t.Errorf("AckMany on an unknown connection removed %d", n)
	}
	if diff := cmp.Diff(store.Tail{}, tail(t, s, "ghost")); diff != "" {
		t.Errorf("Tail after acks on an unknown connection (-want +got):\n%s", diff)
	}
	// Had the acks created the connection, its floor would be 9 now.
	appendAll(t, s, "ghost", "a")
	if g := tail(t, s, "ghost").Generation; g != 0 {
		t.Errorf("floor of a new connection = %d, want 0: an ack created state", g)
	}
}

// outboxAdvanceGeneration is the AdvanceGeneration case of TestOutbox.
func outboxAdvanceGeneration(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, tail, wantTail := x.ctx, x.newStore, x.appendAll, x.tail, x.wantTail
	s := newStore(t)
	noErr(t, s.AdvanceGeneration(ctx, "c", 0)) // no such connection, not above 0: no-op
	if diff := cmp.Diff(store.Tail{}, tail(t, s, "c")); diff != "" {
		t.Errorf("AdvanceGeneration(0) created state (-want +got):\n%s", diff)
	}
	appendAll(t, s, "c", "a", "b")
	if g := tail(t, s, "c").Generation; g != 0 {
		t.Fatalf("floor of a new connection = %d, want 0", g)
	}
	noErr(t, s.AdvanceGeneration(ctx, "c", 3))
	noErr(t, s.AdvanceGeneration(ctx, "c", 2)) // not above: no-op
	noErr(t, s.AdvanceGeneration(ctx, "c", 3)) // equal: no-op
	if g := tail(t, s, "c").Generation; g != 3 {
		t.Errorf("Generation = %d, want 3", g)
	}
	wantTail(t, s, "c", "m1=a@1", "m2=b@2") // nothing acked
	wantErr(t, s.Ack(ctx, "c", "m1", 2), store.ErrStaleOwner)
	noErr(t, s.Ack(ctx, "c", "m1", 3))
	wantTail(t, s, "c", "m2=b@2")
}

// A raised fence is never lost: an advance on a connection with no hash yet
// (before the first append, after DropConn, after expiry) creates one that
// holds the floor, so a stale owner's ack fails on the connection the next
// append creates.
func outboxAdvanceBeforeFirstAppend(t *testing.T, x *outboxSuite) {
	h, ctx, newStore, appendAll, tail, wantTail := x.h, x.ctx, x.newStore, x.appendAll, x.tail, x.wantTail
	for _, ttl := range []time.Duration{0, 100 * h.Tick} {
		s := newStore(t, store.WithTTL(ttl))
		noErr(t, s.AdvanceGeneration(ctx, "c", 2))
		tl := tail(t, s, "c")
		if tl.Generation != 2 || tl.Epoch == 0 || len(tl.Messages) != 0 {
			t.Errorf("ttl %v: Tail after AdvanceGeneration on no connection = %+v, want floor 2, an epoch, no messages", ttl, tl)
		}
		as := appendAll(t, s, "c", "a", "b")
		if as[0].Seq != 1 || as[1].Seq != 2 || as[0].Epoch != tl.Epoch {
			t.Errorf("ttl %v: appends after the advance = %+v, want seqs 1, 2 in epoch %d", ttl, as, tl.Epoch)
		}
		wantErr(t, s.Ack(ctx, "c", "m1", 1), store.ErrStaleOwner)
		wantTail(t, s, "c", "m1=a@1", "m2=b@2")
		noErr(t, s.Ack(ctx, "c", "m1", 2))
		wantTail(t, s, "c", "m2=b@2")

		// After DropConn: a new owner's advance holds for the next incarnation.
		noErr(t, s.DropConn(ctx, "c"))
		noErr(t, s.AdvanceGeneration(ctx, "c", 5))
		appendAll(t, s, "c", "x")
		wantErr(t, s.Ack(ctx, "c", "m1", 4), store.ErrStaleOwner)
		if _, err := s.AckMany(ctx, "c", []string{"m1"}, 3); !errors.Is(err, store.ErrStaleOwner) {
			t.Errorf("ttl %v: AckMany below the floor = %v, want ErrStaleOwner", ttl, err)
		}
		wantTail(t, s, "c", "m1=x@1")
	}
}

// outboxGenerationsFullUint64 is the GenerationsFullUint64 case of TestOutbox.
func outboxGenerationsFullUint64(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, tail, wantTail := x.ctx, x.newStore, x.appendAll, x.tail, x.wantTail
	s := newStore(t)
	// Each pair is equal as a float64 or misordered as a plain string.
	pairs := [][2]uint64{
		{1 << 53, 1<<53 + 1},
		{math.MaxUint64 - 1, math.MaxUint64},
		{9, 10},
		{99999, 100000},
		{0, 1},
	}
	for i, p := range pairs {
		lo, hi := p[0], p[1]
		conn := fmt.Sprintf("gen%d", i)
		appendAll(t, s, conn, "a", "b", "c")
		noErr(t, s.AdvanceGeneration(ctx, conn, lo))
		noErr(t, s.Ack(ctx, conn, "m1", hi))
		if g := tail(t, s, conn).Generation; g != hi {
			t.Errorf("%d vs %d: floor = %d, want %d", lo, hi, g, hi)
		}
		if err := s.Ack(ctx, conn, "m2", lo); !errors.Is(err, store.ErrStaleOwner) {
			t.Errorf("%d vs %d: Ack at %d below the floor %d = %v, want ErrStaleOwner", lo, hi, lo, hi, err)
		}
		noErr(t, s.AdvanceGeneration(ctx, conn, lo))
		if g := tail(t, s, conn).Generation; g != hi {
			t.Errorf("%d vs %d: AdvanceGeneration(%d) lowered the floor to %d", lo, hi, lo, g)
		}
		noErr(t, s.Ack(ctx, conn, "m2", hi))
		wantTail(t, s, conn, "m3=c@3")
	}
}

// outboxAppendWithIDIdempotent is the AppendWithIDIdempotent case of TestOutbox.
func outboxAppendWithIDIdempotent(t *testing.T, x *outboxSuite) {
	ctx, newStore, wantTail := x.ctx, x.newStore, x.wantTail
	s := newStore(t)
	a1, err := s.AppendWithID(ctx, "c", "m", []byte("first"))
	noErr(t, err)
	a2, err := s.AppendWithID(ctx, "c", "m", []byte("second"))
	noErr(t, err)
	if !a1.Created || a2.Created {
		t.Errorf("Created = %v then %v, want true then false", a1.Created, a2.Created)
	}
	want := store.Appended{ID: "m", Seq: 1, Epoch: a1.Epoch}
	if diff := cmp.Diff(want, a2); diff != "" {
		t.Errorf("retry (-want +got):\n%s", diff)
	}
	if a1.Epoch == 0 {
		t.Error("Epoch = 0")
	}
	wantTail(t, s, "c", "m=first@1")
	a3, err := s.AppendWithID(ctx, "c", "n", []byte("x"))
	noErr(t, err)
	if a3.Seq != 2 {
		t.Errorf("next new id: seq = %d, want 2 (the retry consumed a seq?)", a3.Seq)
	}
	// Acked ids are gone: appending one again is a new message.
	noErr(t, s.Ack(ctx, "c", "m", 0))
	a4, err := s.AppendWithID(ctx, "c", "m", []byte("again"))
	noErr(t, err)
	if !a4.Created || a4.Seq != 3 {
		t.Errorf("re-append after ack = %+v, want Created seq 3", a4)
	}
	wantTail(t, s, "c", "n=x@2", "m=again@3")
}

// outboxMaxUnacked is the MaxUnacked case of TestOutbox.
func outboxMaxUnacked(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, wantTail := x.ctx, x.newStore, x.appendAll, x.wantTail
	s := newStore(t, store.WithMaxUnacked(2))
	appendAll(t, s, "c", "a", "b")
	_, err := s.AppendWithID(ctx, "c", "m3", []byte("c"))
	wantErr(t, err, store.ErrOutboxFull)
	_, _, err = s.Append(ctx, "c", []byte("c"))
	wantErr(t, err, store.ErrOutboxFull)
	wantTail(t, s, "c", "m1=a@1", "m2=b@2")
	// A retry of an id in the tail still succeeds when full.
	a, err := s.AppendWithID(ctx, "c", "m2", []byte("b"))
	noErr(t, err)
	if a.Created || a.Seq != 2 {
		t.Errorf("retry when full = %+v, want seq 2, not created", a)
	}
	// Another connection has its own limit.
	appendAll(t, s, "other", "x", "y")
	noErr(t, s.Ack(ctx, "c", "m1", 0))
	a, err = s.AppendWithID(ctx, "c", "m3", []byte("c"))
	noErr(t, err)
	if a.Seq != 3 {
		t.Errorf("append after an ack made room: seq = %d, want 3 (a refused append consumed a seq?)", a.Seq)
	}
	wantTail(t, s, "c", "m2=b@2", "m3=c@3")
}

// outboxAppendMany is the AppendMany case of TestOutbox.
func outboxAppendMany(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, tail, wantTail := x.ctx, x.newStore, x.appendAll, x.tail, x.wantTail
	s := newStore(t)
	appendAll(t, s, "c", "a") // m1@1
	out, err := s.AppendMany(ctx, "c", []store.Outgoing{
		{ID: "x", Payload: []byte("px")},
		{ID: "m1", Payload: []byte("ignored")}, // already in the tail
		{ID: "y", Payload: []byte("py")},
		{ID: "x", Payload: []byte("ignored too")}, // first wins
		{Payload: []byte("minted")},
		{ID: "z", Payload: nil},
	})
	noErr(t, err)
	if len(out) != 6 {
		t.Fatalf("AppendMany returned %d results, want 6", len(out))
	}
	epoch := out[0].Epoch
	if len(out[4].ID) != 32 {
		t.Errorf("minted id %q, want 32 hex characters", out[4].ID)
	}
	want := []store.Appended{
		{ID: "x", Seq: 2, Epoch: epoch, Created: true},
		{ID: "m1", Seq: 1, Epoch: epoch},
		{ID: "y", Seq: 3, Epoch: epoch, Created: true},
		{ID: "x", Seq: 2, Epoch: epoch},
		{ID: out[4].ID, Seq: 4, Epoch: epoch, Created: true},
		{ID: "z", Seq: 5, Epoch: epoch, Created: true},
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("AppendMany (-want +got):\n%s", diff)
	}
	if tl := tail(t, s, "c"); tl.Epoch != epoch {
		t.Errorf("Tail epoch %d, AppendMany's %d", tl.Epoch, epoch)
	}
	wantTail(t, s, "c", "m1=a@1", "x=px@2", "y=py@3", out[4].ID+"=minted@4", "z=@5")
	// A retry of the whole burst writes nothing and answers the same seqs.
	again, err := s.AppendMany(ctx, "c", []store.Outgoing{{ID: "x"}, {ID: "y"}, {ID: "z"}})
	noErr(t, err)
	if diff := cmp.Diff([]store.Appended{{ID: "x", Seq: 2, Epoch: epoch}, {ID: "y", Seq: 3, Epoch: epoch}, {ID: "z", Seq: 5, Epoch: epoch}}, again); diff != "" {
		t.Errorf("retry (-want +got):\n%s", diff)
	}
	// One burst on a new connection: seqs 1..n, one epoch, the same as
	// AppendWithID one by one would give.
	out, err = s.AppendMany(ctx, "fresh", []store.Outgoing{{ID: "a", Payload: []byte("1")}, {ID: "b", Payload: []byte("2")}})
	noErr(t, err)
	if out[0].Seq != 1 || out[1].Seq != 2 || out[0].Epoch == 0 || out[0].Epoch != out[1].Epoch || !out[0].Created || !out[1].Created {
		t.Errorf("burst on a new connection = %+v", out)
	}
	a, err := s.AppendWithID(ctx, "fresh", "c", []byte("3"))
	noErr(t, err)
	if a.Seq != 3 || a.Epoch != out[0].Epoch {
		t.Errorf("AppendWithID after the burst = %+v, want seq 3 in epoch %d", a, out[0].Epoch)
	}
	out, err = s.AppendMany(ctx, "c", nil)
	noErr(t, err)
	if len(out) != 0 {
		t.Errorf("AppendMany(nil) = %v", out)
	}
}

// outboxAppendManyAllOrNothing is the AppendManyAllOrNothing case of TestOutbox.
func outboxAppendManyAllOrNothing(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, tail, wantTail := x.ctx, x.newStore, x.appendAll, x.tail, x.wantTail
	s := newStore(t, store.WithMaxUnacked(3))
	appendAll(t, s, "c", "a") // m1@1
	_, err := s.AppendMany(ctx, "c", []store.Outgoing{{ID: "x"}, {ID: "y"}, {ID: "z"}})
	wantErr(t, err, store.ErrOutboxFull)
	wantTail(t, s, "c", "m1=a@1")
	// Ids already in the tail and duplicates take no room.
	out, err := s.AppendMany(ctx, "c", []store.Outgoing{{ID: "m1"}, {ID: "x"}, {ID: "x"}, {ID: "y"}})
	noErr(t, err)
	if out[1].Seq != 2 || out[3].Seq != 3 {
		t.Errorf("burst after a refused one = %+v, want seqs 2 and 3 (a refused burst consumed seqs?)", out)
	}
	// Full: a burst of known ids still succeeds.
	_, err = s.AppendMany(ctx, "c", []store.Outgoing{{ID: "m1"}, {ID: "y"}})
	noErr(t, err)
	_, err = s.AppendMany(ctx, "c", []store.Outgoing{{ID: "m1"}, {ID: "new"}})
	wantErr(t, err, store.ErrOutboxFull)
	// Bad input refuses the whole burst before anything is sent.
	for _, bad := range [][]store.Outgoing{
		{{ID: "ok"}, {ID: "_reserved"}},
		{{ID: "ok"}, {ID: strings.Repeat("i", maxMessageIDLen+1)}},
		{{ID: "ok"}, {ID: "big", Payload: make([]byte, (4<<20)+1)}},
		make([]store.Outgoing, maxAppendMany+1),
	} {
		_, err := s.AppendMany(ctx, "other", bad)
		wantErr(t, err, store.ErrInvalidArgument)
	}
	if tl := tail(t, s, "other"); tl.Epoch != 0 {
		t.Errorf("a refused burst created the connection: %+v", tl)
	}
	wantTail(t, s, "c", "m1=a@1", "x=@2", "y=@3")
}

// outboxAckMany is the AckMany case of TestOutbox.
func outboxAckMany(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, wantTail := x.ctx, x.newStore, x.appendAll, x.wantTail
	s := newStore(t)
	appendAll(t, s, "c", "a", "b", "c", "d", "e")
	n, err := s.AckMany(ctx, "c", []string{"m1", "m3", "unknown", "m3"}, 0)
	noErr(t, err)
	if n != 2 {
		t.Errorf("AckMany removed %d, want 2", n)
	}
	wantTail(t, s, "c", "m2=b@2", "m4=d@4", "m5=e@5")
	n, err = s.AckMany(ctx, "c", nil, 0)
	noErr(t, err)
	if n != 0 {
		t.Errorf("AckMany(nil) = %d", n)
	}
	_, err = s.AckMany(ctx, "c", []string{"m2", "_seq", "m4"}, 0)
	wantErr(t, err, store.ErrInvalidArgument)
	wantTail(t, s, "c", "m2=b@2", "m4=d@4", "m5=e@5")
}

// outboxAckManyLarge is the AckManyLarge case of TestOutbox.
func outboxAckManyLarge(t *testing.T, x *outboxSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	ids := make([]string, 3000)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
		_, err := s.AppendWithID(ctx, "c", ids[i], nil)
		noErr(t, err)
	}
	n, err := s.AckMany(ctx, "c", ids[:2500], 1)
	noErr(t, err)
	if n != 2500 {
		t.Errorf("AckMany of 2500 ids removed %d", n)
	}
	msgs, err := s.Unacked(ctx, "c")
	noErr(t, err)
	if len(msgs) != 500 || msgs[0].ID != "id-2500" || msgs[0].Seq != 2501 {
		t.Errorf("after acking 2500 of 3000: %d left, first %+v", len(msgs), msgs[:min(1, len(msgs))])
	}
}

// outboxDropConn is the DropConn case of TestOutbox.
func outboxDropConn(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, tail := x.ctx, x.newStore, x.appendAll, x.tail
	s := newStore(t)
	first := appendAll(t, s, "c", "a", "b")
	noErr(t, s.AdvanceGeneration(ctx, "c", 4))
	noErr(t, s.DropConn(ctx, "c"))
	if diff := cmp.Diff(store.Tail{}, tail(t, s, "c")); diff != "" {
		t.Errorf("Tail after DropConn (-want +got):\n%s", diff)
	}
	a, err := s.AppendWithID(ctx, "c", "m1", []byte("new"))
	noErr(t, err)
	if a.Seq != 1 || !a.Created {
		t.Errorf("first Append after DropConn = %+v, want a new message at seq 1", a)
	}
	if a.Epoch == first[0].Epoch {
		t.Errorf("Epoch %d did not change after DropConn: (epoch, seq) repeats", a.Epoch)
	}
	tl := tail(t, s, "c")
	if tl.Generation != 0 || tl.Epoch != a.Epoch {
		t.Errorf("Tail after re-create = %+v, want floor 0 and epoch %d", tl, a.Epoch)
	}
	noErr(t, s.DropConn(ctx, "never-existed"))
}

// outboxEpochPerIncarnation is the EpochPerIncarnation case of TestOutbox.
func outboxEpochPerIncarnation(t *testing.T, x *outboxSuite) {
	ctx, newStore, appendAll, tail := x.ctx, x.newStore, x.appendAll, x.tail
	s := newStore(t)
	seen := map[uint64]bool{}
	for round := range 5 {
		as := appendAll(t, s, "c", "a", "b", "c")
		for _, a := range as {
			if a.Epoch != as[0].Epoch || a.Epoch == 0 {
				t.Fatalf("round %d: epochs %d, %d differ within one incarnation", round, as[0].Epoch, a.Epoch)
			}
		}
		if e := tail(t, s, "c").Epoch; e != as[0].Epoch {
			t.Errorf("Tail.Epoch = %d, Appended.Epoch = %d", e, as[0].Epoch)
		}
		if seen[as[0].Epoch] {
			t.Errorf("round %d: epoch %d repeats an earlier incarnation's", round, as[0].Epoch)
		}
		seen[as[0].Epoch] = true
		noErr(t, s.DropConn(ctx, "c"))
	}
}

// outboxTTL is the TTL case of TestOutbox.
func outboxTTL(t *testing.T, x *outboxSuite) {
	h, ctx, newStore, appendAll, tail, wantTail := x.h, x.ctx, x.newStore, x.appendAll, x.tail, x.wantTail
	s := newStore(t, store.WithTTL(4*h.Tick))
	first := appendAll(t, s, "c", "a")
	h.Wait(2 * h.Tick)
	_, err := s.AppendWithID(ctx, "c", "m2", []byte("b")) // re-arms the TTL
	noErr(t, err)
	h.Wait(3 * h.Tick) // 5 ticks after the first append, 3 after the second
	wantTail(t, s, "c", "m1=a@1", "m2=b@2")
	_, err = s.AppendWithID(ctx, "c", "m2", []byte("b")) // a retry re-arms it too
	noErr(t, err)
	h.Wait(3 * h.Tick) // 6 ticks after the second append, 3 after the retry
	wantTail(t, s, "c", "m1=a@1", "m2=b@2")
	h.Wait(2 * h.Tick) // 5 ticks after the retry
	if diff := cmp.Diff(store.Tail{}, tail(t, s, "c")); diff != "" {
		t.Errorf("Tail after the TTL passed (-want +got):\n%s", diff)
	}
	a, err := s.AppendWithID(ctx, "c", "m9", []byte("z"))
	noErr(t, err)
	if a.Seq != 1 || a.Epoch == first[0].Epoch {
		t.Errorf("Append after expiry = %+v, want seq 1 and an epoch other than %d", a, first[0].Epoch)
	}
}

// outboxAdvanceRearmsTTL is the AdvanceRearmsTTL case of TestOutbox.
func outboxAdvanceRearmsTTL(t *testing.T, x *outboxSuite) {
	h, ctx, newStore, appendAll, tail, wantTail := x.h, x.ctx, x.newStore, x.appendAll, x.tail, x.wantTail
	s := newStore(t, store.WithTTL(4*h.Tick))
	appendAll(t, s, "c", "a")
	h.Wait(2 * h.Tick)
	noErr(t, s.AdvanceGeneration(ctx, "c", 1))
	h.Wait(3 * h.Tick)
	wantTail(t, s, "c", "m1=a@1")
	noErr(t, s.Ack(ctx, "c", "m1", 1)) // acks do not re-arm
	h.Wait(2 * h.Tick)
	if diff := cmp.Diff(store.Tail{}, tail(t, s, "c")); diff != "" {
		t.Errorf("Tail after the TTL passed (-want +got):\n%s", diff)
	}
}

// outboxNoTTLByDefault is the NoTTLByDefault case of TestOutbox.
func outboxNoTTLByDefault(t *testing.T, x *outboxSuite) {
	h, ctx, newStore, appendAll, tail := x.h, x.ctx, x.newStore, x.appendAll, x.tail
	s := newStore(t)
	appendAll(t, s, "c", "a")
	noErr(t, s.Ack(ctx, "c", "m1", 0))
	h.Wait(3 * h.Tick)
	tl := tail(t, s, "c")
	if tl.Epoch == 0 {
		t.Error("a drained connection without TTL was removed; it should keep its seq line until DropConn")
	}
	a, err := s.AppendWithID(ctx, "c", "m2", nil)
	noErr(t, err)
	if a.Seq != 2 {
		t.Errorf("seq after waiting = %d, want 2", a.Seq)
	}
}

// outboxBinaryPayloads is the BinaryPayloads case of TestOutbox.
func outboxBinaryPayloads(t *testing.T, x *outboxSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	big := make([]byte, 1<<20)
	_, _ = rand.Read(big)
	limit := bytes.Repeat([]byte{':'}, (4 << 20))
	payloads := [][]byte{
		{}, []byte(":"), []byte("a:b:c"), []byte("12:34"), []byte("\x00"), []byte("a\x00:\x00b"),
		[]byte("\xff\xfe\r\n"), []byte("_seq"), big, limit,
	}
	var want []store.Message
	for i, p := range payloads {
		id := fmt.Sprintf("p%d", i)
		a, err := s.AppendWithID(ctx, "c", id, p)
		noErr(t, err)
		want = append(want, store.Message{ID: id, Seq: a.Seq, Payload: p})
	}
	msgs, err := s.Unacked(ctx, "c")
	noErr(t, err)
	if len(msgs) != len(want) {
		t.Fatalf("Unacked returned %d messages, want %d", len(msgs), len(want))
	}
	for i := range want {
		if msgs[i].ID != want[i].ID || msgs[i].Seq != want[i].Seq || !bytes.Equal(msgs[i].Payload, want[i].Payload) {
			t.Errorf("message %d = %q seq %d (%d bytes), want %q seq %d (%d bytes)", i,
				msgs[i].ID, msgs[i].Seq, len(msgs[i].Payload), want[i].ID, want[i].Seq, len(want[i].Payload))
		}
	}
	_, err = s.AppendWithID(ctx, "c", "over", make([]byte, (4<<20)+1))
	wantErr(t, err, store.ErrInvalidArgument)
	_, _, err = s.Append(ctx, "c", make([]byte, (4<<20)+1))
	wantErr(t, err, store.ErrInvalidArgument)
	msgs, err = s.Unacked(ctx, "c")
	noErr(t, err)
	if len(msgs) != len(want) {
		t.Errorf("an oversize payload was appended: %d messages", len(msgs))
	}
	// The returned payload is the caller's own copy.
	msgs[1].Payload[0] = 'X'
	again, err := s.Unacked(ctx, "c")
	noErr(t, err)
	if string(again[1].Payload) != ":" {
		t.Errorf("changing a returned payload changed the store: %q", again[1].Payload)
	}
}

// outboxMessageIDs is the MessageIDs case of TestOutbox.
func outboxMessageIDs(t *testing.T, x *outboxSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	good := []string{"a:b", "1:2", "a\x00b", "{tag}", "ünï", " ", "x_", strings.Repeat("i", maxMessageIDLen)}
	for _, id := range good {
		_, err := s.AppendWithID(ctx, "c", id, []byte(id))
		noErr(t, err)
	}
	bad := []string{"", strings.Repeat("i", maxMessageIDLen+1), "_", "_x", "_seq", "_gen", "_epoch"}
	for _, id := range bad {
		_, err := s.AppendWithID(ctx, "c", id, []byte("p"))
		wantErr(t, err, store.ErrInvalidArgument)
		wantErr(t, s.Ack(ctx, "c", id, 0), store.ErrInvalidArgument)
		_, err = s.AckMany(ctx, "c", []string{"a:b", id}, 0)
		wantErr(t, err, store.ErrInvalidArgument)
	}
	msgs, err := s.Unacked(ctx, "c")
	noErr(t, err)
	var got []string
	for _, m := range msgs {
		if m.ID != string(m.Payload) {
			t.Errorf("message %q has payload %q", m.ID, m.Payload)
		}
		got = append(got, m.ID)
	}
	if diff := cmp.Diff(good, got); diff != "" {
		t.Errorf("Unacked ids (-want +got); no reserved field may appear:\n%s", diff)
	}
}

// outboxAnyBytesInConnIDs is the AnyBytesInConnIDs case of TestOutbox.
func outboxAnyBytesInConnIDs(t *testing.T, x *outboxSuite) {
	ctx, newStore, wantTail := x.ctx, x.newStore, x.wantTail
	s := newStore(t)
	conns := []string{"a\x00b", "{tag}", "}{", "a:b:c", "ünï", " ", "a", "A", "_seq"}
	for _, c := range conns {
		a, err := s.AppendWithID(ctx, c, "m", []byte(c))
		noErr(t, err)
		if a.Seq != 1 {
			t.Errorf("conn %q: seq = %d, want 1: connections collide", c, a.Seq)
		}
	}
	for _, c := range conns {
		wantTail(t, s, c, fmt.Sprintf("m=%s@1", c))
	}
}

// outboxBadInput is the BadInput case of TestOutbox.
func outboxBadInput(t *testing.T, x *outboxSuite) {
	ctx, newStore, tail := x.ctx, x.newStore, x.tail
	s := newStore(t)
	long := strings.Repeat("x", store.MaxIDLen+1)
	for _, conn := range []string{"", long} {
		checkAllRefused(t, s, conn, store.ErrInvalidArgument)
	}
	if diff := cmp.Diff(store.Tail{}, tail(t, s, "x")); diff != "" {
		t.Errorf("a refused call wrote (-want +got):\n%s", diff)
	}
	_, err := s.AppendWithID(ctx, strings.Repeat("x", store.MaxIDLen), "m", nil)
	noErr(t, err)
}

// outboxBadOptions is the BadOptions case of TestOutbox.
func outboxBadOptions(t *testing.T, x *outboxSuite) {
	h := x.h
	// A bad option fails New.
	for _, opt := range []store.Option{nil, store.WithTTL(-time.Second), store.WithMaxUnacked(-1)} {
		s, err := h.New(t, opt)
		if !errors.Is(err, store.ErrInvalidArgument) || s != nil {
			t.Errorf("New with a bad option = %v, %v; want nil, ErrInvalidArgument", s, err)
		}
	}
}

// outboxCancelledContext is the CancelledContext case of TestOutbox.
func outboxCancelledContext(t *testing.T, x *outboxSuite) {
	ctx, newStore, tail := x.ctx, x.newStore, x.tail
	s := newStore(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	checkAllRefusedCtx(t, cctx, s, "c", context.Canceled)
	if diff := cmp.Diff(store.Tail{}, tail(t, s, "c")); diff != "" {
		t.Errorf("a call with a cancelled context wrote (-want +got):\n%s", diff)
	}
}

// outboxReconnectElsewhere is the ReconnectElsewhere case of TestOutbox.
func outboxReconnectElsewhere(t *testing.T, x *outboxSuite) {
	ctx, newStore := x.ctx, x.newStore
	// Node A (generation 1) sends three messages; the client acks the first
	// and moves to node B (generation 2), which replays the rest.
	s := newStore(t)
	for _, p := range []string{"one", "two", "three"} {
		_, _, err := s.Append(ctx, "conn", []byte(p))
		noErr(t, err)
	}
	msgs, err := s.Unacked(ctx, "conn")
	noErr(t, err)
	noErr(t, s.Ack(ctx, "conn", msgs[0].ID, 1))
	noErr(t, s.AdvanceGeneration(ctx, "conn", 2)) // B takes over
	replay, err := s.Unacked(ctx, "conn")
	noErr(t, err)
	if len(replay) != 2 || string(replay[0].Payload) != "two" || string(replay[1].Payload) != "three" {
		t.Fatalf("replay = %+v", replay)
	}
	wantErr(t, s.Ack(ctx, "conn", replay[0].ID, 1), store.ErrStaleOwner) // A, late
	noErr(t, s.Ack(ctx, "conn", replay[0].ID, 2))
	_, seq, err := s.Append(ctx, "conn", []byte("four"))
	noErr(t, err)
	if seq != 4 {
		t.Errorf("B's first append: seq = %d, want 4", seq)
	}
}

// outboxConcurrentAppends is the ConcurrentAppends case of TestOutbox.
func outboxConcurrentAppends(t *testing.T, x *outboxSuite) {
	ctx, newStore := x.ctx, x.newStore
	s := newStore(t)
	const writers, each = 8, 50
	seqs := make(chan uint64, writers*each)
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, seq, err := s.Append(ctx, "c", []byte("x"))
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				seqs <- seq
			}
		}()
	}
	wg.Wait()
	close(seqs)
	checkSeqs(t, seqs, writers*each)
	msgs, err := s.Unacked(ctx, "c")
	noErr(t, err)
	for i, m := range msgs {
		if m.Seq != uint64(i+1) {
			t.Fatalf("Unacked[%d].Seq = %d, want %d", i, m.Seq, i+1)
		}
	}
}

// outboxTakeoverRace is the TakeoverRace case of TestOutbox.
func outboxTakeoverRace(t *testing.T, x *outboxSuite) {
	ctx, newStore, tail := x.ctx, x.newStore, x.tail
	s := newStore(t)
	const n = 200
	for i := range 2 * n {
		_, err := s.AppendWithID(ctx, "c", fmt.Sprintf("m%d", i), nil)
		noErr(t, err)
	}
	var bLanded atomic.Bool
	var staleA, okAfter atomic.Int32
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // A, generation 1, acks the even ids
		defer wg.Done()
		for i := 0; i < 2*n; i += 2 {
			after := bLanded.Load()
			err := s.Ack(ctx, "c", fmt.Sprintf("m%d", i), 1)
			switch {
			case errors.Is(err, store.ErrStaleOwner):
				staleA.Add(1)
			case err != nil:
				t.Errorf("A: %v", err)
			case after:
				okAfter.Add(1)
			}
		}
	}()
	go func() { // B, generation 2, acks the odd ids
		defer wg.Done()
		for i := 1; i < 2*n; i += 2 {
			if err := s.Ack(ctx, "c", fmt.Sprintf("m%d", i), 2); err != nil {
				t.Errorf("B: %v", err)
			}
			bLanded.Store(true)
		}
	}()
	wg.Wait()
	if k := okAfter.Load(); k != 0 {
		t.Errorf("%d acks of A (generation 1) succeeded after B's (generation 2) landed", k)
	}
	// Every message A failed to ack is still there, and nothing else.
	msgs, err := s.Unacked(ctx, "c")
	noErr(t, err)
	if len(msgs) != int(staleA.Load()) {
		t.Errorf("%d messages left, but A had %d acks refused", len(msgs), staleA.Load())
	}
	for _, m := range msgs {
		if m.Seq%2 != 1 { // ids m0, m2... have seqs 1, 3...
			t.Errorf("message %s (seq %d) left behind: B's acks must all land", m.ID, m.Seq)
		}
	}
	if g := tail(t, s, "c").Generation; g != 2 {
		t.Errorf("floor = %d, want 2", g)
	}
}

// checkAllRefused calls every operation on conn and wants target from each.
func checkAllRefused(t *testing.T, s *store.Outbox, conn string, target error) {
	t.Helper()
	checkAllRefusedCtx(t, context.Background(), s, conn, target)
}

func checkAllRefusedCtx(t *testing.T, ctx context.Context, s *store.Outbox, conn string, target error) {
	t.Helper()
	_, _, err := s.Append(ctx, conn, []byte("p"))
	wantErr(t, err, target)
	_, err = s.AppendWithID(ctx, conn, "m", []byte("p"))
	wantErr(t, err, target)
	_, err = s.AppendMany(ctx, conn, []store.Outgoing{{ID: "m", Payload: []byte("p")}})
	wantErr(t, err, target)
	_, err = s.Unacked(ctx, conn)
	wantErr(t, err, target)
	_, err = s.Tail(ctx, conn)
	wantErr(t, err, target)
	wantErr(t, s.Ack(ctx, conn, "m", 1), target)
	_, err = s.AckMany(ctx, conn, []string{"m"}, 1)
	wantErr(t, err, target)
	wantErr(t, s.AdvanceGeneration(ctx, conn, 1), target)
	wantErr(t, s.DropConn(ctx, conn), target)
}

// checkSeqs wants exactly the seqs 1..n from ch, each once.
func checkSeqs(t *testing.T, ch <-chan uint64, n int) {
	t.Helper()
	got := make([]int, n+1)
	count := 0
	for seq := range ch {
		count++
		if seq == 0 || seq > uint64(n) {
			t.Errorf("seq %d out of 1..%d", seq, n)
			continue
		}
		got[seq]++
	}
	if count != n {
		t.Errorf("got %d seqs, want %d", count, n)
	}
	for seq := 1; seq <= n; seq++ {
		if got[seq] != 1 {
			t.Errorf("seq %d returned %d times, want once", seq, got[seq])
		}
	}
}
