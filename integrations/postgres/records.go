package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redisonce/redisonce/store"
)

// recordsDDL is records.sql: the table and its index, under the default name.
//
//go:embed records.sql
var recordsDDL string

// DefaultRecordsTable is the table of Records unless WithRecordsTable says
// otherwise.
const DefaultRecordsTable = "redisonce_records"

// DefaultRecordsPruneBatch is how many rows one of Prune's DELETE statements
// removes at most unless WithRecordsPruneBatch says otherwise.
const DefaultRecordsPruneBatch = 1000

// finalBudget bounds the statements Do runs after fn returned (the final
// write, the commit, giving the claim back): they run even when the caller's
// context ended, as the effect is in the transaction.
const finalBudget = 5 * time.Second

// RecordsDB is the database Records runs on: a *pgxpool.Pool (the usual
// choice) or a *pgx.Conn (one call at a time) satisfy it. Records needs
// statements that commit on their own (a claim must be visible to other
// owners while fn runs), so give it a pool or a connection, not a
// transaction.
type RecordsDB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// RecordsOption configures Records (NewRecords).
type RecordsOption func(*recordsConfig) error

type recordsConfig struct {
	table      pgx.Identifier
	ttl        time.Duration
	pruneBatch int
}

// WithRecordsTable names the table: a name, or a schema and a name
// (WithRecordsTable("app", "idempotency")). Each part is 1 to 63 bytes of
// valid UTF-8 without NUL; it is quoted (pgx.Identifier), so it is used
// exactly as given, case included. Default: DefaultRecordsTable, in the
// connection's search_path.
func WithRecordsTable(parts ...string) RecordsOption {
	return func(c *recordsConfig) error {
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

// WithRecordsTTL sets how long a record and its row are kept, counted from
// the record's creation (or from its final write, when fn outlasted it, as
// the Redis store counts). Do and AcquireWith pass it to the Redis store as
// AcquireOptions.TTL when theirs is 0, so the record and its row share one
// retention. Default: store.DefaultRecordsTTL (24 hours). 0: rows never
// expire; the Redis store's records then live as its own WithTTL says (give
// it store.WithTTL(0) too), and a record that expires there first is found
// again in the row and replayed. Must not be negative.
func WithRecordsTTL(d time.Duration) RecordsOption {
	return func(c *recordsConfig) error {
		if d < 0 {
			return fmt.Errorf("TTL %v is negative", d)
		}
		c.ttl = d
		return nil
	}
}

// WithRecordsPruneBatch bounds how many rows each DELETE of Prune removes.
// Default: DefaultRecordsPruneBatch (1000). Must be 1 to 1,000,000.
func WithRecordsPruneBatch(n int) RecordsOption {
	return func(c *recordsConfig) error {
		if n < 1 || n > 1_000_000 {
			return fmt.Errorf("prune batch %d: want 1 to 1,000,000", n)
		}
		c.pruneBatch = n
		return nil
	}
}

// Records is a record store with the methods of store.Records whose stored
// results commit with their effect: Do runs fn inside one Postgres
// transaction, which fn gets from Tx(ctx), and writes the key's row — fence,
// token, fingerprint, status, result — in that same transaction, so the
// effect and its stored result commit together or not at all. Redis stays
// the lease and the fast path: a *store.Records (on Redis, or
// store.NewMemoryRecords in a test) grants the lease with its fence and
// token, answers a retry in flight (or makes it wait, AcquireOptions.Wait),
// and replays a finished key without a single SQL statement. The row is the
// truth behind it.
//
// Do, for a key the Redis store has no finished record of:
//
//  1. the Redis store acquires the key, its lease renewed while fn runs;
//  2. a claim, one statement that commits on its own, writes the row as
//     pending under the lease's fence and token — unless the row is finished
//     (it is replayed: fn does not run, and the Redis record is completed
//     from it), held under a higher fence (this lease is stale:
//     store.ErrStaleOwner), or holds another fingerprint
//     (store.ErrFingerprintMismatch);
//  3. one transaction: fn, then the row's final write — status and result,
//     only if the row still holds this lease's fence and token (or is gone)
//     — and the commit;
//  4. the Redis record's final write. When it does not happen (Redis down,
//     the process killed, the record flushed), the row holds the outcome and
//     the next Do for the key replays it; Do itself reports the committed
//     outcome.
//
// A stale owner cannot commit. One paused past its lease while another took
// the key over finds, when it comes to its final write, Redis naming another
// owner (Do renews the lease there just before the final write, and an owner
// whose context was ended by the loss of its lease stops there too), or the
// row claimed under the new lease's fence when Redis no longer knows (its
// record flushed): its transaction rolls back with fn's writes, and Do
// returns an error matching store.ErrStaleOwner and store.ErrNotCommitted.
// An owner paused between its final write and its commit holds the row's
// lock: the next owner's claim waits for that commit, then replays it. The
// fences must not go back for this (a fence lower than the row's is refused
// until the row is gone).
//
// The transaction commits exactly when fn succeeded and Do stores its
// result (or, for a result over store.MaxRecordPayloadLen, the failure that
// says so, as the Redis store does). fn's error rolls its writes back, as
// pgx.BeginFunc does: an error marked store.Permanent is still the key's
// outcome, its failed row written on its own and replayed with
// store.ErrFailed; any other error, a panic, a lost lease, a refused final
// write or a failed commit leave nothing behind: the claim is given back (its
// pending row deleted) and the Redis record released, so a retry runs fn
// again on a fresh transaction and a database the first run did not change.
// Do returns fn's error, or, when fn succeeded and its result did not
// commit, an error matching store.ErrNotCommitted (a caller must not report
// such a result as done; httpidem answers 503). A COMMIT whose outcome is
// unknown (the connection broke during it) is looked up in the row; if that
// fails too, the retry learns the outcome: a replay, or a run. fn must not
// commit or roll back the transaction (Commit and Rollback return an error);
// a savepoint (its Begin) is fn's.
//
// The other methods keep store.Records' contract with the row behind the
// Redis record: AcquireWith acquires in Redis and, when the key's row is
// finished (the Redis record was lost: an expiry, FLUSHALL, a failover),
// completes the Redis record from the row and returns it as the existing
// record; Get reads Redis, then the row; Update writes the Redis record (the
// token is checked there) and the row when there is one, or the row alone,
// fenced by the token that wrote it, when Redis has no record; Delete
// removes both; DeleteFenced removes the Redis record and the row the token
// wrote. Only Do writes an outcome in a transaction with an effect.
//
// Records is safe for concurrent use when its RecordsDB is (a
// *pgxpool.Pool is).
type Records struct {
	db         RecordsDB
	lease      *store.Records
	table      string // quoted, schema-qualified as given
	ttl        time.Duration
	pruneBatch int
	ddl        string
	sql        recordsSQL
}

// NewRecords returns Records whose leases and fast path are lease's — the
// Redis store of the records (store.NewRecords with a prefix of its own),
// or store.NewMemoryRecords in a test — and whose rows are in db. An
// invalid option, a nil lease or a nil db is an error wrapping
// store.ErrInvalidArgument. Close closes lease, not db. NewRecords does not
// touch the database: create the table with CreateTable, or have a DBA run
// records.sql.
func NewRecords(lease *store.Records, db RecordsDB, opts ...RecordsOption) (*Records, error) {
	if lease == nil || db == nil || reflect.ValueOf(db).Kind() == reflect.Pointer && reflect.ValueOf(db).IsNil() {
		return nil, fmt.Errorf("redisonce: new records: %w: a nil record store or database", store.ErrInvalidArgument)
	}
	c := recordsConfig{table: pgx.Identifier{DefaultRecordsTable}, ttl: store.DefaultRecordsTTL, pruneBatch: DefaultRecordsPruneBatch}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return nil, fmt.Errorf("redisonce: new records: %w: %v", store.ErrInvalidArgument, err)
		}
	}
	s := &Records{db: db, lease: lease, table: c.table.Sanitize(), ttl: c.ttl, pruneBatch: c.pruneBatch}
	index := pgx.Identifier{c.table[len(c.table)-1] + "_expires_at"}.Sanitize()
	// records.sql without its comments (a name may hold any character but
	// NUL, a newline included), the names replaced
	var ddl strings.Builder
	for line := range strings.Lines(recordsDDL) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			ddl.WriteString(line)
		}
	}
	s.ddl = strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(ddl.String(), "redisonce_records_expires_at", index), "redisonce_records", s.table))
	s.sql = newRecordsSQL(s.table)
	return s, nil
}

// DDL returns the statements CreateTable runs, for a migration tool:
// records.sql for this store's table, without its comments.
func (s *Records) DDL() string { return s.ddl }

// CreateTable creates the table and its index if they do not exist
// (records.sql). It is safe to call from several processes at once: they
// take turns on a transaction-scoped advisory lock.
func (s *Records) CreateTable(ctx context.Context) error {
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "redisonce records ddl "+s.table); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.ddl)
		return err
	})
	if err != nil {
		return fmt.Errorf("redisonce: create records table %s: %w", s.table, err)
	}
	return nil
}

// Tx returns the transaction of the Records.Do whose fn received ctx (or a
// context derived from it), and false outside such a fn. Every write fn makes
// with it commits with the stored result, or not at all. The transaction is
// Do's to end: its Commit and Rollback return an error (a savepoint from its
// Begin, or pgx.BeginFunc on it, is fn's to end).
func Tx(ctx context.Context) (pgx.Tx, bool) {
	if ctx == nil {
		return nil, false
	}
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

type txKey struct{}

// errTxOwned is what Commit and Rollback of the transaction fn gets return.
var errTxOwned = errors.New("redisonce: the transaction is Records.Do's: it commits with the stored result, or rolls back")

// doTx is the transaction fn gets: Do's own, less Commit and Rollback.
type doTx struct{ pgx.Tx }

func (doTx) Commit(context.Context) error   { return errTxOwned }
func (doTx) Rollback(context.Context) error { return errTxOwned }

// row is one row of the table.
type row struct {
	fence       uint64
	token       string
	status      store.Status
	fingerprint string
	result      []byte
	created     time.Time
	updated     time.Time
	expires     time.Time // zero: never
	expired     bool      // by the server's clock when read
}

// record is the row as a store.Record, without its token (no lease: Redis
// keeps leases).
func (r row) record(key string) store.Record {
	rec := store.Record{
		Key: key, Status: r.status, Fence: r.fence, Fingerprint: r.fingerprint,
		CreatedAt: ms(r.created), UpdatedAt: ms(r.updated), ExpiresAt: ms(r.expires),
	}
	if len(r.result) > 0 {
		rec.Payload = r.result
	}
	return rec
}

// ms is t at the stores' millisecond precision; the zero time stays zero.
func ms(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli())
}

// recordsSQL are the statements on one table.
type recordsSQL struct {
	read, claim, final, release, del, delFenced, update, expire, retention string
}

func newRecordsSQL(t string) recordsSQL {
	// ttl is a duration in ms ($n::bigint), 0 for none.
	ttl := func(n int) string { return fmt.Sprintf("$%d::bigint * interval '1 millisecond'", n) }
	return recordsSQL{
		read: `SELECT fence::text, token, status, fingerprint, result, created_at, updated_at, expires_at,
	expires_at IS NOT NULL AND expires_at <= clock_timestamp()
FROM ` + t + ` WHERE key = $1`,

		// The claim: a new row, or the key taken from a pending row of a
		// fence no higher than this lease's (a fingerprint that agrees), or
		// a new incarnation over a finished row past its retention. A
		// takeover keeps the row's creation and retention, as Redis's does.
		claim: `WITH now AS (SELECT clock_timestamp() AS t)
INSERT INTO ` + t + ` AS r (key, fence, token, status, fingerprint, created_at, updated_at, expires_at)
SELECT $1, $2::numeric, $3, 'pending', $4, now.t, now.t, CASE WHEN $5::bigint > 0 THEN now.t + ` + ttl(5) + ` END FROM now
ON CONFLICT (key) DO UPDATE SET
	fence = excluded.fence, token = excluded.token, status = 'pending', result = NULL, updated_at = excluded.updated_at,
	fingerprint = CASE WHEN r.status = 'pending' AND r.fingerprint <> '' THEN r.fingerprint ELSE excluded.fingerprint END,
	created_at = CASE WHEN r.status = 'pending' THEN r.created_at ELSE excluded.created_at END,
	expires_at = CASE WHEN r.status = 'pending' THEN r.expires_at ELSE excluded.expires_at END
WHERE (r.status <> 'pending' AND r.expires_at <= excluded.updated_at)
	OR (r.status = 'pending' AND r.fence <= excluded.fence
		AND (r.fingerprint = '' OR excluded.fingerprint = '' OR r.fingerprint = excluded.fingerprint))
RETURNING true`,

		// The final write, in fn's transaction: the outcome, if the row is
		// still this lease's claim, or a new row if it is gone; nothing if
		// another owner holds it. The retention counts from the row's
		// creation, or from now if that has passed (as Redis's final write).
		final: `WITH now AS (SELECT clock_timestamp() AS t)
INSERT INTO ` + t + ` AS r (key, fence, token, status, fingerprint, result, created_at, updated_at, expires_at)
SELECT $1, $2::numeric, $3, $4, $5, $6, now.t, now.t, CASE WHEN $7::bigint > 0 THEN now.t + ` + ttl(7) + ` END FROM now
ON CONFLICT (key) DO UPDATE SET status = excluded.status, result = excluded.result, updated_at = excluded.updated_at,
	expires_at = CASE WHEN $7::bigint <= 0 THEN NULL
		WHEN r.created_at + ` + ttl(7) + ` > excluded.updated_at THEN r.created_at + ` + ttl(7) + `
		ELSE excluded.expires_at END
WHERE r.token = excluded.token AND r.fence = excluded.fence AND r.status = 'pending'
RETURNING true`,

		release:   `DELETE FROM ` + t + ` WHERE key = $1 AND fence = $2::numeric AND token = $3 AND status = 'pending'`,
		del:       `DELETE FROM ` + t + ` WHERE key = $1`,
		delFenced: `DELETE FROM ` + t + ` WHERE key = $1 AND token = $2`,

		// update: $2 status (NULL: kept), $3 whether to set the result, $4
		// the result, $5 whether to set the expiry, $6 it (NULL: never),
		// $7 the token ('' = unfenced). Past rows are not updated.
		update: `UPDATE ` + t + ` SET status = COALESCE($2::text, status),
	result = CASE WHEN $3::boolean THEN $4::bytea ELSE result END,
	expires_at = CASE WHEN $5::boolean THEN $6::timestamptz ELSE expires_at END,
	updated_at = clock_timestamp()
WHERE key = $1 AND (expires_at IS NULL OR expires_at > clock_timestamp()) AND ($7::text = '' OR token = $7::text)
RETURNING true`,
		expire: `DELETE FROM ` + t + ` WHERE key = $1 AND $2::timestamptz <= clock_timestamp()`,

		retention: `DELETE FROM ` + t + ` WHERE key IN (
	SELECT key FROM ` + t + ` WHERE expires_at <= clock_timestamp() ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`,
	}
}

// errorf builds an error for op and key that wraps sentinel with a detail.
func errorf(op, key string, sentinel error, format string, args ...any) error {
	return fmt.Errorf("redisonce: %s %q: %w: %s", op, key, sentinel, fmt.Sprintf(format, args...))
}

// wrap wraps a statement's error for op and key; a missing table says how
// to create it.
func wrap(op, key string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return fmt.Errorf("redisonce: %s %q: the records table does not exist (Records.CreateTable creates it, or run records.sql): %w", op, key, err)
	}
	return fmt.Errorf("redisonce: %s %q: %w", op, key, err)
}

// readRow reads key's row; ok false when there is none.
func (s *Records) readRow(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key string) (row, bool, error) {
	var (
		r       row
		fence   string
		status  string
		fp      []byte
		expires *time.Time
	)
	err := q.QueryRow(ctx, s.sql.read, []byte(key)).Scan(&fence, &r.token, &status, &fp, &r.result, &r.created, &r.updated, &expires, &r.expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	if r.fence, err = strconv.ParseUint(fence, 10, 64); err != nil {
		return row{}, false, fmt.Errorf("%w: fence %q", store.ErrUnexpectedReply, fence)
	}
	r.status, r.fingerprint = store.Status(status), string(fp)
	if expires != nil {
		r.expires = *expires
	}
	return r, true, nil
}

// live reads key's row, treating one past its retention as missing.
func (s *Records) live(ctx context.Context, key string) (row, bool, error) {
	r, ok, err := s.readRow(ctx, s.db, key)
	if err != nil || !ok || r.expired {
		return row{}, false, err
	}
	return r, true, nil
}

// fingerprintsDiffer is the stores' fingerprint rule: both set and different.
func fingerprintsDiffer(a, b string) bool { return a != "" && b != "" && a != b }

// ttl is the retention Do and AcquireWith ask for: o's, or the store's.
func (s *Records) withTTL(o store.AcquireOptions) store.AcquireOptions {
	if o.TTL == 0 {
		o.TTL = s.ttl
	}
	return o
}

// Acquire is AcquireWith(ctx, key, store.AcquireOptions{TTL: ttl}).
func (s *Records) Acquire(ctx context.Context, key string, ttl time.Duration) (store.Record, bool, error) {
	return s.AcquireWith(ctx, key, store.AcquireOptions{TTL: ttl})
}

// AcquireWith acquires key in the Redis store. When it acquired the key and
// the key's row holds a finished outcome (the Redis record was lost while
// the row lived on), the Redis record is completed from the row and the row
// is returned as the existing record (false); a row with another
// fingerprint gives the key back and returns ErrFingerprintMismatch.
func (s *Records) AcquireWith(ctx context.Context, key string, o store.AcquireOptions) (store.Record, bool, error) {
	o = s.withTTL(o)
	rec, acquired, err := s.lease.AcquireWith(ctx, key, o)
	if err != nil || !acquired {
		return rec, acquired, err
	}
	r, ok, err := s.live(ctx, key)
	giveBack := func(err error) (store.Record, bool, error) {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalBudget)
		defer cancel()
		return store.Record{}, false, errors.Join(err, s.lease.DeleteFenced(bctx, key, rec.Token))
	}
	switch {
	case err != nil:
		return giveBack(wrap("acquire", key, err))
	case !ok || r.status == store.StatusPending:
		return rec, true, nil
	case fingerprintsDiffer(r.fingerprint, o.Fingerprint):
		return giveBack(errorf("acquire", key, store.ErrFingerprintMismatch, "the key's row was written with another fingerprint"))
	}
	st, p := r.status, r.result
	if err := s.lease.Update(ctx, key, store.Update{Status: &st, Payload: &p, Token: rec.Token}); err != nil {
		return store.Record{}, false, err
	}
	return r.record(key), false, nil
}

// Get returns key's Redis record, or else its live row.
func (s *Records) Get(ctx context.Context, key string) (store.Record, bool, error) {
	rec, ok, err := s.lease.Get(ctx, key)
	if err != nil || ok {
		return rec, ok, err
	}
	r, ok, err := s.live(ctx, key)
	if err != nil {
		return store.Record{}, false, wrap("get", key, err)
	}
	if !ok {
		return store.Record{}, false, nil
	}
	return r.record(key), true, nil
}

// Update changes key's Redis record as the Redis store does (its token is
// checked there), then key's row if it has one: status, result and expiry
// (LeaseUntil lives in Redis only; an expiry at or before now deletes the
// row). When Redis has no record of the key, the row alone is updated, fenced
// by u.Token against the token that wrote it: ErrNotFound when there is no
// live row either.
func (s *Records) Update(ctx context.Context, key string, u store.Update) error {
	err := s.lease.Update(ctx, key, u)
	inRedis := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if u.ExpiresAt != nil && !u.ExpiresAt.IsZero() {
		tag, err := s.db.Exec(ctx, s.sql.expire, []byte(key), *u.ExpiresAt)
		if err != nil {
			return wrap("update", key, err)
		}
		if tag.RowsAffected() > 0 {
			return nil
		}
	}
	var status *string
	if u.Status != nil {
		st := string(*u.Status)
		status = &st
	}
	var payload []byte
	if u.Payload != nil {
		payload = *u.Payload
	}
	var expires *time.Time
	if u.ExpiresAt != nil && !u.ExpiresAt.IsZero() {
		expires = u.ExpiresAt
	}
	token := u.Token
	if inRedis {
		token = "" // the Redis record's token was checked; the row follows it
	}
	var ok bool
	err = s.db.QueryRow(ctx, s.sql.update, []byte(key), status, u.Payload != nil, payload, u.ExpiresAt != nil, expires, token).Scan(&ok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return wrap("update", key, err)
	}
	if ok || inRedis {
		return nil
	}
	if _, live, err := s.live(ctx, key); err != nil {
		return wrap("update", key, err)
	} else if live {
		return errorf("update", key, store.ErrStaleOwner, "the key's row was written by another owner")
	}
	return errorf("update", key, store.ErrNotFound, "no record in Redis and no row")
}

// Delete removes key's Redis record and its row. Once the Redis record is
// removed the row's DELETE runs even if ctx ends (bounded by 5 s): a Do
// holding the key is told of its loss by cancelling its context.
func (s *Records) Delete(ctx context.Context, key string) error {
	if err := s.lease.Delete(ctx, key); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalBudget)
	defer cancel()
	if _, err := s.db.Exec(dctx, s.sql.del, []byte(key)); err != nil {
		return wrap("delete", key, err)
	}
	return nil
}

// DeleteFenced removes key's Redis record if token owns it (ErrStaleOwner
// otherwise), then the row if token wrote it.
func (s *Records) DeleteFenced(ctx context.Context, key, token string) error {
	if err := s.lease.DeleteFenced(ctx, key, token); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalBudget)
	defer cancel()
	if _, err := s.db.Exec(dctx, s.sql.delFenced, []byte(key), token); err != nil {
		return wrap("delete", key, err)
	}
	return nil
}

// Close closes the Redis store; the DB is the caller's.
func (s *Records) Close() error { return s.lease.Close() }

// Prune deletes the rows past their retention, in DELETE statements of at
// most the prune batch each (rows locked by a transaction at work are left
// for the next time), until a batch comes back short or ctx is done. It
// returns how many rows it deleted. A row is ignored from the moment it
// expires, so when Prune runs does not change what Do answers.
func (s *Records) Prune(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.db.Exec(ctx, s.sql.retention, s.pruneBatch)
		if err != nil {
			return total, fmt.Errorf("redisonce: records prune %s: %w", s.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.pruneBatch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("redisonce: records prune %s: %w", s.table, err)
		}
	}
}

// RunPruner calls Prune every interval until ctx is done, then returns
// ctx's error. A failed Prune is passed to onErr when it is not nil, and
// tried again at the next interval. interval must be > 0.
func (s *Records) RunPruner(ctx context.Context, interval time.Duration, onErr func(error)) error {
	if ctx == nil || interval <= 0 {
		return fmt.Errorf("redisonce: records pruner: %w: nil context, or interval %v <= 0", store.ErrInvalidArgument, interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if _, err := s.Prune(ctx); err != nil && onErr != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
	}
}

// runState is what one Do's fn (run below) tells Do after the Redis store's
// Do returned.
type runState struct {
	replay    *row   // the key's row was finished: replayed, fn did not run
	committed bool   // fn's transaction committed with the outcome
	ran       bool   // fn ran
	result    []byte // fn's result
	fnErr     error  // fn's error
	ret       []byte // what Do returns with retErr once committed
	retErr    error
}

// Do runs fn at most once per key, in a transaction that commits with its
// stored result (see Records); fn gets the transaction from Tx(ctx), and the
// lease from store.LeaseFromContext(ctx). A duplicate of a finished key is
// replayed (true) from Redis, or from the row when Redis lost it; one in
// flight is store.ErrInFlight (or waits, o.Wait). Once the transaction
// committed, Do reports the outcome even if the Redis record's final write
// fails: the row answers the next Do.
func (s *Records) Do(ctx context.Context, key string, o store.AcquireOptions, fn func(context.Context) ([]byte, error)) ([]byte, bool, error) {
	o = s.withTTL(o)
	var st runState
	var run func(context.Context) ([]byte, error)
	if fn != nil { // nil: the Redis store refuses it
		run = func(lctx context.Context) ([]byte, error) { return s.run(lctx, key, o, fn, &st) }
	}
	res, replayed, err := s.lease.Do(ctx, key, o, run)
	switch {
	case st.replay != nil:
		if st.replay.status == store.StatusFailed {
			return st.replay.result, true, errorf("do", key, store.ErrFailed, "%s", st.replay.result)
		}
		return st.replay.result, true, nil
	case st.committed:
		return st.ret, false, st.retErr
	case st.ran && st.fnErr == nil && err != nil:
		// fn succeeded but its result did not commit: return it with the
		// error, as the Redis store returns a result it could not store
		return st.result, false, err
	}
	return res, replayed, err
}

// run is fn's run inside the Redis store's Do, under its lease: claim the
// row, run fn in a transaction, write the outcome and commit.
func (s *Records) run(lctx context.Context, key string, o store.AcquireOptions, fn func(context.Context) ([]byte, error), st *runState) ([]byte, error) {
	lease, ok := store.LeaseFromContext(lctx)
	if !ok {
		return nil, errorf("do", key, store.ErrUnexpectedReply, "the Redis store's Do gave fn no lease")
	}
	fence := strconv.FormatUint(lease.Fence, 10)
	ttlMS := o.TTL.Milliseconds()
	if o.TTL > 0 && ttlMS == 0 {
		ttlMS = 1
	}

	r, err := s.claim(lctx, key, fence, lease.Token, o.Fingerprint, ttlMS)
	if err != nil {
		return nil, err
	}
	if r != nil {
		st.replay = r
		if r.status == store.StatusFailed {
			return nil, store.Permanent(errors.New(string(r.result)))
		}
		return r.result, nil
	}

	// From here the claim is ours: give it back unless the outcome commits.
	bg := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(lctx), finalBudget)
	}
	release := func() {
		bctx, cancel := bg()
		defer cancel()
		_, _ = s.db.Exec(bctx, s.sql.release, []byte(key), fence, lease.Token)
	}
	tx, err := s.db.BeginTx(lctx, pgx.TxOptions{})
	if err != nil {
		release()
		return nil, wrap("do", key, err)
	}
	finished := false
	defer func() {
		if finished {
			return
		}
		// fn panicked: roll back, give the claim back, let the panic go on.
		bctx, cancel := bg()
		defer cancel()
		_ = tx.Rollback(bctx)
		release()
	}()
	st.ran = true
	result, fnErr := fn(context.WithValue(lctx, txKey{}, pgx.Tx(doTx{tx})))
	finished = true
	st.result, st.fnErr = result, fnErr

	wctx, cancel := bg()
	defer cancel()
	rollback := func() {
		_ = tx.Rollback(wctx)
		release()
	}
	if fnErr != nil && !store.IsPermanent(fnErr) {
		rollback()
		return nil, fnErr
	}
	// What to store and return, as the Redis store's Do does: fn's result;
	// a Permanent error's text, cut to the limit; for a result too long to
	// store, that error's text, returning the result with the error.
	status, payload, ret, retErr, toRedis := store.StatusCompleted, result, result, error(nil), error(nil)
	switch {
	case fnErr != nil:
		text := []byte(fnErr.Error())
		if len(text) > store.MaxRecordPayloadLen {
			text = text[:store.MaxRecordPayloadLen]
		}
		status, payload, ret, retErr, toRedis = store.StatusFailed, text, nil, fnErr, fnErr
	case len(result) > store.MaxRecordPayloadLen:
		tooLong := errorf("do", key, store.ErrInvalidArgument, "fn's result is %d bytes, the limit is %d", len(result), store.MaxRecordPayloadLen)
		status, payload, retErr, toRedis = store.StatusFailed, []byte(tooLong.Error()), tooLong, store.Permanent(tooLong)
	}
	// An owner that knows its lease is gone (fn's context ended with the
	// lease's loss as its cause) commits nothing.
	if c := context.Cause(lctx); errors.Is(c, store.ErrStaleOwner) || errors.Is(c, store.ErrLeaseLost) {
		rollback()
		return nil, fmt.Errorf("redisonce: do %q: %w: fn's writes were rolled back: %w", key, store.ErrNotCommitted, c)
	}
	// Redis first: when it says another owner holds the key (a takeover, or
	// a Delete and a new acquire), the lease is lost and nothing commits.
	// The check also renews the lease for the commit. A record gone (flushed,
	// expired) or a Redis that does not answer leaves the decision to the row.
	until := time.Now().Add(o.Lease)
	if err := s.lease.Update(wctx, key, store.Update{LeaseUntil: &until, Token: lease.Token}); errors.Is(err, store.ErrStaleOwner) {
		rollback()
		return nil, fmt.Errorf("redisonce: do %q: %w: %w: another owner holds the key's lease; fn's writes were rolled back", key, store.ErrStaleOwner, store.ErrNotCommitted)
	}
	// The final write: in fn's transaction; or, for fn's Permanent error,
	// on its own once fn's writes are rolled back (an error rolls back what
	// fn wrote, and the failure is still the key's outcome).
	q := interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}(tx)
	if fnErr != nil {
		_ = tx.Rollback(wctx)
		q = s.db
	}
	var wrote bool
	err = q.QueryRow(wctx, s.sql.final, []byte(key), fence, lease.Token, string(status), []byte(o.Fingerprint), payload, ttlMS).Scan(&wrote)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		_ = tx.Rollback(wctx)
		// The row is another owner's: nothing of this run stays.
		return nil, fmt.Errorf("redisonce: do %q: %w: %w: a newer lease claimed the key's row; fn's writes were rolled back", key, store.ErrStaleOwner, store.ErrNotCommitted)
	case err != nil:
		rollback()
		return nil, fmt.Errorf("redisonce: do %q: %w: the final write failed, fn's writes were rolled back: %w", key, store.ErrNotCommitted, err)
	}
	if commitHook != nil {
		commitHook(key, "before")
	}
	// A failure was written on its own; fn's result commits with its writes.
	if err := commit(wctx, tx, fnErr == nil); err != nil {
		// Did it commit? The row says: it holds this lease's outcome only if so.
		r, ok, rerr := s.readRow(wctx, s.db, key)
		switch {
		case rerr != nil:
			return nil, fmt.Errorf("redisonce: do %q: %w: the commit failed (%w) and the row could not be read (%w): a retry finds out", key, store.ErrNotCommitted, err, rerr)
		case !ok || r.token != lease.Token || r.fence != lease.Fence || r.status != status:
			release()
			return nil, fmt.Errorf("redisonce: do %q: %w: the commit failed, fn's writes were rolled back: %w", key, store.ErrNotCommitted, err)
		}
	}
	st.committed, st.ret, st.retErr = true, ret, retErr
	if commitHook != nil {
		commitHook(key, "after")
	}
	return payload, toRedis
}

// commit commits tx when it holds the outcome.
func commit(ctx context.Context, tx pgx.Tx, holds bool) error {
	if !holds {
		return nil
	}
	return tx.Commit(ctx)
}

// commitHook, when set (by tests in this package), is called with the key
// just before fn's transaction commits ("before") and just after
// ("after"), before the Redis record's final write.
var commitHook func(key, when string)

// claim writes key's row as pending under the lease (nil, nil), or returns
// the finished row to replay; an error when the lease is stale or the
// fingerprint differs.
func (s *Records) claim(ctx context.Context, key, fence, token, fingerprint string, ttlMS int64) (*row, error) {
	for range 3 {
		var ok bool
		err := s.db.QueryRow(ctx, s.sql.claim, []byte(key), fence, token, []byte(fingerprint), ttlMS).Scan(&ok)
		if err == nil {
			return nil, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, wrap("do", key, err)
		}
		// The row refused the claim: say why.
		r, found, err := s.readRow(ctx, s.db, key)
		switch {
		case err != nil:
			return nil, wrap("do", key, err)
		case !found || (r.expired && r.status != store.StatusPending):
			continue // deleted or expired meanwhile: claim again
		case fingerprintsDiffer(r.fingerprint, fingerprint):
			return nil, errorf("do", key, store.ErrFingerprintMismatch, "the key's row was written with another fingerprint")
		case r.status != store.StatusPending:
			return &r, nil
		default:
			return nil, errorf("do", key, store.ErrStaleOwner, "the key's row is claimed under fence %d, this lease has %s", r.fence, fence)
		}
	}
	return nil, errorf("do", key, store.ErrStaleOwner, "the key's row kept changing under the claim")
}
