package kafka_test

// The code of the Go snippet of docs/integrations.md about this module: a
// region (// snippet:NAME ... // snippet:end) that TestDocSnippets (root
// module) compares with the document. Compiled by every `go test` of this
// module, not run (it needs a Redis and Kafka); Example runs the same
// consumer against franz-go's in-process Kafka.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/store"
)

func applyPayment(context.Context, []byte) error { return nil }

func docKafka(ctx context.Context) error {
	// snippet:kafka
	claims, err := store.OpenClaims("redis://localhost:6379", store.WithTTL(7*24*time.Hour))
	if err != nil {
		return err
	}
	defer claims.Close()

	c, err := kafka.New(claims, func(ctx context.Context, r *kgo.Record) error {
		return applyPayment(ctx, r.Value) // all-or-nothing: one write, or fenced by the lease token
	}, []kgo.Opt{kgo.SeedBrokers("localhost:9092"), kgo.ConsumerGroup("ledger"), kgo.ConsumeTopics("payments")},
		kafka.WithID(kafka.HeaderID("payment-id"))) // default: "<topic>/<partition>/<offset>"
	if err != nil {
		return err
	}
	err = c.Run(ctx) // until ctx is cancelled; offsets committed past the records that are done
	// snippet:end
	return err
}
