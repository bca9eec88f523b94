package jetstream_test

// The code of the Go snippet of docs/integrations.md about this module: a
// region (// snippet:NAME ... // snippet:end) that TestDocSnippets (root
// module) compares with the document. Compiled by every `go test` of this
// module, not run (it needs a Redis and a nats-server); Example runs the same
// handler against an in-process nats-server.

import (
	"context"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/store"
)

func applyPayment(context.Context, []byte) error { return nil }

func docJetStream(consumer natsjs.Consumer) error {
	// snippet:jetstream
	claims, err := store.OpenClaims("redis://localhost:6379", store.WithTTL(24*time.Hour))
	if err != nil {
		return err
	}
	defer claims.Close()

	h, err := jetstream.New(claims, func(ctx context.Context, msg natsjs.Msg) error {
		return applyPayment(ctx, msg.Data()) // all-or-nothing: one write, or fenced by the lease token
	}, jetstream.WithLease(30*time.Second)) // at most the consumer's AckWait
	if err != nil {
		return err
	}
	cc, err := h.Consume(consumer) // once per Nats-Msg-Id (WithID: an id of yours), in batches
	// snippet:end
	if err == nil {
		cc.Stop()
	}
	return err
}
