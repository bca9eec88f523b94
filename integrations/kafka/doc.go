// Package kafka is a Kafka consumer-group member, on franz-go
// (github.com/twmb/franz-go), whose handler runs once per record id over
// Kafka's at-least-once delivery, with a redisonce *store.Claims
// (store.Claims on Redis).
//
//	claims, err := store.NewClaims(redisClient, store.WithTTL(7*24*time.Hour))
//	c, err := kafka.New(claims, func(ctx context.Context, r *kgo.Record) error {
//		return applyPayment(ctx, r.Value) // all-or-nothing: see below
//	}, []kgo.Opt{kgo.SeedBrokers("localhost:9092"), kgo.ConsumerGroup("ledger"), kgo.ConsumeTopics("payments")},
//		kafka.WithID(kafka.HeaderID("payment-id")))
//	err = c.Run(ctx) // until ctx is cancelled
//
// Offsets are committed only past records that are done (processed now, or
// found processed already, or given up on to the dead-letter function). A
// record that is not done — in flight in another consumer, or failed — holds
// its partition back and is retried in order: one handler per partition at a
// time, partitions in parallel, Kafka's per-partition order kept. A record
// in flight elsewhere is tried again when the holder's lease can have run
// out; a failed one after the failure policy's backoff (DefaultFailure:
// exponential, without end; dead letter for an error marked store.Permanent).
// A panic in fn is a failure: recovered, the claim released, the record
// tried again; the consumer goes on.
//
// Rebalances: a revoked (or lost) partition's handler sees its context
// cancelled; the rebalance waits for it (WithRevokeTimeout), then commits what
// is done. A handler that finished its effect before it saw the cancel
// commits its claim, so the partition's next owner finds it processed; one that
// gave up releases its claim, so the next owner runs it.
//
// # Batches
//
// A partition takes the records queued for it together (a poll's, up to
// 500) and claims their ids in one script call per hash slot
// (store.Claims.Batch, gathered with the other partitions' calls); the
// records then run in order, one fn at a time, a record's fn starting once
// the previous one returned nil while that one's commit is on its way, and
// an offset is marked once its record's commit is in and every record before
// it is done. A record that is not done at its first attempt gives back the
// claims of the records behind it, is retried on its own, and those are
// claimed again after it. There is no flush interval: a lone record waits
// for nothing (the store's gathering adds at most one round trip, and only
// while another call is in flight). A claim taken up front is extended
// while its record waits, for at most a lease: a record that waits longer
// is claimed again when it runs (one call more). An id another partition
// of the Consumer holds waits for that record; one another process holds
// is in flight for up to a lease.
//
// The id is OffsetID ("<topic>/<partition>/<offset>") unless WithID says
// otherwise: it dedupes records read again after a crash or a rebalance, but
// not a message a producer sent twice; HeaderID or an id from the payload
// dedupes that too.
//
// # What fn must do
//
// fn's effect must be all-or-nothing: one write (one SQL transaction, one
// Redis command or script), or idempotent downstream, or fenced with the
// lease's token (store.LeaseFromContext) so that a write from a holder that
// lost its lease is refused. A consumer killed between two writes of fn leaves
// the first one done and the next reader runs fn again.
//
// Return nil once the effect is written. A write that landed but reported
// the context's error (fn's context was cancelled, by a rebalance or a
// shutdown, while the command was on the wire) makes fn fail for an effect
// that happened, and the record runs again: send the one final write with
// context.WithoutCancel(ctx), so that once sent it is seen through, and
// return its result.
//
// The tests run against franz-go's in-process Kafka, kfake
// (github.com/twmb/franz-go/pkg/kfake), not a real Kafka broker: it speaks the
// Kafka protocol, consumer groups and rebalances included, and starts in
// milliseconds. Redis comes from redis-server. Several consumer processes run,
// one SIGKILLed mid-handler, with rebalances while handlers run.
package kafka
