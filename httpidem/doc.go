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
//     spaces, else 400; it is scoped to the caller by WithScope (the
//     authenticated user, say), so one caller never replays another's
//     response nor learns, from a 422, that another used a key. Middleware
//     refuses to be built without a scope decision: WithScope, or
//     WithSharedKeys for one key space shared by every caller;
//   - the body is read once (at most 8 MiB, WithMaxBody, else 413) and handed
//     to the handler intact;
//   - a fingerprint of the method, the path, the query string and a SHA-256
//     of the body (WithFingerprint) guards the key: the same key with another
//     request is answered 422 and the handler does not run;
//   - the handler runs inside the store's Do, so it runs once per key across
//     every server sharing the store, with the key's lease kept alive while it
//     runs; a retry meanwhile is answered 409 with a short Retry-After hint
//     (WithRetryAfter, 1 s by default), or, with WithWait(d), waits up to d
//     for the first to finish and gets its response, replayed (pushed by the
//     store, not polled; 409 once d passes). The request the handler gets carries
//     the lease in its context: store.LeaseFromContext(r.Context()) gives the
//     fencing token and fence to pass to a downstream system that checks them;
//   - the handler runs detached from the client: a client that times out or
//     hangs up does not cancel its context (which keeps the request's values),
//     so an effect is not cut in half and its response is stored for the
//     retry. The context ends when the lease is lost, or when the WithShutdown
//     context ends; WithCancelOnDisconnect restores cancel-on-disconnect;
//   - a 2xx, 3xx or 4xx response is a final answer: it is stored (headers
//     minus the hop-by-hop ones, Date and Set-Cookie: WithKeepHeader), whether
//     or not the client is still connected, and replayed to every retry until
//     the record expires (WithTTL, else the store's TTL);
//   - a 5xx response, a handler that panics, and a handler that wrote nothing
//     (no status, no byte) are not stored: the record is deleted so that a
//     retry runs the handler again. A 5xx response still reaches the client as
//     the handler wrote it. A panic is not recovered: the record is deleted
//     and the panic goes on, to net/http or to an outer recovery middleware,
//     exactly as without this middleware;
//   - a response whose stored form would exceed store.MaxRecordPayloadLen
//     (1 MiB) is sent to the client as it is written but not stored, and the
//     record is released (deleted), never half-stored: a retry runs the
//     handler again. A handler that calls Flush (a streaming response) or
//     hijacks the connection is passed through the same way, unstored;
//   - every response sent but not stored is logged (WithLogger) and reported
//     to the WithObserver observer, with the reason (ErrServerError,
//     ErrPanicked, ErrTooLarge, ErrStreamed, ErrHijacked, ErrNothingWritten);
//   - 1xx informational responses (103 Early Hints) are sent at once and not
//     stored; trailers are not stored.
//
// Requests with other methods, and requests without the header (unless
// WithRequireKey), pass through untouched. When the middleware answers for
// itself the body is an RFC 9457 problem+json (Problem). When the store
// cannot be reached the answer is 503 and the handler does not run: the
// middleware fails closed.
package httpidem
