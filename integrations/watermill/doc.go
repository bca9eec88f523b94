// Package watermill runs watermill handlers exactly once per message id over
// at-least-once delivery, with a redisonce claims store (store.Claims on
// Redis), for any watermill Pub/Sub: Kafka, AMQP, NATS, SQL, Redis Streams,
// GoChannel.
//
//	go get github.com/redisonce/redisonce/integrations/watermill
//
// Import it under a name of your own beside watermill's packages
// (wmonce below). Add the middleware to a router, once, inside watermill's
// Retry (a failed handler is then retried with a backoff, not redelivered
// at once in a loop):
//
//	claims, err := store.OpenClaims("redis://localhost:6379/0", store.WithTTL(7*24*time.Hour))
//	if err != nil { ... }
//	defer claims.Close()
//
//	retry := middleware.Retry{MaxRetries: 5, InitialInterval: time.Second, Multiplier: 2}
//	router.AddMiddleware(retry.Middleware, wmonce.Middleware(claims))
//
// Every handler of the router then runs once per message UUID, however often
// the Pub/Sub redelivers it and however many instances consume it:
//
//	what happened                             the handler          the message
//	first delivery, handler succeeds          ran, id committed    acked
//	... and returns messages                  ran, committed after the router published them and acked the input
//	... whose publication fails               ran, id released     nacked: redelivered, runs again, publishes again
//	handler fails or panics                   ran, id released     nacked: redelivered, runs again
//	duplicate of a processed message          not run              acked
//	duplicate while another consumer runs it  not run              held for the holder's lease time left, then nacked
//	consumer dies in the handler              -                    the lease expires; the redelivery runs it
//	handler succeeds, commit fails            ran                  acked (a nack would run it twice)
//	no id (WithMetadataID field missing)      not run              nacked with store.ErrInvalidArgument
//
// The middleware expects the router (or whatever calls it) to ack or nack
// each message, as watermill's router does: when the handler returns
// messages, the commit waits for that ack.
//
// While the handler runs, its lease (WithLease, default 30s) is extended every
// quarter of it, so a slow handler keeps its message however long it takes; a
// consumer that dies stops extending, and another runs the message once the
// lease has expired. msg.Context() inside the handler is cancelled if the
// lease is lost, and carries the store.Lease (store.LeaseFromContext).
//
// The router hands the middleware one message per call, so there is no
// batch to claim up front: the middleware runs every call through one
// store.Batch, which gathers the claims, extensions and commits of the
// messages handled at once into one script call each. A lone message waits
// for nothing (a call waits at most for the one in flight ahead of it).
//
// The id is the message's UUID. A producer that sets a business id in the
// metadata, or that may publish the same message twice under two UUIDs:
// WithMetadataID("order_id"). Any other rule: WithID.
//
// The middleware nacks a failed handler at once, and most Pub/Subs redeliver
// at once: that is why Retry goes outside it (the id is released between its
// tries). Add watermill's PoisonQueue outside Retry to set aside a message
// that keeps failing.
//
// Messages the handler returns are never lost: the id is committed only after
// the router has published them and acked the input. They are published at
// least once: a process that dies after the publish and before the commit
// runs the handler again, and publishes them again (with new UUIDs unless the
// handler derives them from the input's, which lets the next consumer dedupe
// them). An effect of the handler's own then also runs again; keep the
// effects of a handler that returns messages idempotent, or split it in two.
//
// # watermill's Deduplicator on Redis
//
// watermill's own middleware.Deduplicator keeps its keys in process memory.
// ExpiringKeyRepository keeps them in Redis, shared by every instance, with
// the store's TTL as the window:
//
//	dedup := &middleware.Deduplicator{
//		KeyFactory: middleware.NewMessageHasherSHA256(1024),
//		Repository: wmonce.NewExpiringKeyRepository(claims),
//	}
//	router.AddMiddleware(dedup.Middleware)
//
// It marks a message seen before the handler runs (a dedupe mark, Claim): a
// handler that then fails, or a process that dies in it, loses the message,
// since its redelivery is dropped as a duplicate. Use it to drop repeated
// payloads cheaply; use Middleware for effects.
package watermill
