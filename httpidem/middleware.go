// Package httpidem is net/http middleware for the Idempotency-Key header
// (Stripe's, and the IETF draft "The Idempotency-Key HTTP Header Field") over
// any store.RecordStore: the first response to a key — status, headers and
// body — is stored, and a retry with the same key gets the same response
// again, marked with "Idempotent-Replayed: true", without the handler running.
//
// For a request with one of the middleware's methods (POST and PATCH by
// default) and an Idempotency-Key header:
//
//   - the key must be 1..255 bytes (WithMaxKeyLen) of visible ASCII or
//     spaces, else 400; it is scoped by WithScope (the authenticated user,
//     say);
//   - the body is read once (at most 8 MiB, WithMaxBody, else 413) and handed
//     to the handler intact;
//   - a fingerprint of the method, the path and a SHA-256 of the body
//     (WithFingerprint) guards the key: the same key with another request is
//     answered 422 and the handler does not run;
//   - the handler runs inside the store's Do, so it runs once per key across
//     every server sharing the store, with the key's lease kept alive while it
//     runs; a retry meanwhile is answered 409 with a Retry-After (in seconds)
//     of the lease's remaining time. The request the handler gets carries
//     the lease in its context: store.LeaseFromContext(r.Context()) gives the
//     fencing token and fence to pass to a downstream system that checks them;
//     if the lease is lost, that context is cancelled;
//   - a 2xx, 3xx or 4xx response is a final answer: it is stored (headers
//     minus the hop-by-hop ones, Date and Set-Cookie: WithKeepHeader) and
//     replayed to every retry until the record expires (WithTTL, else the
//     store's TTL);
//   - a 5xx response, a handler that panics, and a request whose context ends
//     while the handler runs (the client went away) are not stored: the record
//     is deleted so that a retry runs the handler again. A 5xx response still
//     reaches the client as the handler wrote it. A panic is not recovered: the
//     record is deleted and the panic goes on, to net/http or to an outer
//     recovery middleware, exactly as without this middleware;
//   - a response whose stored form would exceed store.MaxRecordPayloadLen
//     (1 MiB) is sent to the client as it is written but not stored, and the
//     record is released (deleted), never half-stored: a retry runs the
//     handler again. A handler that calls Flush (a streaming response) or
//     hijacks the connection is passed through the same way, unstored.
//   - 1xx informational responses (103 Early Hints) are sent at once and not
//     stored; trailers are not stored.
//
// Requests with other methods, and requests without the header (unless
// WithRequireKey), pass through untouched. When the middleware answers for
// itself the body is an RFC 9457 problem+json (Problem). When the store
// cannot be reached the answer is 503 and the handler does not run: the
// middleware fails closed.
package httpidem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/redisonce/redisonce/store"
)

// Header names.
const (
	// HeaderKey is the request header that carries the idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a replayed response; the first
	// response never carries it.
	HeaderReplayed = "Idempotent-Replayed"
)

// Middleware returns middleware that makes a handler idempotent under the
// Idempotency-Key header, with rs keeping the responses (see the package
// documentation for the behaviour and the defaults). Give it a store with a
// prefix of its own (store.WithPrefix("http-idem:")): a record that other
// code wrote under the same key is not a stored response, and is answered 500.
// A nil store or handler, or an invalid option (a nil one, a lease or key
// length <= 0, a key length over store.MaxIDLen, a negative TTL or body
// limit) does not panic: the middleware then answers every request 500 with
// a problem saying what is wrong, and never runs the handler (fail closed).
func Middleware(rs store.RecordStore, opts ...Option) func(http.Handler) http.Handler {
	cfg, bad := newConfig(opts), ""
	switch {
	case rs == nil:
		bad = "httpidem: nil store"
	case cfg.badOption != "":
		bad = cfg.badOption
	case cfg.lease <= 0:
		bad = fmt.Sprintf("httpidem: WithLease(%v): the lease must be > 0", cfg.lease)
	case cfg.ttl < 0:
		bad = fmt.Sprintf("httpidem: WithTTL(%v): negative", cfg.ttl)
	case cfg.maxKeyLen <= 0 || cfg.maxKeyLen > store.MaxIDLen:
		bad = fmt.Sprintf("httpidem: WithMaxKeyLen(%d): want 1..%d", cfg.maxKeyLen, store.MaxIDLen)
	case cfg.maxBody < 0:
		bad = fmt.Sprintf("httpidem: WithMaxBody(%d): negative", cfg.maxBody)
	}
	return func(next http.Handler) http.Handler {
		if bad == "" && next == nil {
			bad = "httpidem: nil handler"
		}
		if bad != "" {
			return misconfigured(bad)
		}
		return &handler{rs: rs, cfg: cfg, next: next}
	}
}

// misconfigured answers every request 500 with detail: middleware built with
// bad input, which must not run the handler unguarded.
type misconfigured string

func (m misconfigured) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	writeProblem(w, http.StatusInternalServerError, string(m), "", 0)
}

type handler struct {
	rs   store.RecordStore
	cfg  *config
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.methods[r.Method] {
		h.next.ServeHTTP(w, r)
		return
	}
	keys := r.Header.Values(HeaderKey)
	switch {
	case len(keys) == 0 && h.cfg.require:
		writeProblem(w, http.StatusBadRequest, "this request needs an Idempotency-Key header", HeaderKey, 0)
		return
	case len(keys) == 0:
		h.next.ServeHTTP(w, r)
		return
	case len(keys) > 1:
		writeProblem(w, http.StatusBadRequest, "the request has more than one Idempotency-Key header", HeaderKey, 0)
		return
	}
	key := keys[0]
	if detail := h.checkKey(key); detail != "" {
		writeProblem(w, http.StatusBadRequest, detail, HeaderKey, 0)
		return
	}

	body, err := h.readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a request with an Idempotency-Key may have a body of at most %d bytes", tooBig.Limit), "", 0)
			return
		}
		writeProblem(w, http.StatusBadRequest, "the request body could not be read: "+err.Error(), "", 0)
		return
	}
	id := key
	if h.cfg.scope != nil {
		id = url.QueryEscape(h.cfg.scope(r)) + ":" + key
		if len(id) > store.MaxIDLen {
			writeProblem(w, http.StatusBadRequest, fmt.Sprintf("the Idempotency-Key with its scope is %d bytes, the limit is %d", len(id), store.MaxIDLen), HeaderKey, 0)
			return
		}
	}
	o := store.AcquireOptions{TTL: h.cfg.ttl, Lease: h.cfg.lease}
	if h.cfg.fingerprint != nil {
		o.Fingerprint = h.cfg.fingerprint(r, body)
	}

	var rec *recorder
	var fnErr error
	res, replayed, err := h.rs.Do(r.Context(), id, o, func(ctx context.Context) ([]byte, error) {
		rec = newRecorder(w, h.cfg.keep, store.MaxRecordPayloadLen)
		h.next.ServeHTTP(rec, r.WithContext(ctx))
		rec.finish()
		switch {
		case rec.passed != nil:
			fnErr = store.Retryable(rec.passed)
		case ctx.Err() != nil:
			fnErr = store.Retryable(fmt.Errorf("%w: %w", errClientGone, context.Cause(ctx)))
		default:
			return encode(rec.response()), nil
		}
		return nil, fnErr
	})
	if rec != nil {
		// The handler ran here: its response goes to the client whatever the
		// store said (the effect has happened), unless it went already.
		rec.deliver()
		if err != nil && err != fnErr {
			h.cfg.log.ErrorContext(r.Context(), "httpidem: the response was sent but the store failed", "key", id, "err", err)
		}
		return
	}
	switch {
	case err == nil && replayed:
		h.replay(w, r, id, res)
	case errors.Is(err, store.ErrInFlight):
		writeProblem(w, http.StatusConflict, "a request with this Idempotency-Key is still being processed; retry later", HeaderKey, h.retryAfter(r.Context(), id))
	case errors.Is(err, store.ErrFingerprintMismatch):
		writeProblem(w, http.StatusUnprocessableEntity, "this Idempotency-Key was used with a different request", HeaderKey, 0)
	case errors.Is(err, store.ErrInvalidArgument):
		// A fingerprint over store.MaxFingerprintLen, say: a configuration error.
		h.cfg.log.ErrorContext(r.Context(), "httpidem: the store refused the request's key or options", "key", id, "err", err)
		writeProblem(w, http.StatusInternalServerError, "the idempotency store refused this request", "", 0)
	case errors.Is(err, store.ErrFailed):
		h.cfg.log.ErrorContext(r.Context(), "httpidem: the key's record is failed", "key", id, "err", err)
		writeProblem(w, http.StatusInternalServerError, "the stored outcome for this Idempotency-Key is a failure", HeaderKey, 0)
	case err == nil:
		// Do neither ran fn nor replayed: a broken store.
		h.cfg.log.ErrorContext(r.Context(), "httpidem: the store's Do neither ran the handler nor replayed", "key", id)
		writeProblem(w, http.StatusInternalServerError, "the idempotency store answered nothing", "", 0)
	default:
		if r.Context().Err() == nil {
			h.cfg.log.ErrorContext(r.Context(), "httpidem: store error", "key", id, "err", err)
		}
		writeProblem(w, http.StatusServiceUnavailable, "the idempotency store is unavailable; retry later", "", 1)
	}
}

// checkKey returns why key is not acceptable, or "".
func (h *handler) checkKey(key string) string {
	if key == "" {
		return "the Idempotency-Key header is empty"
	}
	if len(key) > h.cfg.maxKeyLen {
		return fmt.Sprintf("the Idempotency-Key is %d bytes, the limit is %d", len(key), h.cfg.maxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Sprintf("the Idempotency-Key has a byte 0x%02x at %d: only visible ASCII and spaces are allowed", c, i)
		}
	}
	return ""
}

// readBody reads the whole body, at most maxBody bytes, and puts an intact
// copy back for the handler.
func (h *handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.maxBody))
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return body, nil
}

// replay writes a stored response with Idempotent-Replayed: true.
func (h *handler) replay(w http.ResponseWriter, r *http.Request, id string, payload []byte) {
	resp, err := decode(payload)
	if err != nil {
		h.cfg.log.ErrorContext(r.Context(), "httpidem: stored response does not decode", "key", id, "err", err)
		writeProblem(w, http.StatusInternalServerError, "the stored response for this Idempotency-Key is unreadable", HeaderKey, 0)
		return
	}
	hd := w.Header()
	maps.Copy(hd, resp.header)
	hd.Set(HeaderReplayed, "true")
	w.WriteHeader(resp.status)
	if len(resp.body) > 0 {
		_, _ = w.Write(resp.body)
	}
}

// retryAfter is the Retry-After of a 409, in whole seconds: the time left on
// the running request's lease (after which a crashed server's request is
// taken over), at least 1 and at most the configured lease.
func (h *handler) retryAfter(ctx context.Context, id string) int {
	limit := int(math.Ceil(h.cfg.lease.Seconds()))
	rec, ok, err := h.rs.Get(ctx, id)
	if err != nil || !ok || rec.Status != store.StatusPending {
		return 1 // it just finished, or the store is unsure: try again soon
	}
	if rec.LeaseUntil.IsZero() {
		return limit
	}
	s := int(math.Ceil(time.Until(rec.LeaseUntil).Seconds()))
	return min(max(s, 1), limit)
}
