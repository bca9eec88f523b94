// Package jetstream runs a NATS JetStream consumer's handler exactly once per
// message id, over JetStream's at-least-once delivery, with a redisonce
// *store.Claims (store.Claims on Redis).
//
// Wrap the handler once and give it to the consumer:
//
//	claims, err := store.NewClaims(redisClient, store.WithTTL(24*time.Hour))
//	h, err := jetstream.New(claims, func(ctx context.Context, msg natsjs.Msg) error {
//		return applyPayment(ctx, msg.Data()) // all-or-nothing: see below
//	}, jetstream.WithLease(30*time.Second))
//	cc, err := h.Consume(consumer) // or consumer.Consume(h.Handle): unbatched
//
// What each delivery gets (the failure mapping):
//
//	fn succeeded                DoubleAck (Consume's batches: Ack)
//	id already processed        DoubleAck (batches: Ack), fn not run
//	id in flight elsewhere      NakWithDelay(time left on the holder's lease)
//	fn failed or panicked       the failure policy (DefaultFailure: Term for an
//	                            error marked store.Permanent, else NakWithDelay
//	                            with an exponential backoff); a panic is
//	                            recovered, never a crashed consumer
//	fn succeeded, commit failed DoubleAck or Ack (fn's effect happened)
//	store error before fn ran   NakWithDelay(lease)
//	context cancelled           Nak (another consumer takes it at once)
//
// While fn runs, the claim's lease is extended every lease/4 and each
// extension sends InProgress, so a handler slower than the consumer's AckWait
// is not redelivered while it lives; keep the lease at most the AckWait. A
// consumer that dies stops extending: JetStream redelivers after AckWait, the
// redelivery finds the id in flight and is nak'd until the dead holder's lease
// has run out, then runs fn. Redeliveries of an in-flight message are thus
// paced by the lease, not by the broker's retry rate.
//
// # Batches
//
// h.Consume(consumer) takes the messages in batches: Consume's callback
// queues each delivery, and one goroutine takes the queued ones together
// (WithBatch: at most 100 by default), claims their ids in one script call
// per hash slot (store.Claims.Batch), runs fn on them one at a time in
// delivery order, and acks, naks or terminates each message, as above, once
// its own commit is in, while the next fn runs. One message's failure,
// in-flight id or store error settles that message only. A batch acks with
// Ack, not DoubleAck (WithDoubleAck to confirm): the settlements run behind
// the next fns and nobody waits for a confirmation, and an ack lost on the
// way costs one redelivery after AckWait, answered by the claims as a
// duplicate and acked again. A lone message's latency grows by at most
// WithBatch's wait, the flush interval (0 by default: the messages queued by
// then; the store's gathering adds at most one round trip and ~1 ms, and
// only while another call is in flight). A message queued or claimed waits
// for its turn without InProgress, so keep the batch small beside the
// consumer's AckWait. ProcessBatch does the same for the
// messages of one consumer.Fetch, in a loop of your own. Handle and Process
// run one message per call, without batching.
//
// The id is the message's Nats-Msg-Id header (MsgID; JetStream's publish
// deduplication uses it too, but only within the stream's duplicate window),
// or what WithID returns, e.g. a payment id from the payload.
//
// # What fn must do
//
// fn's effect must be all-or-nothing: one write (one SQL transaction, one
// Redis command or script), or idempotent downstream, or fenced with the
// lease's token (store.LeaseFromContext) so that a write from a holder that
// lost its lease is refused. A consumer killed between two writes of fn leaves
// the first one done and the redelivery runs fn again.
//
// Return nil once the effect is written. A write that landed but reported
// the context's error (fn's context was cancelled, by a shutdown or a lost
// lease, while the command was on the wire) makes fn fail for an effect that
// happened, and the message runs again: send the one final write with
// context.WithoutCancel(ctx), so that once sent it is seen through, and
// return its result. "Once" is about the whole of fn succeeding once, not
// about each line of it.
//
// The tests run nats-server in process (github.com/nats-io/nats-server/v2)
// and Redis from redis-server, with several consumer processes, one of them
// SIGKILLed mid-handler.
package jetstream
