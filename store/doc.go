// Package store gives exactly-once effects on top of at-least-once delivery, with
// three Redis stores and an in-memory reference implementation of each:
//
//   - Claims: dedupe on a message id for consumers; Claims.Do runs an effect
//     once across N concurrent consumers, keeps its lease alive while the
//     effect runs, and lets a crashed consumer's lease expire so the message
//     is retried. Claim alone is a dedupe mark taken before the effect. A
//     duplicate of an id in flight gets ErrInFlight, and RetryAfter(err) says
//     when the holder's lease can have ended. Package
//     github.com/redisonce/redisonce/streams runs a Redis Streams consumer
//     group around Claims.Do.
//   - Outbox: a per-connection unacknowledged tail for gateways.
//   - Records: idempotency records with a lease, a status and a stored result.
//
// Every Redis operation is ONE embedded Lua script (package redisonce) run with
// EVALSHA through rueidis, so it is atomic and runs unchanged on Redis Cluster: each
// operation touches exactly one key, prefix + id. Each store is one type over a
// private backend: the type validates, reports events and runs the Do flows; its
// Redis backend marshals the script's arguments and parses its reply, and its
// memory backend (NewMemoryClaims, NewMemoryOutbox, NewMemoryRecords) restates
// the script in Go. The conformance suites in store/storetest run against both.
//
// A constructor fails with ErrInvalidArgument on a bad option, a nil client, or
// an option that does not apply to the store. Bad input (an empty or oversize id,
// a negative duration) is refused in Go with ErrInvalidArgument before anything
// is sent, and again by the script before its first write. So is a nil context, a
// nil fn, and a call on a nil store (var c *Claims; c.Do(...)): no method panics
// on them, and Close on a nil store returns nil.
//
// Do (Claims and Records) puts the caller's Lease in fn's context; see
// LeaseFromContext.
//
// Memory: with maxmemory and noeviction, Redis refuses every write script that
// could grow memory up front (an OOM error; nothing is written). The operations
// that cannot grow it (Forget, Ack, AckMany, DropConn, Delete, DeleteFenced;
// inside Claims.Do the lease extension, the commit and the release; inside
// Records.Do the lease renewal) run anyway (flags=allow-oom), so an effect
// that happened is committed and an application can always drain its keys.
//
// Errors never show the password of a URL given to OpenX.
//
// Clients: a store made with NewX borrows the rueidis.Client you pass (its Close is
// a no-op); OpenX(url) owns the client it creates. OpenX takes redis://, rediss://
// (TLS, verified against the system's roots) and unix:// URLs (rueidis.ParseURL).
// For anything else — a private CA, client certificates, Sentinel, timeouts —
// build the client yourself and use NewX:
//
//	opt, err := rueidis.ParseURL("rediss://app:secret@redis.internal:6380")
//	// handle err
//	opt.TLSConfig.RootCAs = pool // x509.NewCertPool() + AppendCertsFromPEM(caPEM)
//	c, err := rueidis.NewClient(opt)
//	// handle err
//	claims, err := store.NewClaims(c)
package store
