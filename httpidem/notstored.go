package httpidem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redisonce/redisonce/store"
)

// ErrNotStored is what every reason a response was sent but not stored
// wraps; the Err of the middleware's "respond" events (WithObserver).
var ErrNotStored = errors.New("httpidem: response not stored")

// Why a response went to the client without being stored. Two kinds:
//
//   - the handler said a retry may run it again (NotDone; a 5xx under
//     WithRetry5xx): the record is released, and a retry runs the handler;
//   - the response cannot be replayed (ErrTooLarge, ErrStreamed,
//     ErrHijacked, ErrPanicked): the record keeps a 500 problem saying so
//     (the not-replayable answer), which every retry gets instead of a
//     second run.
//
// Each is reported (WithObserver) and logged (WithLogger).
var (
	// ErrNotDone: the handler called NotDone; a retry runs it again.
	ErrNotDone = fmt.Errorf("%w: the handler said it is not done (NotDone)", ErrNotStored)
	// ErrServerError: the handler answered 5xx under WithRetry5xx; a retry
	// runs it again.
	ErrServerError = fmt.Errorf("%w: a 5xx response (WithRetry5xx)", ErrNotStored)
	// ErrTooLarge: the response would exceed store.MaxRecordPayloadLen.
	ErrTooLarge = fmt.Errorf("%w: larger than a record payload", ErrNotStored)
	// ErrStreamed: the handler flushed a response (streaming) that grew past
	// store.MaxRecordPayloadLen. (A flushed response that fits is stored.)
	ErrStreamed = fmt.Errorf("%w: a streamed response larger than a record payload", ErrNotStored)
	// ErrHijacked: the handler hijacked the connection, or switched protocols.
	ErrHijacked = fmt.Errorf("%w: the handler hijacked the connection", ErrNotStored)
	// ErrPanicked: the handler panicked; the panic goes on.
	ErrPanicked = fmt.Errorf("%w: the handler panicked", ErrNotStored)
)

// OutcomeNotStored is the Outcome of a "respond" event: a response sent but
// not stored.
const OutcomeNotStored store.Outcome = "not_stored"

// notStored reports a response sent but not stored.
func (h *handler) notStored(ctx context.Context, id string, start time.Time, why error) {
	msg := "httpidem: response sent but not replayable; a retry gets a 500 problem, the handler does not run again"
	if errors.Is(why, ErrNotDone) || errors.Is(why, ErrServerError) {
		msg = "httpidem: response sent but not stored; a retry runs the handler again"
	}
	h.cfg.log.WarnContext(ctx, msg, append(h.logAttrs(id, nil), "reason", why)...)
	if h.cfg.obs != nil {
		h.cfg.obs.Observe(ctx, store.Event{Store: "httpidem", Op: "respond", Key: id, N: 1,
			Outcome: OutcomeNotStored, Start: start, Duration: time.Since(start), Err: why})
	}
}

// notReplayable is the response a record keeps when the handler ran but its
// own response cannot be stored (why): a 500 problem saying the request was
// processed and is not run again. Its encoded form stays well under
// store.MaxSmallPayloadLen (with a problem type URI of up to 300 bytes), so
// it is stored even when Redis is out of memory.
func notReplayable(problemType string, why error) response {
	if problemType == "" {
		problemType = "about:blank"
	}
	p := Problem{Type: problemType, Title: http.StatusText(http.StatusInternalServerError),
		Status: http.StatusInternalServerError, Header: HeaderKey,
		Detail: "the request with this Idempotency-Key was processed, but its response could not be stored (" +
			reasonText(why) + "): it is not replayed, and the request does not run again"}
	body, _ := json.Marshal(p) // strings and an int: cannot fail
	body = append(body, '\n')
	h := http.Header{}
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	return response{status: http.StatusInternalServerError, header: h, body: body}
}

// reasonText is why's text without ErrNotStored's.
func reasonText(why error) string {
	switch why {
	case ErrTooLarge:
		return "larger than a record"
	case ErrStreamed:
		return "streamed, and larger than a record"
	case ErrHijacked:
		return "the handler took the connection"
	case ErrPanicked:
		return "the handler panicked"
	}
	return "the store could not keep it"
}

// notDoneKey is the context key of a request's *atomic.Bool that NotDone sets.
type notDoneKey struct{}

// NotDone tells the middleware that the handler serving r has had no effect
// that a retry must not repeat: its response still goes to the client, but
// it is not stored, the key's record is released, and a retry with the same
// key runs the handler again. Call it before returning (a 503 after a
// downstream call that surely did not happen, say). Without it, once the
// handler has started a retry never runs it again (see the package
// documentation). It reports whether r is a request the middleware is
// guarding (false: nothing to mark).
func NotDone(r *http.Request) bool {
	b, ok := r.Context().Value(notDoneKey{}).(*atomic.Bool)
	if ok {
		b.Store(true)
	}
	return ok
}
