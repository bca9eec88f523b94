package jetstream_test

// The code of the Go snippet of docs/integrations.md about this module with
// the effect in Postgres (integrations/postgres): compiled, not run; the
// postgres module's tests run the same Inbox on real servers.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/store"
)

func applyPaymentTx(context.Context, pgx.Tx, []byte) error { return nil }

func docJetStreamTx(consumer natsjs.Consumer, claims *store.Claims, pool *pgxpool.Pool) error {
	// snippet:jetstreamTx
	inbox, err := postgres.NewInbox(claims, pool) // pool: a *pgxpool.Pool; inbox.CreateTable(ctx) once
	if err != nil {
		return err
	}
	h, err := jetstream.New(claims, postgres.WithTx(inbox, func(ctx context.Context, tx pgx.Tx, msg natsjs.Msg) error {
		return applyPaymentTx(ctx, tx, msg.Data()) // commits with the message's inbox row: once
	}), jetstream.WithLease(30*time.Second))
	// snippet:end
	if err != nil {
		return err
	}
	_, err = consumer.Consume(h.Handle)
	return err
}
