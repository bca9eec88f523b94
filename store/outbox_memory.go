package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryOutbox is the in-memory reference implementation of OutboxStore, with
// the same behaviour as Outbox (the storetest suite checks both). It is for tests
// and single-process programs; it is safe for concurrent use. WithClock sets its
// clock, which drives TTL expiry and epochs.
//
// Its epochs are the clock's time in microseconds at creation, raised when
// needed so that each is greater than every epoch the store handed out before
// (a fake clock that stands still still yields a new epoch after DropConn).
// It has no replicas and no failover, so it never re-mints an epoch the way
// Outbox does after one (see Appended.Epoch), and it accepts and ignores
// WithWaitReplicas.
type MemoryOutbox struct {
	mu        sync.Mutex
	conns     map[string]*memConn
	lastEpoch uint64
	ttl       time.Duration
	max       int
	now       func() time.Time
	err       error
	ev        events
}

// memConn is one connection's hash: _seq, _gen, _epoch and the messages
// (no _rid: a memory store has no replication ID).
type memConn struct {
	seq, gen, epoch uint64
	msgs            map[string]memMessage
	expires         time.Time // zero: never
}

type memMessage struct {
	seq     uint64
	payload []byte
}

var _ OutboxStore = (*MemoryOutbox)(nil)

// NewMemoryOutbox returns an empty in-memory outbox. Options: WithTTL (default
// 0: never expire), WithMaxUnacked (default 0: unbounded), WithClock (default
// time.Now).
func NewMemoryOutbox(opts ...Option) *MemoryOutbox {
	cfg := newConfig(DefaultOutboxPrefix, opts)
	return &MemoryOutbox{conns: map[string]*memConn{}, ttl: cfg.ttl, max: cfg.maxUnack, now: cfg.now, err: cfg.err, ev: newEvents("outbox", cfg)}
}

// get returns conn's live hash, dropping an expired one. Callers hold mu.
func (s *MemoryOutbox) get(conn string, now time.Time) *memConn {
	c, ok := s.conns[conn]
	if ok && !c.expires.IsZero() && !now.Before(c.expires) {
		delete(s.conns, conn)
		return nil
	}
	return c
}

// rearm is PEXPIRE ttl_ms when the store has a TTL. Callers hold mu.
func (s *MemoryOutbox) rearm(c *memConn, now time.Time) {
	if s.ttl > 0 {
		c.expires = expiryAt(now, s.ttl)
	}
}

// Append is Outbox.Append.
func (s *MemoryOutbox) Append(ctx context.Context, conn string, payload []byte) (string, uint64, error) {
	if s == nil {
		return "", 0, nilStore("append", conn, "MemoryOutbox")
	}
	a, err := s.AppendWithID(ctx, conn, newToken(), payload)
	return a.ID, a.Seq, err
}

// AppendWithID is Outbox.AppendWithID (append.lua).
func (s *MemoryOutbox) AppendWithID(ctx context.Context, conn, msgID string, payload []byte) (Appended, error) {
	if s == nil {
		return Appended{}, nilStore("append", conn, "MemoryOutbox")
	}
	if s.ev.obs == nil {
		return s.appendWithID(ctx, conn, msgID, payload)
	}
	start := time.Now()
	a, err := s.appendWithID(ctx, conn, msgID, payload)
	s.ev.report(ctx, "append", "", conn, 1, outcome(err, appendOutcome(a.Created)), start, err)
	return a, err
}

func (s *MemoryOutbox) appendWithID(ctx context.Context, conn, msgID string, payload []byte) (Appended, error) {
	if err := checkOutboxAppend(ctx, s.err, conn, msgID, payload); err != nil {
		return Appended{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	c := s.get(conn, now)
	if c != nil {
		if m, ok := c.msgs[msgID]; ok {
			s.rearm(c, now)
			return Appended{ID: msgID, Seq: m.seq, Epoch: c.epoch}, nil
		}
		if s.max > 0 && len(c.msgs) >= s.max {
			return Appended{}, errorf("append", conn, ErrOutboxFull, "the tail holds %d unacked messages", len(c.msgs))
		}
		if c.seq >= maxExactSeq {
			return Appended{}, errorf("append", conn, ErrOutboxFull, "_seq is at 2^53-1, the last exact sequence number")
		}
	} else {
		c = s.create(conn, now)
	}
	c.seq++
	c.msgs[msgID] = memMessage{seq: c.seq, payload: append([]byte{}, payload...)}
	s.rearm(c, now)
	return Appended{ID: msgID, Seq: c.seq, Epoch: c.epoch, Created: true}, nil
}

// maxExactSeq is 2^53-1, the last sequence number append.lua hands out (the
// last integer a Lua number holds exactly).
const maxExactSeq = 1<<53 - 1

// create starts a new incarnation of conn: seq 0, floor 0, a new epoch.
// Callers hold mu.
func (s *MemoryOutbox) create(conn string, now time.Time) *memConn {
	epoch := uint64(max(now.UnixMicro(), 1))
	if epoch <= s.lastEpoch {
		epoch = s.lastEpoch + 1
	}
	s.lastEpoch = epoch
	c := &memConn{epoch: epoch, msgs: map[string]memMessage{}}
	s.conns[conn] = c
	return c
}

// AppendMany is Outbox.AppendMany (append_many.lua).
func (s *MemoryOutbox) AppendMany(ctx context.Context, conn string, msgs []Outgoing) ([]Appended, error) {
	if s == nil {
		return nil, nilStore("append_many", conn, "MemoryOutbox")
	}
	if s.ev.obs == nil {
		return s.appendMany(ctx, conn, msgs)
	}
	start := time.Now()
	out, err := s.appendMany(ctx, conn, msgs)
	reportAppendMany(ctx, &s.ev, "", conn, len(msgs), out, start, err)
	return out, err
}

func (s *MemoryOutbox) appendMany(ctx context.Context, conn string, msgs []Outgoing) ([]Appended, error) {
	if err := checkAppendMany(ctx, s.err, conn, msgs); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return []Appended{}, nil
	}
	ids := mintIDs(msgs)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	c := s.get(conn, now)
	held := 0
	if c != nil {
		held = len(c.msgs)
	}
	fresh := map[string]bool{}
	for _, id := range ids {
		if c != nil {
			if _, ok := c.msgs[id]; ok {
				continue
			}
		}
		fresh[id] = true
	}
	if len(fresh) > 0 && c != nil && c.seq+uint64(len(fresh)) > maxExactSeq {
		return nil, errorf("append_many", conn, ErrOutboxFull, "_seq would pass 2^53-1, the last exact sequence number")
	}
	if len(fresh) > 0 && s.max > 0 && held+len(fresh) > s.max {
		return nil, errorf("append_many", conn, ErrOutboxFull, "the tail holds %d unacked messages, %d more do not fit", held, len(fresh))
	}
	if c == nil {
		c = s.create(conn, now)
	}
	out := make([]Appended, len(ids))
	for i, id := range ids {
		if m, ok := c.msgs[id]; ok {
			out[i] = Appended{ID: id, Seq: m.seq, Epoch: c.epoch}
			continue
		}
		c.seq++
		c.msgs[id] = memMessage{seq: c.seq, payload: append([]byte{}, msgs[i].Payload...)}
		out[i] = Appended{ID: id, Seq: c.seq, Epoch: c.epoch, Created: true}
	}
	s.rearm(c, now)
	return out, nil
}

// Unacked is Outbox.Unacked.
func (s *MemoryOutbox) Unacked(ctx context.Context, conn string) ([]Message, error) {
	if s == nil {
		return nil, nilStore("unacked", conn, "MemoryOutbox")
	}
	t, err := s.observeTail(ctx, "unacked", conn)
	return t.Messages, err
}

// Tail is Outbox.Tail (unacked.lua).
func (s *MemoryOutbox) Tail(ctx context.Context, conn string) (Tail, error) {
	if s == nil {
		return Tail{}, nilStore("tail", conn, "MemoryOutbox")
	}
	return s.observeTail(ctx, "tail", conn)
}

// observeTail is Tail, reported as op.
func (s *MemoryOutbox) observeTail(ctx context.Context, op, conn string) (Tail, error) {
	if s.ev.obs == nil {
		return s.tail(ctx, conn)
	}
	start := time.Now()
	t, err := s.tail(ctx, conn)
	s.ev.report(ctx, op, "", conn, 1, outcome(err, OutcomeRead), start, err)
	return t, err
}

func (s *MemoryOutbox) tail(ctx context.Context, conn string) (Tail, error) {
	if err := checkOutbox(ctx, s.err, "unacked", conn); err != nil {
		return Tail{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.get(conn, s.now())
	if c == nil {
		return Tail{}, nil
	}
	t := Tail{Epoch: c.epoch, Generation: c.gen}
	if len(c.msgs) > 0 {
		t.Messages = make([]Message, 0, len(c.msgs))
	}
	for id, m := range c.msgs {
		t.Messages = append(t.Messages, Message{ID: id, Seq: m.seq, Payload: append([]byte{}, m.payload...)})
	}
	sortMessages(t.Messages)
	return t, nil
}

// Ack is Outbox.Ack.
func (s *MemoryOutbox) Ack(ctx context.Context, conn, msgID string, generation uint64) error {
	if s == nil {
		return nilStore("ack", conn, "MemoryOutbox")
	}
	_, err := s.observeAck(ctx, "ack", conn, []string{msgID}, generation)
	return err
}

// AckMany is Outbox.AckMany (ack.lua).
func (s *MemoryOutbox) AckMany(ctx context.Context, conn string, msgIDs []string, generation uint64) (int, error) {
	if s == nil {
		return 0, nilStore("ack_many", conn, "MemoryOutbox")
	}
	return s.observeAck(ctx, "ack_many", conn, msgIDs, generation)
}

// observeAck is AckMany, reported as op.
func (s *MemoryOutbox) observeAck(ctx context.Context, op, conn string, msgIDs []string, generation uint64) (int, error) {
	if s.ev.obs == nil {
		return s.ackMany(ctx, conn, msgIDs, generation)
	}
	start := time.Now()
	n, err := s.ackMany(ctx, conn, msgIDs, generation)
	reportAck(ctx, &s.ev, op, "", conn, len(msgIDs), n, start, err)
	return n, err
}

func (s *MemoryOutbox) ackMany(ctx context.Context, conn string, msgIDs []string, generation uint64) (int, error) {
	if err := checkOutboxAck(ctx, s.err, conn, msgIDs); err != nil || len(msgIDs) == 0 {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.get(conn, s.now())
	if c == nil {
		return 0, nil
	}
	if generation < c.gen {
		return 0, fmt.Errorf("redisonce: ack %q: %w: generation %d is below the floor %d", conn, ErrStaleOwner, generation, c.gen)
	}
	c.gen = generation
	n := 0
	for _, id := range msgIDs {
		if _, ok := c.msgs[id]; ok {
			delete(c.msgs, id)
			n++
		}
	}
	return n, nil
}

// AdvanceGeneration is Outbox.AdvanceGeneration (advance.lua).
func (s *MemoryOutbox) AdvanceGeneration(ctx context.Context, conn string, generation uint64) error {
	if s == nil {
		return nilStore("advance", conn, "MemoryOutbox")
	}
	if s.ev.obs == nil {
		_, err := s.advance(ctx, conn, generation)
		return err
	}
	start := time.Now()
	raised, err := s.advance(ctx, conn, generation)
	s.ev.report(ctx, "advance", "", conn, 1, outcome(err, advanceOutcome(raised)), start, err)
	return err
}

// advance is AdvanceGeneration; true when it raised the floor.
func (s *MemoryOutbox) advance(ctx context.Context, conn string, generation uint64) (bool, error) {
	if err := checkOutbox(ctx, s.err, "advance", conn); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	c := s.get(conn, now)
	if c == nil && generation > 0 {
		// advance.lua creates a fence-only incarnation: the floor is never lost.
		c = s.create(conn, now)
	}
	if c != nil && generation > c.gen {
		c.gen = generation
		s.rearm(c, now)
		return true, nil
	}
	return false, nil
}

// DropConn is Outbox.DropConn (drop.lua).
func (s *MemoryOutbox) DropConn(ctx context.Context, conn string) error {
	if s == nil {
		return nilStore("drop", conn, "MemoryOutbox")
	}
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	ok, err := false, checkOutbox(ctx, s.err, "drop", conn)
	if err == nil {
		s.mu.Lock()
		ok = s.get(conn, s.now()) != nil
		delete(s.conns, conn)
		s.mu.Unlock()
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, "drop", "", conn, 1, outcome(err, found(ok, OutcomeDropped)), start, err)
	}
	return err
}

// Close does nothing; it is there to satisfy OutboxStore.
func (s *MemoryOutbox) Close() error { return nil }
