package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// memOutbox is Outbox's memory backend: append.lua, append_many.lua,
// unacked.lua, ack.lua, advance.lua and drop.lua restated in Go on a map,
// with WithClock's clock in place of the server's TIME.
type memOutbox struct {
	mu        sync.Mutex
	conns     map[string]*memConn
	lastEpoch uint64
	ttl       time.Duration
	max       int
	now       func() time.Time
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

// get returns conn's live hash, dropping an expired one. Callers hold mu.
func (b *memOutbox) get(conn string, now time.Time) *memConn {
	c, ok := b.conns[conn]
	if ok && !c.expires.IsZero() && !now.Before(c.expires) {
		delete(b.conns, conn)
		return nil
	}
	return c
}

// rearm is PEXPIRE ttl_ms when the store has a TTL. Callers hold mu.
func (b *memOutbox) rearm(c *memConn, now time.Time) {
	if b.ttl > 0 {
		c.expires = expiryAt(now, b.ttl)
	}
}

func (b *memOutbox) append(_ context.Context, conn, msgID string, payload []byte) (Appended, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	c := b.get(conn, now)
	if c != nil {
		if m, ok := c.msgs[msgID]; ok {
			b.rearm(c, now)
			return Appended{ID: msgID, Seq: m.seq, Epoch: c.epoch}, nil
		}
		if b.max > 0 && len(c.msgs) >= b.max {
			return Appended{}, errorf("append", conn, ErrOutboxFull, "the tail holds %d unacked messages", len(c.msgs))
		}
		if c.seq >= maxExactSeq {
			return Appended{}, errorf("append", conn, ErrOutboxFull, "_seq is at 2^53-1, the last exact sequence number")
		}
	} else {
		c = b.create(conn, now)
	}
	c.seq++
	c.msgs[msgID] = memMessage{seq: c.seq, payload: append([]byte{}, payload...)}
	b.rearm(c, now)
	return Appended{ID: msgID, Seq: c.seq, Epoch: c.epoch, Created: true}, nil
}

// maxExactSeq is 2^53-1, the last sequence number append.lua hands out (the
// last integer a Lua number holds exactly).
const maxExactSeq = 1<<53 - 1

// create starts a new incarnation of conn: seq 0, floor 0, a new epoch.
// Callers hold mu.
func (b *memOutbox) create(conn string, now time.Time) *memConn {
	epoch := uint64(max(now.UnixMicro(), 1))
	if epoch <= b.lastEpoch {
		epoch = b.lastEpoch + 1
	}
	b.lastEpoch = epoch
	c := &memConn{epoch: epoch, msgs: map[string]memMessage{}}
	b.conns[conn] = c
	return c
}

func (b *memOutbox) appendMany(_ context.Context, conn string, ids []string, msgs []Outgoing) ([]Appended, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	c := b.get(conn, now)
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
	if len(fresh) > 0 && b.max > 0 && held+len(fresh) > b.max {
		return nil, errorf("append_many", conn, ErrOutboxFull, "the tail holds %d unacked messages, %d more do not fit", held, len(fresh))
	}
	if c == nil {
		c = b.create(conn, now)
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
	b.rearm(c, now)
	return out, nil
}

func (b *memOutbox) tail(_ context.Context, conn string) (Tail, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.get(conn, b.now())
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

func (b *memOutbox) ack(_ context.Context, conn, msgID string, msgIDs []string, generation uint64) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.get(conn, b.now())
	if c == nil {
		return 0, nil
	}
	if generation < c.gen {
		return 0, fmt.Errorf("redisonce: ack %q: %w: generation %d is below the floor %d", conn, ErrStaleOwner, generation, c.gen)
	}
	c.gen = generation
	if msgIDs == nil {
		_, ok := c.msgs[msgID]
		delete(c.msgs, msgID)
		return int(flag(ok)), nil
	}
	n := 0
	for _, id := range msgIDs {
		if _, ok := c.msgs[id]; ok {
			delete(c.msgs, id)
			n++
		}
	}
	return n, nil
}

func (b *memOutbox) advance(_ context.Context, conn string, generation uint64) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	c := b.get(conn, now)
	if c == nil && generation > 0 {
		// advance.lua creates a fence-only incarnation: the floor is never lost.
		c = b.create(conn, now)
	}
	if c != nil && generation > c.gen {
		c.gen = generation
		b.rearm(c, now)
		return true, nil
	}
	return false, nil
}

func (b *memOutbox) drop(_ context.Context, conn string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := b.get(conn, b.now()) != nil
	delete(b.conns, conn)
	return ok, nil
}

func (b *memOutbox) close() error { return nil }
