package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

var (
	scriptAppend  = mustScript("append")
	scriptAck     = mustScript("ack")
	scriptAdvance = mustScript("advance")
	scriptUnacked = mustScript("unacked")
	scriptDrop    = mustScript("drop")
)

// Outbox keeps, per connection, the messages a gateway node sent that the
// client has not yet acknowledged, in Redis, so they survive the node's death:
// the node that takes the connection over replays them in order with Unacked.
//
// Connection conn is one hash, prefix + conn, holding the reserved fields _seq
// (last sequence number), _gen (ack-generation floor, decimal uint64), _epoch
// (server time in microseconds when this incarnation of the hash was created)
// and _rid (the replication ID of the server that minted _epoch; see
// Appended.Epoch), and one field per message: id -> "<seq>:<payload>".
//
// Acks are fenced: each owner of a connection acks with its generation (for
// example a counter bumped on every reconnect); an ack raises the floor to its
// generation, and an ack below the floor — from a node that lost the connection
// — fails with ErrStaleOwner and changes nothing. The new owner calls
// AdvanceGeneration as it takes over, so the old owner is fenced out even before
// the new one acks anything.
//
// Acks never remove the reserved fields: without a TTL (WithTTL) a drained
// connection keeps its 4 small fields, and its seq line, until DropConn.
// Outbox is safe for concurrent use, and any number of Outbox values on any
// number of processes share one seq line and one floor per connection.
type Outbox struct {
	redisStore
	ttl time.Duration // 0 = leave the expiry alone
	max string        // decimal, "0" = unbounded
	// ttlMS renders ttl for the scripts.
	ttlMS msCache
	ev    events
}

var _ OutboxStore = (*Outbox)(nil)

// NewOutbox returns an outbox on a client the caller keeps: Close does not close
// it. Options: WithPrefix (default "gateway:outbox:"), WithTTL (default 0: a
// connection's hash never expires; with a TTL, every Append, and every
// AdvanceGeneration that raises the floor, re-arms it), WithMaxUnacked (default
// 0: unbounded).
//
// For the performance measured in BENCHMARKS.md, build the client from
// ClientOptions (DisableCache: true, MaxFlushDelay: 20µs), as OpenOutbox does:
// the store never uses client-side caching.
func NewOutbox(c rueidis.Client, opts ...Option) *Outbox {
	cfg := newConfig(DefaultOutboxPrefix, opts)
	return &Outbox{redisStore: newRedisStore(c, cfg), ttl: cfg.ttl, max: strconv.Itoa(cfg.maxUnack), ev: newEvents("outbox", cfg)}
}

// OpenOutbox connects to url (redis://, rediss://, unix://, or a Sentinel
// deployment with ?addr=...&master_set=NAME) with ClientOptions and returns an outbox that owns the
// client: Close closes it.
func OpenOutbox(url string, opts ...Option) (*Outbox, error) {
	s := NewOutbox(nil, opts...)
	if err := s.open(url); err != nil {
		return nil, err
	}
	return s, nil
}

// Append adds payload to conn's tail under a new message id (32 lower-case hex
// characters from crypto/rand) and returns the id and its seq. The seq comes
// from the server (_seq + 1 in append.lua), so it is monotonic across every
// process and restart for as long as the connection's hash exists. Append is the
// outbox contract; AppendWithID gives the epoch too and makes retries safe.
func (s *Outbox) Append(ctx context.Context, conn string, payload []byte) (msgID string, seq uint64, err error) {
	if s == nil {
		return "", 0, nilStore("append", conn, "Outbox")
	}
	a, err := s.AppendWithID(ctx, conn, newToken(), payload)
	return a.ID, a.Seq, err
}

// AppendWithID adds payload to conn's tail under msgID (1..256 bytes, not
// starting with "_"). It is idempotent while the message is unacknowledged: a
// second call with the same id — a retry after a timeout — returns the first
// call's Seq and Epoch with Created false and writes nothing, even when the tail
// is full. An id that was acked is gone, so appending it again appends a new
// message. A new id while the tail holds WithMaxUnacked messages fails with
// ErrOutboxFull and writes nothing. A payload over MaxPayloadLen fails with
// ErrInvalidArgument before anything is sent.
func (s *Outbox) AppendWithID(ctx context.Context, conn, msgID string, payload []byte) (Appended, error) {
	if s == nil {
		return Appended{}, nilStore("append", conn, "Outbox")
	}
	if s.ev.obs == nil {
		return s.appendWithID(ctx, conn, msgID, payload)
	}
	start := time.Now()
	a, err := s.appendWithID(ctx, conn, msgID, payload)
	s.ev.report(ctx, "append", "append", conn, 1, outcome(err, appendOutcome(a.Created)), start, err)
	return a, err
}

func (s *Outbox) appendWithID(ctx context.Context, conn, msgID string, payload []byte) (Appended, error) {
	if err := checkOutboxAppend(ctx, s.err, conn, msgID, payload); err != nil {
		return Appended{}, err
	}
	r := s.exec(ctx, scriptAppend, s.key(conn), msgID, rueidis.BinaryString(payload), s.ttlMS.ms(s.ttl), s.max)
	a, err := parseAppended("append", conn, r)
	a.ID = msgID
	return a, err
}

// Unacked returns conn's unacknowledged messages, ascending by Seq: the tail to
// replay to a client that reconnected. It is empty (nil) when the connection has
// no messages or does not exist. The payloads are cut from one buffer (one
// allocation per call): keeping one Payload keeps the whole tail's bytes. A stored value that the outbox scripts did not
// write fails with ErrUnexpectedReply.
func (s *Outbox) Unacked(ctx context.Context, conn string) ([]Message, error) {
	if s == nil {
		return nil, nilStore("unacked", conn, "Outbox")
	}
	t, err := s.observeTail(ctx, "unacked", conn)
	return t.Messages, err
}

// Tail is Unacked with the connection's Epoch and Generation floor, read in the
// same atomic step. It runs unacked.lua, a read-only script (EVALSHA_RO).
func (s *Outbox) Tail(ctx context.Context, conn string) (Tail, error) {
	if s == nil {
		return Tail{}, nilStore("tail", conn, "Outbox")
	}
	return s.observeTail(ctx, "tail", conn)
}

// observeTail is Tail, reported as op.
func (s *Outbox) observeTail(ctx context.Context, op, conn string) (Tail, error) {
	if s.ev.obs == nil {
		return s.tail(ctx, conn)
	}
	start := time.Now()
	t, err := s.tail(ctx, conn)
	s.ev.report(ctx, op, "unacked", conn, 1, outcome(err, OutcomeRead), start, err)
	return t, err
}

func (s *Outbox) tail(ctx context.Context, conn string) (Tail, error) {
	if err := s.check(ctx, "unacked", conn); err != nil {
		return Tail{}, err
	}
	return parseTail("unacked", conn, s.exec(ctx, scriptUnacked, s.key(conn)))
}

// Ack removes msgID from conn's tail on behalf of the owner at generation. A
// generation below the connection's floor fails with ErrStaleOwner and changes
// nothing; one above raises the floor. Acking an id that is not in the tail is
// not an error, and acking on a connection that does not exist is not an error
// and creates nothing.
func (s *Outbox) Ack(ctx context.Context, conn, msgID string, generation uint64) error {
	if s == nil {
		return nilStore("ack", conn, "Outbox")
	}
	_, err := s.observeAck(ctx, "ack", conn, []string{msgID}, generation)
	return err
}

// AckMany is Ack for many ids of one connection in one script call: all of them
// or, on ErrStaleOwner, none. It returns how many were in the tail and are now
// removed. Every id is validated before anything is sent. With no ids it does
// nothing and sends nothing (use AdvanceGeneration to raise the floor).
func (s *Outbox) AckMany(ctx context.Context, conn string, msgIDs []string, generation uint64) (int, error) {
	if s == nil {
		return 0, nilStore("ack_many", conn, "Outbox")
	}
	return s.observeAck(ctx, "ack_many", conn, msgIDs, generation)
}

// observeAck is AckMany, reported as op.
func (s *Outbox) observeAck(ctx context.Context, op, conn string, msgIDs []string, generation uint64) (int, error) {
	if s.ev.obs == nil {
		return s.ackMany(ctx, conn, msgIDs, generation)
	}
	start := time.Now()
	n, err := s.ackMany(ctx, conn, msgIDs, generation)
	reportAck(ctx, &s.ev, op, "ack", conn, len(msgIDs), n, start, err)
	return n, err
}

func (s *Outbox) ackMany(ctx context.Context, conn string, msgIDs []string, generation uint64) (int, error) {
	if err := checkOutboxAck(ctx, s.err, conn, msgIDs); err != nil || len(msgIDs) == 0 {
		return 0, err
	}
	args := make([]string, 0, 1+len(msgIDs))
	args = append(args, strconv.FormatUint(generation, 10))
	args = append(args, msgIDs...)
	n, err := replyInt("ack", conn, s.exec(ctx, scriptAck, s.key(conn), args...))
	if err != nil {
		return 0, err
	}
	if n < 0 || n > int64(len(msgIDs)) {
		return 0, errorf("ack", conn, ErrUnexpectedReply, "removed %d of %d ids", n, len(msgIDs))
	}
	return int(n), nil
}

// AdvanceGeneration raises conn's ack-generation floor to generation without
// acking anything, fencing out every owner with a lower generation; a node
// calls it as it takes a connection over. It does nothing when generation is not
// above the floor. On a connection that does not exist yet (a takeover before
// the first Append, or after DropConn or expiry) it creates a new incarnation
// holding only the floor (4 small fields, with the store's TTL), so no Ack below
// generation succeeds until the connection is dropped or expires. A raise
// re-arms the store's TTL. Appends are not fenced: they carry no generation.
func (s *Outbox) AdvanceGeneration(ctx context.Context, conn string, generation uint64) error {
	if s == nil {
		return nilStore("advance", conn, "Outbox")
	}
	if s.ev.obs == nil {
		_, err := s.advance(ctx, conn, generation)
		return err
	}
	start := time.Now()
	raised, err := s.advance(ctx, conn, generation)
	s.ev.report(ctx, "advance", "advance", conn, 1, outcome(err, advanceOutcome(raised)), start, err)
	return err
}

// advance is AdvanceGeneration; true when it raised the floor.
func (s *Outbox) advance(ctx context.Context, conn string, generation uint64) (bool, error) {
	if err := s.check(ctx, "advance", conn); err != nil {
		return false, err
	}
	r := s.exec(ctx, scriptAdvance, s.key(conn), strconv.FormatUint(generation, 10), s.ttlMS.ms(s.ttl))
	n, err := replyInt("advance", conn, r)
	if err != nil {
		return false, err
	}
	if n != 0 && n != 1 {
		return false, errorf("advance", conn, ErrUnexpectedReply, "want 0 or 1, got %d", n)
	}
	return n == 1, nil
}

// DropConn forgets conn: its tail, seq line, floor and epoch. The next Append
// starts a new incarnation (seq 1, a new Epoch, floor 0). Dropping an unknown
// connection is not an error.
func (s *Outbox) DropConn(ctx context.Context, conn string) error {
	if s == nil {
		return nilStore("drop", conn, "Outbox")
	}
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	var n int64
	err := s.check(ctx, "drop", conn)
	if err == nil {
		n, err = replyInt("drop", conn, s.exec(ctx, scriptDrop, s.key(conn)))
	}
	if s.ev.obs != nil {
		s.ev.report(ctx, "drop", "drop", conn, 1, outcome(err, found(n == 1, OutcomeDropped)), start, err)
	}
	return err
}

// parseAppended reads append.lua's {seq, epoch, created}; with
// ErrNotReplicated when its replicas did not confirm it.
func parseAppended(op, conn string, r reply) (Appended, error) {
	vals, err := replyArray(op, conn, r, 3)
	if err != nil {
		return Appended{}, err
	}
	var n [3]uint64
	for i := range vals {
		if n[i], err = replyUint(&vals[i]); err != nil {
			return Appended{}, errorf(op, conn, ErrUnexpectedReply, "element %d: %v", i+1, err)
		}
	}
	if n[0] == 0 || n[1] == 0 || n[2] > 1 {
		return Appended{}, errorf(op, conn, ErrUnexpectedReply, "seq %d, epoch %d, created %d", n[0], n[1], n[2])
	}
	return Appended{Seq: n[0], Epoch: n[1], Created: n[2] == 1}, r.replicated(op, conn)
}

// parseTail reads unacked.lua's {epoch, generation, id1, value1, ...}.
func parseTail(op, conn string, r reply) (Tail, error) {
	if err := r.Error(); err != nil {
		return Tail{}, opError(op, conn, err)
	}
	vals, err := r.ToArray()
	if err != nil {
		return Tail{}, errorf(op, conn, ErrUnexpectedReply, "want an array reply: %v", err)
	}
	if len(vals) == 0 {
		return Tail{}, nil
	}
	if len(vals) < 2 || len(vals)%2 != 0 {
		return Tail{}, errorf(op, conn, ErrUnexpectedReply, "want epoch, generation and id/value pairs, got %d elements", len(vals))
	}
	var t Tail
	if t.Epoch, err = replyUint(&vals[0]); err != nil || t.Epoch == 0 {
		return Tail{}, errorf(op, conn, ErrUnexpectedReply, "epoch %s is not a positive integer", vals[0].String())
	}
	if t.Generation, err = replyUint(&vals[1]); err != nil {
		return Tail{}, errorf(op, conn, ErrUnexpectedReply, "generation: %v", err)
	}
	if len(vals) > 2 {
		t.Messages = make([]Message, 0, (len(vals)-2)/2)
	}
	// Every payload is copied into one buffer: one allocation for the tail
	// instead of one per message. Each Payload is capped at its own length,
	// so appending to one never writes into the next.
	size := 0
	for i := 3; i < len(vals); i += 2 {
		if v, err := replyString(&vals[i]); err == nil {
			size += len(v)
		}
	}
	buf := make([]byte, 0, size)
	for i := 2; i < len(vals); i += 2 {
		id, err1 := replyString(&vals[i])
		v, err2 := replyString(&vals[i+1])
		if err1 != nil || err2 != nil || id == "" || id[0] == '_' {
			return Tail{}, errorf(op, conn, ErrUnexpectedReply, "pair %d is not a message id and value", i/2)
		}
		seqText, payload, ok := strings.Cut(v, ":")
		seq, err := strconv.ParseUint(seqText, 10, 64)
		if !ok || err != nil || seq == 0 {
			return Tail{}, errorf(op, conn, ErrUnexpectedReply, "message %q: value is not \"<seq>:<payload>\"", id)
		}
		start := len(buf)
		buf = append(buf, payload...)
		t.Messages = append(t.Messages, Message{ID: id, Seq: seq, Payload: buf[start:len(buf):len(buf)]})
	}
	sortMessages(t.Messages)
	return t, nil
}
