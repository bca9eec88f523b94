// Package httpidem is net/http middleware for the Idempotency-Key header
// (Stripe's, and the IETF draft "The Idempotency-Key HTTP Header Field") over
// any *store.Records: the first response to a key — status, headers and
// body — is stored, and a retry with the same key gets the same response
// again, marked with "Idempotent-Replayed: true", without the handler running.
//
// For a request with one of the middleware's methods (POST and PATCH by
// default) and an Idempotency-Key header:
//
//   - the key must be 1..255 bytes (WithMaxKeyLen) of visible ASCII or
//     spaces, else 400; it is scoped to the caller, so one caller never
//     replays another's response nor learns, from a 422, that another used a
//     key: by default to the request's credentials (CredentialScope: a
//     SHA-256 of the Authorization header and the TLS client certificate;
//     requests without credentials share the anonymous key space), or to what
//     WithScope returns (the authenticated account: the choice when tokens
//     rotate or a gateway authenticates); WithSharedKeys is the explicit
//     opt-out, one key space for every caller;
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
//
// # The IETF draft and Stripe, point by point
//
// Every requirement (MUST, SHOULD, MAY) of "The Idempotency-Key HTTP Header
// Field" (draft-ietf-httpapi-idempotency-key-header-06), what Stripe's API
// does (stripe.com/docs/idempotency), and what httpidem does:
//
//	Draft: the field is an sf-string (RFC 8941), "8e03978e-..." quoted.
//	Stripe: a bare value, Idempotency-Key: 8e03978e-...
//	httpidem: both; a quoted value is unquoted (\" and \\ escapes), so
//	  "k" and k are one key; a malformed quoted value (no closing quote,
//	  another escape, bytes after the quote) is 400.
//
//	Draft: a client MUST NOT send more than one Idempotency-Key field.
//	httpidem: two or more are 400.
//
//	Draft: a key MUST be unique and MUST NOT be reused with another payload;
//	  UUIDs are RECOMMENDED; servers should validate keys against a published
//	  format. Stripe: at most 255 characters, V4 UUIDs suggested.
//	httpidem: 1..255 bytes (WithMaxKeyLen) of visible ASCII or spaces, else
//	  400; no format beyond that (validate UUIDs in your handler if you
//	  publish that format).
//
//	Draft: a key MAY expire; the server SHOULD define the expiry policy and
//	  MUST publish it (with its idempotency specification).
//	Stripe: keys may be removed once at least 24 hours old.
//	httpidem: a stored response lives WithTTL, by default the store's TTL
//	  (store.DefaultRecordsTTL, 24 hours, counted from the first request);
//	  publish that figure in your API docs. After it, the key runs anew.
//
//	Draft: a fingerprint of the request MAY be used with the key.
//	Stripe: the parameters of a retry are compared with the first request's;
//	  a mismatch is an error (400, idempotency_error).
//	httpidem: a fingerprint of the method, path, query and body (Fingerprint;
//	  WithFingerprint); a mismatch is 422, as the draft says, and the handler
//	  does not run.
//
//	Draft: the server SHOULD read the key, fingerprint the request and
//	  process a first request normally.
//	httpidem: the handler runs once per key across every server sharing the
//	  store; a client that times out or hangs up does not cancel it.
//
//	Draft: a retry after the first completed SHOULD get its result, success
//	  or error. Stripe: the same status and body, 500s included, with
//	  Idempotent-Replayed: true.
//	httpidem: 2xx-4xx are stored and replayed (status, headers but hop-by-hop
//	  ones, Date and Set-Cookie, body) with Idempotent-Replayed: true; a 5xx,
//	  a panic, a handler that wrote nothing, a streamed or too large response
//	  are not stored, so the retry runs the handler (Stripe replays a 500:
//	  here a 5xx means "try again", and the effect must not have happened).
//
//	Draft: a retry while the first runs MUST get a conflict error, SHOULD be
//	  409 with a problem body. Stripe: 409 (idempotency_key_in_use).
//	httpidem: 409 problem+json with Retry-After (WithRetryAfter, 1 s), or,
//	  with WithWait(d), the retry waits up to d for the first's response
//	  (replayed) before the 409.
//
//	Draft: a missing key on an operation that needs one SHOULD be 400, and
//	  the 400, 409 and 422 bodies SHOULD link to the server's documentation
//	  (a problem "type" URI, or a Link header).
//	httpidem: WithRequireKey(true) makes a missing key 400; every problem's
//	  "type" is WithProblemType's URI (default "about:blank").
//
//	Draft: a client MUST correct a request answered 4xx (but 409) before
//	  retrying it, or the server MUST fail it again with the same error.
//	httpidem: its own answers (400, 409, 413, 422) are not stored: the
//	  corrected request runs, the uncorrected one gets the same error again.
//
//	Draft (security): low-entropy keys let attackers fetch other clients'
//	  cached responses; the lookup key SHOULD combine the client's key with
//	  client attributes known only to the server.
//	Stripe: keys are per account.
//	httpidem: keys are scoped to the caller by default (CredentialScope, a
//	  SHA-256 of the Authorization header and TLS client certificate), or by
//	  WithScope(fn) (the authenticated account); the scope is in the record
//	  key, so neither a replay nor a 422 crosses callers; WithSharedKeys is
//	  the explicit opt-out.
//
//	Stripe: GET and DELETE with a key: the key has no effect.
//	httpidem: only POST and PATCH (WithMethods) are handled; the rest pass
//	  through.
package httpidem
