package postgres_test

// The code of the Go snippets of README.md and docs/*.md about this module
// and about the streams runner with the effect in Postgres: regions
// (// snippet:NAME ... // snippet:end) that TestDocSnippets (root module)
// compares with the documents. Compiled by every `go test` of this module,
// not run; the tests run the same calls on real servers.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

func docInbox(ctx context.Context, msgID string, amount int64) error {
	// snippet:inbox
	claims, err := store.OpenClaims("redis://localhost:6379", store.WithTTL(7*24*time.Hour))
	if err != nil {
		return err
	}
	defer claims.Close()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost/app")
	if err != nil {
		return err
	}
	defer pool.Close()

	inbox, err := postgres.NewInbox(claims, pool, postgres.WithInboxRetention(14*24*time.Hour))
	if err != nil {
		return err
	}
	if err := inbox.CreateTable(ctx); err != nil { // or have a DBA run inbox.sql
		return err
	}
	ran, err := inbox.Do(ctx, msgID, 30*time.Second, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)`, msgID, amount)
		return err // the effect commits with the inbox row, or neither does
	})
	// snippet:end
	_ = ran // true: committed now; false with a nil error: a duplicate, or processed before
	return err
}

func docStreamsTx(ctx context.Context, client rueidis.Client, pool *pgxpool.Pool, hostname string) error {
	// snippet:streamsTx
	claims, err := store.NewClaims(client, store.WithTTL(7*24*time.Hour))
	if err != nil {
		return err
	}
	inbox, err := postgres.NewInbox(claims, pool) // pool: a *pgxpool.Pool; inbox.CreateTable(ctx) once
	if err != nil {
		return err
	}
	consumer, err := streams.New(client, claims, "payments", "ledger", hostname,
		postgres.WithTx(inbox, func(ctx context.Context, tx pgx.Tx, m streams.Message) error {
			_, err := tx.Exec(ctx, `INSERT INTO payments (id, amount) VALUES ($1, $2)`, m.ClaimID, m.Values["amount"])
			return err // commits with the message's inbox row: once
		}), streams.WithIDField("payment_id"))
	// snippet:end
	if err != nil {
		return err
	}
	return consumer.Run(ctx)
}

// snippet:fencedSQL
// ship marks an order shipped, fenced: the lease's fence only grows (every
// lease granted for an id has a higher one), so a write from an owner whose
// lease was taken over finds a higher fence on the row and changes nothing.
func ship(ctx context.Context, tx pgx.Tx, orderID string) error {
	l, _ := store.LeaseFromContext(ctx)
	tag, err := tx.Exec(ctx, `UPDATE orders SET status = 'shipped', fence = $2
		WHERE id = $1 AND fence < $2`, orderID, l.Fence)
	if err == nil && tag.RowsAffected() == 0 {
		return store.Permanent(errors.New("order " + orderID + ": a newer lease wrote it, or no such order"))
	}
	return err
}

// snippet:end

type brokerMsg struct{ ID string }

func chargeCardTx(context.Context, pgx.Tx, brokerMsg) error { return nil }

func docReadmeInbox(ctx context.Context, claims *store.Claims, pool *pgxpool.Pool, msg brokerMsg) error {
	// snippet:readmeInbox
	inbox, err := postgres.NewInbox(claims, pool) // pool: a *pgxpool.Pool; inbox.CreateTable(ctx) once
	if err != nil {
		return err
	}
	ran, err := inbox.Do(ctx, msg.ID, 10*time.Second, func(ctx context.Context, tx pgx.Tx) error {
		return chargeCardTx(ctx, tx, msg) // its writes commit with the message's inbox row, or none does
	})
	// snippet:end
	_ = ran // as with claims.Do: true when fn's transaction committed now
	return err
}
