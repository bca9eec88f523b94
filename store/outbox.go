package store

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// defaultOutboxPrefix is the key prefix of Outbox unless WithPrefix says
// otherwise: connection conn lives in the hash "gateway:outbox:" + conn.
const defaultOutboxPrefix = "gateway:outbox:"

const (
	// maxMessageIDLen is the longest outbox message id, in bytes. Message ids are
	// 1..maxMessageIDLen bytes of any value that does not start with "_" (the
	// prefix of the hash's reserved fields _seq, _gen, _epoch and _rid).
	maxMessageIDLen = 256
	// maxPayloadLen is the largest outbox payload, in bytes: 4 MiB, the default
	// largest message a gRPC server receives (MaxRecvMsgSize). Every payload of a
	// connection's tail comes back in one Unacked reply, so bound the tail with
	// WithMaxUnacked when payloads are large. append.lua enforces the same limit.
	maxPayloadLen = 4 << 20
)

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

// Outbox keeps, per connection, the messages a gateway node sent that the
// client has not yet acknowledged, in Redis (NewOutbox, OpenOutbox), so they
// survive the node's death: the node that takes the connection over replays
// them in order with Unacked. NewMemoryOutbox keeps them in this process
// instead, with the same behaviour.
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
	core
	b outboxBackend
}

// outboxBackend is where Outbox's connections live: Redis (one script per
// method) or memory (the same statements in Go). It only runs the
// operation; the arguments were checked by Outbox. Its TTL and tail limit
// are the store's options.
type outboxBackend interface {
	// append is append.lua: msgID with payload on conn's tail.
	append(ctx context.Context, conn, msgID string, payload []byte) (Appended, error)
	// appendMany is append_many.lua: ids[i] with msgs[i].Payload, for a
	// burst of at least one message.
	appendMany(ctx context.Context, conn string, ids []string, msgs []Outgoing) ([]Appended, error)
	// tail is unacked.lua.
	tail(ctx context.Context, conn string) (Tail, error)
	// ack is ack.lua for msgIDs, or for msgID alone when msgIDs is nil
	// (Ack: no slice to allocate): how many were removed.
	ack(ctx context.Context, conn, msgID string, msgIDs []string, generation uint64) (int, error)
	// advance is advance.lua: true when it raised the floor.
	advance(ctx context.Context, conn string, generation uint64) (bool, error)
	// drop is drop.lua: true when conn existed.
	drop(ctx context.Context, conn string) (bool, error)
	close() error
}

// NewOutbox returns an outbox on a client the caller keeps: Close does not close
// it. Options: WithPrefix (default "gateway:outbox:"), WithTTL (default 0: a
// connection's hash never expires; with a TTL, every Append, and every
// AdvanceGeneration that raises the floor, re-arms it), WithMaxUnacked (default
// 0: unbounded), WithWaitReplicas, WithObserver. An invalid option, one that
// does not apply (Option), or a nil client fails here.
//
// For the performance measured in BENCHMARKS.md, build the client from
// ClientOptions (DisableCache: true, MaxFlushDelay: 20µs), as OpenOutbox does:
// the store never uses client-side caching.
func NewOutbox(c rueidis.Client, opts ...Option) (*Outbox, error) {
	cfg, err := redisConfig("outbox", defaultOutboxPrefix, c, opts)
	if err != nil {
		return nil, err
	}
	b := &redisOutbox{redisStore: newRedisStore(c, cfg, false), ttl: cfg.ttl, max: strconv.Itoa(cfg.maxUnack)}
	return &Outbox{core: newCore("outbox", cfg, true), b: b}, nil
}

// OpenOutbox connects to url (redis://, rediss://, unix://, or a Sentinel
// deployment with ?addr=...&master_set=NAME) with ClientOptions and returns an outbox that owns the
// client: Close closes it.
func OpenOutbox(url string, opts ...Option) (*Outbox, error) {
	cfg, c, err := openRedis("outbox", defaultOutboxPrefix, url, opts)
	if err != nil {
		return nil, err
	}
	b := &redisOutbox{redisStore: newRedisStore(c, cfg, true), ttl: cfg.ttl, max: strconv.Itoa(cfg.maxUnack)}
	return &Outbox{core: newCore("outbox", cfg, true), b: b}, nil
}

// NewMemoryOutbox returns an empty outbox in this process's memory, with the
// same behaviour as a Redis one (the storetest suite checks both): for tests
// and single-process programs. Options: WithTTL (default 0: never expire),
// WithMaxUnacked (default 0: unbounded), WithClock (default time.Now), which
// drives TTL expiry and epochs, WithObserver.
//
// Its epochs are the clock's time in microseconds at creation, raised when
// needed so that each is greater than every epoch the store handed out before
// (a fake clock that stands still still yields a new epoch after DropConn).
// It has no replicas and no failover, so it never re-mints an epoch the way
// a Redis outbox does after one (see Appended.Epoch).
func NewMemoryOutbox(opts ...Option) (*Outbox, error) {
	cfg, err := memoryConfig("outbox", defaultOutboxPrefix, opts)
	if err != nil {
		return nil, err
	}
	b := &memOutbox{conns: map[string]*memConn{}, ttl: cfg.ttl, max: cfg.maxUnack, now: cfg.now}
	return &Outbox{core: newCore("outbox", cfg, false), b: b}, nil
}

// Close closes the client if the store opened it (OpenOutbox); for a store
// made with NewOutbox or NewMemoryOutbox it does nothing. On a nil *Outbox it
// returns nil.
func (s *Outbox) Close() error {
	if s == nil {
		return nil
	}
	return s.b.close()
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
// ErrOutboxFull and writes nothing. A payload over 4 MiB fails with
// ErrInvalidArgument before anything is sent.
func (s *Outbox) AppendWithID(ctx context.Context, conn, msgID string, payload []byte) (Appended, error) {
	if s == nil {
		return Appended{}, nilStore("append", conn, "Outbox")
	}
	var a Appended
	err := s.observe(ctx, "append", "append", conn, func() (Outcome, error) {
		err := s.checkAppend(ctx, conn, msgID, payload)
		if err == nil {
			a, err = s.b.append(ctx, conn, msgID, payload)
			a.ID = msgID
		}
		return appendOutcome(a.Created), err
	})
	return a, err
}

// AppendMany appends a burst of messages to conn's tail in one script call
// (append_many.lua) and returns, per message in order, what AppendWithID
// would have returned for it:
//
//   - all or nothing: when the new messages do not all fit under
//     WithMaxUnacked it fails with ErrOutboxFull and appends none;
//   - idempotent per message id: an id already in the tail gets its stored
//     Seq with Created false (its stored payload is kept); of an id given
//     twice in one burst the first occurrence is appended, the later ones get
//     its Seq with Created false;
//   - the new messages get consecutive seqs, in the order given, and one
//     Epoch.
//
// Every message is validated before anything is sent; at most maxAppendMany
// messages per call. With no messages it sends nothing. The Epoch is re-minted
// after a failover as AppendWithID's is (see Appended.Epoch), also when every
// message is a retry. With WithWaitReplicas a burst its replicas did not
// confirm returns its results with ErrNotReplicated.
func (s *Outbox) AppendMany(ctx context.Context, conn string, msgs []Outgoing) ([]Appended, error) {
	if s == nil {
		return nil, nilStore("append_many", conn, "Outbox")
	}
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	out, err := s.appendMany(ctx, conn, msgs)
	if s.ev.obs != nil {
		reportAppendMany(ctx, &s.ev, "append_many", conn, len(msgs), out, start, err)
	}
	return out, err
}

func (s *Outbox) appendMany(ctx context.Context, conn string, msgs []Outgoing) ([]Appended, error) {
	if err := s.checkAppendMany(ctx, conn, msgs); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return []Appended{}, nil
	}
	return s.b.appendMany(ctx, conn, mintIDs(msgs), msgs)
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
	t, err := s.tail(ctx, "unacked", conn)
	return t.Messages, err
}

// Tail is Unacked with the connection's Epoch and Generation floor, read in the
// same atomic step. It runs unacked.lua, a read-only script (EVALSHA_RO).
func (s *Outbox) Tail(ctx context.Context, conn string) (Tail, error) {
	if s == nil {
		return Tail{}, nilStore("tail", conn, "Outbox")
	}
	return s.tail(ctx, "tail", conn)
}

// tail is Tail, reported as op.
func (s *Outbox) tail(ctx context.Context, op, conn string) (Tail, error) {
	var t Tail
	err := s.observe(ctx, op, "unacked", conn, func() (Outcome, error) {
		err := s.check(ctx, "unacked", conn)
		if err == nil {
			t, err = s.b.tail(ctx, conn)
		}
		return outRead, err
	})
	return t, err
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
	_, err := s.ack(ctx, "ack", conn, msgID, nil, generation)
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
	if len(msgIDs) == 0 {
		msgIDs = []string{} // nil stands for Ack's one id
	}
	return s.ack(ctx, "ack_many", conn, "", msgIDs, generation)
}

// ack is AckMany of msgIDs, or of msgID alone when msgIDs is nil, reported
// as op.
func (s *Outbox) ack(ctx context.Context, op, conn, msgID string, msgIDs []string, generation uint64) (int, error) {
	var start time.Time
	if s.ev.obs != nil {
		start = time.Now()
	}
	ids := len(msgIDs)
	if msgIDs == nil {
		ids = 1
	}
	n, err := 0, s.checkAck(ctx, conn, msgID, msgIDs)
	if err == nil && ids > 0 {
		n, err = s.b.ack(ctx, conn, msgID, msgIDs, generation)
	}
	if s.ev.obs != nil {
		reportAck(ctx, &s.ev, op, "ack", conn, ids, n, start, err)
	}
	return n, err
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
	return s.observe(ctx, "advance", "advance", conn, func() (Outcome, error) {
		raised, err := false, s.check(ctx, "advance", conn)
		if err == nil {
			raised, err = s.b.advance(ctx, conn, generation)
		}
		return advanceOutcome(raised), err
	})
}

// DropConn forgets conn: its tail, seq line, floor and epoch. The next Append
// starts a new incarnation (seq 1, a new Epoch, floor 0). Dropping an unknown
// connection is not an error.
func (s *Outbox) DropConn(ctx context.Context, conn string) error {
	if s == nil {
		return nilStore("drop", conn, "Outbox")
	}
	return s.observe(ctx, "drop", "drop", conn, func() (Outcome, error) {
		ok, err := false, s.check(ctx, "drop", conn)
		if err == nil {
			ok, err = s.b.drop(ctx, conn)
		}
		return found(ok, outDropped), err
	})
}

// checkAppend validates one message before anything is sent.
func (s *Outbox) checkAppend(ctx context.Context, conn, msgID string, payload []byte) error {
	if err := s.check(ctx, "append", conn); err != nil {
		return err
	}
	if err := checkMessageID("append", conn, msgID); err != nil {
		return err
	}
	if len(payload) > maxPayloadLen {
		return errorf("append", conn, ErrInvalidArgument, "payload is %d bytes, the limit is %d", len(payload), maxPayloadLen)
	}
	return nil
}

// checkAck validates an ack's ids (msgID alone when msgIDs is nil) before
// anything is sent.
func (s *Outbox) checkAck(ctx context.Context, conn, msgID string, msgIDs []string) error {
	if err := s.check(ctx, "ack", conn); err != nil {
		return err
	}
	if msgIDs == nil {
		return checkMessageID("ack", conn, msgID)
	}
	for _, id := range msgIDs {
		if err := checkMessageID("ack", conn, id); err != nil {
			return err
		}
	}
	return nil
}

// checkMessageID validates an outbox message id: 1..maxMessageIDLen bytes, not
// starting with "_".
func checkMessageID(op, conn, id string) error {
	switch {
	case id == "":
		return errorf(op, conn, ErrInvalidArgument, "empty message id")
	case len(id) > maxMessageIDLen:
		return errorf(op, conn, ErrInvalidArgument, "message id is %d bytes, the limit is %d", len(id), maxMessageIDLen)
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
