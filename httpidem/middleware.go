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
	"strings"
	"sync/atomic"
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

// Store keeps the middleware's records: a *store.Records (on Redis, or its
// memory twin), or a store of another module with the same Do, such as
// integrations/postgres' Records, which commits the stored response in the
// transaction that makes the handler's writes. Do runs fn at most once per
// key across every caller and replays its result, as store.Records.Do does.
type Store interface {
	Do(ctx context.Context, key string, o store.AcquireOptions, fn func(context.Context) ([]byte, error)) (result []byte, replayed bool, err error)
}

// Middleware returns middleware that makes a handler idempotent under the
// Idempotency-Key header, with rs keeping the responses (see the package
// documentation for the behaviour and the defaults). Give it a store with a
// prefix of its own (store.WithPrefix("http-idem:")): a record that other
// code wrote under the same key is not a stored response, and is answered 500.
//
// The key space is a decision Middleware does not make for you: opts must
// hold one of WithScope (keys scoped to the caller's identity: the account
// behind a cookie session or a rotating token), WithCredentialScope (scoped
// to the request's own credentials) and WithSharedKeys (one key space for
// every caller), else Middleware returns an error. So does a nil store or an
// invalid option (a nil one, a lease or key length <= 0, a key length over
// store.MaxIDLen, a negative TTL, body limit, wait or Retry-After cap). A nil
// handler given to the returned function is answered 500 on every request,
// never run (fail closed).
func Middleware(rs Store, opts ...Option) (func(http.Handler) http.Handler, error) {
	cfg, bad := newConfig(opts), ""
	if r, ok := rs.(*store.Records); ok && r == nil {
		rs = nil // a typed nil is refused like a nil store
	}
	switch {
	case rs == nil:
		bad = "httpidem: nil store"
	case cfg.badOption != "":
		bad = cfg.badOption
	case cfg.scopeMode == scopeUnset:
		bad = "httpidem: no key scope: give WithScope(fn) (the caller's account), WithCredentialScope() or WithSharedKeys()"
	case cfg.lease <= 0:
		bad = fmt.Sprintf("httpidem: WithLease(%v): the lease must be > 0", cfg.lease)
	case cfg.ttl < 0:
		bad = fmt.Sprintf("httpidem: WithTTL(%v): negative", cfg.ttl)
	case cfg.maxKeyLen <= 0 || cfg.maxKeyLen > store.MaxIDLen:
		bad = fmt.Sprintf("httpidem: WithMaxKeyLen(%d): want 1..%d", cfg.maxKeyLen, store.MaxIDLen)
	case cfg.maxBody < 0:
		bad = fmt.Sprintf("httpidem: WithMaxBody(%d): negative", cfg.maxBody)
	case cfg.wait < 0:
		bad = fmt.Sprintf("httpidem: WithWait(%v): negative", cfg.wait)
	case cfg.retryAfter < 0:
		bad = fmt.Sprintf("httpidem: WithRetryAfter(%v): negative", cfg.retryAfter)
	}
	if bad != "" {
		return nil, errors.New(bad)
	}
	if cfg.retryAfter == 0 {
		cfg.retryAfter = cfg.lease
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			return misconfigured("httpidem: nil handler")
		}
		return &handler{rs: rs, cfg: cfg, next: next}
	}, nil
}

// misconfigured answers every request 500 with detail: middleware built with
// bad input, which must not run the handler unguarded.
type misconfigured string

func (m misconfigured) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	writeProblem(w, "", http.StatusInternalServerError, string(m), "", 0)
}

type handler struct {
	rs   Store
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
		h.problem(w, http.StatusBadRequest, "this request needs an Idempotency-Key header", HeaderKey, 0)
		return
	case len(keys) == 0:
		h.next.ServeHTTP(w, r)
		return
	case len(keys) > 1:
		h.problem(w, http.StatusBadRequest, "the request has more than one Idempotency-Key header", HeaderKey, 0)
		return
	}
	key, detail := parseKey(keys[0])
	if detail == "" {
		detail = h.checkKey(key)
	}
	if detail != "" {
		h.problem(w, http.StatusBadRequest, detail, HeaderKey, 0)
		return
	}

	body, err := h.readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a request with an Idempotency-Key may have a body of at most %d bytes", tooBig.Limit), "", 0)
			return
		}
		h.problem(w, http.StatusBadRequest, "the request body could not be read: "+err.Error(), "", 0)
		return
	}
	id := h.recordKey(r, key)
	if len(id) > store.MaxIDLen {
		h.problem(w, http.StatusBadRequest, fmt.Sprintf("the Idempotency-Key with its scope is %d bytes, the limit is %d", len(id), store.MaxIDLen), HeaderKey, 0)
		return
	}
	o := store.AcquireOptions{TTL: h.cfg.ttl, Lease: h.cfg.lease, Wait: h.cfg.wait}
	if h.cfg.fingerprint != nil {
		o.Fingerprint = h.cfg.fingerprint(r, body)
	}

	// The handler's context: detached from the client unless
	// WithCancelOnDisconnect, ended by WithShutdown's context; the store's Do
	// ends it too when the lease is lost.
	ctx := r.Context()
	if h.cfg.detach {
		ctx = context.WithoutCancel(ctx)
	}
	if h.cfg.shutdown != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(h.cfg.shutdown, func() { cancel(context.Cause(h.cfg.shutdown)) })
		defer stop()
	}

	// Once the handler starts, its outcome is the key's: the response it
	// wrote, stored; or, when that cannot be stored, the not-replayable
	// problem (notReplayable); the record is released (a retry runs the
	// handler again) only when the handler says so (NotDone, or a 5xx under
	// WithRetry5xx). A panic is recovered here, so that the store keeps the
	// key failed (answered not-replayable), and goes on after the store's Do.
	var (
		rec      *recorder
		why      error // not stored: why
		fnErr    error
		panicked any
		didPanic bool
	)
	notDone := new(atomic.Bool)
	start := time.Now()
	res, replayed, err := h.rs.Do(ctx, id, o, func(ctx context.Context) ([]byte, error) {
		rec = newRecorder(w, h.cfg.keep, store.MaxRecordPayloadLen)
		hr := r.WithContext(context.WithValue(ctx, notDoneKey{}, notDone))
		func() {
			finished := false
			defer func() {
				if !finished {
					panicked, didPanic = recover(), true
				}
			}()
			h.next.ServeHTTP(rec, hr)
			finished = true
		}()
		switch {
		case didPanic:
			why = ErrPanicked
		case notDone.Load():
			why = ErrNotDone
		default:
			rec.finish()
			if rec.status >= 500 && h.cfg.retry5xx {
				why = ErrServerError
			} else {
				why = rec.notStorable()
			}
		}
		switch why {
		case nil:
			return encode(rec.response()), nil
		case ErrNotDone, ErrServerError:
			fnErr = store.Retryable(why)
			return nil, fnErr
		case ErrPanicked:
			// A failed record: a retry gets the not-replayable answer, as
			// for a stored one, and a store whose outcomes commit with
			// their effect rolls the half-run handler's writes back.
			fnErr = store.Permanent(why)
			return nil, fnErr
		}
		return encode(notReplayable(h.cfg.problemType, why)), nil
	})
	if rec != nil {
		if why != nil {
			h.notStored(r.Context(), id, start, why)
		}
		if errors.Is(err, store.ErrNotCommitted) && err != fnErr && !rec.passed && !rec.hijacked && !didPanic {
			// A transactional store rolled the handler's writes back with
			// its response, or cannot tell whether they committed: the
			// response must not reach the client as done. A retry with the
			// key learns the outcome: the stored response, or a new run.
			h.cfg.log.WarnContext(r.Context(), "httpidem: the handler's effect did not commit with its response", h.logAttrs(id, err)...)
			h.problem(w, http.StatusServiceUnavailable, "the request's effect did not commit; retry with the same Idempotency-Key", "", 1)
			return
		}
		// The handler ran here: its response goes to the client whatever the
		// store said (the effect has happened), unless it went already.
		if err != nil && err != fnErr {
			h.cfg.log.ErrorContext(r.Context(), "httpidem: the response was sent but the store failed", h.logAttrs(id, err)...)
		}
		if didPanic {
			panic(panicked)
		}
		rec.deliver()
		return
	}
	switch {
	case err == nil && replayed:
		h.replay(w, r, id, res)
	case errors.Is(err, store.ErrInFlight):
		h.problem(w, http.StatusConflict, "a request with this Idempotency-Key is still being processed; retry later", HeaderKey, h.retryAfter(err))
	case errors.Is(err, store.ErrFingerprintMismatch):
		h.problem(w, http.StatusUnprocessableEntity, "this Idempotency-Key was used with a different request", HeaderKey, 0)
	case errors.Is(err, store.ErrInvalidArgument):
		// A fingerprint over the store's 256-byte limit, say: a configuration error.
		h.cfg.log.ErrorContext(r.Context(), "httpidem: the store refused the request's key or options", h.logAttrs(id, err)...)
		h.problem(w, http.StatusInternalServerError, "the idempotency store refused this request", "", 0)
	case errors.Is(err, store.ErrFailed):
		h.cfg.log.ErrorContext(r.Context(), "httpidem: the key's record is failed", h.logAttrs(id, err)...)
		h.send(w, notReplayable(h.cfg.problemType, err))
	case err == nil:
		// Do neither ran fn nor replayed: a broken store.
		h.cfg.log.ErrorContext(r.Context(), "httpidem: the store's Do neither ran the handler nor replayed", h.logAttrs(id, nil)...)
		h.problem(w, http.StatusInternalServerError, "the idempotency store answered nothing", "", 0)
	default:
		if r.Context().Err() == nil {
			h.cfg.log.ErrorContext(r.Context(), "httpidem: store error", h.logAttrs(id, err)...)
		}
		h.problem(w, http.StatusServiceUnavailable, "the idempotency store is unavailable; retry later", "", 1)
	}
}

// parseKey reads the header's value: an sf-string (RFC 8941 section
// 3.3.3: "..." with \" and \\ escapes, as the IETF draft says) is
// unquoted, anything else is taken as it is (a bare token, as Stripe's
// clients send): `"abc"` and `abc` are the same key. It returns why the
// value is not acceptable, or "".
func parseKey(v string) (key, detail string) {
	if !strings.HasPrefix(v, `"`) {
		return v, ""
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			if i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", fmt.Sprintf("the Idempotency-Key is a quoted string with a bad escape at %d: only \\\" and \\\\ are allowed", i)
			}
			i++
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", "the Idempotency-Key has bytes after its closing quote"
			}
			return b.String(), ""
		default:
			b.WriteByte(c) // checkKey refuses what is not visible ASCII
		}
	}
	return "", "the Idempotency-Key has an opening quote and no closing one"
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

// problem answers with a problem+json body of the middleware's problem type.
func (h *handler) problem(w http.ResponseWriter, status int, detail, header string, retryAfter int) {
	writeProblem(w, h.cfg.problemType, status, detail, header, retryAfter)
}

// replay writes a stored response with Idempotent-Replayed: true.
func (h *handler) replay(w http.ResponseWriter, r *http.Request, id string, payload []byte) {
	resp, err := decode(payload)
	if err != nil {
		h.cfg.log.ErrorContext(r.Context(), "httpidem: stored response does not decode", h.logAttrs(id, err)...)
		h.problem(w, http.StatusInternalServerError, "the stored response for this Idempotency-Key is unreadable", HeaderKey, 0)
		return
	}
	h.send(w, resp)
}

// send writes a stored response, marked Idempotent-Replayed: true.
func (h *handler) send(w http.ResponseWriter, resp response) {
	hd := w.Header()
	maps.Copy(hd, resp.header)
	hd.Set(HeaderReplayed, "true")
	w.WriteHeader(resp.status)
	if len(resp.body) > 0 {
		_, _ = w.Write(resp.body)
	}
}

// retryAfter is the Retry-After of a 409, in whole seconds: the holder's
// lease time left (store.RetryAfter: when a holder that died lets the key
// go), rounded up, at least 1, at most the WithRetryAfter cap (default the
// lease); the cap when the store does not say.
func (h *handler) retryAfter(err error) int {
	d, ok := store.RetryAfter(err)
	if !ok || d <= 0 || d > h.cfg.retryAfter {
		d = h.cfg.retryAfter
	}
	return max(int(math.Ceil(d.Seconds())), 1)
}

// recordKey is the record key of Idempotency-Key key: each key space starts
// with a byte of its own and the header value comes last, so no value a
// client sends reaches another space — "k:" key with WithSharedKeys; "s:"
// the scope, query-escaped (it holds no ':'), ":" key with WithScope; with
// WithCredentialScope "c:" the credentials' hex SHA-256 ":" key, or "a:" key
// for a request without credentials (the anonymous callers' space).
func (h *handler) recordKey(r *http.Request, key string) string {
	switch h.cfg.scopeMode {
	case scopeShared:
		return "k:" + key
	case scopeCredential:
		if c := credentialHash(r); c != "" {
			return "c:" + c + ":" + key
		}
		return "a:" + key
	}
	return "s:" + url.QueryEscape(h.cfg.scope(r)) + ":" + key
}

// logAttrs are a log line's attributes for record key id and err (nil:
// none): without WithLogKey, no key, and err's text as an observer without
// the key shows it (store.Event.ErrorText(false)).
func (h *handler) logAttrs(id string, err error) []any {
	var a []any
	if h.cfg.logKey {
		a = append(a, "key", id)
		if err != nil {
			a = append(a, "err", err)
		}
		return a
	}
	if err != nil {
		a = append(a, "err", store.Event{Op: "do", Key: id, Err: err}.ErrorText(false))
	}
	return a
}
