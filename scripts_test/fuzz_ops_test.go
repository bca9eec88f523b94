package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Model-based tests (fuzz_* and linearizability_*) apply the same operations
// to a Redis store and to its in-memory twin and compare the replies. A store
// takes part with one entry in opModels: how to build both, how to read an
// operation from bytes (fuzz input or random bytes), and how to run one.

// opModel is one store's operations for the model-based tests.
type opModel struct {
	name string
	// newMemory returns an empty in-memory store; newRedis a Redis store on c
	// under prefix. Both get opts; the memory store's clock never moves, and
	// the operations use no TTL and hour-long leases, so time never matters.
	newMemory func(opts ...store.Option) any
	newRedis  func(c rueidis.Client, prefix string, opts ...store.Option) any
	// options reads store options from the input (e.g. a small max_unacked).
	options func(r *opReader) []store.Option
	// decode reads one operation; valid restricts it to well-formed ones on
	// the small id set linIDs (for linearizability histories).
	decode func(r *opReader, valid bool) op
	// apply runs o on s (made by newMemory or newRedis) and renders what it
	// returned. env carries what earlier operations returned (tokens).
	apply func(ctx context.Context, s any, o op, env *applyEnv) result
	// split turns a batch into the single operations it is made of, each
	// atomic on its own (nil: o is atomic as it is).
	split func(o op, r result) []opResult
	// atomic reports whether o runs as one script (Do does not: it is a
	// claim, a callback and a commit), so a history may hold it.
	atomic func(o op) bool
	// ids are every id decode may produce, for cleaning up after an input.
	ids []string
	// snapshot renders everything about id in s (a memory store the caller
	// throws away afterwards, so it may write to find out) that any later
	// operation's reply can depend on, for the linearizability checker.
	snapshot func(ctx context.Context, s any, id string, env *applyEnv) string
	// write and read are a write and a read of one id, for FuzzStoreIDs.
	write, read func(id string) op
	// broken names an operation whose effect a deliberately wrong model
	// drops; a real history must not be linearizable against it.
	broken string
	// impossible is a short history no correct store could produce.
	impossible func() []porcupine.Operation
}

// seqOps builds a history of operations that do not overlap in time, one
// client each, in the order given.
func seqOps(ors ...opResult) []porcupine.Operation {
	h := make([]porcupine.Operation, len(ors))
	for i, or := range ors {
		or.op.Seq = i
		h[i] = porcupine.Operation{ClientId: i, Input: linInput{or.op}, Call: int64(10 * i), Output: or.res, Return: int64(10*i + 5)}
	}
	return h
}

// op is one operation: Name is the method, ID the id (connection, key) it
// works on, which partitions a history. The other fields are its arguments.
type op struct {
	Name string
	ID   string
	IDs  []string // batches: ClaimMany, AckMany
	Arg  string   // a payload, message id, status
	N    uint64   // a generation
	Flag bool     // Do: the callback fails
	Ref  int      // records: the operation whose token this one presents (-1: none)
	Seq  int      // index in its history, set by the runner
}

func (o op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s(%q", o.Name, o.ID)
	if o.IDs != nil {
		fmt.Fprintf(&b, " %q", o.IDs)
	}
	if o.Arg != "" {
		fmt.Fprintf(&b, " arg=%q", o.Arg)
	}
	if o.N != 0 {
		fmt.Fprintf(&b, " n=%d", o.N)
	}
	if o.Flag {
		b.WriteString(" fail")
	}
	if o.Ref >= 0 && o.Ref != 0 {
		fmt.Fprintf(&b, " ref=%d", o.Ref)
	}
	b.WriteString(")")
	return b.String()
}

// result is what an operation returned, rendered: comparable with == and
// go-cmp, and the same for equal behaviour of both implementations.
type result struct {
	Val string // the value returned
	Err string // errName of the error
}

type opResult struct {
	op  op
	res result
}

// applyEnv carries what earlier operations returned that later ones present
// again (records' tokens), per implementation.
type applyEnv struct {
	tokens map[int]string
}

func newApplyEnv() *applyEnv { return &applyEnv{tokens: map[int]string{}} }

// errName renders an error by the sentinel it wraps, so that the same
// failure reads the same from both implementations. Anything else renders
// as "other: <text>", which never matches the other side by accident.
func errName(err error) string {
	if err == nil {
		return ""
	}
	for _, s := range []struct {
		err  error
		name string
	}{
		{store.ErrInvalidArgument, "ErrInvalidArgument"},
		{store.ErrNotFound, "ErrNotFound"},
		{store.ErrStaleOwner, "ErrStaleOwner"},
		{store.ErrInFlight, "ErrInFlight"},
		{store.ErrLeaseLost, "ErrLeaseLost"},
		{store.ErrOutboxFull, "ErrOutboxFull"},
		{store.ErrFingerprintMismatch, "ErrFingerprintMismatch"},
		{store.ErrUnexpectedReply, "ErrUnexpectedReply"},
		{store.ErrFailed, "ErrFailed"},
		{errCallbackFailed, "callback failed"},
		{errRetryLater, "retry later"},
		{context.Canceled, "context.Canceled"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "other: " + err.Error()
}

// errCallbackFailed is what a Do callback returns when the operation says so.
var errCallbackFailed = errors.New("callback failed")

// opReader reads small choices from fuzz input; past its end it reads zeros.
type opReader struct {
	b []byte
}

func (r *opReader) empty() bool { return len(r.b) == 0 }

func (r *opReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// pick returns one of choices.
func pick[T any](r *opReader, choices []T) T { return choices[int(r.byte())%len(choices)] }

// bytes returns up to max bytes of the input, as a string.
func (r *opReader) bytes(max int) string {
	n := int(r.byte()) % (max + 1)
	n = min(n, len(r.b))
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// decodeOps reads operations until the input runs out (at most max).
func decodeOps(m opModel, r *opReader, valid bool, max int) []op {
	var ops []op
	for !r.empty() && len(ops) < max {
		o := m.decode(r, valid)
		o.Seq = len(ops)
		ops = append(ops, o)
	}
	return ops
}

// Ids the decoders draw from. fuzzIDs holds the odd and the invalid ones.
var (
	linIDs  = []string{"a", "b", "c"}
	fuzzIDs = []string{"a", "b", "c", "{a}", "a\x00", "ü", "", strings.Repeat("x", store.MaxIDLen+1)}
)

// opModels lists every store the model-based tests cover.
var opModels = []opModel{claimsModel, outboxModel, recordsModel}

var claimsModel = opModel{
	name:      "claims",
	newMemory: func(opts ...store.Option) any { return must.Store(store.NewMemoryClaims(opts...)) },
	newRedis: func(c rueidis.Client, prefix string, opts ...store.Option) any {
		return must.Store(store.NewClaims(c, append(opts, store.WithPrefix(prefix))...))
	},
	options: func(*opReader) []store.Option { return nil },
	decode: func(r *opReader, valid bool) op {
		ids := fuzzIDs
		names := []string{"Claim", "ClaimMany", "Seen", "Remember", "Forget", "SeenMany", "Do"}
		if valid {
			ids = linIDs
			names = names[:6]
		}
		o := op{Name: pick(r, names), ID: pick(r, ids), Ref: -1}
		switch o.Name {
		case "ClaimMany", "SeenMany":
			o.IDs = []string{o.ID}
			for range int(r.byte() % 4) {
				o.IDs = append(o.IDs, pick(r, ids))
			}
		case "Do":
			o.Flag = r.byte()%2 == 1
		}
		return o
	},
	apply: func(ctx context.Context, s any, o op, _ *applyEnv) result {
		cs := s.(*store.Claims)
		var v any
		var err error
		switch o.Name {
		case "Claim":
			v, err = cs.Claim(ctx, o.ID)
		case "ClaimMany":
			v, err = cs.ClaimMany(ctx, o.IDs)
		case "SeenMany":
			v, err = cs.SeenMany(ctx, o.IDs)
		case "Seen":
			v, err = cs.Seen(ctx, o.ID)
		case "Remember":
			err = cs.Remember(ctx, o.ID)
		case "Forget":
			err = cs.Forget(ctx, o.ID)
		case "Do":
			v, err = cs.Do(ctx, o.ID, time.Hour, func(context.Context) error {
				if o.Flag {
					return errCallbackFailed
				}
				return nil
			})
		default:
			panic("claims: no operation " + o.Name)
		}
		if err != nil {
			v = nil // a failed batch's partial results are not compared
		}
		return result{Val: fmt.Sprint(v), Err: errName(err)}
	},
	split: func(o op, r result) []opResult {
		if o.Name != "ClaimMany" && o.Name != "SeenMany" {
			return nil
		}
		single := "Claim"
		if o.Name == "SeenMany" {
			single = "Seen"
		}
		var won []bool
		if r.Err == "" {
			for _, f := range strings.Fields(strings.Trim(r.Val, "[]")) {
				won = append(won, f == "true")
			}
		}
		out := make([]opResult, len(o.IDs))
		for i, id := range o.IDs {
			one := op{Name: single, ID: id, Ref: -1, Seq: o.Seq}
			res := result{Err: r.Err, Val: "<nil>"}
			if r.Err == "" {
				res.Val = fmt.Sprint(won[i])
			}
			out[i] = opResult{one, res}
		}
		return out
	},
	atomic: func(o op) bool { return o.Name != "Do" },
	ids:    fuzzIDs,
	snapshot: func(ctx context.Context, s any, id string, _ *applyEnv) string {
		seen, err := s.(*store.Claims).Seen(ctx, id)
		return fmt.Sprintf("seen=%v %v", seen, err)
	},
	write:  func(id string) op { return op{Name: "Claim", ID: id, Ref: -1} },
	read:   func(id string) op { return op{Name: "Seen", ID: id, Ref: -1} },
	broken: "Forget",
	impossible: func() []porcupine.Operation {
		// Two claims of one id, one after the other, both won.
		claim := op{Name: "Claim", ID: "a", Ref: -1}
		won := result{Val: "true"}
		return seqOps(opResult{claim, won}, opResult{claim, won})
	},
}
