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

// redisOutbox is Outbox's Redis backend: connection conn is one hash, prefix
// + conn, holding the reserved fields _seq (last sequence number), _gen
// (ack-generation floor, decimal uint64), _epoch (server time in
// microseconds when this incarnation of the hash was created) and _rid (the
// replication ID of the server that minted _epoch; see Appended.Epoch), and
// one field per message: id -> "<seq>:<payload>".
type redisOutbox struct {
	redisStore
	ttl time.Duration // 0 = leave the expiry alone
	max string        // decimal, "0" = unbounded
	// ttlMS renders ttl for the scripts.
	ttlMS msCache
}

func (b *redisOutbox) append(ctx context.Context, conn, msgID string, payload []byte) (Appended, error) {
	r := b.exec(ctx, scriptAppend, b.key(conn), msgID, rueidis.BinaryString(payload), b.ttlMS.ms(b.ttl), b.max)
	return parseAppended("append", conn, r)
}

func (b *redisOutbox) tail(ctx context.Context, conn string) (Tail, error) {
	return parseTail("unacked", conn, b.exec(ctx, scriptUnacked, b.key(conn)))
}

func (b *redisOutbox) ack(ctx context.Context, conn, msgID string, msgIDs []string, generation uint64) (int, error) {
	if msgIDs == nil {
		msgIDs = []string{msgID}
	}
	args := make([]string, 0, 1+len(msgIDs))
	args = append(args, strconv.FormatUint(generation, 10))
	args = append(args, msgIDs...)
	n, err := replyInt("ack", conn, b.exec(ctx, scriptAck, b.key(conn), args...))
	if err != nil {
		return 0, err
	}
	if n < 0 || n > int64(len(msgIDs)) {
		return 0, errorf("ack", conn, ErrUnexpectedReply, "removed %d of %d ids", n, len(msgIDs))
	}
	return int(n), nil
}

func (b *redisOutbox) advance(ctx context.Context, conn string, generation uint64) (bool, error) {
	r := b.exec(ctx, scriptAdvance, b.key(conn), strconv.FormatUint(generation, 10), b.ttlMS.ms(b.ttl))
	n, err := replyInt("advance", conn, r)
	if err != nil {
		return false, err
	}
	if n != 0 && n != 1 {
		return false, errorf("advance", conn, ErrUnexpectedReply, "want 0 or 1, got %d", n)
	}
	return n == 1, nil
}

func (b *redisOutbox) drop(ctx context.Context, conn string) (bool, error) {
	n, err := replyInt("drop", conn, b.exec(ctx, scriptDrop, b.key(conn)))
	return n == 1, err
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
