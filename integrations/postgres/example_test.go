package postgres_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// A consumer's delivery: the payment's ledger row commits with the message's
// inbox row, once per message id. (Compiled, not run: it needs a Redis and a
// PostgreSQL; the package's tests run the same calls on real servers.)
func ExampleInbox_Do() {
	ctx := context.Background()
	claims, err := store.OpenClaims("redis://localhost:6379", store.WithTTL(7*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	defer claims.Close()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	inbox, err := postgres.NewInbox(claims, pool)
	if err != nil {
		log.Fatal(err)
	}
	if err := inbox.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}

	msgID, amount := "pay-1", 10
	ran, err := inbox.Do(ctx, msgID, 30*time.Second, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)`, msgID, amount)
		return err
	})
	switch {
	case errors.Is(err, store.ErrInFlight): // another consumer holds it: redeliver later
		d, _ := store.RetryAfter(err)
		log.Printf("redeliver %s in %v", msgID, d)
	case err != nil: // rolled back, claim released: redeliver
		log.Printf("redeliver %s: %v", msgID, err)
	default: // ran: committed now; !ran: a duplicate, or processed before
		log.Printf("ack %s (ran %v)", msgID, ran)
	}
}

// The streams runner with the effect in Postgres: its claims stay the
// runner's, and WithTx runs each handler in the inbox transaction.
func ExampleWithTx() {
	ctx := context.Background()
	opt, err := store.ClientOptions("redis://localhost:6379")
	if err != nil {
		log.Fatal(err)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	claims, err := store.NewClaims(client, store.WithTTL(7*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	inbox, err := postgres.NewInbox(claims, pool)
	if err != nil {
		log.Fatal(err)
	}
	credit := func(ctx context.Context, tx pgx.Tx, m streams.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)`, m.ClaimID, m.Values["amount"])
		return err
	}
	consumer, err := streams.New(client, claims, "payments", "ledger", "worker-1", postgres.WithTx(inbox, credit),
		streams.WithIDField("payment_id"))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(consumer.Run(ctx))
}
