package store

import (
	"context"
	"slices"
	"strings"
)

// DefaultOutboxPrefix is the key prefix of Outbox unless WithPrefix says
// otherwise: connection conn lives in the hash "gateway:outbox:" + conn.
const DefaultOutboxPrefix = "gateway:outbox:"

const (
	// MaxMessageIDLen is the longest outbox message id, in bytes. Message ids are
	// 1..MaxMessageIDLen bytes of any value that does not start with "_" (the
	// prefix of the hash's reserved fields _seq, _gen, _epoch and _rid).
	MaxMessageIDLen = 256
	// MaxPayloadLen is the largest outbox payload, in bytes: 4 MiB, the default
	// largest message a gRPC server receives (MaxRecvMsgSize). Every payload of a
	// connection's tail comes back in one Unacked reply, so bound the tail with
	// WithMaxUnacked when payloads are large. append.lua enforces the same limit.
	MaxPayloadLen = 4 << 20
)

// OutboxStore is what Outbox and MemoryOutbox implement; storetest.TestOutbox
// checks any implementation against the contract.
type OutboxStore interface {
	Append(ctx context.Context, conn string, payload []byte) (msgID string, seq uint64, err error)
	AppendWithID(ctx context.Context, conn, msgID string, payload []byte) (Appended, error)
	AppendMany(ctx context.Context, conn string, msgs []Outgoing) ([]Appended, error)
	Unacked(ctx context.Context, conn string) ([]Message, error)
	Tail(ctx context.Context, conn string) (Tail, error)
	Ack(ctx context.Context, conn, msgID string, generation uint64) error
	AckMany(ctx context.Context, conn string, msgIDs []string, generation uint64) (int, error)
	AdvanceGeneration(ctx context.Context, conn string, generation uint64) error
	DropConn(ctx context.Context, conn string) error
	Close() error
}

// Message is one unacknowledged message of a connection.
type Message struct {
	// ID is the message id: minted by Append (32 lower-case hex characters) or
	// given to AppendWithID.
	ID string
	// Seq is the message's place in the connection's sequence: 1, 2, 3... for
	// one incarnation of the connection (see Tail.Epoch). Acks leave gaps.
	Seq uint64
	// Payload is the message's bytes, exactly as appended.
	Payload []byte
}

// Appended is the result of AppendWithID, and of each message of AppendMany.
type Appended struct {
	// ID is the message id.
	ID string
	// Seq is the message's sequence number; for an idempotent retry (Created
	// false) it is the seq the message got when it was first appended.
	Seq uint64
	// Epoch identifies the incarnation of the connection's outbox: the server
	// time in microseconds when it was created (by the first Append after it
	// did not exist: at the start, or after DropConn or TTL expiry). Seq restarts
	// at 1 in a new incarnation and Epoch changes with it, so a client that
	// dedupes on (Epoch, Seq) is never fooled by a restarted sequence.
	//
	// The Redis store also mints a new Epoch (above the old one; Seq goes on)
	// on the first Append or AppendMany after the hash came through a
	// failover or a restart of its server — when the server's replication ID
	// is not the one stored with the epoch — because appends acknowledged
	// just before may be lost and their seqs would come again. So an (Epoch, Seq) pair never names
	// two messages, with or without WithWaitReplicas; a client that sees the
	// Epoch change replays the tail as new (messages it already has come
	// again under the new Epoch: duplicates, never losses). See the paragraph
	// "No (Epoch, Seq) reuse" of docs/failover.md.
	Epoch uint64
	// Created is true when this call appended the message, false when the id was
	// already in the tail (the stored payload is kept, nothing is written).
	Created bool
}

// Tail is a connection's unacknowledged messages, for replay after a reconnect.
type Tail struct {
	// Epoch identifies the incarnation of the connection's outbox (see
	// Appended.Epoch); 0 when the connection does not exist.
	Epoch uint64
	// Generation is the ack-generation floor: an Ack with a lower generation
	// fails with ErrStaleOwner. 0 for a new or absent connection.
	Generation uint64
	// Messages are the unacknowledged messages, ascending by Seq.
	Messages []Message
}

// checkOutbox validates the store's options, the context and the connection id.
func checkOutbox(ctx context.Context, cfgErr error, op, conn string) error {
	if cfgErr != nil {
		return cfgErr
	}
	return checkID(ctx, op, conn)
}

func checkOutboxAppend(ctx context.Context, cfgErr error, conn, msgID string, payload []byte) error {
	if err := checkOutbox(ctx, cfgErr, "append", conn); err != nil {
		return err
	}
	if err := checkMessageID("append", conn, msgID); err != nil {
		return err
	}
	if len(payload) > MaxPayloadLen {
		return errorf("append", conn, ErrInvalidArgument, "payload is %d bytes, the limit is %d", len(payload), MaxPayloadLen)
	}
	return nil
}

func checkOutboxAck(ctx context.Context, cfgErr error, conn string, msgIDs []string) error {
	if err := checkOutbox(ctx, cfgErr, "ack", conn); err != nil {
		return err
	}
	for _, id := range msgIDs {
		if err := checkMessageID("ack", conn, id); err != nil {
			return err
		}
	}
	return nil
}

// checkMessageID validates an outbox message id: 1..MaxMessageIDLen bytes, not
// starting with "_".
func checkMessageID(op, conn, id string) error {
	switch {
	case id == "":
		return errorf(op, conn, ErrInvalidArgument, "empty message id")
	case len(id) > MaxMessageIDLen:
		return errorf(op, conn, ErrInvalidArgument, "message id is %d bytes, the limit is %d", len(id), MaxMessageIDLen)
	case id[0] == '_':
		return errorf(op, conn, ErrInvalidArgument, "message id %q starts with \"_\" (reserved)", id)
	}
	return nil
}

// sortMessages orders a tail by Seq (then ID, so a corrupt duplicate seq still
// sorts deterministically).
func sortMessages(m []Message) {
	slices.SortFunc(m, func(a, b Message) int {
		if a.Seq != b.Seq {
			if a.Seq < b.Seq {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
}
