package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/redisonce/redisonce/store"
)

// WithTx adapts a handler that takes the inbox transaction to the
// func(ctx, message) error shape of the consumers that run it through their
// own *store.Claims (streams.Handler, the jetstream, kafka and asynq
// handlers): each call is inbox.Apply(ctx, ...) around h, so h's writes and
// the message's inbox row commit together, and h is skipped when the row says
// the message was processed already. A nil inbox or h gives a handler that
// fails with an error wrapping store.ErrInvalidArgument, marked
// store.Permanent.
func WithTx[M any](inbox *Inbox, h func(ctx context.Context, tx pgx.Tx, m M) error) func(context.Context, M) error {
	return func(ctx context.Context, m M) error {
		if inbox == nil || h == nil {
			return store.Permanent(fmt.Errorf("redisonce: postgres.WithTx: %w: a nil inbox or handler", store.ErrInvalidArgument))
		}
		return inbox.Apply(ctx, func(ctx context.Context, tx pgx.Tx) error { return h(ctx, tx, m) })
	}
}
