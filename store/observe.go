package store

import (
	"context"
	"log/slog"
	"time"
)

// Observer receives one Event per store operation, after it ends, on the
// caller's goroutine. It must be safe for concurrent use and should return
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
	// Op is the operation in the store's API words, lower case: "claim",
	// "claim_many", "seen", "forget", "do", "extend", "append", "append_many",
	// "unacked", "ack", "advance", "drop", "acquire", "get", "update",
	// "delete"... Do flows report "do" once, with the flow's outcome, and
	// "extend" for each lease extension.
	Op string
	// Script is the name of the script the operation ran ("claim" for
	// claim.lua), empty for a memory twin or for a flow made of several scripts.
	Script string
	// Prefix is the store's key prefix; Key the id, connection or record key
	// the operation was about (empty for a batch). Key is unbounded in
	// cardinality: keep it out of metric labels.
	Prefix, Key string
	// N is the number of items in a batch (ids, messages), 1 otherwise.
	N int
	// Outcome says how it ended, in the store's own words (see the Outcome
	// constants); OutcomeError when Err is not a store verdict.
	Outcome Outcome
	// Start is when the operation began; Duration how long it took.
	Start    time.Time
	Duration time.Duration
	// Err is the error the operation returned, nil on success. Verdicts such
	// as ErrInFlight or ErrStaleOwner come with their own Outcome.
	Err error
}

// Outcome is how an operation ended, in a store's words. Its values are
// stable: alert and dashboard on them.
type Outcome string

// Outcomes. Claims: claimed, duplicate, in_flight, committed, released,
// lease_lost, extended, seen, not_seen, forgotten. Outbox: appended,
// retried_append, full, acked, stale_owner, advanced, dropped, read. Records:
// acquired, taken_over, existing, replayed, in_flight, mismatch, completed,
// failed, released, stale_owner, updated, deleted, not_found, read. Every store:
// invalid (bad input, nothing sent), error (connection, server, corrupt data).
const (
	OutcomeClaimed       Outcome = "claimed"
	OutcomeDuplicate     Outcome = "duplicate"
	OutcomeInFlight      Outcome = "in_flight"
	OutcomeCommitted     Outcome = "committed"
	OutcomeReleased      Outcome = "released"
	OutcomeLeaseLost     Outcome = "lease_lost"
	OutcomeExtended      Outcome = "extended"
	OutcomeSeen          Outcome = "seen"
	OutcomeNotSeen       Outcome = "not_seen"
	OutcomeForgotten     Outcome = "forgotten"
	OutcomeAppended      Outcome = "appended"
	OutcomeRetriedAppend Outcome = "retried_append"
	OutcomeFull          Outcome = "full"
	OutcomeAcked         Outcome = "acked"
	OutcomeStaleOwner    Outcome = "stale_owner"
	OutcomeAdvanced      Outcome = "advanced"
	OutcomeDropped       Outcome = "dropped"
	OutcomeRead          Outcome = "read"
	OutcomeAcquired      Outcome = "acquired"
	OutcomeTakenOver     Outcome = "taken_over"
	OutcomeExisting      Outcome = "existing"
	OutcomeReplayed      Outcome = "replayed"
	OutcomeMismatch      Outcome = "mismatch"
	OutcomeCompleted     Outcome = "completed"
	OutcomeFailed        Outcome = "failed"
	OutcomeUpdated       Outcome = "updated"
	OutcomeDeleted       Outcome = "deleted"
	OutcomeNotFound      Outcome = "not_found"
	OutcomeInvalid       Outcome = "invalid"
	OutcomeError         Outcome = "error"
)

// SlogObserver logs every event to l: Debug for routine outcomes, Warn for
// the ones worth a look (stale_owner, lease_lost, taken_over, mismatch, full,
// invalid), Error for error. Attributes: store, op, script, key, n, outcome,
// duration, err.
func SlogObserver(l *slog.Logger) Observer {
	return slogObserver{l}
}

type slogObserver struct{ l *slog.Logger }

func (o slogObserver) Observe(ctx context.Context, e Event) {
	level := slog.LevelDebug
	switch e.Outcome {
	case OutcomeStaleOwner, OutcomeLeaseLost, OutcomeTakenOver, OutcomeMismatch, OutcomeFull, OutcomeInvalid:
		level = slog.LevelWarn
	case OutcomeError:
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
	if e.Key != "" {
		attrs = append(attrs, slog.String("key", e.Key))
	}
	if e.N != 1 {
		attrs = append(attrs, slog.Int("n", e.N))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	o.l.LogAttrs(ctx, level, "redisonce "+e.Store+" "+e.Op, attrs...)
}
