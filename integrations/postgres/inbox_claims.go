package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redisonce/redisonce/store"
)

// ClaimStore returns the inbox as a store.ClaimStore, for a consumer that
// takes one (the streams runner, and the jetstream, kafka, watermill and asynq
// integrations): its Do is Inbox.Do, with fn's transaction in fn's context
// (TxFromContext, or WithTx to receive it as an argument). Give it to the
// consumer in place of the claims, and every handler's effect commits with
// its inbox row:
//
//	consumer, err := streams.New(client, inbox.ClaimStore(), "payments", "ledger", hostname,
//		postgres.WithTx(credit))
//
// Its Do answers as Claims.Do does, so the consumers' failure mappings hold:
// (false, nil) for a duplicate — answered by Redis, or by a processed row —,
// ErrInFlight (an *InFlightError) for an id held elsewhere, (true, fn's error)
// for a failure, and an error wrapping store.ErrStaleOwner for a lease that
// a newer one replaced (nothing committed; redeliver). The other methods are
// the claim store's, in Redis only: Forget frees the id in Redis, and the
// processed row still skips fn until Prune deletes it.
func (ib *Inbox) ClaimStore() store.ClaimStore { return inboxClaims{ib} }

type inboxClaims struct{ *Inbox }

var _ store.ClaimStore = inboxClaims{}

func (c inboxClaims) Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, error) {
	if fn == nil {
		return false, fmt.Errorf("redisonce: inbox %q: %w: nil fn", id, store.ErrInvalidArgument)
	}
	return c.Inbox.Do(ctx, id, lease, func(ctx context.Context, tx pgx.Tx) error {
		return fn(context.WithValue(ctx, txKey{}, tx))
	})
}

func (c inboxClaims) Claim(ctx context.Context, id string) (bool, error) {
	return c.claims.Claim(ctx, id)
}

func (c inboxClaims) ClaimMany(ctx context.Context, ids []string) ([]bool, error) {
	return c.claims.ClaimMany(ctx, ids)
}

func (c inboxClaims) Seen(ctx context.Context, id string) (bool, error) {
	return c.claims.Seen(ctx, id)
}

func (c inboxClaims) SeenMany(ctx context.Context, ids []string) ([]bool, error) {
	return c.claims.SeenMany(ctx, ids)
}

func (c inboxClaims) Remember(ctx context.Context, id string) error {
	return c.claims.Remember(ctx, id)
}
func (c inboxClaims) Forget(ctx context.Context, id string) error { return c.claims.Forget(ctx, id) }

// Close closes the claim store the inbox was given.
func (c inboxClaims) Close() error { return c.claims.Close() }

type txKey struct{}

// TxFromContext returns the inbox transaction of the Do whose fn received ctx
// (through ClaimStore), and false outside such a fn.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	if ctx == nil {
		return nil, false
	}
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// WithTx adapts a handler that takes the inbox transaction to the
// func(ctx, message) error shape the consumers take (streams.Handler, the
// jetstream, kafka and asynq handlers): it calls h with the transaction of
// the Inbox.ClaimStore Do it runs in. Outside one it fails with an error
// wrapping store.ErrInvalidArgument and does not call h.
func WithTx[M any](h func(ctx context.Context, tx pgx.Tx, m M) error) func(context.Context, M) error {
	return func(ctx context.Context, m M) error {
		tx, ok := TxFromContext(ctx)
		if !ok {
			return fmt.Errorf("redisonce: postgres.WithTx: %w: no inbox transaction in the context (give the consumer Inbox.ClaimStore())", store.ErrInvalidArgument)
		}
		return h(ctx, tx, m)
	}
}
