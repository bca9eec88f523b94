package scripts_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// outboxLoad drives Outbox: workers append to a few shared connections
// (AppendWithID with fresh ids), ack some of their own acknowledged messages
// (generation 1), and read the tail back (every message of theirs that was
// acknowledged and not acked since must be in it).
type outboxLoad struct {
	s      *store.Outbox
	prefix string
	conns  []string

	mu         sync.Mutex
	appended   map[string]outboxMsg // conn/id -> what the store acknowledged
	ackTried   map[string]bool      // conn/id -> an ack was sent for it
	acked      map[string]bool      // conn/id -> the ack was acknowledged
	mine       map[int][]string     // worker -> conn/id of its acknowledged appends, in order
	violations []string
}

type outboxMsg struct {
	conn, id string
	seq      uint64
	payload  string
}

func newOutboxLoad(c rueidis.Client, prefix string, tags []string) *outboxLoad {
	l := &outboxLoad{
		s: must.Store(store.NewOutbox(c, store.WithPrefix(prefix))), prefix: prefix,
		appended: map[string]outboxMsg{}, ackTried: map[string]bool{}, acked: map[string]bool{},
		mine: map[int][]string{},
	}
	for i := range 4 {
		if len(tags) == 0 {
			l.conns = append(l.conns, fmt.Sprint("conn", i))
		} else {
			l.conns = append(l.conns, fmt.Sprintf("{%s}conn%d", tags[i%len(tags)], i))
		}
	}
	return l
}

func (l *outboxLoad) Op(ctx context.Context, w, i int) error {
	switch i % 5 {
	case 3:
		return l.ack(ctx, w)
	case 4:
		return l.read(ctx, w, i)
	}
	conn := l.conns[(w+i)%len(l.conns)]
	id := fmt.Sprintf("w%d-%d", w, i)
	payload := fmt.Sprintf("payload of %s: %d", id, i*i)
	a, err := l.s.AppendWithID(ctx, conn, id, []byte(payload))
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !a.Created || a.Seq == 0 || a.Epoch == 0 {
		l.violations = append(l.violations, fmt.Sprintf("AppendWithID(%q, %q) of a fresh id = %+v", conn, id, a))
		return nil
	}
	k := conn + "/" + id
	l.appended[k] = outboxMsg{conn, id, a.Seq, payload}
	l.mine[w] = append(l.mine[w], k)
	return nil
}

// ack acks the oldest acknowledged message of worker w not acked yet.
func (l *outboxLoad) ack(ctx context.Context, w int) error {
	l.mu.Lock()
	var m outboxMsg
	for _, k := range l.mine[w] {
		if !l.ackTried[k] {
			m = l.appended[k]
			l.ackTried[k] = true
			break
		}
	}
	l.mu.Unlock()
	if m.id == "" {
		return nil
	}
	n, err := l.s.AckMany(ctx, m.conn, []string{m.id}, 1)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[m.conn+"/"+m.id] = true
	if n != 1 {
		l.violations = append(l.violations, fmt.Sprintf("Ack(%q, %q) of an unacked message removed %d", m.conn, m.id, n))
	}
	return nil
}

// read checks that the tail of a connection holds, in seq order, every
// acknowledged append of worker w to it that w has not tried to ack.
func (l *outboxLoad) read(ctx context.Context, w, i int) error {
	conn := l.conns[(w+i)%len(l.conns)]
	l.mu.Lock()
	var want []outboxMsg
	for _, k := range l.mine[w] {
		if m := l.appended[k]; m.conn == conn && !l.ackTried[k] {
			want = append(want, m)
		}
	}
	l.mu.Unlock()
	msgs, err := l.s.Unacked(ctx, conn)
	if err != nil {
		return err
	}
	got := map[string]store.Message{}
	for j, m := range msgs {
		got[m.ID] = m
		if j > 0 && msgs[j-1].Seq >= m.Seq {
			l.mu.Lock()
			l.violations = append(l.violations, fmt.Sprintf("Unacked(%q) not in ascending seq order at %d", conn, j))
			l.mu.Unlock()
			break
		}
	}
	for _, m := range want {
		if g, ok := got[m.id]; !ok || g.Seq != m.seq || string(g.Payload) != m.payload {
			l.mu.Lock()
			l.violations = append(l.violations, fmt.Sprintf("Unacked(%q) lost or changed %q (seq %d): got %+v", conn, m.id, m.seq, g))
			l.mu.Unlock()
		}
	}
	return nil
}

var outboxValue = regexp.MustCompile(`(?s)^([1-9][0-9]*):(.*)$`)

func (l *outboxLoad) Check(t *testing.T, c rueidis.Client) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.violations {
		t.Error(v)
	}
	bySeq := map[string]map[uint64]outboxMsg{}
	for _, m := range l.appended {
		if bySeq[m.conn] == nil {
			bySeq[m.conn] = map[uint64]outboxMsg{}
		}
		bySeq[m.conn][m.seq] = m
	}
	checked := 0
	for _, conn := range l.conns {
		k := raw(t, c, l.prefix+conn)
		if k.Type == "none" && len(bySeq[conn]) == 0 {
			continue
		}
		if k.Type != "hash" {
			t.Errorf("connection %q: raw key %+v, want a hash", conn, k)
			continue
		}
		top, err1 := strconv.ParseUint(k.Hash["_seq"], 10, 64)
		_, err2 := strconv.ParseUint(k.Hash["_gen"], 10, 64)
		epoch, err3 := strconv.ParseUint(k.Hash["_epoch"], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || epoch == 0 {
			t.Errorf("connection %q: reserved fields _seq %q _gen %q _epoch %q", conn, k.Hash["_seq"], k.Hash["_gen"], k.Hash["_epoch"])
			continue
		}
		present := map[uint64]string{}
		for f, v := range k.Hash {
			if strings.HasPrefix(f, "_") {
				continue
			}
			m := outboxValue.FindStringSubmatch(v)
			if m == nil {
				t.Errorf("connection %q: message %q has value %q, not <seq>:<payload>", conn, f, v)
				continue
			}
			seq, _ := strconv.ParseUint(m[1], 10, 64)
			if seq > top {
				t.Errorf("connection %q: message %q has seq %d above _seq %d", conn, f, seq, top)
			}
			if other, dup := present[seq]; dup {
				t.Errorf("connection %q: messages %q and %q share seq %d", conn, other, f, seq)
			}
			present[seq] = f
			checked++
			if a, ok := l.appended[conn+"/"+f]; ok && (a.seq != seq || a.payload != m[2]) {
				t.Errorf("connection %q: message %q is seq %d %q, the store acknowledged seq %d %q", conn, f, seq, m[2], a.seq, a.payload)
			}
		}
		// Contiguity: every seq up to _seq belongs to a message that is still
		// there or that somebody tried to ack; none was consumed by half an
		// append.
		var missing []uint64
		for seq := uint64(1); seq <= top; seq++ {
			if _, ok := present[seq]; ok {
				continue
			}
			if m, ok := bySeq[conn][seq]; ok && l.ackTried[conn+"/"+m.id] {
				continue
			}
			missing = append(missing, seq)
		}
		if len(missing) > 0 {
			t.Errorf("connection %q: seqs %v of 1..%d are neither present nor acked", conn, missing[:min(len(missing), 20)], top)
		}
		for seq, m := range bySeq[conn] {
			k := conn + "/" + m.id
			switch {
			case l.acked[k] && present[seq] != "":
				t.Errorf("connection %q: acknowledged ack of %q, yet it is there", conn, m.id)
			case !l.ackTried[k] && present[seq] != m.id:
				t.Errorf("connection %q: acknowledged append %q (seq %d) is gone", conn, m.id, seq)
			}
		}
	}
	return checked
}

func outboxProbes(c rueidis.Client, prefix string) []probe {
	s := must.Store(store.NewOutbox(c, store.WithPrefix(prefix), store.WithTTL(time.Hour)))
	return []probe{
		{name: "Append", write: true, run: func(ctx context.Context, id string) (bool, error) {
			_, _, err := s.Append(ctx, id, []byte("p"))
			return false, err
		}},
		{name: "AppendWithID", write: true, run: func(ctx context.Context, id string) (bool, error) {
			_, err := s.AppendWithID(ctx, id, "m-new", []byte("p"))
			return false, err
		}},
		{name: "Ack", write: true, frees: true, run: func(ctx context.Context, id string) (bool, error) {
			return false, s.Ack(ctx, id, "m1", 7)
		}},
		{name: "AckMany", write: true, frees: true, run: func(ctx context.Context, id string) (bool, error) {
			_, err := s.AckMany(ctx, id, []string{"m1", "m2"}, 7)
			return false, err
		}},
		{name: "AdvanceGeneration", write: true, run: func(ctx context.Context, id string) (bool, error) {
			return false, s.AdvanceGeneration(ctx, id, 9)
		}},
		{name: "Unacked", run: func(ctx context.Context, id string) (bool, error) {
			_, err := s.Unacked(ctx, id)
			return false, err
		}},
		{name: "Tail", run: func(ctx context.Context, id string) (bool, error) {
			_, err := s.Tail(ctx, id)
			return false, err
		}},
		{name: "DropConn", write: true, frees: true, run: func(ctx context.Context, id string) (bool, error) {
			return false, s.DropConn(ctx, id)
		}, wrongTypeOK: true},
	}
}

// outboxSeedTail gives connection id a tail of two messages, m1 and m2.
func outboxSeedTail(ctx context.Context, c rueidis.Client, prefix, id string) error {
	s := must.Store(store.NewOutbox(c, store.WithPrefix(prefix)))
	for _, m := range []string{"m1", "m2"} {
		if _, err := s.AppendWithID(ctx, id, m, []byte("payload "+m)); err != nil {
			return err
		}
	}
	return nil
}
