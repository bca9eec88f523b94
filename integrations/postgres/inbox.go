package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redisonce/redisonce/store"
)

// inboxDDL is the inbox table's DDL, for the default table name; CreateTable
// runs it with the configured name.
//
//go:embed inbox.sql
var inboxDDL string

// DefaultInboxTable is the inbox table's name unless WithInboxTable says
// otherwise.
const DefaultInboxTable = "redisonce_inbox"

// DefaultInboxRetention is how long Prune keeps a row after its last claim
// unless WithInboxRetention says otherwise.
const DefaultInboxRetention = 7 * 24 * time.Hour

// DefaultInboxPruneBatch is how many rows one of Prune's DELETE statements
// removes at most unless WithInboxPruneBatch says otherwise.
const DefaultInboxPruneBatch = 1000

// InboxDB is the database an Inbox runs on: a *pgxpool.Pool (the usual
// choice, safe for concurrent Do calls) or a *pgx.Conn (one Do at a time)
// satisfy it. A pgx.Tx does not, on purpose: the statement that records a
// lease must commit on its own, before fn's transaction, for a newer lease
// to refuse an older one that is still inside its transaction.
type InboxDB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Inbox applies a message's effect exactly once in PostgreSQL: the effect and
// the inbox row that marks the message id processed commit in one
// transaction, and Redis (a store.ClaimStore) is the fast path that answers
// duplicates and in-flight deliveries without touching the database, and the
// lease that keeps two consumers from working on one id at once.
//
// It is safe for concurrent use when its InboxDB is (a *pgxpool.Pool is).
type Inbox struct {
	claims     claimer
	db         InboxDB
	table      string // the sanitized table name, ready for SQL
	index      string // the sanitized index name
	retention  time.Duration
	pruneBatch int
	txOptions  pgx.TxOptions

	sqlClaim, sqlState, sqlFinish, sqlPrune, ddl string

	committed, duplicates, inFlight, alreadyProcessed, stale, failed, redisCommitFailed atomic.Uint64
}

// InboxOption configures an Inbox (NewInbox).
type InboxOption func(*inboxConfig) error

type inboxConfig struct {
	table      pgx.Identifier
	retention  time.Duration
	pruneBatch int
	txOptions  pgx.TxOptions
}

// WithInboxTable names the inbox table: a name, or a schema and a name
// (WithInboxTable("app", "inbox")). Each part is 1 to 63 bytes of valid
// UTF-8 without NUL; it is quoted (pgx.Identifier), so it is used exactly as
// given, case included. Default: DefaultInboxTable, in the connection's
// search_path.
func WithInboxTable(parts ...string) InboxOption {
	return func(c *inboxConfig) error {
		if len(parts) < 1 || len(parts) > 2 {
			return fmt.Errorf("table name: %d parts, want a name or a schema and a name", len(parts))
		}
		for _, p := range parts {
			if p == "" || len(p) > 63 || !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
				return fmt.Errorf("table name part %q: want 1 to 63 bytes of UTF-8 without NUL", p)
			}
		}
		c.table = pgx.Identifier(append([]string(nil), parts...))
		return nil
	}
}

// WithInboxRetention is how long a row is kept after its last claim (the
// latest lease that reached the database, claimed_at) before Prune deletes it. Keep it longer than the longest time a message can be
// redelivered after it was processed, and than the longest Do: a delivery
// that comes after its row was pruned, and finds no processed mark in Redis
// either (the claims' TTL passed, or Redis lost it), runs fn again. Default:
// DefaultInboxRetention (7 days). Must be > 0.
func WithInboxRetention(d time.Duration) InboxOption {
	return func(c *inboxConfig) error {
		if d <= 0 {
			return fmt.Errorf("retention %v must be > 0", d)
		}
		c.retention = d
		return nil
	}
}

// WithInboxPruneBatch bounds how many rows each DELETE of Prune removes.
// Default: DefaultInboxPruneBatch (1000). Must be 1 to 1,000,000.
func WithInboxPruneBatch(n int) InboxOption {
	return func(c *inboxConfig) error {
		if n < 1 || n > 1_000_000 {
			return fmt.Errorf("prune batch %d: want 1 to 1,000,000", n)
		}
		c.pruneBatch = n
		return nil
	}
}

// WithInboxTxOptions sets the options of fn's transaction (isolation level,
// ...). Default: the zero pgx.TxOptions, the server's default isolation (READ
// COMMITTED unless configured). Under REPEATABLE READ or SERIALIZABLE a
// transaction that meets a concurrent owner's commit fails with a
// serialization error (SQLSTATE 40001) instead of seeing it: Do returns that
// error, and the redelivery finds the row. A read-only transaction cannot
// record the row and is refused.
func WithInboxTxOptions(o pgx.TxOptions) InboxOption {
	return func(c *inboxConfig) error {
		if o.AccessMode == pgx.ReadOnly {
			return errors.New("a read-only transaction cannot record the inbox row")
		}
		c.txOptions = o
		return nil
	}
}

// claimer is the one method of *store.Claims the inbox uses.
type claimer interface {
	Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, error)
}

// NewInbox returns an inbox that claims ids in claims (on Redis, or
// store.NewMemoryClaims in a test) and records them in db. An invalid
// option, a nil claims or a nil db is an error wrapping
// store.ErrInvalidArgument. NewInbox does not touch the database: create the
// table with CreateTable, or have a DBA run inbox.sql.
func NewInbox(claims *store.Claims, db InboxDB, opts ...InboxOption) (*Inbox, error) {
	if claims == nil {
		return newInbox(nil, db, opts...)
	}
	return newInbox(claims, db, opts...)
}

func newInbox(claims claimer, db InboxDB, opts ...InboxOption) (*Inbox, error) {
	if claims == nil || db == nil {
		return nil, fmt.Errorf("redisonce: new inbox: %w: a nil claim store or database", store.ErrInvalidArgument)
	}
	cfg := inboxConfig{table: pgx.Identifier{DefaultInboxTable}, retention: DefaultInboxRetention, pruneBatch: DefaultInboxPruneBatch}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("redisonce: new inbox: %w: %v", store.ErrInvalidArgument, err)
		}
	}
	ib := &Inbox{claims: claims, db: db, table: cfg.table.Sanitize(),
		index:     pgx.Identifier{cfg.table[len(cfg.table)-1] + "_claimed_at_idx"}.Sanitize(),
		retention: cfg.retention, pruneBatch: cfg.pruneBatch, txOptions: cfg.txOptions}
	t := ib.table
	// The lease's row: a new row, or the fence and owner of an unprocessed
	// row whose fence is not above this lease's. It commits on its own at
	// once, so an older owner still at work finds it replaced when it comes
	// to mark the row processed, and nobody waits for that owner's
	// transaction to get here.
	ib.sqlClaim = `INSERT INTO ` + t + ` AS t (id, fence, owner, claimed_at) VALUES ($1, $2, $3, now())
ON CONFLICT (id) DO UPDATE SET fence = excluded.fence, owner = excluded.owner, claimed_at = excluded.claimed_at
WHERE t.processed_at IS NULL AND t.fence <= excluded.fence
RETURNING true`
	ib.sqlState = `SELECT fence::text, processed_at IS NOT NULL FROM ` + t + ` WHERE id = $1`
	// In fn's transaction, after fn: only the row's current owner marks it
	// processed. The row lock is taken here, at the end, so a newer owner's
	// claim statement never waits for an older owner's fn.
	ib.sqlFinish = `UPDATE ` + t + ` SET processed_at = now()
WHERE id = $1 AND fence = $2 AND owner = $3 AND processed_at IS NULL`
	// One bounded batch; rows locked by a transaction at work are skipped.
	ib.sqlPrune = `DELETE FROM ` + t + ` WHERE ctid IN (SELECT ctid FROM ` + t + `
WHERE claimed_at < now() - $1::bigint * interval '1 microsecond' LIMIT $2 FOR UPDATE SKIP LOCKED)`
	ib.ddl = ddlFor(ib.table, ib.index)
	return ib, nil
}

var (
	ddlIndexName = regexp.MustCompile(`\bredisonce_inbox_claimed_at_idx\b`)
	ddlTableName = regexp.MustCompile(`\bredisonce_inbox\b`)
)

// ddlFor is inbox.sql with the table and index names replaced, its comments
// dropped.
func ddlFor(table, index string) string {
	var b strings.Builder
	for line := range strings.Lines(inboxDDL) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		line = ddlIndexName.ReplaceAllLiteralString(line, index)
		b.WriteString(ddlTableName.ReplaceAllLiteralString(line, table))
	}
	return strings.TrimSpace(b.String())
}

// DDL returns the statements CreateTable runs: inbox.sql for this inbox's
// table name.
func (ib *Inbox) DDL() string { return ib.ddl }

// CreateTable creates the inbox table and its index if they do not exist
// (inbox.sql). It is safe to call from several processes at once: they take
// turns on a transaction-scoped advisory lock.
func (ib *Inbox) CreateTable(ctx context.Context) error {
	if ib == nil {
		return fmt.Errorf("redisonce: create inbox table: %w: nil *Inbox", store.ErrInvalidArgument)
	}
	if ctx == nil {
		return fmt.Errorf("redisonce: create inbox table: %w: nil context", store.ErrInvalidArgument)
	}
	err := pgx.BeginTxFunc(ctx, ib.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "redisonce inbox ddl "+ib.table); err != nil {
			return err
		}
		for stmt := range strings.SplitSeq(ib.ddl, ";") {
			if stmt = strings.TrimSpace(stmt); stmt != "" {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisonce: create inbox table %s: %w", ib.table, err)
	}
	return nil
}

// Do runs fn's effect exactly once per id, in PostgreSQL:
//
//  1. It claims id in Redis with the claim store's Do and lease (see
//     store.Claims.Do). An id already processed answers (false, nil) and an
//     id another consumer holds answers (false, an error wrapping
//     store.ErrInFlight), both without touching Postgres.
//  2. Holding the claim, one statement (committed on its own) records the
//     lease's fence and owner token in the id's inbox row. A row already
//     processed means the effect committed before (the last commit to Redis
//     did not land, or Redis lost the mark): fn is skipped and Do answers
//     (false, nil). A row held by a lease with a higher fence refuses this
//     one: (false, an error wrapping store.ErrStaleOwner).
//  3. One transaction: fn(ctx, tx), then the row marked processed, only if
//     the row still names this lease (an owner whose lease was taken over
//     meanwhile is refused: rolled back, ErrStaleOwner), then COMMIT. The
//     transaction is always committed or rolled back, also when fn panics.
//  4. Only then the claim commits in Redis. When that commit fails, the
//     effect is still once (the row says so, and the next delivery finds
//     it): Do answers (true, nil) and counts it in InboxStats.
//
// ctx given to fn is the claim's: it carries the lease (store.LeaseFromContext:
// its Fence, never lower than any lease granted before for the id, to fence
// fn's own rows) and is cancelled when the lease is lost; the statements of
// steps 2 and 3 use it, so an owner that knows its lease is gone commits
// nothing. fn must do its effect with tx only, and must not commit or roll
// it back.
//
// ran is true when fn was called and its transaction committed (err nil), or
// when fn, or a statement after it, failed (err says which; the transaction
// rolled back and the claim was released, so a redelivery retries). It is
// false when fn was not called, and when fn's transaction was rolled back
// because the row turned out processed (err nil) or taken by a newer lease
// (ErrStaleOwner). A failed COMMIT (a connection lost while committing) has
// an unknown outcome: Do returns its error and releases the claim, and the
// redelivery finds the row processed or not, whichever happened.
//
// id must be valid UTF-8 without NUL (the row's key is text) and what the
// claim store accepts; lease must be > 0; checked before any write.
func (ib *Inbox) Do(ctx context.Context, id string, lease time.Duration, fn func(ctx context.Context, tx pgx.Tx) error) (ran bool, err error) {
	if err := ib.check(ctx, id, lease, fn); err != nil {
		return false, err
	}
	var r attempt
	claimRan, err := ib.claims.Do(ctx, id, lease, func(ctx context.Context) error {
		return ib.apply(ctx, id, fn, &r)
	})
	if !claimRan {
		switch {
		case err == nil:
			ib.duplicates.Add(1)
		case errors.Is(err, store.ErrInFlight):
			ib.inFlight.Add(1)
		}
		return false, err
	}
	switch r.result {
	case resultCommitted, resultProcessed:
		// The row is processed (by this transaction, or an earlier one):
		// the effect is once, whatever the claim's commit in Redis said.
		if err != nil {
			ib.redisCommitFailed.Add(1)
		}
		return r.result == resultCommitted, nil
	case resultStale:
		return false, err
	default:
		if err == nil { // a claim store that swallowed apply's error
			err = fmt.Errorf("redisonce: inbox %q: %w: the claim store reported success for a failed transaction", id, store.ErrUnexpectedReply)
		}
		return r.fnCalled, err
	}
}

// check validates Do's arguments before anything is sent.
func (ib *Inbox) check(ctx context.Context, id string, lease time.Duration, fn func(context.Context, pgx.Tx) error) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("redisonce: inbox %q: %w: %s", id, store.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	switch {
	case ib == nil:
		return bad("nil *Inbox")
	case ctx == nil:
		return bad("nil context")
	case fn == nil:
		return bad("nil fn")
	case lease <= 0:
		return bad("lease %v must be > 0", lease)
	case id == "":
		return bad("empty id")
	case len(id) > store.MaxIDLen:
		return fmt.Errorf("redisonce: inbox %q: %w: id is %d bytes, the limit is %d", id[:32]+"...", store.ErrInvalidArgument, len(id), store.MaxIDLen)
	case !utf8.ValidString(id) || strings.ContainsRune(id, 0):
		return bad("the id must be valid UTF-8 without NUL (the inbox row's key is text)")
	}
	return nil
}

// Apply is Do's work in Postgres, for a fn that already holds the claim: the
// handler of a consumer that runs it through its own *store.Claims (the
// streams runner, the jetstream, kafka, watermill and asynq integrations), or
// a Claims.Do of yours. It reads the claim from ctx (store.LeaseFromContext:
// the id, the owner token, the fence), records the lease in the id's inbox
// row, and runs fn and marks the row processed in one transaction (Do's steps
// 2 and 3); the claim's commit in Redis is the caller's, after Apply returns
// nil.
//
// It returns nil when fn's transaction committed, and also when the row was
// processed already (fn is skipped: a redelivery after "SQL committed, Redis
// not", or Redis lost the mark): in both cases the effect is in the database
// once, and the message can be acknowledged. A lease a newer one replaced is
// an error wrapping store.ErrStaleOwner, and nothing is committed; fn's
// error, or a statement's, is returned as it is, after the rollback. Outside
// a claim's fn (no lease in ctx), or with an id the row cannot hold (not
// UTF-8, or with NUL), it returns an error wrapping store.ErrInvalidArgument,
// marked store.Permanent (a redelivery cannot fix it), and writes nothing.
func (ib *Inbox) Apply(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if ib == nil || ctx == nil || fn == nil {
		return store.Permanent(fmt.Errorf("redisonce: inbox apply: %w: nil *Inbox, context or fn", store.ErrInvalidArgument))
	}
	l, ok := store.LeaseFromContext(ctx)
	if !ok || l.Token == "" {
		return store.Permanent(fmt.Errorf("redisonce: inbox apply: %w: no claim in the context: call Apply in the fn of a Claims.Do, or in a consumer's handler", store.ErrInvalidArgument))
	}
	if !utf8.ValidString(l.ID) || strings.ContainsRune(l.ID, 0) {
		return store.Permanent(fmt.Errorf("redisonce: inbox %q: %w: the id must be valid UTF-8 without NUL (the inbox row's key is text)", l.ID, store.ErrInvalidArgument))
	}
	var r attempt
	return ib.apply(ctx, l.ID, fn, &r)
}

type result int

const (
	resultFailed    result = iota // fn or a statement failed: rolled back
	resultCommitted               // fn's transaction committed
	resultProcessed               // the row was processed already: fn skipped, or rolled back
	resultStale                   // a newer lease holds the row: nothing changed
)

// attempt is what apply did, for Do.
type attempt struct {
	result   result
	fnCalled bool
}

// apply is steps 2 and 3 of Do, run while the claim is held.
func (ib *Inbox) apply(ctx context.Context, id string, fn func(context.Context, pgx.Tx) error, r *attempt) error {
	l, ok := store.LeaseFromContext(ctx)
	if !ok || l.Token == "" {
		return fmt.Errorf("redisonce: inbox %q: %w: the claim gave fn no lease (store.LeaseFromContext)", id, store.ErrUnexpectedReply)
	}
	fence := l.Fence
	var claimed bool
	err := ib.db.QueryRow(ctx, ib.sqlClaim, id, fence, l.Token).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return ib.refused(ctx, id, fence, r)
	}
	if err != nil {
		ib.failed.Add(1)
		return ib.sqlError(ctx, id, "record the lease", err)
	}

	tx, err := ib.db.BeginTx(ctx, ib.txOptions)
	if err != nil {
		ib.failed.Add(1)
		return ib.sqlError(ctx, id, "begin", err)
	}
	done := false
	defer func() {
		if !done { // fn panicked, or a step below failed
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackBudget)
			_ = tx.Rollback(rctx)
			cancel()
		}
	}()
	r.fnCalled = true
	if err := fn(ctx, tx); err != nil {
		ib.failed.Add(1)
		return err
	}
	tag, err := tx.Exec(ctx, ib.sqlFinish, id, fence, l.Token)
	if err != nil {
		ib.failed.Add(1)
		return ib.sqlError(ctx, id, "mark processed", err)
	}
	if tag.RowsAffected() != 1 {
		done = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackBudget)
		_ = tx.Rollback(rctx)
		cancel()
		return ib.refused(ctx, id, fence, r)
	}
	done = true
	if err := tx.Commit(ctx); err != nil {
		ib.failed.Add(1)
		return ib.sqlError(ctx, id, "commit (its outcome is unknown: the next delivery finds the row processed or not)", err)
	}
	r.result = resultCommitted
	ib.committed.Add(1)
	return nil
}

// rollbackBudget bounds a rollback, which runs even when fn's context is
// cancelled.
const rollbackBudget = 5 * time.Second

// refused classifies a row this lease may not write: processed already
// (resultProcessed, nil: fn is skipped and the claim commits) or held by a
// newer lease (resultStale, ErrStaleOwner).
func (ib *Inbox) refused(ctx context.Context, id string, fence uint64, r *attempt) error {
	var rowFence string
	var processed bool
	err := ib.db.QueryRow(ctx, ib.sqlState, id).Scan(&rowFence, &processed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		r.result = resultStale
		ib.stale.Add(1)
		return fmt.Errorf("redisonce: inbox %q: %w: the inbox row is gone (pruned while this lease was at work? keep the retention far above the lease)", id, store.ErrStaleOwner)
	case err != nil:
		ib.failed.Add(1)
		return ib.sqlError(ctx, id, "read the row", err)
	case processed:
		r.result = resultProcessed
		ib.alreadyProcessed.Add(1)
		return nil
	default:
		r.result = resultStale
		ib.stale.Add(1)
		return fmt.Errorf("redisonce: inbox %q: %w: the inbox row belongs to a newer lease (fence %s, this one %d); nothing was committed", id, store.ErrStaleOwner, rowFence, fence)
	}
}

// sqlError wraps a database error with the operation and the id; a missing
// table (SQLSTATE 42P01) says how to create it. The *pgconn.PgError stays
// reachable with errors.As.
func (ib *Inbox) sqlError(ctx context.Context, id, what string, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		// The lease's loss (store.ErrLeaseLost) says more than "context canceled".
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return fmt.Errorf("redisonce: inbox %q: %s: the inbox table %s does not exist (Inbox.CreateTable creates it, or run inbox.sql): %w", id, what, ib.table, err)
	}
	return fmt.Errorf("redisonce: inbox %q: %s: %w", id, what, err)
}

// Prune deletes the rows whose last claim is older than the retention
// window, in DELETE statements of at most the prune batch each (rows locked
// by a transaction at work are left for the next time), until a batch comes
// back short or ctx is done. It returns how many rows it deleted.
func (ib *Inbox) Prune(ctx context.Context) (int64, error) {
	if ib == nil {
		return 0, fmt.Errorf("redisonce: inbox prune: %w: nil *Inbox", store.ErrInvalidArgument)
	}
	if ctx == nil {
		return 0, fmt.Errorf("redisonce: inbox prune: %w: nil context", store.ErrInvalidArgument)
	}
	var total int64
	for {
		tag, err := ib.db.Exec(ctx, ib.sqlPrune, ib.retention.Microseconds(), ib.pruneBatch)
		if err != nil {
			return total, fmt.Errorf("redisonce: inbox prune %s: %w", ib.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(ib.pruneBatch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("redisonce: inbox prune %s: %w", ib.table, err)
		}
	}
}

// RunPruner calls Prune every interval until ctx is done, then returns
// ctx's error. A failed Prune is passed to onErr when it is not nil, and
// tried again at the next interval. interval must be > 0.
func (ib *Inbox) RunPruner(ctx context.Context, interval time.Duration, onErr func(error)) error {
	if ib == nil || ctx == nil || interval <= 0 {
		return fmt.Errorf("redisonce: inbox pruner: %w: nil *Inbox or context, or interval %v <= 0", store.ErrInvalidArgument, interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if _, err := ib.Prune(ctx); err != nil && onErr != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
	}
}

// InboxStats counts what an Inbox's Do calls did, since NewInbox.
type InboxStats struct {
	// Committed: fn's transaction committed.
	Committed uint64
	// Duplicates: the claim store answered "processed"; Postgres was not
	// touched.
	Duplicates uint64
	// InFlight: the claim store answered "in flight"; Postgres was not
	// touched.
	InFlight uint64
	// AlreadyProcessed: Redis had no processed mark (a commit to Redis that
	// did not land, or Redis lost it) but the row was processed: fn was
	// skipped, or its transaction rolled back.
	AlreadyProcessed uint64
	// Stale: a newer lease held the row; nothing was committed.
	Stale uint64
	// Failed: fn or a statement failed; the transaction rolled back.
	Failed uint64
	// RedisCommitFailed: the row was processed but the claim's commit in
	// Redis failed; the next delivery finds the row.
	RedisCommitFailed uint64
}

// Stats returns the counters.
func (ib *Inbox) Stats() InboxStats {
	return InboxStats{Committed: ib.committed.Load(), Duplicates: ib.duplicates.Load(), InFlight: ib.inFlight.Load(),
		AlreadyProcessed: ib.alreadyProcessed.Load(), Stale: ib.stale.Load(), Failed: ib.failed.Load(),
		RedisCommitFailed: ib.redisCommitFailed.Load()}
}
