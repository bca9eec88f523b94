package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// DefaultClaimsPrefix is the key prefix of Claims unless WithPrefix says
// otherwise; it and the value "1" keep the data compatible with consumers that
// dedupe with `SET bq:idemp:<id> 1 NX PX ttl`.
const DefaultClaimsPrefix = "bq:idemp:"

// ClaimStore is what Claims and MemoryClaims implement; storetest.TestClaims
// checks any implementation against the contract.
type ClaimStore interface {
	Claim(ctx context.Context, id string) (bool, error)
	ClaimMany(ctx context.Context, ids []string) ([]bool, error)
	Seen(ctx context.Context, id string) (bool, error)
	SeenMany(ctx context.Context, ids []string) ([]bool, error)
	Remember(ctx context.Context, id string) error
	Forget(ctx context.Context, id string) error
	Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (ran bool, err error)
	Close() error
}

// runLeased is Do after a won claim, shared by Claims and MemoryClaims: run fn
// with the lease kept alive (hb, started before the claim was sent and
// confirmed once it was won), then commit on success or release on failure
// or panic. Commit and release run even when ctx is already cancelled,
// bounded by a budget of their own, and are retried on transport failures
// (retryLost). commit returns commit.lua's reply.
//
// Which commit replies are a success, and why each is sound:
//   - 1: the key held this Do's "~<token>", which nobody else writes: the
//     lease was never taken, and the mark is ours.
//   - 2: the key was absent (the lease expired and nobody holds the id): no
//     other caller's effect is marked done, so ours is the one recorded. (A
//     caller that took the id meanwhile and failed released it; its effect
//     failed as a whole.)
//   - 0 on the first attempt: another caller processed the id: ErrLeaseLost.
//   - 0 after a retry: "1" is there, and it is our own earlier attempt only
//     if nobody else could have taken the id before the attempt that found
//     it ran. That is provable when the heartbeat never found the lease lost
//     and that attempt's reply came back before the local lease deadline:
//     the attempt ran before its reply, so before the server could let the
//     lease go (the deadline is the send time of the last successful claim or
//     extension plus the lease, minus the clock-rate margin), while the key
//     still held our token or the mark our own commit wrote. Otherwise
//     another caller may have taken the id over, run and committed, and a
//     success would hide a double effect: ErrLeaseLost.
//   - -1: another caller's lease: ErrLeaseLost.
//
// A release retried after a transport failure reports success whatever its
// retry finds (our lease deleted by the first attempt, or another caller's
// lease left alone): it only gives the id back, and claims nothing.
func runLeased(ctx context.Context, hb *heartbeat, id string, fn func(context.Context) error,
	commit func(context.Context) (int64, error), release func(context.Context) error) (out Outcome, err error) {
	done := false
	defer func() {
		if done {
			return
		}
		// fn panicked: give the id back before the panic goes on.
		hb.stop()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
		defer cancel()
		_ = retryLost(rctx, release)
	}()
	fnErr := fn(hb)
	done = true
	deadline, lost := hb.stop()
	if fnErr != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
		defer cancel()
		if rerr := retryLost(rctx, release); rerr != nil {
			// The lease will expire on its own; report both.
			return OutcomeError, errors.Join(fnErr, rerr)
		}
		return OutcomeReleased, fnErr
	}
	// The effect has happened: commit even if ctx was cancelled meanwhile, so a
	// redelivery does not run it again.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteBudget)
	defer cancel()
	var n int64
	var answered time.Time
	attempts := 0
	err = retryLost(cctx, func(ctx context.Context) (err error) {
		attempts++
		n, err = commit(ctx)
		answered = time.Now()
		return err
	})
	if err != nil {
		return outcome(err, OutcomeError), err
	}
	switch {
	case n == 1 || n == 2:
		return OutcomeCommitted, nil
	case n == 0 && attempts > 1 && !lost && answered.Before(deadline):
		// A retry found the mark while the lease was provably still ours:
		// the first attempt landed.
		return OutcomeCommitted, nil
	case n == 0 && attempts > 1:
		return OutcomeLeaseLost, errorf("do", id, ErrLeaseLost, "a retried commit found the id processed after the lease may have passed: another consumer may have processed it too")
	case n == 0:
		return OutcomeLeaseLost, errorf("do", id, ErrLeaseLost, "another consumer processed the id")
	default:
		return OutcomeLeaseLost, errorf("do", id, ErrLeaseLost, "another consumer holds the id")
	}
}

// finalWriteBudget bounds a Do's final write (commit, release, the record's
// outcome) with its retries; it runs even when the Do's ctx is cancelled.
const finalWriteBudget = 5 * time.Second

// newLeaseValue returns "~" and a newToken in one allocation.
func newLeaseValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	var v [1 + 32]byte
	v[0] = '~'
	hex.Encode(v[1:], b[:])
	return string(v[:])
}

// Wrap adapts a ClaimStore's Do to a message handler: the returned handler runs h
// at most once per id(msg) and is safe to call on every delivery.
//
// It returns nil for a duplicate of a processed message (ack it), the store's
// ErrInFlight while another consumer holds the message (nack it so it is
// redelivered later: store.RetryAfter(err) says when its holder's lease can
// have ended), and h's error when h fails (the claim is released so the
// redelivery retries). A nil s, id or h gives a handler that returns
// ErrInvalidArgument.
func Wrap[M any](s ClaimStore, lease time.Duration, id func(M) string, h func(context.Context, M) error) func(context.Context, M) error {
	if s == nil || id == nil || h == nil {
		return func(context.Context, M) error {
			return fmt.Errorf("redisonce: wrap: %w: a nil store, id func or handler", ErrInvalidArgument)
		}
	}
	return func(ctx context.Context, msg M) error {
		_, err := s.Do(ctx, id(msg), lease, func(ctx context.Context) error { return h(ctx, msg) })
		return err
	}
}
