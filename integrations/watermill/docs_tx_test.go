package watermill_test

// The code of the Go snippet of docs/integrations.md about this module with
// the effect in Postgres (integrations/postgres): compiled, not run; the
// postgres module's tests run the same Inbox on real servers.

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redisonce/redisonce/integrations/postgres"
	wmonce "github.com/redisonce/redisonce/integrations/watermill"
	"github.com/redisonce/redisonce/store"
)

func applyPaymentTx(context.Context, pgx.Tx, []byte) error { return nil }

func docWatermillTx(router *message.Router, sub message.Subscriber, claims *store.Claims, pool *pgxpool.Pool) error {
	// snippet:watermillTx
	inbox, err := postgres.NewInbox(claims, pool) // pool: a *pgxpool.Pool; inbox.CreateTable(ctx) once
	if err != nil {
		return err
	}
	router.AddMiddleware(wmonce.Middleware(claims))
	router.AddNoPublisherHandler("ledger", "payments", sub, func(msg *message.Message) error {
		return inbox.Apply(msg.Context(), func(ctx context.Context, tx pgx.Tx) error {
			return applyPaymentTx(ctx, tx, msg.Payload) // commits with the message's inbox row: once
		})
	})
	// snippet:end
	return nil
}
