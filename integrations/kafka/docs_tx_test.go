package kafka_test

// The code of the Go snippet of docs/integrations.md about this module with
// the effect in Postgres (integrations/postgres): compiled, not run; the
// postgres module's tests run the same Inbox on real servers.

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/store"
)

func applyPaymentTx(context.Context, pgx.Tx, []byte) error { return nil }

func docKafkaTx(ctx context.Context, claims *store.Claims, pool *pgxpool.Pool, opts []kgo.Opt) error {
	// snippet:kafkaTx
	inbox, err := postgres.NewInbox(claims, pool) // pool: a *pgxpool.Pool; inbox.CreateTable(ctx) once
	if err != nil {
		return err
	}
	c, err := kafka.New(claims, postgres.WithTx(inbox, func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		return applyPaymentTx(ctx, tx, r.Value) // commits with the record's inbox row: once
	}), opts, kafka.WithID(kafka.HeaderID("payment-id")))
	// snippet:end
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
