package store

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Observer receives one Event per store operation, after it ends, on the
// caller's goroutine with the caller's context (a Do flow's lease extensions
// come from the flow's heartbeat goroutine, with a context that carries the
// caller's values). It must be safe for concurrent use and should return
// quickly (hand heavy work to another goroutine). A store without an observer
// builds no Event and allocates nothing for it.
//
// Adapters: SlogObserver here; OpenTelemetry (traces and metrics) in the module
// github.com/redisonce/redisonce/observe/otel; Prometheus in
// github.com/redisonce/redisonce/observe/prometheus.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// WithObserver makes a store report every operation to o (Redis stores and
// memory twins alike). Default: none, at no cost.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = o }
}

// Event is what an Observer hears of one operation.
type Event struct {
	// Store is "claims", "outbox" or "records".
	Store string
	// Op is the operation in the store's API words, lower case. Claims:
	// "claim", "claim_many", "remember", "seen", "seen_many", "forget", "do",
	// "extend". Outbox: "append" (Append and AppendWithID), "append_many",
	// "unacked", "tail", "ack", "ack_many", "advance", "drop". Records: "acquire" (Acquire and
	// AcquireWith), "get", "update", "delete" (Delete and DeleteFenced), "do",
	// "extend". A Do flow reports "do" once, with the flow's outcome (its
	// claim, commit, release or final write are not reported apart), and
	// "extend" for each lease extension while fn runs; a Records.Do that
	// takes a record over from an owner whose lease had passed also reports
	// "acquire" with outTakenOver, before its "do".
	Op string
	// Script is the name of the script the operation ran ("claim" for
	// claim.lua; a batch names its batch script, "claim_many", even when a
	// slot group of one id ran claim.lua), empty for a memory twin or for a
	// flow made of several scripts.
	Script string
	// Prefix is the store's key prefix; Key the id, connection or record key
	// the operation was about (empty for claim_many and seen_many, whose ids
	// are many keys).
	// Key is unbounded in cardinality: keep it out of metric labels.
	Prefix, Key string
	// N is the number of items the event is about: 1 for a single item. A
	// batch (claim_many, seen_many, append_many, ack, ack_many) reports one
	// event per outcome its items had, each with N its items and the whole
	// batch's duration (a ClaimMany of 10 ids, 7 new: claimed N=7 and
	// duplicate N=3); one event for all of them when it failed as a whole;
	// none when it was empty.
	N int
	// Outcome says how it ended, in the store's own words (see the Outcome
	// constants); outError when Err is not a store verdict.
	Outcome Outcome
	// Start is when the operation began; Duration how long it took.
	Start    time.Time
	Duration time.Duration
	// Err is the error the operation returned, nil on success. Verdicts such
	// as ErrInFlight or ErrStaleOwner come with their own Outcome.
	Err error
}

// ErrorText is Err's text for an observer ("" when Err is nil). With withKey
// it is Err.Error(). Without, it holds no key: every store error quotes its
// id (`redisonce: ack "c1": stale owner`), and ErrorText cuts each quoted id
// that follows "redisonce: <op>" (`redisonce: ack: stale owner`); when what
// is left still holds Key (an error of fn that names it, say), it is only
// `redisonce: <op>: <kind>`, kind the store sentinel Err wraps ("stale
// owner", "context canceled"...) or "error" (so a key of a letter or two,
// found in most texts, leaves only the kind). An observer that promises no
// keys (SlogObserver, the OpenTelemetry adapter without their key options)
// records ErrorText(false), never Err.Error().
func (e Event) ErrorText(withKey bool) string {
	if e.Err == nil {
		return ""
	}
	text := e.Err.Error()
	if withKey {
		return text
	}
	text = cutQuotedIDs(text)
	if e.Key != "" && (strings.Contains(text, e.Key) || strings.Contains(text, strconv.Quote(e.Key)[1:len(strconv.Quote(e.Key))-1])) {
		return "redisonce: " + e.Op + ": " + errorKind(e.Err) + " (its text is not shown: it holds the key)"
	}
	return text
}

// cutQuotedIDs removes the quoted id after every "redisonce: <op> " in text.
func cutQuotedIDs(text string) string {
	const mark = "redisonce: "
	var b strings.Builder
	for {
		i := strings.Index(text, mark)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i+len(mark)])
		text = text[i+len(mark):]
		op, rest, ok := strings.Cut(text, " ")
		if !ok || strings.ContainsAny(op, "\":") {
			continue
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			continue
		}
		b.WriteString(op)
		text = rest[len(q):]
	}
}

// errorKind names the store sentinel or context error err wraps, else "error".
func errorKind(err error) string {
	for _, k := range []error{ErrInvalidArgument, ErrStaleOwner, ErrInFlight, ErrLeaseLost, ErrOutboxFull,
		ErrFingerprintMismatch, ErrNotFound, ErrUnexpectedReply, ErrNotReplicated, ErrFailed,
		context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return "error"
}

// Outcome is how an operation ended, in a store's words: one of the values
// below, by store and operation. They are stable: alert and dashboard on
// them (e.Outcome == "lease_lost"). Integrations (the streams runner,
// httpidem) report their own operations with the same vocabulary.
//
//	claims  claim, remember, claim_many  claimed, duplicate, in_flight
//	        seen, seen_many              seen, not_seen
//	        forget                       forgotten, not_found
//	        do                           committed, duplicate, in_flight, released, lease_lost
//	        extend                       extended, lease_lost
//	outbox  append, append_many          appended, retried_append, full
//	        unacked, tail                read
//	        ack, ack_many                acked, not_found, stale_owner
//	        advance                      advanced, unchanged
//	        drop                         dropped, not_found
//	records acquire                      acquired, taken_over, existing, mismatch
//	        get                          read, not_found
//	        update                       updated, not_found, stale_owner
//	        delete                       deleted, not_found, stale_owner
//	        do                           completed, replayed, in_flight, failed, released,
//	                                     stale_owner, lease_lost, mismatch
//	        extend                       extended, stale_owner
//
// Every operation may also end invalid (bad input or options: nothing was
// sent) or error (connection, server, a reply of the wrong shape). A Do
// whose fn panics reports released (the claim or record is given back).
// Records' do reports replayed for a stored failure too, with Err wrapping
// ErrFailed.
type Outcome string

// The outcomes, for the stores' own code.
const (
	outClaimed       Outcome = "claimed"
	outDuplicate     Outcome = "duplicate"
	outInFlight      Outcome = "in_flight"
	outCommitted     Outcome = "committed"
	outReleased      Outcome = "released"
	outLeaseLost     Outcome = "lease_lost"
	outExtended      Outcome = "extended"
	outSeen          Outcome = "seen"
	outNotSeen       Outcome = "not_seen"
	outForgotten     Outcome = "forgotten"
	outAppended      Outcome = "appended"
	outRetriedAppend Outcome = "retried_append"
	outFull          Outcome = "full"
	outAcked         Outcome = "acked"
	outStaleOwner    Outcome = "stale_owner"
	outAdvanced      Outcome = "advanced"
	outDropped       Outcome = "dropped"
	outRead          Outcome = "read"
	outAcquired      Outcome = "acquired"
	outTakenOver     Outcome = "taken_over"
	outExisting      Outcome = "existing"
	outReplayed      Outcome = "replayed"
	outMismatch      Outcome = "mismatch"
	outCompleted     Outcome = "completed"
	outFailed        Outcome = "failed"
	outUpdated       Outcome = "updated"
	outDeleted       Outcome = "deleted"
	outNotFound      Outcome = "not_found"
	outUnchanged     Outcome = "unchanged" // advance: the floor was already at or above the generation
	outInvalid       Outcome = "invalid"
	outError         Outcome = "error"
)

// SlogObserver logs every event to l: Debug for routine outcomes, Warn for
// the ones worth a look (stale_owner, lease_lost, taken_over, mismatch, full,
// invalid), Error for error. Attributes: store, op, script, n, outcome,
// duration, err (Event.ErrorText: without the key), and key only with
// SlogWithKey (keys can carry user data).
func SlogObserver(l *slog.Logger, opts ...SlogOption) Observer {
	o := slogObserver{l: l}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// SlogOption configures SlogObserver.
type SlogOption func(*slogObserver)

// SlogWithKey makes SlogObserver log the key attribute, and error texts as
// they are, quoting the key. Default: neither.
func SlogWithKey() SlogOption {
	return func(o *slogObserver) { o.withKey = true }
}

type slogObserver struct {
	l       *slog.Logger
	withKey bool
}

func (o slogObserver) Observe(ctx context.Context, e Event) {
	if o.l == nil {
		return
	}
	level := slog.LevelDebug
	switch e.Outcome {
	case outStaleOwner, outLeaseLost, outTakenOver, outMismatch, outFull, outInvalid:
		level = slog.LevelWarn
	case outError:
		level = slog.LevelError
	}
	if !o.l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("store", e.Store),
		slog.String("op", e.Op),
		slog.String("outcome", string(e.Outcome)),
		slog.Duration("duration", e.Duration),
	}
	if e.Script != "" {
		attrs = append(attrs, slog.String("script", e.Script))
	}
	if o.withKey && e.Key != "" {
		attrs = append(attrs, slog.String("key", e.Key))
	}
	if e.N != 1 {
		attrs = append(attrs, slog.Int("n", e.N))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.ErrorText(o.withKey)))
	}
	o.l.LogAttrs(ctx, level, "redisonce "+e.Store+" "+e.Op, attrs...)
}

// events is what a store needs to report its operations: the observer (nil:
// none) and what every event of the store carries.
type events struct {
	obs    Observer
	store  string
	prefix string
	// scripts: the backend runs scripts (Redis), so events name them;
	// a memory backend's events have no Script.
	scripts bool
}

func newEvents(store string, c config) events {
	return events{obs: c.observer, store: store, prefix: c.prefix}
}

// report sends one event that began at start. Callers test ev.obs != nil
// first, and only then read the clock, so that a store without an observer
// builds nothing.
func (ev *events) report(ctx context.Context, op, script, key string, n int, out Outcome, start time.Time, err error) {
	if ctx == nil {
		ctx = context.Background() // a call refused for its nil context is reported too
	}
	if !ev.scripts {
		script = ""
	}
	ev.obs.Observe(ctx, Event{
		Store: ev.store, Op: op, Script: script, Prefix: ev.prefix, Key: key, N: n,
		Outcome: out, Start: start, Duration: time.Since(start), Err: err,
	})
}

// outcome is how an operation that returned err ended: ok without an error,
// a store's verdict by its sentinel, else outError.
func outcome(err error, ok Outcome) Outcome {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, ErrInvalidArgument):
		return outInvalid
	case errors.Is(err, ErrStaleOwner):
		return outStaleOwner
	case errors.Is(err, ErrInFlight):
		return outInFlight
	case errors.Is(err, ErrLeaseLost):
		return outLeaseLost
	case errors.Is(err, ErrOutboxFull):
		return outFull
	case errors.Is(err, ErrFingerprintMismatch):
		return outMismatch
	case errors.Is(err, ErrNotFound):
		return outNotFound
	}
	return outError
}

// claimOutcome is claim.lua's reply in words.
func claimOutcome(n int64) Outcome {
	switch n {
	case 1:
		return outClaimed
	case 0:
		return outDuplicate
	}
	return outInFlight
}

// found is the outcome of an operation on something that may be absent.
func found(ok bool, yes Outcome) Outcome {
	if ok {
		return yes
	}
	return outNotFound
}

// observeExtend wraps a Do flow's lease extension so that each one is
// reported as an "extend" event: extended, or lost (the store's word for a
// lease another caller holds), or the error. An extension cut short because
// the flow ended (the heartbeat's stop cancels the one in flight) is not
// reported: nothing failed; nor is a "lost" answer to an extension sent
// before the claim's reply came back, which may have overtaken the claim.
func (ev *events) observeExtend(key, script string, lost Outcome, extend extendFunc) extendFunc {
	return func(ctx context.Context, sent *time.Time) (bool, error) {
		start := time.Now()
		held, err := extend(ctx, sent)
		if err != nil && errors.Is(ctx.Err(), context.Canceled) {
			return held, err
		}
		if err == nil && !held && ctx.Value(speculativeKey{}) != nil {
			return held, err // it overtook the claim: no loss (heartbeat)
		}
		out := outExtended
		if !held {
			out = lost
		}
		ev.report(ctx, "extend", script, key, 1, outcome(err, out), start, err)
		return held, err
	}
}

// seenOutcome is Seen's answer in words.
func seenOutcome(seen bool) Outcome {
	if seen {
		return outSeen
	}
	return outNotSeen
}

// tally counts a batch's items by outcome, for its events: one event per
// outcome present, with N its items, in the order the outcomes were given to
// newTally, then one for the items that failed. A nil tally (no observer)
// counts nothing, so that a store without an observer builds nothing.
type tally struct {
	start time.Time
	outs  []Outcome
	n     []int
	order []int // per item counted by add, in order: its index in outs (see unconfirmed)
	fails int   // items that ended with an error
	err   error // the first item's error, or the error that refused the batch
	whole bool  // err refused the whole batch: nothing was sent
}

// newTally starts a tally of a batch whose items may end as outs.
func newTally(outs ...Outcome) *tally {
	return &tally{start: time.Now(), outs: outs, n: make([]int, len(outs))}
}

// add counts one item that ended as out.
func (t *tally) add(out Outcome) {
	if t == nil {
		return
	}
	for i, o := range t.outs {
		if o == out {
			t.n[i]++
			t.order = append(t.order, i)
			return
		}
	}
	t.order = append(t.order, len(t.outs))
	t.outs, t.n = append(t.outs, out), append(t.n, 1)
}

// mark is where the items counted from now on begin, for unconfirmed.
func (t *tally) mark() int {
	if t == nil {
		return 0
	}
	return len(t.order)
}

// unconfirmed moves the items counted by add since mark to the failed ones,
// with err: a group of a batch whose replicas did not confirm it
// (ErrNotReplicated) ran, but its verdicts are not results the caller may
// rely on, so they are reported as errors, as a single write's would be.
func (t *tally) unconfirmed(mark int, err error) {
	if t == nil || mark >= len(t.order) {
		return
	}
	for _, i := range t.order[mark:] {
		t.n[i]--
	}
	t.failed(len(t.order)-mark, err)
	t.order = t.order[:mark]
}

// failed counts k items that ended with err (the first error is kept).
func (t *tally) failed(k int, err error) {
	if t == nil || k <= 0 {
		return
	}
	t.fails += k
	if t.err == nil {
		t.err = err
	}
}

// counted is the number of items counted so far.
func (t *tally) counted() int {
	k := t.fails
	for _, n := range t.n {
		k += n
	}
	return k
}

// end records how a batch of items that returned (out, err) ended: with err
// and no result, refused as a whole (nothing was sent); with err and a
// result, the items not counted yet ended with err.
func (t *tally) end(out []bool, items int, err error) {
	switch {
	case err == nil:
	case out == nil:
		t.fail(err)
	default:
		t.failed(items-t.counted(), err)
	}
}

// fail records that err refused the whole batch before anything was sent.
func (t *tally) fail(err error) {
	if t != nil {
		t.err, t.whole = err, true
	}
}

// counting returns read that also counts every valid reply n as out(n).
func (t *tally) counting(read func(int64) (bool, bool), out func(int64) Outcome) func(int64) (bool, bool) {
	return func(n int64) (bool, bool) {
		v, ok := read(n)
		if ok {
			t.add(out(n))
		}
		return v, ok
	}
}

// report sends the batch's events (none for an empty batch).
func (t *tally) report(ctx context.Context, ev *events, op, script, key string, items int) {
	if t.whole {
		ev.report(ctx, op, script, key, items, outcome(t.err, outError), t.start, t.err)
		return
	}
	for i, out := range t.outs {
		if t.n[i] > 0 {
			ev.report(ctx, op, script, key, t.n[i], out, t.start, nil)
		}
	}
	if t.fails > 0 {
		ev.report(ctx, op, script, key, t.fails, outcome(t.err, outError), t.start, t.err)
	}
}

// appendOutcome is what an append without an error did.
func appendOutcome(created bool) Outcome {
	if created {
		return outAppended
	}
	return outRetriedAppend
}

// advanceOutcome is what an AdvanceGeneration without an error did.
func advanceOutcome(raised bool) Outcome {
	if raised {
		return outAdvanced
	}
	return outUnchanged
}

// reportAck reports an ack of ids message ids that removed n of them: acked
// (N = n) and not_found (N = the others) when it ran, one event with the
// error when it did not. An empty batch sends nothing and reports nothing.
func reportAck(ctx context.Context, ev *events, op, script, conn string, ids, n int, start time.Time, err error) {
	switch {
	case err != nil:
		ev.report(ctx, op, script, conn, ids, outcome(err, outError), start, err)
		return
	case ids == 0:
		return
	}
	if n > 0 {
		ev.report(ctx, op, script, conn, n, outAcked, start, nil)
	}
	if n < ids {
		ev.report(ctx, op, script, conn, ids-n, outNotFound, start, nil)
	}
}

// acquireOutcome is what an acquire without an error did: a record acquired
// with a fence above 1 was taken over from an owner whose lease had passed.
func acquireOutcome(acquired bool, fence uint64) Outcome {
	switch {
	case !acquired:
		return outExisting
	case fence > 1:
		return outTakenOver
	}
	return outAcquired
}
