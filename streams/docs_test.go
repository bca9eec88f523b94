package streams_test

// The code of the Go snippets of docs/integrations.md and README.md about
// this package: regions (// snippet:NAME ... // snippet:end) that
// TestDocSnippets (root module) compares with the documents. Compiled by
// every `go test` of this package; Example (example_test.go) and the tests
// run the same calls against a real Redis.

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

func docStreams(ctx context.Context, client rueidis.Client, hostname string, credit streams.Handler) error {
	// snippet:streams
	claims, err := store.NewClaims(client, store.WithTTL(7*24*time.Hour))
	if err != nil {
		return err
	}
	consumer, err := streams.New(client, claims, "payments", "ledger", hostname, credit,
		streams.WithIDField("payment_id"),          // the producer's id: a payment XADDed twice runs once
		streams.WithDeadLetter("payments:dead", 5), // after 5 deliveries
		streams.WithConcurrency(16), streams.WithLease(10*time.Second))
	if err != nil {
		return err
	}
	err = consumer.Run(ctx) // until ctx is done; then a graceful shutdown
	// snippet:end
	return err
}

var client rueidis.Client

// snippet:fencedHandler
func handle(ctx context.Context, m streams.Message) error {
	l, _ := store.LeaseFromContext(ctx) // l.ID is the claim id, l.Token the lease's token
	return fencedCredit.Exec(ctx, client, []string{"bq:idemp:" + l.ID, "applied", "ledger", "log"},
		[]string{"~" + l.Token, l.ID, m.Values["amount"]}).Error()
}

// snippet:end
