package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
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

// DefaultInboxRetention is how long Prune keeps a row after its commit
// unless WithInboxRetention says otherwise.
const DefaultInboxRetention = 7 * 24 * time.Hour

// DefaultInboxPruneBatch is how many rows one of Prune's DELETE statements
// removes at most unless WithInboxPruneBatch says otherwise.
const DefaultInboxPruneBatch = 1000

// InboxDB is the database an Inbox runs on: a *pgxpool.Pool (the usual
// choice, safe for concurrent Do calls) or a *pgx.Conn (one Do at a time)
// satisfy it. A pgx.Tx does not: each Do runs a transaction of its own,
// whose commit is the effect's.
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

	sqlTake, sqlRow, sqlEnd, sqlLock, sqlAfter, sqlPrune, ddl string

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

// WithInboxRetention is how long a row is kept after its transaction
// committed (processed_at) before Prune deletes it. Keep it longer than the
// longest time a message can be redelivered after it was processed: a
// delivery that comes after its row was pruned, and finds no processed mark
// in Redis either (the claims' TTL passed, or Redis lost it), runs fn again.
// Default: DefaultInboxRetention (7 days). Must be > 0.
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
		index:     pgx.Identifier{cfg.table[len(cfg.table)-1] + "_processed_at_idx"}.Sanitize(),
		retention: cfg.retention, pruneBatch: cfg.pruneBatch, txOptions: cfg.txOptions}
	t := ib.table
	// The first statement of fn's transaction: the id's row, written only
	// when this transaction holds the id's advisory lock (a transaction of
	// another owner of the id, at work, holds it) and no row is there (one
	// is there only when an owner's transaction committed). It never waits:
	// no lock, or a row, and it writes nothing.
	ib.sqlTake = `INSERT INTO ` + t + ` (id, fence, owner) SELECT $1, $2, $3
WHERE pg_try_advisory_xact_lock($4, $5)
ON CONFLICT (id) DO NOTHING RETURNING true`
	ib.sqlRow = `SELECT 1 FROM ` + t + ` WHERE id = $1`
	// Every other session whose transaction holds the id's lock: an owner
	// whose lease is gone (this one holds the claim), still inside its
	// transaction.
	holders := `FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
AND classid = $1::int4::oid AND objid = $2::int4::oid AND granted AND pid <> pg_backend_pid()`
	ib.sqlEnd = `SELECT count(pg_terminate_backend(pid)) ` + holders
	ib.sqlLock = `SELECT pg_advisory_xact_lock($1, $2)`
	// After a failed COMMIT, on another connection: the row's owner, and
	// whether a session other than this transaction's ($4) holds the id's lock.
	ib.sqlAfter = `SELECT (SELECT owner FROM ` + t + ` WHERE id = $3),
EXISTS (SELECT 1 ` + holders + ` AND pid <> $4)`
	// One bounded batch; rows locked by a transaction at work are skipped.
	ib.sqlPrune = `DELETE FROM ` + t + ` WHERE ctid IN (SELECT ctid FROM ` + t + `
WHERE processed_at < now() - $1::bigint * interval '1 microsecond' LIMIT $2 FOR UPDATE SKIP LOCKED)`
	ib.ddl = ddlFor(ib.table, ib.index)
	return ib, nil
}

var (
	ddlIndexName = regexp.MustCompile(`\bredisonce_inbox_processed_at_idx\b`)
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
//  2. Holding the claim, it begins one transaction whose first statement
//     writes the id's inbox row with the lease's fence and owner token. A row
//     already there means the effect committed before (the last commit to
//     Redis did not land, or Redis lost the mark): fn is skipped and Do
//     answers (false, nil). Another owner's transaction still at work on the
//     id (it holds the id's advisory lock) belongs to a lease that is gone —
//     this call holds the claim: that session is ended
//     (pg_terminate_backend), its transaction rolls back, and the row is
//     written once its lock is free. The statement never waits behind an
//     owner paused in its fn.
//  3. fn(ctx, tx), then COMMIT: the effect and the row commit together, or
//     neither does. The transaction is always committed or rolled back, also
//     when fn panics. An owner whose transaction a newer owner ended finds
//     its COMMIT failing and answers (false, an error wrapping
//     store.ErrStaleOwner) while the newer owner works, (false, nil) once the
//     newer owner's row is there: it changed nothing.
//  4. Only then the claim commits in Redis. When that commit fails, the
//     effect is still once (the row says so, and the next delivery finds
//     it): Do answers (true, nil) and counts it in InboxStats.
//
// A first delivery costs what a plain SQL inbox costs (BEGIN, the row's
// INSERT, fn's statements, COMMIT) plus the claim's two calls to Redis.
//
// ctx given to fn is the claim's: it carries the lease (store.LeaseFromContext:
// its Fence, never lower than any lease granted before for the id, to fence
// fn's own rows) and is cancelled when the lease is lost; the transaction's
// statements use it, so an owner that knows its lease is gone commits
// nothing. fn must do its effect with tx only, and must not commit or roll
// it back.
//
// ran is true when fn was called and its transaction committed (err nil), or
// when fn, or a statement after it, failed (err says which; the transaction
// rolled back and the claim was released, so a redelivery retries). It is
// false when fn was not called, and when fn's transaction was ended by a
// newer owner. A COMMIT that fails is resolved on another connection: the
// row names this lease (committed: true, nil), another one (false, nil), or
// none while a newer owner holds the id (false, ErrStaleOwner); otherwise its
// outcome is unknown (the connection was lost while committing): Do returns
// its error and releases the claim, and the redelivery finds the row or not,
// whichever happened.
//
// The role Do runs as ends a stale owner's session: it must be the role of
// every consumer of the table, or have pg_signal_backend (a superuser's
// sessions only a superuser can end).
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
// the id, the owner token, the fence), and writes the id's inbox row, runs fn
// and commits in one transaction (Do's steps 2 and 3); the claim's commit in
// Redis is the caller's, after Apply returns nil.
//
// It returns nil when fn's transaction committed, and also when the row was
// processed already (fn is skipped: a redelivery after "SQL committed, Redis
// not", or Redis lost the mark): in both cases the effect is in the database
// once, and the message can be acknowledged. A lease a newer one replaced is
// an error wrapping store.ErrStaleOwner (its transaction was ended by the
// newer owner, still at work), and nothing is committed; fn's
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
	resultStale                   // a newer owner ended the transaction: nothing changed
)

// attempt is what apply did, for Do.
type attempt struct {
	result   result
	fnCalled bool
}

// lockKeys are the two keys of the id's transaction-scoped advisory lock
// (pg_try_advisory_xact_lock(int4, int4)): a 64-bit FNV-1a hash of the
// table's name and the id, so ids of different inbox tables never share one.
// (Two ids of one table share one with a chance of 2^-64: then one owner
// would end the other's transaction, which rolls back and is redelivered.)
func (ib *Inbox) lockKeys(id string) (int32, int32) {
	h := fnv.New64a()
	h.Write([]byte(ib.table))
	h.Write([]byte{0})
	h.Write([]byte(id))
	k := h.Sum64()
	return int32(k >> 32), int32(k)
}

// apply is steps 2 and 3 of Do, run while the claim is held.
func (ib *Inbox) apply(ctx context.Context, id string, fn func(context.Context, pgx.Tx) error, r *attempt) error {
	l, ok := store.LeaseFromContext(ctx)
	if !ok || l.Token == "" {
		return fmt.Errorf("redisonce: inbox %q: %w: the claim gave fn no lease (store.LeaseFromContext)", id, store.ErrUnexpectedReply)
	}
	k1, k2 := ib.lockKeys(id)
	tx, err := ib.db.BeginTx(ctx, ib.txOptions)
	if err != nil {
		ib.failed.Add(1)
		return ib.sqlError(ctx, id, "begin", err)
	}
	done := false
	defer func() {
		if !done { // fn panicked, or a step below failed
			ib.rollback(ctx, tx)
		}
	}()
	var took bool
	err = tx.QueryRow(ctx, ib.sqlTake, id, l.Fence, l.Token, k1, k2).Scan(&took)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		took, err = ib.takeOver(ctx, tx, id, l, k1, k2, r)
	case err != nil:
		err = ib.sqlError(ctx, id, "record the lease", err)
	}
	if err != nil || !took {
		if err != nil && r.result == resultFailed {
			ib.failed.Add(1)
		}
		return err
	}
	r.fnCalled = true
	if err := fn(ctx, tx); err != nil {
		ib.failed.Add(1)
		return err
	}
	done = true
	pid := tx.Conn().PgConn().PID() // the session whose COMMIT this is
	if err := tx.Commit(ctx); err != nil {
		return ib.afterFailedCommit(ctx, id, l, k1, k2, pid, err, r)
	}
	r.result = resultCommitted
	ib.committed.Add(1)
	return nil
}

// takeOver is apply's path when its first statement wrote nothing: the row
// is there (an owner's transaction committed: this one is refused), or
// another owner's transaction holds the id. This call holds the claim, so
// that owner's lease is gone (it expired while the owner was paused or cut
// off, or Redis lost it): its session is ended (pg_terminate_backend), which
// rolls its transaction back, and once the id's lock is this transaction's
// the row is written. The owner finds its connection closed when it comes
// to commit: a stale owner changes nothing, also when it does not know its
// lease is gone. took is false with nil when the row says the effect
// committed before.
func (ib *Inbox) takeOver(ctx context.Context, tx pgx.Tx, id string, l store.Lease, k1, k2 int32, r *attempt) (bool, error) {
	for range 2 {
		var one int
		err := tx.QueryRow(ctx, ib.sqlRow, id).Scan(&one)
		if err == nil {
			return false, ib.refused(r)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return false, ib.sqlError(ctx, id, "read the row", err)
		}
		if _, err := tx.Exec(ctx, ib.sqlEnd, k1, k2); err != nil {
			return false, ib.sqlError(ctx, id, "end a stale owner's transaction (the role needs pg_signal_backend, or to be the role of every consumer)", err)
		}
		if _, err := tx.Exec(ctx, ib.sqlLock, k1, k2); err != nil {
			return false, ib.sqlError(ctx, id, "wait for a stale owner's transaction to end", err)
		}
		var took bool
		err = tx.QueryRow(ctx, ib.sqlTake, id, l.Fence, l.Token, k1, k2).Scan(&took)
		if err == nil {
			return took, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return false, ib.sqlError(ctx, id, "record the lease", err)
		}
		// The ended owner committed just before it was ended: read the row.
	}
	return false, ib.sqlError(ctx, id, "record the lease", errors.New("the row is neither there nor writable"))
}

// afterFailedCommit resolves a COMMIT that returned an error, on another
// connection: the row names this lease (the commit landed before the
// connection was lost: committed), or another one (refused: processed, or a
// newer owner's), or there is none while a session other than pid (the one
// whose COMMIT failed) holds the id's lock (a newer owner ended this
// transaction and is at work: stale). Otherwise the outcome is not known
// (pid's session may still be committing): the error is returned and the
// redelivery finds the row or not.
func (ib *Inbox) afterFailedCommit(ctx context.Context, id string, l store.Lease, k1, k2 int32, pid uint32, cerr error, r *attempt) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackBudget)
	defer cancel()
	var row *string
	var held bool
	if err := ib.db.QueryRow(rctx, ib.sqlAfter, k1, k2, id, int64(pid)).Scan(&row, &held); err == nil {
		switch {
		case row != nil:
			if *row == l.Token {
				r.result = resultCommitted
				ib.committed.Add(1)
				return nil
			}
			return ib.refused(r)
		case held:
			r.result = resultStale
			ib.stale.Add(1)
			return fmt.Errorf("redisonce: inbox %q: %w: a newer owner of the id ended this transaction; nothing was committed (%v)", id, store.ErrStaleOwner, cerr)
		}
	}
	ib.failed.Add(1)
	return ib.sqlError(ctx, id, "commit (its outcome is unknown: the next delivery finds the row or not)", cerr)
}

func (ib *Inbox) rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackBudget)
	_ = tx.Rollback(rctx)
	cancel()
}

// rollbackBudget bounds a rollback, which runs even when fn's context is
// cancelled.
const rollbackBudget = 5 * time.Second

// refused counts a row an owner's transaction committed, which refuses
// every later lease, whatever its fence: the effect is in the database once
// (a redelivery after "SQL committed, Redis not", Redis lost the mark, or
// this owner's lease was taken over and the newer owner committed). fn is
// skipped, or its transaction rolled back, and the claim commits.
func (ib *Inbox) refused(r *attempt) error {
	r.result = resultProcessed
	ib.alreadyProcessed.Add(1)
	return nil
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

// Prune deletes the rows committed longer ago than the retention
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
	// skipped, or its transaction rolled back (an owner whose transaction a
	// newer owner ended, which then committed, is counted here).
	AlreadyProcessed uint64
	// Stale: a newer owner ended this transaction; nothing was committed.
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
