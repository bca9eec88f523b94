package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// outboxPrefixes numbers the prefixes of the stores the suite makes, so that
// every store is isolated on the shared servers.
var outboxPrefixes atomic.Int64

// outboxPrefix returns a key prefix of t's own.
func outboxPrefix(t *testing.T) string {
	return fmt.Sprintf("outbox-test:%s:%d:", t.Name(), outboxPrefixes.Add(1))
}

// TestOutboxClusterConformance runs storetest.TestOutbox on a cluster; the
// standalone run is store's TestRedisOutbox.
func TestOutboxClusterConformance(t *testing.T) {
	c := newClient(t, clusterURL(t))
	storetest.TestOutbox(t, storetest.OutboxHarness{
		New: func(t *testing.T, opts ...store.Option) (*store.Outbox, error) {
			return store.NewOutbox(c, append([]store.Option{store.WithPrefix(outboxPrefix(t))}, opts...)...)
		},
		Wait: time.Sleep,
		Tick: 100 * time.Millisecond,
	})
}

// TestOutboxConcurrentAppends: 8 writers, each on its own client, append 500
// messages each to one connection; the seqs are exactly 1..4000.
func TestOutboxConcurrentAppends(t *testing.T) {
	url := standaloneURL(t)
	prefix := outboxPrefix(t)
	const writers, each = 8, 500
	ctx := context.Background()
	seqs := make(chan uint64, writers*each)
	var wg sync.WaitGroup
	for w := range writers {
		ob := mustStore(store.NewOutbox(newClient(t, url), store.WithPrefix(prefix)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				a, err := ob.AppendWithID(ctx, "conn", fmt.Sprintf("w%d-%d", w, i), []byte("x"))
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				seqs <- a.Seq
			}
		}()
	}
	wg.Wait()
	close(seqs)
	seen := make([]int, writers*each+1)
	n := 0
	for seq := range seqs {
		n++
		if seq == 0 || seq > writers*each {
			t.Fatalf("seq %d out of 1..%d", seq, writers*each)
		}
		seen[seq]++
	}
	if n != writers*each {
		t.Fatalf("%d appends returned, want %d", n, writers*each)
	}
	for seq := 1; seq <= writers*each; seq++ {
		if seen[seq] != 1 {
			t.Errorf("seq %d returned %d times, want once", seq, seen[seq])
		}
	}
	// The stored tail agrees: 4000 messages, seqs 1..4000 in order, and each
	// writer's messages in its own order.
	msgs, err := mustStore(store.NewOutbox(newClient(t, url), store.WithPrefix(prefix))).Unacked(ctx, "conn")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != writers*each {
		t.Fatalf("Unacked holds %d messages, want %d", len(msgs), writers*each)
	}
	last := map[string]int{}
	for i, m := range msgs {
		if m.Seq != uint64(i+1) {
			t.Fatalf("Unacked[%d].Seq = %d", i, m.Seq)
		}
		var w, k int
		if _, err := fmt.Sscanf(m.ID, "w%d-%d", &w, &k); err != nil {
			t.Fatalf("id %q: %v", m.ID, err)
		}
		writer := fmt.Sprint(w)
		if prev, ok := last[writer]; ok && k != prev+1 {
			t.Errorf("writer %d: message %d follows %d", w, k, prev)
		}
		last[writer] = k
	}
}

// TestOutboxTakeoverRace: node A owns the connection at generation 1, node B
// takes it over at generation 2; they ack concurrently on their own clients.
// Once B's first ack has landed, every later ack of A fails with
// ErrStaleOwner, and every message A could not ack is still in the tail.
func TestOutboxTakeoverRace(t *testing.T) {
	url := standaloneURL(t)
	prefix := outboxPrefix(t)
	ctx := context.Background()
	a := mustStore(store.NewOutbox(newClient(t, url), store.WithPrefix(prefix)))
	b := mustStore(store.NewOutbox(newClient(t, url), store.WithPrefix(prefix)))
	for round := range 5 {
		conn := fmt.Sprintf("conn-%d", round)
		const n = 300
		for i := range 2 * n {
			if _, err := a.AppendWithID(ctx, conn, fmt.Sprintf("m%d", i), nil); err != nil {
				t.Fatal(err)
			}
		}
		var bLanded atomic.Bool
		var okA, staleA, okAAfter atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < 2*n; i += 2 {
				after := bLanded.Load()
				err := a.Ack(ctx, conn, fmt.Sprintf("m%d", i), 1)
				switch {
				case errors.Is(err, store.ErrStaleOwner):
					staleA.Add(1)
				case err != nil:
					t.Errorf("A: %v", err)
				case after:
					okAAfter.Add(1)
				default:
					okA.Add(1)
				}
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(time.Duration(round) * time.Millisecond) // vary where the takeover lands
			for i := 1; i < 2*n; i += 2 {
				if err := b.Ack(ctx, conn, fmt.Sprintf("m%d", i), 2); err != nil {
					t.Errorf("B: %v", err)
				}
				bLanded.Store(true)
			}
		}()
		close(start)
		wg.Wait()
		if k := okAAfter.Load(); k != 0 {
			t.Errorf("round %d: %d acks of A succeeded after B's first ack landed", round, k)
		}
		tl, err := b.Tail(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		if tl.Generation != 2 {
			t.Errorf("round %d: floor = %d, want 2", round, tl.Generation)
		}
		if len(tl.Messages) != int(staleA.Load()) {
			t.Errorf("round %d: %d messages left, A had %d acks refused", round, len(tl.Messages), staleA.Load())
		}
		for _, m := range tl.Messages {
			if m.Seq%2 != 1 {
				t.Errorf("round %d: B's message %s is left", round, m.ID)
			}
		}
		t.Logf("round %d: A acked %d before the takeover, %d refused after", round, okA.Load(), staleA.Load())
	}
}

// TestOutboxTwoNodes: two Outbox values on separate clients, as two gateway
// nodes would have, share one seq line and one floor per connection.
func TestOutboxTwoNodes(t *testing.T) {
	for _, topo := range []struct {
		name string
		url  func(*testing.T) string
	}{{"standalone", standaloneURL}, {"cluster", clusterURL}} {
		t.Run(topo.name, func(t *testing.T) {
			url := topo.url(t)
			prefix := outboxPrefix(t)
			ctx := context.Background()
			n1 := mustStore(store.NewOutbox(newClient(t, url), store.WithPrefix(prefix)))
			n2 := mustStore(store.NewOutbox(newClient(t, url), store.WithPrefix(prefix)))
			var seqs []uint64
			for i := range 6 {
				node := []*store.Outbox{n1, n2}[i%2]
				_, seq, err := node.Append(ctx, "conn", []byte{byte('a' + i)})
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, seq)
			}
			if fmt.Sprint(seqs) != "[1 2 3 4 5 6]" {
				t.Errorf("seqs across two nodes = %v, want [1 2 3 4 5 6]", seqs)
			}
			t1, err1 := n1.Tail(ctx, "conn")
			t2, err2 := n2.Tail(ctx, "conn")
			if err1 != nil || err2 != nil || t1.Epoch != t2.Epoch || len(t1.Messages) != 6 || len(t2.Messages) != 6 {
				t.Fatalf("the nodes see different tails: %+v %v / %+v %v", t1, err1, t2, err2)
			}
			if err := n2.AdvanceGeneration(ctx, "conn", 2); err != nil {
				t.Fatal(err)
			}
			if err := n1.Ack(ctx, "conn", t1.Messages[0].ID, 1); !errors.Is(err, store.ErrStaleOwner) {
				t.Errorf("node 1's ack after node 2 advanced = %v, want ErrStaleOwner", err)
			}
			if err := n1.Ack(ctx, "conn", t1.Messages[0].ID, 2); err != nil {
				t.Errorf("ack at the shared floor through node 1: %v", err)
			}
			msgs, err := n2.Unacked(ctx, "conn")
			if err != nil || len(msgs) != 5 || msgs[0].Seq != 2 {
				t.Errorf("node 2 after node 1's ack: %v, %v", msgs, err)
			}
		})
	}
}

// TestOutboxCorruptState: keys the scripts did not write give
// ErrUnexpectedReply (CORRUPT, or WRONGTYPE for a key of another type), never
// a panic, and change nothing.
func TestOutboxCorruptState(t *testing.T) {
	url := standaloneURL(t)
	c := newClient(t, url)
	prefix := outboxPrefix(t)
	ob := mustStore(store.NewOutbox(c, store.WithPrefix(prefix)))
	ctx := context.Background()

	outboxSeed(t, c, prefix+"foreign", map[string]string{"_seq": "2", "_gen": "0", "_epoch": outboxOldEpoch, "m": "not a seq"}, 0)
	outboxSeed(t, c, prefix+"nogen", map[string]string{"_seq": "2", "_epoch": outboxOldEpoch, "m": "1:x"}, 0)
	// unacked.lua passes a field it does not know through; the reader rejects it.
	outboxSeed(t, c, prefix+"underscore", map[string]string{"_seq": "2", "_gen": "0", "_epoch": outboxOldEpoch, "_x": "1:x"}, 0)
	_, err := ob.Unacked(ctx, "underscore")
	outboxWantUnexpected(t, "Unacked underscore", err)
	if err := c.Do(ctx, c.B().Set().Key(prefix+"string").Value("hello").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for _, conn := range []string{"foreign", "nogen", "string"} {
		_, err := ob.Unacked(ctx, conn)
		outboxWantUnexpected(t, "Unacked "+conn, err)
		_, err = ob.AppendWithID(ctx, conn, "m", []byte("p"))
		outboxWantUnexpected(t, "AppendWithID "+conn, err)
	}
	outboxWantUnexpected(t, "Ack nogen", ob.Ack(ctx, "nogen", "m", 1))
	outboxWantUnexpected(t, "AdvanceGeneration nogen", ob.AdvanceGeneration(ctx, "nogen", 1))
	outboxWantUnexpected(t, "Ack string", ob.Ack(ctx, "string", "m", 1))
	outboxWantUnexpected(t, "AdvanceGeneration string", ob.AdvanceGeneration(ctx, "string", 1))
	if h, _ := outboxRaw(t, c, prefix+"nogen"); len(h) != 3 || h["m"] != "1:x" {
		t.Errorf("refused calls changed the hash: %v", h)
	}
	// DropConn removes whatever is there.
	for _, conn := range []string{"foreign", "nogen", "string"} {
		if err := ob.DropConn(ctx, conn); err != nil {
			t.Errorf("DropConn %s: %v", conn, err)
		}
	}
}

func outboxWantUnexpected(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrUnexpectedReply) {
		t.Errorf("%s: error = %v, want ErrUnexpectedReply", what, err)
	}
}

// outboxImpostor runs, in place of every outbox script the store sends, a
// script of the test's that replies with the wrong shape: the replies come
// from a real Redis, only the script differs.
type outboxImpostor struct {
	rueidis.Client
	src string
}

func (c outboxImpostor) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	cs := cmd.Commands()
	if len(cs) >= 4 && strings.HasPrefix(cs[0], "EVALSHA") {
		return c.Client.Do(ctx, c.Client.B().Eval().Script(c.src).Numkeys(1).Key(cs[3]).Arg(cs[4:]...).Build())
	}
	return c.Client.Do(ctx, cmd)
}

// TestOutboxUnexpectedReplies: every reply of the wrong shape is
// ErrUnexpectedReply, never a panic.
func TestOutboxUnexpectedReplies(t *testing.T) {
	c := newClient(t, standaloneURL(t))
	ctx := context.Background()
	type op struct {
		name string
		call func(*store.Outbox) error
	}
	appendOp := op{"append", func(s *store.Outbox) error { _, err := s.AppendWithID(ctx, "c", "m", nil); return err }}
	tailOp := op{"unacked", func(s *store.Outbox) error { _, err := s.Tail(ctx, "c"); return err }}
	ackOp := op{"ack", func(s *store.Outbox) error { _, err := s.AckMany(ctx, "c", []string{"a", "b"}, 1); return err }}
	advanceOp := op{"advance", func(s *store.Outbox) error { return s.AdvanceGeneration(ctx, "c", 1) }}
	dropOp := op{"drop", func(s *store.Outbox) error { return s.DropConn(ctx, "c") }}
	for _, tc := range []struct {
		reply string // Lua returning the impostor reply
		ops   []op
	}{
		{"return 'text'", []op{appendOp, tailOp, ackOp, advanceOp, dropOp}},
		{"return {1, 2}", []op{appendOp, ackOp, advanceOp, dropOp}},
		{"return {1, 2, 3, 4}", []op{appendOp, ackOp, advanceOp, dropOp}},
		{"return 7", []op{appendOp, tailOp, ackOp, advanceOp}},
		{"return -1", []op{appendOp, tailOp, ackOp, advanceOp}},
		{"return {-1, 1700000000000000, 1}", []op{appendOp}},
		{"return {0, 1700000000000000, 1}", []op{appendOp}},
		{"return {1, 0, 1}", []op{appendOp}},
		{"return {1, 1700000000000000, 2}", []op{appendOp}},
		{"return {1, 'soon', 1}", []op{appendOp}},
		{"return {1, {1}, 1}", []op{appendOp}},
		{"return {'1700000000000000'}", []op{tailOp}},
		{"return {'1700000000000000', '0', 'm'}", []op{tailOp}},
		{"return {'1700000000000000', '0', 'm', 'no seq'}", []op{tailOp}},
		{"return {'1700000000000000', '0', 'm', ':x'}", []op{tailOp}},
		{"return {'1700000000000000', '0', 'm', '0:x'}", []op{tailOp}},
		{"return {'1700000000000000', '0', 'm', '-1:x'}", []op{tailOp}},
		{"return {'1700000000000000', '0', 'm', '99999999999999999999:x'}", []op{tailOp}},
		{"return {'1700000000000000', '0', '_seq', '1:x'}", []op{tailOp}},
		{"return {'1700000000000000', '0', '', '1:x'}", []op{tailOp}},
		{"return {'1700000000000000', '0', {1}, '1:x'}", []op{tailOp}},
		{"return {'1700000000000000', '-1'}", []op{tailOp}},
		{"return {'1700000000000000', '18446744073709551616'}", []op{tailOp}},
		{"return {'0', '0'}", []op{tailOp}},
		{"return {'yesterday', '0'}", []op{tailOp}},
		{"return 3", []op{ackOp}}, // more removed than ids sent
		{"return 2", []op{advanceOp}},
		{"return redis.error_reply('WHAT is this')", []op{appendOp, tailOp, ackOp, advanceOp, dropOp}},
	} {
		s := mustStore(store.NewOutbox(outboxImpostor{c, tc.reply}, store.WithPrefix(outboxPrefix(t))))
		for _, o := range tc.ops {
			err := o.call(s)
			if tc.reply == "return redis.error_reply('WHAT is this')" {
				// An unknown code is passed on as the Redis error it is.
				if _, ok := rueidis.IsRedisErr(errors.Unwrap(err)); err == nil || !ok || !strings.Contains(err.Error(), "WHAT is this") {
					t.Errorf("%s with %q: error = %v, want the Redis error wrapped", o.name, tc.reply, err)
				}
				continue
			}
			if !errors.Is(err, store.ErrUnexpectedReply) {
				t.Errorf("%s with %q: error = %v, want ErrUnexpectedReply", o.name, tc.reply, err)
			} else if !strings.HasPrefix(err.Error(), "redisonce: "+o.name+" \"c\": unexpected reply") {
				t.Errorf("%s with %q: error %q does not name the operation and connection", o.name, tc.reply, err)
			}
		}
	}
}

// TestOutboxNoScript: after SCRIPT FLUSH (a restart or failover) every
// operation still works: EVALSHA's NOSCRIPT falls back to EVAL.
func TestOutboxNoScript(t *testing.T) {
	srv := newServer(t, redisproc.Options{})
	c := newClient(t, srv.URL())
	ob := mustStore(store.NewOutbox(c))
	ctx := context.Background()
	flush := func() {
		t.Helper()
		if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	id, seq, err := ob.Append(ctx, "conn", []byte("p"))
	if err != nil || seq != 1 {
		t.Fatalf("Append after SCRIPT FLUSH = %d, %v", seq, err)
	}
	flush()
	if msgs, err := ob.Unacked(ctx, "conn"); err != nil || len(msgs) != 1 {
		t.Fatalf("Unacked after SCRIPT FLUSH = %v, %v", msgs, err)
	}
	flush()
	if err := ob.AdvanceGeneration(ctx, "conn", 3); err != nil {
		t.Fatal(err)
	}
	flush()
	if n, err := ob.AckMany(ctx, "conn", []string{id}, 3); err != nil || n != 1 {
		t.Fatalf("AckMany after SCRIPT FLUSH = %d, %v", n, err)
	}
	flush()
	if err := ob.DropConn(ctx, "conn"); err != nil {
		t.Fatal(err)
	}
	// The default prefix, as documented.
	if h, _ := outboxRaw(t, c, "gateway:outbox:"+"conn"); h != nil {
		t.Errorf("DropConn left %v", h)
	}
	if _, _, err := ob.Append(ctx, "conn", nil); err != nil {
		t.Fatal(err)
	}
	if h, _ := outboxRaw(t, c, "gateway:outbox:conn"); h["_seq"] != "1" {
		t.Errorf("default key gateway:outbox:conn holds %v", h)
	}
}

// TestOutboxOpen: OpenOutbox owns its client; a bad URL or option is refused.
func TestOutboxOpen(t *testing.T) {
	url := standaloneURL(t)
	ctx := context.Background()
	ob, err := store.OpenOutbox(url, store.WithPrefix(outboxPrefix(t)), store.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ob.Append(ctx, "conn", []byte("p")); err != nil {
		t.Fatal(err)
	}
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ob.Append(ctx, "conn", []byte("p")); err == nil {
		t.Error("Append after Close of an owned client succeeded")
	}
	if _, err := store.OpenOutbox("nosuch://x"); err == nil {
		t.Error("OpenOutbox with a bad URL succeeded")
	}
	if _, err := store.OpenOutbox(url, store.WithMaxUnacked(-1)); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("OpenOutbox with a bad option = %v, want ErrInvalidArgument", err)
	}
	// A borrowed client stays open.
	c := newClient(t, url)
	if err := mustStore(store.NewOutbox(c)).Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Errorf("NewOutbox's Close closed the borrowed client: %v", err)
	}
}

// TestOutboxScriptsAreRegistered: the five outbox scripts are in the bundle,
// with unacked read-only and the others writing.
func TestOutboxScriptsAreRegistered(t *testing.T) {
	for name, ro := range map[string]bool{"append": false, "ack": false, "advance": false, "unacked": true, "drop": false} {
		s, ok := redisonce.Get(name)
		if !ok || s.ReadOnly != ro || s.NumKeys != 1 {
			t.Errorf("script %s = %+v, %v; want read-only %v", name, s, ok, ro)
		}
	}
}

// TestOutboxBadInputSendsNothing: calls refused in Go (bad ids, oversize
// payloads, bad options, a cancelled context) send no command and leave no key.
func TestOutboxBadInputSendsNothing(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, redisproc.Options{})
	c := newClient(t, srv.URL())
	ob := mustStore(store.NewOutbox(c))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	before := commandCount(t, c)
	for _, ch := range []struct {
		name string
		call func() error
		want error
	}{
		{"empty conn", func() error { _, _, err := ob.Append(ctx, "", nil); return err }, store.ErrInvalidArgument},
		{"long conn", func() error { _, err := ob.Tail(ctx, strings.Repeat("c", store.MaxIDLen+1)); return err }, store.ErrInvalidArgument},
		{"reserved id", func() error { _, err := ob.AppendWithID(ctx, "c", "_seq", nil); return err }, store.ErrInvalidArgument},
		{"long id", func() error { _, err := ob.AppendWithID(ctx, "c", strings.Repeat("i", 257), nil); return err }, store.ErrInvalidArgument},
		{"oversize payload", func() error { _, _, err := ob.Append(ctx, "c", make([]byte, (4<<20)+1)); return err }, store.ErrInvalidArgument},
		{"ack of an empty id", func() error { return ob.Ack(ctx, "c", "", 1) }, store.ErrInvalidArgument},
		{"batch with a reserved id", func() error { _, err := ob.AckMany(ctx, "c", []string{"a", "_gen"}, 1); return err }, store.ErrInvalidArgument},
		{"empty batch", func() error { _, err := ob.AckMany(ctx, "c", nil, 1); return err }, nil},
		{"negative ttl", func() error {
			_, err := store.NewOutbox(c, store.WithTTL(-time.Second))
			return err
		}, store.ErrInvalidArgument},
		{"negative max", func() error {
			_, err := store.NewOutbox(c, store.WithMaxUnacked(-1))
			return err
		}, store.ErrInvalidArgument},
		{"cancelled context", func() error { return ob.AdvanceGeneration(cancelled, "c", 1) }, context.Canceled},
	} {
		if err := ch.call(); !errors.Is(err, ch.want) || (ch.want == nil && err != nil) {
			t.Errorf("%s: error = %v, want %v", ch.name, err, ch.want)
		}
	}
	// The second reading counts the first INFO, and nothing else may be sent.
	if after := commandCount(t, c); after != before+1 {
		t.Errorf("refused calls sent %d commands", after-before-1)
	}
	if n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("DBSIZE after refused calls = %d, %v; want 0", n, err)
	}
}

// TestOutboxEpochAfterSnapshotRestore: no (epoch, seq) reuse, for Append and
// AppendMany: appends acknowledged after the last
// snapshot are lost when the server comes back from it (a restart, like a
// failover, gives the server a new replication ID), and the appends that
// follow take their seqs again, so they must carry a new epoch: no (epoch,
// seq) names two messages. The tail keeps the snapshot's messages, with the
// new epoch.
func TestOutboxEpochAfterSnapshotRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t, redisproc.Options{})
	o := mustStore(store.NewOutbox(newClient(t, srv.URL())))
	many := func(ids ...string) []store.Outgoing {
		out := make([]store.Outgoing, len(ids))
		for i, id := range ids {
			out[i] = store.Outgoing{ID: id, Payload: []byte(id)}
		}
		return out
	}
	type pair struct {
		conn       string
		epoch, seq uint64
	}
	named := map[pair]string{}
	name := func(conn string, as ...store.Appended) {
		for _, a := range as {
			p := pair{conn, a.Epoch, a.Seq}
			if prev, ok := named[p]; ok && prev != a.ID {
				t.Errorf("%s: (epoch %d, seq %d) names %s and %s", conn, a.Epoch, a.Seq, prev, a.ID)
			}
			named[p] = a.ID
		}
	}
	appendOne := func(conn, id string) store.Appended {
		t.Helper()
		a, err := o.AppendWithID(ctx, conn, id, []byte(id))
		if err != nil || !a.Created {
			t.Fatalf("AppendWithID(%s, %s) = %+v, %v", conn, id, a, err)
		}
		name(conn, a)
		return a
	}
	appendMany := func(conn string, ids ...string) []store.Appended {
		t.Helper()
		as, err := o.AppendMany(ctx, conn, many(ids...))
		if err != nil || len(as) != len(ids) {
			t.Fatalf("AppendMany(%s, %v) = %+v, %v", conn, ids, as, err)
		}
		name(conn, as...)
		return as
	}
	// Before the snapshot: each connection made by the other call.
	appendOne("one", "a1")
	appendMany("one", "a2")
	appendMany("many", "b1", "b2")
	appendOne("many", "b3")
	if _, err := srv.Do("SAVE"); err != nil {
		t.Fatal(err)
	}
	lostOne, lostMany := appendOne("one", "a3"), appendMany("many", "b4", "b5")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v\n%s", err, srv.Log())
	}
	// A client of its own (the old one's connections died with the server;
	// a write is not retried on a lost connection).
	o = mustStore(store.NewOutbox(newClient(t, srv.URL())))
	// Back from the snapshot: a3, b4 and b5 are gone; their seqs are handed
	// out again, under a new epoch.
	again := appendMany("one", "x3", "x4")
	if again[0].Seq != lostOne.Seq || again[0].Epoch <= lostOne.Epoch {
		t.Errorf("AppendMany after the restore = %+v; want seq %d again with an epoch above %d", again[0], lostOne.Seq, lostOne.Epoch)
	}
	b := appendOne("many", "y4")
	if b.Seq != lostMany[0].Seq || b.Epoch <= lostMany[0].Epoch {
		t.Errorf("AppendWithID after the restore = %+v; want seq %d again with an epoch above %d", b, lostMany[0].Seq, lostMany[0].Epoch)
	}
	for conn, want := range map[string]uint64{"one": again[0].Epoch, "many": b.Epoch} {
		tail, err := o.Tail(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		if tail.Epoch != want {
			t.Errorf("%s: Tail's epoch %d, want the new %d", conn, tail.Epoch, want)
		}
		for _, m := range tail.Messages {
			name(conn, store.Appended{ID: m.ID, Seq: m.Seq, Epoch: tail.Epoch})
		}
	}
}
