package asynq_test

// The code of the Go snippet of docs/integrations.md about this module with
// the effect in Postgres (integrations/postgres): compiled, not run; the
// postgres module's tests run the same Inbox on real servers.

import (
	"context"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	asynqonce "github.com/redisonce/redisonce/integrations/asynq"
	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/store"
)

func settlePaymentTx(context.Context, pgx.Tx, []byte) error { return nil }

func docAsynqTx(claims *store.Claims, pool *pgxpool.Pool) (*asynq.ServeMux, error) {
	// snippet:asynqTx
	inbox, err := postgres.NewInbox(claims, pool) // pool: a *pgxpool.Pool; inbox.CreateTable(ctx) once
	if err != nil {
		return nil, err
	}
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.Middleware(claims))
	mux.HandleFunc("payment:settle", postgres.WithTx(inbox, func(ctx context.Context, tx pgx.Tx, t *asynq.Task) error {
		return settlePaymentTx(ctx, tx, t.Payload()) // commits with the task's inbox row: once
	}))
	// snippet:end
	return mux, nil
}
