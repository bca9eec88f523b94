package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// insertFn is a Do fn that inserts a charge for key with its transaction and
// returns the charge's id; runs counts its runs.
func insertFn(t *testing.T, charges, key string, runs *atomic.Int32, fail error) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		tx, ok := Tx(ctx)
		if !ok {
			t.Error("no transaction in fn's context")
			return nil, errors.New("no tx")
		}
		if l, ok := store.LeaseFromContext(ctx); !ok || l.ID != key || l.Fence == 0 {
			t.Errorf("LeaseFromContext = %+v, %v", l, ok)
		}
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO `+charges+` (key, amount) VALUES ($1, 1) RETURNING id`, key).Scan(&id); err != nil {
			return nil, err
		}
		if fail != nil {
			return nil, fail
		}
		return fmt.Appendf(nil, "charge %d", id), nil
	}
}

// TestRecordsDoCommitsWithTheEffect: Do's result and fn's writes commit
// together; after FLUSHALL the row replays the result (Do, Get,
// AcquireWith) and refuses another fingerprint, without running fn.
func TestRecordsDoCommitsWithTheEffect(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	s := e.records(t)
	charges := e.chargesTable(t)
	ctx := context.Background()
	o := store.AcquireOptions{Lease: 5 * time.Second, Fingerprint: "fp-A"}
	var runs atomic.Int32
	res, replayed, err := s.Do(ctx, "k", o, insertFn(t, charges, "k", &runs, nil))
	ids := e.charges(t, charges, "k")
	if err != nil || replayed || len(ids) != 1 || string(res) != fmt.Sprintf("charge %d", ids[0]) {
		t.Fatalf("Do = %q, %v, %v with charges %v; want the one charge's result", res, replayed, err, ids)
	}
	var status, result string
	if err := e.pool.QueryRow(ctx, `SELECT status, convert_from(result, 'UTF8') FROM `+e.table+` WHERE key = 'k'`).Scan(&status, &result); err != nil || status != "completed" || result != string(res) {
		t.Fatalf("row = %q %q, %v; want completed with the result", status, result, err)
	}

	inRedis, _, err := s.lease.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	got, ok, err := s.Get(ctx, "k")
	if err != nil || !ok || got.Status != store.StatusCompleted || string(got.Payload) != string(res) || got.Fence != inRedis.Fence || got.Fingerprint != "fp-A" || got.Token != "" {
		t.Errorf("Get after FLUSHALL = %+v, %v, %v; want the row's completed record", got, ok, err)
	}
	if got.ExpiresAt.Sub(got.CreatedAt) != store.DefaultRecordsTTL {
		t.Errorf("the row's retention = %v, want %v", got.ExpiresAt.Sub(got.CreatedAt), store.DefaultRecordsTTL)
	}
	_, _, err = s.Do(ctx, "k", store.AcquireOptions{Lease: time.Second, Fingerprint: "fp-B"}, insertFn(t, charges, "k", &runs, nil))
	if !errors.Is(err, store.ErrFingerprintMismatch) {
		t.Errorf("Do with another fingerprint after FLUSHALL: %v, want ErrFingerprintMismatch", err)
	}
	if _, ok, _ := s.lease.Get(ctx, "k"); ok {
		t.Error("the refused Do left a Redis record")
	}
	again, replayed, err := s.Do(ctx, "k", o, insertFn(t, charges, "k", &runs, nil))
	if err != nil || !replayed || string(again) != string(res) {
		t.Errorf("Do after FLUSHALL = %q, %v, %v; want %q replayed", again, replayed, err, res)
	}
	if rec, ok, err := s.lease.Get(ctx, "k"); err != nil || !ok || rec.Status != store.StatusCompleted || string(rec.Payload) != string(res) {
		t.Errorf("Redis record after the replay = %+v, %v, %v; want completed from the row", rec, ok, err)
	}
	e.flushRedis(t)
	rec, acquired, err := s.AcquireWith(ctx, "k", store.AcquireOptions{Lease: time.Second})
	if err != nil || acquired || rec.Status != store.StatusCompleted || string(rec.Payload) != string(res) || rec.Token != "" {
		t.Errorf("AcquireWith after FLUSHALL = %+v, %v, %v; want the row as the existing record", rec, acquired, err)
	}
	if rec, ok, err := s.lease.Get(ctx, "k"); err != nil || !ok || rec.Status != store.StatusCompleted {
		t.Errorf("Redis record after AcquireWith = %+v, %v, %v; want completed from the row", rec, ok, err)
	}
	e.flushRedis(t)
	if _, _, err := s.AcquireWith(ctx, "k", store.AcquireOptions{Fingerprint: "fp-B"}); !errors.Is(err, store.ErrFingerprintMismatch) {
		t.Errorf("AcquireWith with another fingerprint after FLUSHALL: %v, want ErrFingerprintMismatch", err)
	}
	if _, ok, _ := s.lease.Get(ctx, "k"); ok {
		t.Error("the refused AcquireWith left a Redis record")
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times, want 1", n)
	}
	if ids := e.charges(t, charges, "k"); len(ids) != 1 {
		t.Errorf("charges %v, want one", ids)
	}
	// Delete removes both: the key runs again.
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, replayed, err := s.Do(ctx, "k", o, insertFn(t, charges, "k", &runs, nil)); err != nil || replayed {
		t.Errorf("Do after Delete = %v, %v; want a new run", replayed, err)
	}
	if ids := e.charges(t, charges, "k"); len(ids) != 2 {
		t.Errorf("charges after Delete and Do: %v, want two", ids)
	}
}

// TestRecordsDoRollsBackWhatIsNotStored: an error rolls fn's writes back
// and gives the key back; a Permanent error rolls them back too, its failed
// row stored on its own and replayed (from the row too) without running fn;
// a panic rolls back.
func TestRecordsDoRollsBackWhatIsNotStored(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	s := e.records(t)
	charges := e.chargesTable(t)
	ctx := context.Background()
	o := store.AcquireOptions{Lease: 5 * time.Second}
	var runs atomic.Int32

	boom := errors.New("provider timeout")
	if _, _, err := s.Do(ctx, "retry", o, insertFn(t, charges, "retry", &runs, boom)); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if ids := e.charges(t, charges, "retry"); len(ids) != 0 {
		t.Errorf("charges after fn's error: %v, want none", ids)
	}
	if n := e.count(t, `SELECT count(*) FROM `+e.table+` WHERE key = 'retry'`); n != 0 {
		t.Errorf("%d rows after fn's error, want 0", n)
	}
	if _, replayed, err := s.Do(ctx, "retry", o, insertFn(t, charges, "retry", &runs, nil)); err != nil || replayed {
		t.Errorf("retry = %v, %v; want a run", replayed, err)
	}
	if ids := e.charges(t, charges, "retry"); len(ids) != 1 {
		t.Errorf("charges after the retry: %v, want one", ids)
	}

	declined := store.Permanent(errors.New("card declined"))
	if _, _, err := s.Do(ctx, "perm", o, insertFn(t, charges, "perm", &runs, declined)); !errors.Is(err, declined) {
		t.Fatalf("Do = %v, want the permanent error", err)
	}
	if ids := e.charges(t, charges, "perm"); len(ids) != 0 {
		t.Errorf("charges after a Permanent error: %v, want none (rolled back; the failure is stored on its own)", ids)
	}
	var status string
	if err := e.pool.QueryRow(ctx, `SELECT status FROM `+e.table+` WHERE key = 'perm'`).Scan(&status); err != nil || status != "failed" {
		t.Errorf("row after a Permanent error: %q, %v; want failed", status, err)
	}
	e.flushRedis(t)
	before := runs.Load()
	res, replayed, err := s.Do(ctx, "perm", o, insertFn(t, charges, "perm", &runs, nil))
	if !replayed || !errors.Is(err, store.ErrFailed) || string(res) != "card declined" || runs.Load() != before {
		t.Errorf("Do after FLUSHALL = %q, %v, %v (fn ran %d more); want the failure replayed from the row", res, replayed, err, runs.Load()-before)
	}

	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not go on")
			}
		}()
		_, _, _ = s.Do(ctx, "panic", o, func(ctx context.Context) ([]byte, error) {
			_, _ = insertFn(t, charges, "panic", &runs, nil)(ctx)
			panic("handler bug")
		})
	}()
	if ids := e.charges(t, charges, "panic"); len(ids) != 0 {
		t.Errorf("charges after a panic: %v, want none", ids)
	}
	if _, ok, err := s.Get(ctx, "panic"); ok || err != nil {
		t.Errorf("Get after a panic = %v, %v; want nothing", ok, err)
	}
}

// TestRecordsDoTransactionIsDos: fn cannot commit or roll back Do's
// transaction; a savepoint is its own; a statement that failed (its error
// swallowed) fails the final write: nothing commits, ErrNotCommitted, and
// the key runs again.
func TestRecordsDoTransactionIsDos(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	s := e.records(t)
	charges := e.chargesTable(t)
	ctx := context.Background()
	o := store.AcquireOptions{Lease: 5 * time.Second}
	res, _, err := s.Do(ctx, "k", o, func(ctx context.Context) ([]byte, error) {
		tx, _ := Tx(ctx)
		if err := tx.Commit(ctx); err == nil {
			t.Error("fn committed Do's transaction")
		}
		if err := tx.Rollback(ctx); err == nil {
			t.Error("fn rolled back Do's transaction")
		}
		sp, err := tx.Begin(ctx) // a savepoint, rolled back: its insert goes
		if err != nil {
			return nil, err
		}
		if _, err := sp.Exec(ctx, `INSERT INTO `+charges+` (key, amount) VALUES ('k', 99)`); err != nil {
			return nil, err
		}
		if err := sp.Rollback(ctx); err != nil {
			return nil, err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+charges+` (key, amount) VALUES ('k', 1)`)
		return []byte("ok"), err
	})
	if err != nil || string(res) != "ok" {
		t.Fatalf("Do = %q, %v", res, err)
	}
	if n := e.count(t, `SELECT count(*) FROM `+charges+` WHERE key = 'k' AND amount = 1`); n != 1 || e.count(t, `SELECT count(*) FROM `+charges) != 1 {
		t.Errorf("charges: want the one outside the rolled-back savepoint")
	}

	res, _, err = s.Do(ctx, "bad", o, func(ctx context.Context) ([]byte, error) {
		tx, _ := Tx(ctx)
		_, _ = tx.Exec(ctx, `INSERT INTO `+charges+` (key, amount) VALUES ('bad', 1)`)
		_, _ = tx.Exec(ctx, `SELECT 1/0`) // fails; the error is swallowed
		return []byte("looks fine"), nil
	})
	if !errors.Is(err, store.ErrNotCommitted) || string(res) != "looks fine" {
		t.Errorf("Do over an aborted transaction = %q, %v; want the result with ErrNotCommitted", res, err)
	}
	if n := e.count(t, `SELECT count(*) FROM `+charges+` WHERE key = 'bad'`); n != 0 {
		t.Errorf("%d charges committed from an aborted transaction", n)
	}
	if _, ok, err := s.Get(ctx, "bad"); ok || err != nil {
		t.Errorf("Get = %v, %v; want the key given back", ok, err)
	}
	if _, replayed, err := s.Do(ctx, "bad", o, func(context.Context) ([]byte, error) { return []byte("second"), nil }); err != nil || replayed {
		t.Errorf("retry = %v, %v; want a run", replayed, err)
	}
	if _, ok := Tx(ctx); ok {
		t.Error("Tx outside fn reported a transaction")
	}
	if _, ok := Tx(nil); ok { //nolint:staticcheck // a nil context is answered, not a panic
		t.Error("Tx(nil) reported a transaction")
	}
}

// TestRecordsDoStaleOwnerRolledBack: an owner whose record was removed and
// completed by another Do meanwhile cannot commit: its charge rolls back,
// the other's stays, Do says ErrStaleOwner and ErrNotCommitted.
func TestRecordsDoStaleOwnerRolledBack(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	s := e.records(t)
	charges := e.chargesTable(t)
	ctx := context.Background()
	o := store.AcquireOptions{Lease: 5 * time.Second}
	var runs atomic.Int32
	_, _, err := s.Do(ctx, "k", o, func(ctx context.Context) ([]byte, error) {
		if _, err := insertFn(t, charges, "k", &runs, nil)(ctx); err != nil {
			return nil, err
		}
		// Another owner gets the key (here by a Delete, as a takeover after
		// a lease ran out would) and completes it first.
		if err := s.Delete(ctx, "k"); err != nil {
			return nil, err
		}
		if _, _, err := s.Do(context.Background(), "k", o, insertFn(t, charges, "k", &runs, nil)); err != nil {
			return nil, err
		}
		return []byte("late"), nil
	})
	if !errors.Is(err, store.ErrStaleOwner) || !errors.Is(err, store.ErrNotCommitted) {
		t.Errorf("the stale owner's Do: %v, want ErrStaleOwner and ErrNotCommitted", err)
	}
	ids := e.charges(t, charges, "k")
	if len(ids) != 1 {
		t.Fatalf("charges %v, want the second owner's only", ids)
	}
	if rec, _, _ := s.Get(ctx, "k"); string(rec.Payload) != fmt.Sprintf("charge %d", ids[0]) {
		t.Errorf("record %+v; want the second owner's result", rec)
	}
}

// TestRecordsRetention: rows past their retention are ignored at once and
// deleted by Prune, a bounded batch per statement; live rows stay.
func TestRecordsRetention(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	s := e.records(t, WithRecordsPruneBatch(3))
	ctx := context.Background()
	ok := func(context.Context) ([]byte, error) { return []byte("r"), nil }
	for i := range 10 {
		if _, _, err := s.Do(ctx, fmt.Sprintf("short-%d", i), store.AcquireOptions{Lease: time.Second, TTL: 200 * time.Millisecond}, ok); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, _, err := s.Do(ctx, fmt.Sprintf("long-%d", i), store.AcquireOptions{Lease: time.Second}, ok); err != nil {
			t.Fatal(err)
		}
	}
	e.flushRedis(t) // the rows alone answer
	time.Sleep(400 * time.Millisecond)
	if _, found, err := s.Get(ctx, "short-0"); found || err != nil {
		t.Errorf("Get of an expired row = %v, %v; want nothing", found, err)
	}
	if _, replayed, err := s.Do(ctx, "short-1", store.AcquireOptions{Lease: time.Second, TTL: time.Hour}, func(context.Context) ([]byte, error) { return []byte("new"), nil }); replayed || err != nil {
		t.Errorf("Do over an expired row = %v, %v; want a new run", replayed, err)
	}
	n, err := s.Prune(ctx)
	if err != nil || n != 9 {
		t.Errorf("Prune = %d, %v; want 9 (3 per statement)", n, err)
	}
	if got := e.count(t, `SELECT count(*) FROM `+e.table); got != 4 {
		t.Errorf("%d rows left, want 4 (3 long, 1 run again)", got)
	}
	if n, err := s.Prune(ctx); n != 0 || err != nil {
		t.Errorf("Prune again = %d, %v; want 0", n, err)
	}
	if ddl := s.DDL(); !strings.Contains(ddl, `CREATE TABLE IF NOT EXISTS "`+e.table+`"`) || strings.Contains(ddl, "redisonce_records") {
		t.Errorf("DDL does not name the table %q:\n%s", e.table, ddl)
	}
}

// stmtCounter counts the statements sent on a pool (a pgx.QueryTracer).
type stmtCounter struct{ n atomic.Int64 }

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestRecordsDuplicatesNeverTouchPostgres: a duplicate of a finished key is
// replayed from Redis, and one in flight answered ErrInFlight, with no SQL
// statement sent (counted on the pool); the first run sends the claim, the
// transaction's statements and the final write.
func TestRecordsDuplicatesNeverTouchPostgres(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	e.records(t) // the table
	cfg, err := pgxpool.ParseConfig(e.pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	counter := &stmtCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := NewRecords(must.Store(store.NewRecords(e.client, store.WithPrefix(e.prefix))), pool, WithRecordsTable(e.table))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o := store.AcquireOptions{Lease: 5 * time.Second}
	_, _, err = s.Do(ctx, "k", o, func(ctx context.Context) ([]byte, error) {
		before := counter.n.Load()
		_, _, err := s.Do(ctx, "k", o, func(context.Context) ([]byte, error) { return nil, errors.New("ran in flight") })
		if !errors.Is(err, store.ErrInFlight) {
			t.Errorf("in-flight duplicate: %v", err)
		}
		if n := counter.n.Load() - before; n != 0 {
			t.Errorf("an in-flight duplicate sent %d statements, want 0", n)
		}
		return []byte("r"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first := counter.n.Load()
	if first < 3 {
		t.Errorf("the first run sent %d statements, want the claim, the final write and the commit at least", first)
	}
	for range 100 {
		if res, replayed, err := s.Do(ctx, "k", o, func(context.Context) ([]byte, error) { return nil, errors.New("ran again") }); err != nil || !replayed || string(res) != "r" {
			t.Fatalf("duplicate = %q, %v, %v", res, replayed, err)
		}
	}
	if n := counter.n.Load() - first; n != 0 {
		t.Errorf("100 duplicates sent %d statements, want 0", n)
	}
	t.Logf("first run: %d statements; 100 duplicates: 0", first)
}

// TestRecordsUpdateAndDeleteReachTheRow: with the Redis record gone, Update
// writes the row alone (fenced by the token that wrote it) and an expiry in
// the past deletes it; DeleteFenced removes the row its token wrote; with
// the Redis record there, Update writes both.
func TestRecordsUpdateAndDeleteReachTheRow(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	s := e.records(t)
	ctx := context.Background()
	o := store.AcquireOptions{Lease: 5 * time.Second}
	var token string
	for _, key := range []string{"a", "b", "c"} {
		if _, _, err := s.Do(ctx, key, o, func(ctx context.Context) ([]byte, error) {
			l, _ := store.LeaseFromContext(ctx)
			token = l.Token
			return []byte("r-" + key), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	e.flushRedis(t)
	custom := store.Status("refunded")
	p := []byte("p")
	if err := s.Update(ctx, "a", store.Update{Status: &custom, Payload: &p, Token: "not-the-owner"}); !errors.Is(err, store.ErrStaleOwner) {
		t.Errorf("Update with another token: %v, want ErrStaleOwner", err)
	}
	if err := s.Update(ctx, "a", store.Update{Status: &custom, Payload: &p}); err != nil {
		t.Errorf("unfenced Update of the row: %v", err)
	}
	if rec, ok, err := s.Get(ctx, "a"); err != nil || !ok || rec.Status != custom || string(rec.Payload) != "p" {
		t.Errorf("Get after Update = %+v, %v, %v; want the row refunded, p", rec, ok, err)
	}
	if err := s.Update(ctx, "missing", store.Update{Status: &custom}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Update of a key with no record and no row: %v, want ErrNotFound", err)
	}
	past := time.Now().Add(-time.Second)
	if err := s.Update(ctx, "b", store.Update{ExpiresAt: &past}); err != nil {
		t.Errorf("Update(ExpiresAt in the past): %v", err)
	}
	if _, ok, _ := s.Get(ctx, "b"); ok {
		t.Error("the row outlived an expiry in the past")
	}
	if err := s.DeleteFenced(ctx, "c", token); err != nil {
		t.Errorf("DeleteFenced with the token that wrote the row: %v", err)
	}
	if _, ok, _ := s.Get(ctx, "c"); ok {
		t.Error("DeleteFenced left the row")
	}
	// With a Redis record (completed from the row by a replay), both change.
	if _, replayed, err := s.Do(ctx, "a", o, func(context.Context) ([]byte, error) { return nil, errors.New("ran") }); err != nil || !replayed {
		t.Fatalf("replay of a = %v, %v", replayed, err)
	}
	done := store.StatusCompleted
	if err := s.Update(ctx, "a", store.Update{Status: &done}); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	if rec, ok, err := s.Get(ctx, "a"); err != nil || !ok || rec.Status != store.StatusCompleted {
		t.Errorf("the row after an Update through Redis = %+v, %v, %v; want completed", rec, ok, err)
	}
}
