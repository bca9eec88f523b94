package store

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Sentinel errors. Every error a store returns wraps one of these (or a context
// or connection error) with the operation and the id, e.g.
// `redisonce: ack "c1": stale owner`; test with errors.Is.
var (
	// ErrNotFound: the record or connection does not exist (script code NOT_FOUND).
	ErrNotFound = errors.New("not found")
	// ErrStaleOwner: the caller's token or generation was superseded by a newer
	// owner; nothing was changed (script code STALE_OWNER).
	ErrStaleOwner = errors.New("stale owner")
	// ErrInFlight: another holder's lease on the id is still live; retry later.
	// RetryAfter reads, from Claims.Do's and Records.Do's error, how long the
	// holder's lease has left.
	ErrInFlight = errors.New("in flight")
	// ErrLeaseLost: Claims.Do's commit found the id held or processed by
	// another consumer (the lease ran out while extensions failed, or the id
	// was forgotten and claimed again), or a retried commit found the mark
	// when it could not prove the mark its own; the effect may have run
	// twice. Also the cause of fn's cancelled context when a lease extension
	// finds the lease gone or the local lease deadline passes, and
	// Records.Do's answer when its record vanished and another caller
	// acquired the key before the final write.
	ErrLeaseLost = errors.New("lease lost")
	// ErrOutboxFull: the connection's unacknowledged tail is at its limit; nothing
	// was appended (script code FULL).
	ErrOutboxFull = errors.New("outbox full")
	// ErrFingerprintMismatch: the key was first used with a different request
	// fingerprint (script code MISMATCH).
	ErrFingerprintMismatch = errors.New("fingerprint mismatch")
	// ErrInvalidArgument: an empty or oversize id, a negative duration, an
	// oversize payload... caught in Go before anything is sent (script code BADARG
	// if a non-Go caller sends it).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnexpectedReply: Redis answered with a reply of the wrong shape, or the
	// stored value is not what a store wrote (script code CORRUPT).
	ErrUnexpectedReply = errors.New("unexpected reply")
	// ErrNotReplicated: with WithWaitReplicas, the write happened on the
	// primary but fewer replicas than asked confirmed it in time, so a
	// failover may still undo it. The operation's other results describe the
	// write as the primary made it; retrying an idempotent write (AppendWithID
	// with the same id, a fenced Update...) waits again.
	ErrNotReplicated = errors.New("not replicated (written on the primary; a failover may undo it)")
)

// codeErrors maps a script error's first word to its sentinel.
var codeErrors = map[string]error{
	"BADARG":      ErrInvalidArgument,
	"STALE_OWNER": ErrStaleOwner,
	"NOT_FOUND":   ErrNotFound,
	"FULL":        ErrOutboxFull,
	"MISMATCH":    ErrFingerprintMismatch,
	"CORRUPT":     ErrUnexpectedReply,
}

// opError wraps err with the operation and id. A script error reply is mapped
// to its sentinel by its first word and keeps the script's detail text. A
// WRONGTYPE reply — the key holds a type no store writes there — is
// ErrUnexpectedReply, as the stores' own CORRUPT checks are, with Redis's text;
// so is a nil reply where a script never answers nil (callers that accept nil
// test rueidis.IsRedisNil first).
func opError(op, id string, err error) error {
	if rueidis.IsRedisNil(err) {
		return errorf(op, id, ErrUnexpectedReply, "nil reply")
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		code, detail, _ := strings.Cut(msg, " ")
		if code == "WRONGTYPE" {
			return errorf(op, id, ErrUnexpectedReply, "%s", msg)
		}
		if sentinel, ok := codeErrors[code]; ok {
			if detail != "" {
				return fmt.Errorf("redisonce: %s %q: %w: %s", op, id, sentinel, detail)
			}
			return fmt.Errorf("redisonce: %s %q: %w", op, id, sentinel)
		}
	}
	return fmt.Errorf("redisonce: %s %q: %w", op, id, err)
}

// errorf builds an error for op and id that wraps sentinel with a detail.
func errorf(op, id string, sentinel error, format string, args ...any) error {
	return fmt.Errorf("redisonce: %s %q: %w: %s", op, id, sentinel, fmt.Sprintf(format, args...))
}

// inFlightError is the error Claims.Do and Records.Do return when another
// holder's lease covers the id: errors.Is(err, ErrInFlight) matches it, and
// RetryAfter reads the time its holder's lease had left.
type inFlightError struct {
	op, id string
	left   time.Duration // the holder's lease time left; 0 = unknown (no lease)
}

// Error renders `redisonce: do "m1": in flight (lease ends in 1.5s)`.
func (e *inFlightError) Error() string {
	if e.left <= 0 {
		return fmt.Sprintf("redisonce: %s %q: %v", e.op, e.id, ErrInFlight)
	}
	return fmt.Sprintf("redisonce: %s %q: %v (lease ends in %v)", e.op, e.id, ErrInFlight, e.left)
}

// Is reports whether target is ErrInFlight.
func (e *inFlightError) Is(target error) bool { return target == ErrInFlight }

// RetryAfter is how long to wait before a delivery of an id that err
// reports in flight (ErrInFlight, from Claims.Do or Records.Do) is worth
// trying again, and true; 0 and false when err does not say (any other
// error, or a record pending without a lease, which never expires).
//
// It is the time the holder's lease had left when the store looked, as the
// Redis server's clock counts it (claim.lua replies it; Records.Do takes it
// from the record's lease deadline, against this process's clock). Come back
// after it: by then the holder has committed (a duplicate: ack), released
// after a failure (the redelivery runs), or died and let the lease expire (the
// redelivery runs) — or it is still running, extending its lease, and the
// answer is ErrInFlight again with a new time. So redeliveries of an in-flight
// message are paced by the lease, not by the broker's retry rate. Every
// integration of this module delays its redelivery by it, e.g.
//
//	if d, ok := store.RetryAfter(err); ok {
//		return msg.NakWithDelay(d)
//	}
func RetryAfter(err error) (time.Duration, bool) {
	var e *inFlightError
	if errors.As(err, &e) && e.left > 0 {
		return e.left, true
	}
	return 0, false
}

// inFlight is the in-flight error of op on id with left on the holder's lease.
func inFlight(op, id string, left time.Duration) error {
	return &inFlightError{op: op, id: id, left: left}
}

// nilStore is the error of a method called on a nil *typ (var c *Claims;
// c.Do(...)): ErrInvalidArgument, nothing sent.
func nilStore(op, id, typ string) error {
	return errorf(op, id, ErrInvalidArgument, "nil *%s", typ)
}
