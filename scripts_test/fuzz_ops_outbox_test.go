package scripts_test

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/anishathalye/porcupine"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Outbox operations for the model-based tests. Epochs are server time on one
// side and the memory clock on the other, so replies show only whether an
// epoch is there; ids minted by Append are random on both sides and show as
// "<minted>".

var (
	outboxMsgIDs  = []string{"m1", "m2", "m3", "m4"}
	outboxFuzzIDs = []string{"m1", "m2", "m3", "_seq", "", "ü\x00", strings.Repeat("m", maxMessageIDLen+1)}
	outboxGens    = []uint64{0, 1, 2, 3, math.MaxUint64}
	mintedID      = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

var outboxModel = opModel{
	name:      "outbox",
	newMemory: func(opts ...store.Option) any { return must.Store(store.NewMemoryOutbox(opts...)) },
	newRedis: func(c rueidis.Client, prefix string, opts ...store.Option) any {
		return must.Store(store.NewOutbox(c, append(opts, store.WithPrefix(prefix))...))
	},
	options: func(r *opReader) []store.Option {
		return []store.Option{store.WithMaxUnacked(int(r.byte() % 4))}
	},
	decode: func(r *opReader, valid bool) op {
		ids, msgIDs, gens := fuzzIDs, outboxFuzzIDs, outboxGens
		names := []string{"AppendWithID", "AppendWithID", "Append", "Ack", "AckMany", "AdvanceGeneration", "Unacked", "Tail", "DropConn", "AppendMany"}
		if valid {
			ids, msgIDs, gens = linIDs, outboxMsgIDs, outboxGens[1:4]
			names = []string{"AppendWithID", "AppendWithID", "AppendWithID", "Ack", "AckMany", "AdvanceGeneration", "Unacked", "Unacked", "DropConn",
				"AppendMany", "Ack"} // a second Ack: a history with no Ack that mattered proves nothing
		}
		o := op{Name: pick(r, names), ID: pick(r, ids), Ref: -1}
		switch o.Name {
		case "AppendWithID":
			o.Arg = pick(r, msgIDs)
			o.IDs = []string{r.bytes(8)} // the payload
		case "Append":
			o.IDs = []string{r.bytes(8)}
		case "AppendMany":
			// id, payload pairs; an empty id is minted.
			for range 1 + int(r.byte()%3) {
				o.IDs = append(o.IDs, pick(r, append([]string{""}, msgIDs...)), r.bytes(8))
			}
		case "Ack":
			o.Arg = pick(r, msgIDs)
			o.N = pick(r, gens)
		case "AckMany":
			for range 1 + int(r.byte()%3) {
				o.IDs = append(o.IDs, pick(r, msgIDs))
			}
			o.N = pick(r, gens)
		case "AdvanceGeneration":
			o.N = pick(r, gens)
		}
		return o
	},
	apply: func(ctx context.Context, s any, o op, _ *applyEnv) result {
		ob := s.(*store.Outbox)
		var v string
		var err error
		switch o.Name {
		case "AppendWithID":
			var a store.Appended
			a, err = ob.AppendWithID(ctx, o.ID, o.Arg, []byte(o.IDs[0]))
			v = fmt.Sprintf("id=%q seq=%d created=%v epoch=%v", a.ID, a.Seq, a.Created, a.Epoch > 0)
		case "Append":
			var id string
			var seq uint64
			id, seq, err = ob.Append(ctx, o.ID, []byte(o.IDs[0]))
			v = fmt.Sprintf("minted=%v seq=%d", mintedID.MatchString(id), seq)
		case "AppendMany":
			msgs := make([]store.Outgoing, 0, len(o.IDs)/2)
			for i := 0; i+1 < len(o.IDs); i += 2 {
				msgs = append(msgs, store.Outgoing{ID: o.IDs[i], Payload: []byte(o.IDs[i+1])})
			}
			var out []store.Appended
			out, err = ob.AppendMany(ctx, o.ID, msgs)
			var b strings.Builder
			for i, a := range out {
				id := fmt.Sprintf("%q", a.ID)
				if msgs[i].ID == "" && mintedID.MatchString(a.ID) {
					id = "<minted>"
				}
				fmt.Fprintf(&b, "id=%s seq=%d created=%v epoch=%v same=%v;", id, a.Seq, a.Created, a.Epoch > 0, a.Epoch == out[0].Epoch)
			}
			v = b.String()
		case "Ack":
			err = ob.Ack(ctx, o.ID, o.Arg, o.N)
		case "AckMany":
			var n int
			n, err = ob.AckMany(ctx, o.ID, o.IDs, o.N)
			v = fmt.Sprint(n)
		case "AdvanceGeneration":
			err = ob.AdvanceGeneration(ctx, o.ID, o.N)
		case "Unacked":
			var msgs []store.Message
			msgs, err = ob.Unacked(ctx, o.ID)
			v = renderMessages(msgs)
		case "Tail":
			var tl store.Tail
			tl, err = ob.Tail(ctx, o.ID)
			v = fmt.Sprintf("epoch=%v gen=%d %s", tl.Epoch > 0, tl.Generation, renderMessages(tl.Messages))
		case "DropConn":
			err = ob.DropConn(ctx, o.ID)
		default:
			panic("outbox: no operation " + o.Name)
		}
		if err != nil {
			v = ""
		}
		return result{Val: v, Err: errName(err)}
	},
	atomic: func(op) bool { return true },
	ids:    fuzzIDs,
	snapshot: func(ctx context.Context, s any, id string, _ *applyEnv) string {
		// The tail, then the seq the next append gets (the hidden _seq).
		ob := s.(*store.Outbox)
		tl, err := ob.Tail(ctx, id)
		a, err2 := ob.AppendWithID(ctx, id, "zz-probe", nil)
		return fmt.Sprintf("epoch=%v gen=%d %s next=%d %v %v", tl.Epoch > 0, tl.Generation, renderMessages(tl.Messages), a.Seq, err, err2)
	},
	write:  func(id string) op { return op{Name: "AppendWithID", ID: id, Arg: "m1", IDs: []string{"p"}, Ref: -1} },
	read:   func(id string) op { return op{Name: "Tail", ID: id, Ref: -1} },
	broken: "Ack",
	impossible: func() []porcupine.Operation {
		// Two appends of new ids, one after the other, got the same seq.
		a1 := op{Name: "AppendWithID", ID: "a", Arg: "m1", IDs: []string{"x"}, Ref: -1}
		a2 := op{Name: "AppendWithID", ID: "a", Arg: "m2", IDs: []string{"y"}, Ref: -1}
		return seqOps(
			opResult{a1, result{Val: `id="m1" seq=1 created=true epoch=true`}},
			opResult{a2, result{Val: `id="m2" seq=1 created=true epoch=true`}},
		)
	},
}

// renderMessages renders a tail in seq order, minted ids as "<minted>".
func renderMessages(msgs []store.Message) string {
	var b strings.Builder
	b.WriteString("[")
	for i, m := range msgs {
		if i > 0 {
			b.WriteString(" ")
		}
		id := m.ID
		if mintedID.MatchString(id) {
			id = "<minted>"
		}
		fmt.Fprintf(&b, "%q:%d:%q", id, m.Seq, m.Payload)
	}
	b.WriteString("]")
	return b.String()
}
