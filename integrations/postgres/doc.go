// Package postgres keeps a message's effect exactly once in PostgreSQL, on
// pgx v5: an Inbox claims the message id in Redis (a *store.Claims: the fast
// path, and the lease), then records the id with the lease's fence in an
// inbox table in the same transaction as the effect, so the effect commits
// once even when the process dies between the SQL commit and the claim's
// commit in Redis, when Redis loses the claim, or when an owner paused past
// its lease comes back to commit.
//
//	inbox, err := postgres.NewInbox(claims, pool) // pool: a *pgxpool.Pool
//	err = inbox.CreateTable(ctx)                  // or run inbox.sql
//	ran, err := inbox.Do(ctx, msgID, 30*time.Second, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)`, msgID, amount)
//		return err
//	})
//
// What Do answers:
//
//	fn's transaction committed              (true, nil)
//	a duplicate (Redis: processed)          (false, nil), no statement sent
//	in flight elsewhere (Redis)             (false, store.ErrInFlight), no statement sent
//	the row says processed (Redis lost it,  (false, nil), fn skipped, the claim
//	  or its commit never landed)             committed in Redis
//	fn failed                               (true, fn's error), rolled back, claim released
//	a newer owner ended this transaction    (false, store.ErrStaleOwner), nothing committed
//	a statement failed                      its error (*pgconn.PgError inside), rolled
//	                                          back, claim released
//
// A consumer that runs its handlers through its own *store.Claims (the
// streams runner, the jetstream, kafka, watermill and asynq integrations)
// calls Inbox.Apply in the handler, or wraps it with WithTx. The guarantee
// and its limits are in docs/guarantees.md ("The effect in Postgres").
//
// Records is a record store (store.Records' methods, over a store.Records)
// whose stored results commit with their effect: its Do runs fn inside one
// transaction (Tx gives it to fn, so an httpidem handler writes with
// Tx(r.Context())) and writes the record's row in that same transaction,
// fenced by the Redis lease; Redis stays the lease and the fast path.
package postgres
