package httpidem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redisonce/redisonce/store"
)

// ErrNotStored is what every reason a response was sent but not stored
// wraps; the Err of the middleware's "respond" events (WithObserver).
var ErrNotStored = errors.New("httpidem: response not stored")

// Why a response went to the client without being stored: the record is
// deleted so that a retry runs the handler again, and the reason is reported
// (WithObserver) and logged (WithLogger).
var (
	// ErrServerError: the handler answered 5xx.
	ErrServerError = fmt.Errorf("%w: a 5xx response", ErrNotStored)
	// ErrTooLarge: the response would exceed store.MaxRecordPayloadLen.
	ErrTooLarge = fmt.Errorf("%w: larger than a record payload", ErrNotStored)
	// ErrStreamed: the handler flushed (a streaming response).
	ErrStreamed = fmt.Errorf("%w: the handler flushed (streaming)", ErrNotStored)
	// ErrHijacked: the handler hijacked the connection, or switched protocols.
	ErrHijacked = fmt.Errorf("%w: the handler hijacked the connection", ErrNotStored)
	// ErrNothingWritten: the handler returned without writing a status or a
	// byte (net/http answers 200 with no body); a handler that means "200,
	// empty" and wants it replayed calls WriteHeader.
	ErrNothingWritten = fmt.Errorf("%w: the handler wrote nothing", ErrNotStored)
	// ErrPanicked: the handler panicked; the panic goes on.
	ErrPanicked = fmt.Errorf("%w: the handler panicked", ErrNotStored)
)

// OutcomeNotStored is the Outcome of a "respond" event: a response sent but
// not stored.
const OutcomeNotStored store.Outcome = "not_stored"

// notStored reports a response sent but not stored.
func (h *handler) notStored(ctx context.Context, id string, start time.Time, why error) {
	h.cfg.log.WarnContext(ctx, "httpidem: response sent but not stored; a retry runs the handler again", append(h.logAttrs(id, nil), "reason", why)...)
	if h.cfg.obs != nil {
		h.cfg.obs.Observe(ctx, store.Event{Store: "httpidem", Op: "respond", Key: id, N: 1,
			Outcome: OutcomeNotStored, Start: start, Duration: time.Since(start), Err: why})
	}
}
