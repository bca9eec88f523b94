// Package delivery settles one delivery of a message through a claim
// store's Do, the same way for the Streams runner (streams/) and every
// integration module (integrations/*): it runs the handler with a panic
// turned into an error, and names the row of the outcome table
// (docs/integrations.md, "One behaviour per outcome") the delivery falls in.
// Each caller maps a row to its host's action (ack, nack, park, term...).
//
// A panic is a failure like any other: the handler's goroutine is the
// caller's, so a panic left to run would crash a worker process (most hosts
// do not recover it) and leave the id held until its lease ran out. Recovered
// inside fn, it reaches Do as fn's error: the id is released at once, and the
// message is redelivered under the failure policy.
package delivery

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/redisonce/redisonce/internal/inflight"
	"github.com/redisonce/redisonce/store"
)

// Claimer is the one method of *store.Claims a delivery is settled through.
type Claimer interface {
	Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, error)
}

// Row is one row of the outcome table.
type Row int

const (
	// Done: fn ran and returned nil, and the id is committed.
	Done Row = iota
	// Duplicate: the id was processed already; fn did not run.
	Duplicate
	// InFlight: another consumer holds the id's lease; fn did not run.
	InFlight
	// Failed: fn returned an error or panicked; the id is released.
	Failed
	// Permanent: fn failed with an error marked store.Permanent (a retry
	// cannot succeed); the id is released.
	Permanent
	// Shutdown: the context Do ran under was cancelled before the delivery
	// was done (a shutdown, a revoked partition); the id is released or
	// was never taken.
	Shutdown
	// CommitFailed: fn returned nil, and the commit failed (the lease lost
	// to another consumer, or the store unreachable): the effect happened.
	CommitFailed
	// StoreError: the store failed before fn ran (Redis unreachable).
	StoreError
)

// Names are the shared outcome vocabulary: the word each caller reports for
// a row (plus DeadLettered, a failure moved aside), so that a dashboard over
// two integrations reads one language.
const (
	NameDone         = "done"
	NameDuplicate    = "duplicate"
	NameInFlight     = "in_flight"
	NameDeadLettered = "dead_lettered"
	NameReleased     = "released"
)

// PanicError is fn's error when fn panicked: the panic's value and the
// stack it was recovered on.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Unwrap gives the panic's value when it is an error (panic(err)).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Result is one delivery's settlement.
type Result struct {
	Row Row
	// Err is fn's error for Failed and Permanent (a *PanicError for a
	// panic), else Do's error (nil for Done and Duplicate).
	Err error
	// RedeliverAfter is, for InFlight, how long to hold the delivery back:
	// the holder's lease time left plus a margin (internal/inflight.Delay), or
	// the lease when the store does not say.
	RedeliverAfter time.Duration
}

// Do runs fn once per id through claims.Do under lease, with fn's panic
// recovered as its error, and classifies the result. ctx is Do's context:
// when it is cancelled before the delivery is done, the row is Shutdown.
func Do(ctx context.Context, claims Claimer, id string, lease time.Duration, fn func(context.Context) error) Result {
	var fnErr error
	fnRan := false
	ran, err := claims.Do(ctx, id, lease, func(ctx context.Context) (err error) {
		fnRan = true
		defer func() {
			if p := recover(); p != nil {
				err = &PanicError{Value: p, Stack: debug.Stack()}
			}
			fnErr = err
		}()
		return fn(ctx)
	})
	return classify(ctx, ran, fnRan, fnErr, err, lease)
}

// classify names the row of Do's result; fnRan and fnErr say whether fn
// ran and what it returned.
func classify(ctx context.Context, ran, fnRan bool, fnErr, err error, lease time.Duration) Result {
	switch {
	case err == nil && ran:
		return Result{Row: Done}
	case err == nil:
		return Result{Row: Duplicate}
	case fnRan && fnErr == nil:
		// Even in a shutdown: the effect happened, whatever the commit did.
		return Result{Row: CommitFailed, Err: err}
	case fnRan && ctx.Err() == nil:
		if store.IsPermanent(fnErr) {
			return Result{Row: Permanent, Err: fnErr}
		}
		return Result{Row: Failed, Err: fnErr}
	case ctx.Err() != nil:
		return Result{Row: Shutdown, Err: err}
	case errors.Is(err, store.ErrInFlight):
		return Result{Row: InFlight, Err: err, RedeliverAfter: inflight.Delay(err, lease)}
	default:
		return Result{Row: StoreError, Err: err}
	}
}

// Batched is a *store.Batch as a Claimer: Do runs through the Batch (its
// lease, not the one passed), so that a consumer settles a delivery the same
// way whether its claims are batched or not.
type Batched struct{ B *store.Batch }

// Do is B.Do; lease is the Batch's own.
func (b Batched) Do(ctx context.Context, id string, _ time.Duration, fn func(context.Context) error) (bool, error) {
	return b.B.Do(ctx, id, fn)
}
