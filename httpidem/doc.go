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
//     spaces, else 400; it lives in the key space Middleware was told to
//     use — it refuses to build without that decision: WithScope(fn) (the
//     caller's account: the choice for cookie sessions, gateways and
//     rotating tokens), WithCredentialScope (the request's Authorization
//     and TLS client certificate; requests without credentials share the
//     anonymous space) or WithSharedKeys (one space for every caller). Each
//     space has a record-key prefix of its own ahead of the header value
//     ("k:", "a:", "c:<hash>:", "s:<scope>:"), so no value a client types
//     reaches another space or another caller's key: one caller never
//     replays another's response nor learns, from a 422, that another used
//     a key;
//   - the body is read once (at most 8 MiB, WithMaxBody, else 413) and handed
//     to the handler intact;
//   - a fingerprint of the method, the path, the query string and a SHA-256
//     of the body (Fingerprint; WithFingerprint) guards the key: the same key
//     with another request is answered 422 and the handler does not run;
//   - the handler runs inside the store's Do, so it runs once per key across
//     every server sharing the store, with the key's lease kept alive while it
//     runs and while its response is stored; a retry meanwhile is answered
//     409 with Retry-After the holder's lease time left (rounded up, at least
//     1 s, at most WithRetryAfter, default the lease: a holder that died lets
//     the key go then, so a client that obeys it retries once or twice), or,
//     with WithWait(d), waits up to d for the first to finish and gets its
//     response, replayed (pushed by the store, not polled; 409 once d
//     passes). The request the handler gets carries the lease in its
//     context: store.LeaseFromContext(r.Context()) gives the fencing token
//     and fence to pass to a downstream system that checks them;
//   - the handler runs detached from the client: a client that times out or
//     hangs up does not cancel its context (which keeps the request's values),
//     so an effect is not cut in half and its response is stored for the
//     retry. The context ends when the lease is lost, or when the WithShutdown
//     context ends; WithCancelOnDisconnect restores cancel-on-disconnect;
//   - once the handler has started, a retry never runs it again unless the
//     handler says so: whatever it answered is the key's outcome, stored
//     (headers minus the hop-by-hop ones, Date and Set-Cookie: WithKeepHeader)
//     whether or not the client is still connected, and replayed to every
//     retry until the record expires (WithTTL, else the store's TTL) — 2xx to
//     5xx alike, an empty 200 when it wrote nothing, a flushed (streamed)
//     response that fits in a record. The table below gives every case;
//   - a response that cannot be stored — over store.MaxRecordPayloadLen
//     (1 MiB) streamed or not, a hijacked connection, a panic (recovered,
//     then raised again after the store's Do, to net/http or an outer
//     recovery middleware) — reaches the client as written, and the record
//     keeps in its place the not-replayable answer: a 500 problem saying the
//     request was processed, is not replayed and does not run again. Every
//     retry gets it (marked Idempotent-Replayed); a new key runs the request
//     anew;
//   - the handler releases the key, so that a retry runs it again, only by
//     calling NotDone(r) (its run had no effect: a downstream 503 before
//     anything happened, say), or for every 5xx with WithRetry5xx; the
//     response still reaches the client;
//   - with a store whose outcomes commit with their effect (the Postgres
//     records of integrations/postgres: the handler's writes go through
//     postgres.Tx(r.Context())), the handler's writes and the key's outcome
//     commit in one transaction: a run released by NotDone (or a 5xx under
//     WithRetry5xx) has its writes rolled back, so a retry runs on a database
//     the first run did not change; and a response whose commit failed, or
//     was refused to a handler that lost its lease, is not sent: the answer
//     is 503 with Retry-After, and the retry gets the committed outcome or a
//     new run (store.ErrNotCommitted). The setup, compiled:
//     ExampleRecords_httpidem in integrations/postgres, shown in
//     docs/integrations.md;
//   - every response sent but not stored is logged (WithLogger) and reported
//     to the WithObserver observer, with the reason (ErrNotDone,
//     ErrServerError, ErrTooLarge, ErrStreamed, ErrHijacked, ErrPanicked);
//   - the store keeps the outcome through trouble as far as its lease does
//     (store.Records.Do): a final write that fails on the way is retried with
//     the lease renewed for as long as the lease is held, so a Redis paused
//     or restarted (with its data) for less than the lease loses nothing; a
//     Redis out of memory (maxmemory, noeviction) still takes a response of
//     up to store.MaxSmallPayloadLen (1 KiB) encoded, and a larger one is
//     marked not stored (the retry gets the not-replayable answer); a Redis
//     away for longer than the whole lease leaves the key pending, and once
//     the lease passes it runs anew (the fencing token is the handler's
//     guard then, as after a crash);
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
//	httpidem: a fingerprint of the method, path, query string and body
//	  (Fingerprint; WithFingerprint); a mismatch is 422, as the draft says,
//	  and the handler does not run.
//
//	Draft: the server SHOULD read the key, fingerprint the request and
//	  process a first request normally.
//	httpidem: the handler runs once per key across every server sharing the
//	  store; a client that times out or hangs up does not cancel it.
//
//	Draft: a retry after the first completed SHOULD get its result, success
//	  or error. Stripe: the same status and body, 500s included, with
//	  Idempotent-Replayed: true; a request that failed validation or
//	  conflicted before it began executing is not saved and may be retried.
//	httpidem: once the handler has started, its outcome is the key's. Row
//	  by row (each a test of httpidemtest.TestMiddleware unless noted):
//	  2xx, 3xx, 4xx: stored, replayed.
//	  5xx: stored, replayed, as Stripe does (the handler started and may
//	    have had its effect); WithRetry5xx: sent, not stored, the retry runs
//	    again (for handlers whose 5xx always means nothing happened).
//	  Nothing written: net/http's empty 200, stored, replayed.
//	  Flushed (streamed), fits in a record: sent as written, stored,
//	    replayed.
//	  Over 1 MiB, or streamed past it: sent as written; the retry gets the
//	    not-replayable 500 problem, the handler does not run again.
//	  Hijacked (or 101): the retry gets the not-replayable 500.
//	  Panic, before or after a write: the panic goes on; the retry gets the
//	    not-replayable 500 (the handler may have had its effect).
//	  NotDone(r) called: sent, not stored, the key released: the retry runs
//	    again. The one way, with WithRetry5xx, a handler asks for a rerun.
//	  The middleware's own answers (400, 409, 413, 422, 503) and a store
//	    refusal before the handler started: not stored, as Stripe does; the
//	    handler did not run.
//	  Redis unreachable while the response is stored: retried with the
//	    lease renewed, for as long as the lease is held (not a fixed
//	    budget); the retry meanwhile is 503 or 409, then the replay
//	    (scripts_test TestHTTPIdemOutage: paused and restarted > 5 s).
//	  Redis full (maxmemory) while the response is stored: a response of up
//	    to 1 KiB encoded is stored anyway (complete.lua, allow-oom), a larger
//	    one becomes the not-replayable answer (scripts_test
//	    TestHTTPIdemFullMemory).
//	  Server killed, or Redis away for longer than the lease: the record
//	    stays pending until the lease passes (409 with Retry-After its time
//	    left), then the retry runs the handler again, with a higher fence
//	    (store.LeaseFromContext) for downstream systems to refuse the stale
//	    run: this one case is left to the handler.
//
//	Draft: a retry while the first runs MUST get a conflict error, SHOULD be
//	  409 with a problem body. Stripe: 409 (idempotency_key_in_use).
//	httpidem: 409 problem+json with Retry-After the holder's lease time
//	  left (rounded up, 1 s at least, WithRetryAfter at most: default the
//	  lease), or, with WithWait(d), the retry waits up to d for the first's
//	  response (replayed) before the 409.
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
//	httpidem: Middleware requires the choice: WithScope(fn) (the
//	  authenticated account, as Stripe), WithCredentialScope (a SHA-256 of
//	  the Authorization header and TLS client certificate) or WithSharedKeys.
//	  The space is a prefix of the record key that no header value can
//	  spell, so neither a replay nor a 422 crosses callers or spaces.
//
//	Stripe: GET and DELETE with a key: the key has no effect.
//	httpidem: only POST and PATCH (WithMethods) are handled; the rest pass
//	  through.
package httpidem
