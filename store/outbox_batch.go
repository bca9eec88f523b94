package store

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// maxAppendMany is the most messages one AppendMany takes: the burst is one
// script call, which blocks the server while it runs.
const maxAppendMany = 1000

var scriptAppendMany = mustScript("append_many")

// Outgoing is one message given to AppendMany.
type Outgoing struct {
	// ID is the message id, 1..maxMessageIDLen bytes not starting with "_";
	// empty: AppendMany mints one, as Append does.
	ID string
	// Payload is the message's bytes, at most 4 MiB.
	Payload []byte
}

// checkAppendMany validates AppendMany's input as checkAppend does one
// message's (an empty ID is minted, so it passes).
func (s *Outbox) checkAppendMany(ctx context.Context, conn string, msgs []Outgoing) error {
	if err := s.check(ctx, "append_many", conn); err != nil {
		return err
	}
	if len(msgs) > maxAppendMany {
		return errorf("append_many", conn, ErrInvalidArgument, "%d messages, the limit is %d", len(msgs), maxAppendMany)
	}
	for _, m := range msgs {
		if m.ID != "" {
			if err := checkMessageID("append_many", conn, m.ID); err != nil {
				return err
			}
		}
		if len(m.Payload) > maxPayloadLen {
			return errorf("append_many", conn, ErrInvalidArgument, "payload is %d bytes, the limit is %d", len(m.Payload), maxPayloadLen)
		}
	}
	return nil
}

// reportAppendMany reports an AppendMany of n messages: appended and
// retried_append (N = their messages) when it ran, one event with the error
// when it did not (all or nothing). An empty burst reports nothing.
func reportAppendMany(ctx context.Context, ev *events, script, conn string, n int, out []Appended, start time.Time, err error) {
	if err != nil {
		ev.report(ctx, "append_many", script, conn, n, outcome(err, outError), start, err)
		return
	}
	created := 0
	for _, a := range out {
		if a.Created {
			created++
		}
	}
	if created > 0 {
		ev.report(ctx, "append_many", script, conn, created, outAppended, start, nil)
	}
	if created < len(out) {
		ev.report(ctx, "append_many", script, conn, len(out)-created, outRetriedAppend, start, nil)
	}
}

// mintIDs returns the messages' ids, a new token for every empty one.
func mintIDs(msgs []Outgoing) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
		if ids[i] == "" {
			ids[i] = newToken()
		}
	}
	return ids
}

func (b *redisOutbox) appendMany(ctx context.Context, conn string, ids []string, msgs []Outgoing) ([]Appended, error) {
	args := make([]string, 0, 2+2*len(msgs))
	args = append(args, b.ttlMS.ms(b.ttl), b.max)
	for i, m := range msgs {
		args = append(args, ids[i], rueidis.BinaryString(m.Payload))
	}
	return parseAppendedMany("append_many", conn, ids, b.exec(ctx, scriptAppendMany, b.key(conn), args...))
}

// parseAppendedMany reads append_many.lua's {epoch, seq1, created1, ...};
// with ErrNotReplicated when its replicas did not confirm it.
func parseAppendedMany(op, conn string, ids []string, r reply) ([]Appended, error) {
	vals, err := replyArray(op, conn, r, 1+2*len(ids))
	if err != nil {
		return nil, err
	}
	epoch, err := replyUint(&vals[0])
	if err != nil || epoch == 0 {
		return nil, errorf(op, conn, ErrUnexpectedReply, "epoch %s is not a positive integer", vals[0].String())
	}
	out := make([]Appended, len(ids))
	for i := range ids {
		seq, err1 := replyUint(&vals[1+2*i])
		created, err2 := replyUint(&vals[2+2*i])
		if err1 != nil || err2 != nil || seq == 0 || created > 1 {
			return nil, errorf(op, conn, ErrUnexpectedReply, "message %d: seq %s, created %s", i+1, vals[1+2*i].String(), vals[2+2*i].String())
		}
		out[i] = Appended{ID: ids[i], Seq: seq, Epoch: epoch, Created: created == 1}
	}
	return out, r.replicated(op, conn)
}
