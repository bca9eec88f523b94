package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/internal/faultnet"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

const ledgerDDL = `CREATE TABLE ledger (seq bigserial PRIMARY KEY, msg_id text NOT NULL, amount bigint NOT NULL,
	fence numeric(20,0) NOT NULL, worker text NOT NULL DEFAULT '')`

// inboxEnv is one test's database, Redis and inbox.
type inboxEnv struct {
	pool  *pgxpool.Pool
	url   string
	stmts *atomic.Int64 // statements the pool sent
	rurl  string
	flush func()
	inbox *postgres.Inbox
	ctx   context.Context
}

func newInboxEnv(t *testing.T, opts ...postgres.InboxOption) *inboxEnv {
	t.Helper()
	pool, url, stmts := newDB(t)
	r := startRedis(t)
	rc := newRedis(t, r.URL())
	ib, err := postgres.NewInbox(must.Store(store.NewClaims(rc, store.WithPrefix("in:"))), pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ib.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, ledgerDDL); err != nil {
		t.Fatal(err)
	}
	return &inboxEnv{pool: pool, url: url, stmts: stmts, rurl: r.URL(), inbox: ib, ctx: ctx,
		flush: func() {
			if err := rc.Do(ctx, rc.B().Flushall().Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}}
}

// pay is fn: one ledger row for the message, with the lease's fence.
func pay(id string, amount int) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		l, _ := store.LeaseFromContext(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO ledger (msg_id, amount, fence) VALUES ($1, $2, $3::text::numeric)`,
			id, amount, strconv.FormatUint(l.Fence, 10))
		return err
	}
}

func (e *inboxEnv) ledger(t *testing.T) map[string]int {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT msg_id, count(*) FROM ledger GROUP BY msg_id`)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		m[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *inboxEnv) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx, q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestInboxFirstDeliveryThenDuplicateNeverTouchesPostgres(t *testing.T) {
	e := newInboxEnv(t)
	ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, pay("m1", 10))
	if !ran || err != nil {
		t.Fatalf("first delivery: ran %v, err %v; want true, nil", ran, err)
	}
	var processed bool
	var fence, owner string
	if err := e.pool.QueryRow(e.ctx, `SELECT processed_at IS NOT NULL, fence::text, owner FROM redisonce_inbox WHERE id = 'm1'`).
		Scan(&processed, &fence, &owner); err != nil || !processed || owner == "" {
		t.Fatalf("inbox row: processed %v, fence %s, owner %q, %v", processed, fence, owner, err)
	}
	before := e.stmts.Load()
	for range 5 {
		ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, func(context.Context, pgx.Tx) error {
			t.Error("fn ran for a duplicate")
			return nil
		})
		if ran || err != nil {
			t.Fatalf("duplicate: ran %v, err %v; want false, nil", ran, err)
		}
	}
	if d := e.stmts.Load() - before; d != 0 {
		t.Fatalf("5 duplicates sent %d SQL statements, want 0", d)
	}
	if got := e.ledger(t); len(got) != 1 || got["m1"] != 1 {
		t.Fatalf("ledger %v, want m1 once", got)
	}
	st := e.inbox.Stats()
	if st.Committed != 1 || st.Duplicates != 5 || st.AlreadyProcessed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestInboxInFlightNeverTouchesPostgres: a second delivery while the first
// is in fn answers ErrInFlight from Redis alone.
func TestInboxInFlightNeverTouchesPostgres(t *testing.T) {
	e := newInboxEnv(t)
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, func(ctx context.Context, tx pgx.Tx) error {
			close(inside)
			<-release
			return pay("m1", 1)(ctx, tx)
		})
		done <- err
	}()
	<-inside
	before := e.stmts.Load()
	ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, pay("m1", 1))
	if ran || !errors.Is(err, store.ErrInFlight) {
		t.Fatalf("second delivery: ran %v, err %v; want false, ErrInFlight", ran, err)
	}
	if d := e.stmts.Load() - before; d != 0 {
		t.Fatalf("the in-flight answer sent %d SQL statements, want 0", d)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := e.inbox.Stats(); st.InFlight != 1 || st.Committed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestInboxRedisLostTheMark: after FLUSHALL (or a failover, an eviction, a
// commit to Redis that never landed) the row keeps the effect once.
func TestInboxRedisLostTheMark(t *testing.T) {
	e := newInboxEnv(t)
	for i := range 3 {
		if i > 0 {
			e.flush()
		}
		ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, pay("m1", 10))
		if want := i == 0; ran != want || err != nil {
			t.Fatalf("delivery %d: ran %v, err %v; want %v, nil", i, ran, err, want)
		}
	}
	if got := e.ledger(t); got["m1"] != 1 {
		t.Fatalf("ledger %v, want m1 once", got)
	}
	if st := e.inbox.Stats(); st.Committed != 1 || st.AlreadyProcessed != 2 {
		t.Fatalf("stats %+v", st)
	}
	// The claim committed in Redis after the skip: the next delivery is a
	// duplicate answered by Redis.
	before := e.stmts.Load()
	if ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, pay("m1", 10)); ran || err != nil {
		t.Fatalf("after the skip: ran %v, err %v", ran, err)
	}
	if d := e.stmts.Load() - before; d != 0 {
		t.Fatalf("a duplicate after the skip sent %d statements", d)
	}
}

func TestInboxFnErrorRollsBackAndReleases(t *testing.T) {
	e := newInboxEnv(t)
	boom := errors.New("boom")
	ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, func(ctx context.Context, tx pgx.Tx) error {
		if err := pay("m1", 10)(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("ran %v, err %v; want true, boom", ran, err)
	}
	if got := e.ledger(t); len(got) != 0 {
		t.Fatalf("ledger %v after a failed fn, want empty", got)
	}
	if n := e.count(t, `SELECT count(*) FROM redisonce_inbox WHERE processed_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d processed rows after a failed fn", n)
	}
	// The claim was released: the redelivery runs at once.
	if ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, pay("m1", 10)); !ran || err != nil {
		t.Fatalf("redelivery: ran %v, err %v", ran, err)
	}
	if got := e.ledger(t); got["m1"] != 1 {
		t.Fatalf("ledger %v", got)
	}
}

func TestInboxPanicRollsBack(t *testing.T) {
	e := newInboxEnv(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not come through")
			}
		}()
		_, _ = e.inbox.Do(e.ctx, "m1", 5*time.Second, func(ctx context.Context, tx pgx.Tx) error {
			_ = pay("m1", 10)(ctx, tx)
			panic("fn")
		})
	}()
	if got := e.ledger(t); len(got) != 0 {
		t.Fatalf("ledger %v after a panic", got)
	}
	if ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, pay("m1", 10)); !ran || err != nil {
		t.Fatalf("after the panic: ran %v, err %v", ran, err)
	}
	if n := e.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'`); n != 0 {
		t.Fatalf("%d connections left idle in a transaction", n)
	}
}

// blindClaims hides the loss of the lease from fn and the inbox's
// statements (its context is never cancelled), as for a process paused right
// after its last look at the lease: only the database can refuse it.
type blindClaims struct{ postgres.Claimer }

func (b blindClaims) Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, error) {
	return b.Claimer.Do(ctx, id, lease, func(ctx context.Context) error { return fn(context.WithoutCancel(ctx)) })
}

// TestInboxLostLeaseCommitsNothing: an older owner loses its lease while fn
// runs (Redis flushed) and a newer owner claims the id. The newer owner's
// first statement ends the older owner's transaction without waiting for it,
// and the older one, blind to its lost lease, is refused by the database
// when it comes to commit: rolled back, whether the newer owner has
// committed already (the row is processed: false, nil) or is still at work
// (false, ErrStaleOwner).
func TestInboxLostLeaseCommitsNothing(t *testing.T) {
	for _, newerFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "newer commits first", false: "older commits first"}[newerFirst], func(t *testing.T) {
			e := newInboxEnv(t)
			rc := newRedis(t, e.rurl)
			blind, err := postgres.NewInboxWithClaimer(blindClaims{must.Store(store.NewClaims(rc, store.WithPrefix("in:")))}, e.pool)
			if err != nil {
				t.Fatal(err)
			}
			type res struct {
				ran bool
				err error
			}
			hold := func(ib *postgres.Inbox, amount int) (inside, release chan struct{}, out chan res) {
				inside, release, out = make(chan struct{}), make(chan struct{}), make(chan res, 1)
				go func() {
					ran, err := ib.Do(e.ctx, "m1", 5*time.Second, func(ctx context.Context, tx pgx.Tx) error {
						if err := pay("m1", amount)(ctx, tx); err != nil {
							return err
						}
						close(inside)
						<-release
						return nil
					})
					out <- res{ran, err}
				}()
				select {
				case <-inside:
				case r := <-out:
					t.Fatalf("Do returned before fn's end: %v, %v", r.ran, r.err)
				}
				return inside, release, out
			}
			_, releaseOld, older := hold(blind, 1)
			e.flush() // the older lease is gone from Redis
			_, releaseNew, newer := hold(e.inbox, 2)
			if newerFirst {
				close(releaseNew)
				if r := <-newer; !r.ran || r.err != nil {
					t.Fatalf("newer owner: ran %v, err %v; want true, nil", r.ran, r.err)
				}
				close(releaseOld)
				if r := <-older; r.ran || r.err != nil {
					t.Fatalf("older owner: ran %v, err %v; want false, nil (the row is processed)", r.ran, r.err)
				}
				if st := blind.Stats(); st.AlreadyProcessed != 1 || st.Committed != 0 {
					t.Fatalf("older owner's stats %+v", st)
				}
			} else {
				close(releaseOld)
				if r := <-older; r.ran || !errors.Is(r.err, store.ErrStaleOwner) {
					t.Fatalf("older owner: ran %v, err %v; want false, ErrStaleOwner", r.ran, r.err)
				}
				close(releaseNew)
				if r := <-newer; !r.ran || r.err != nil {
					t.Fatalf("newer owner: ran %v, err %v; want true, nil", r.ran, r.err)
				}
				if st := blind.Stats(); st.Stale != 1 || st.Committed != 0 {
					t.Fatalf("older owner's stats %+v", st)
				}
			}
			if got := e.ledger(t); got["m1"] != 1 || e.count(t, `SELECT sum(amount) FROM ledger`) != 2 {
				t.Fatalf("ledger %v: want the newer owner's row only", got)
			}
		})
	}
}

func TestInboxBadInputWritesNothing(t *testing.T) {
	e := newInboxEnv(t)
	fn := pay("x", 1)
	cases := []struct {
		name  string
		ctx   context.Context
		id    string
		lease time.Duration
		fn    func(context.Context, pgx.Tx) error
	}{
		{"nil ctx", nil, "x", time.Second, fn},
		{"empty id", e.ctx, "", time.Second, fn},
		{"NUL in id", e.ctx, "a\x00b", time.Second, fn},
		{"invalid UTF-8", e.ctx, "a\xffb", time.Second, fn},
		{"oversize id", e.ctx, strings.Repeat("i", store.MaxIDLen+1), time.Second, fn},
		{"zero lease", e.ctx, "x", 0, fn},
		{"negative lease", e.ctx, "x", -time.Second, fn},
		{"nil fn", e.ctx, "x", time.Second, nil},
	}
	before := e.stmts.Load()
	for _, c := range cases {
		ran, err := e.inbox.Do(c.ctx, c.id, c.lease, c.fn)
		if ran || !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: ran %v, err %v; want false, ErrInvalidArgument", c.name, ran, err)
		}
	}
	if d := e.stmts.Load() - before; d != 0 {
		t.Fatalf("bad input sent %d statements", d)
	}
	var nilInbox *postgres.Inbox
	if _, err := nilInbox.Do(e.ctx, "x", time.Second, fn); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("nil inbox: %v", err)
	}
	// And nothing in Redis: the id is still free.
	if ran, err := e.inbox.Do(e.ctx, "x", time.Second, fn); !ran || err != nil {
		t.Fatalf("a good call after the bad ones: ran %v, err %v", ran, err)
	}
	for _, o := range []postgres.InboxOption{postgres.WithInboxTable(), postgres.WithInboxTable("a", "b", "c"),
		postgres.WithInboxTable(""), postgres.WithInboxTable(strings.Repeat("t", 64)), postgres.WithInboxTable("a\x00"),
		postgres.WithInboxRetention(0), postgres.WithInboxPruneBatch(0),
		postgres.WithInboxTxOptions(pgx.TxOptions{AccessMode: pgx.ReadOnly})} {
		if _, err := postgres.NewInbox(must.Store(store.NewMemoryClaims()), e.pool, o); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("NewInbox with a bad option: %v, want ErrInvalidArgument", err)
		}
	}
	if _, err := postgres.NewInbox(nil, e.pool); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("NewInbox(nil claims): %v", err)
	}
	if _, err := postgres.NewInbox(must.Store(store.NewMemoryClaims()), nil); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("NewInbox(nil db): %v", err)
	}
}

// TestInboxTableOption: a schema-qualified, mixed-case, quoted name; the DDL
// names that table and nothing else; a missing table is reported by its
// SQLSTATE (42P01), with the fix.
func TestInboxTableOption(t *testing.T) {
	pool, _, _ := newDB(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA app`); err != nil {
		t.Fatal(err)
	}
	ib, err := postgres.NewInbox(must.Store(store.NewMemoryClaims()), pool, postgres.WithInboxTable("app", `My "Inbox"`))
	if err != nil {
		t.Fatal(err)
	}
	ran, err := ib.Do(ctx, "m1", time.Second, func(context.Context, pgx.Tx) error { return nil })
	var pe *pgconn.PgError
	if ran || !errors.As(err, &pe) || pe.Code != "42P01" || !strings.Contains(err.Error(), "CreateTable") {
		t.Fatalf("before CreateTable: ran %v, err %v; want SQLSTATE 42P01 and the fix", ran, err)
	}
	if !strings.Contains(ib.DDL(), `"app"."My ""Inbox"""`) || strings.Contains(ib.DDL(), "redisonce_inbox") {
		t.Fatalf("DDL:\n%s", ib.DDL())
	}
	if err := ib.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ib.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable twice: %v", err)
	}
	if ran, err := ib.Do(ctx, "m1", time.Second, func(context.Context, pgx.Tx) error { return nil }); !ran || err != nil {
		t.Fatalf("ran %v, err %v", ran, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM app."My ""Inbox""" WHERE processed_at IS NOT NULL`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows %d, %v", n, err)
	}
}

// TestInboxPrune: rows older than the retention go, in DELETEs of at most
// the batch, and younger ones stay.
func TestInboxPrune(t *testing.T) {
	e := newInboxEnv(t, postgres.WithInboxRetention(time.Hour), postgres.WithInboxPruneBatch(7))
	for i := range 40 {
		id := "m" + string(rune('A'+i%26)) + string(rune('a'+i/26))
		if ran, err := e.inbox.Do(e.ctx, id, time.Second, pay(id, 1)); !ran || err != nil {
			t.Fatal(ran, err)
		}
	}
	// 30 rows aged past the retention, 10 not.
	if _, err := e.pool.Exec(e.ctx, `UPDATE redisonce_inbox SET processed_at = now() - interval '2 hours'
		WHERE id IN (SELECT id FROM redisonce_inbox ORDER BY id LIMIT 30)`); err != nil {
		t.Fatal(err)
	}
	before := e.stmts.Load()
	n, err := e.inbox.Prune(e.ctx)
	if err != nil || n != 30 {
		t.Fatalf("Prune = %d, %v; want 30", n, err)
	}
	// 30 rows in batches of 7: 5 DELETEs (7, 7, 7, 7, 2).
	if d := e.stmts.Load() - before; d != 5 {
		t.Fatalf("Prune sent %d statements, want 5 bounded DELETEs", d)
	}
	if left := e.count(t, `SELECT count(*) FROM redisonce_inbox`); left != 10 {
		t.Fatalf("%d rows left, want 10", left)
	}
	if n, err := e.inbox.Prune(e.ctx); n != 0 || err != nil {
		t.Fatalf("second Prune = %d, %v", n, err)
	}
}

// TestInboxCommittedRowRefusesEveryLease: a row is there only when an
// owner's transaction committed, and it refuses every later lease, whatever
// its fence — one above the lease's (a newer owner committed) or below it
// (the effect committed before, and Redis lost the mark): fn does not run,
// nothing is written, and the claim commits in Redis (the id is processed).
func TestInboxCommittedRowRefusesEveryLease(t *testing.T) {
	e := newInboxEnv(t)
	const maxFence = "18446744073709551615" // every fence is at most a uint64
	if _, err := e.pool.Exec(e.ctx, `INSERT INTO redisonce_inbox (id, fence, owner) VALUES ('high', $1::numeric, 'other'), ('low', 0, 'other')`, maxFence); err != nil {
		t.Fatal(err)
	}
	rc := newRedis(t, e.rurl)
	for _, id := range []string{"high", "low"} {
		before := e.stmts.Load()
		ran, err := e.inbox.Do(e.ctx, id, 5*time.Second, func(context.Context, pgx.Tx) error {
			t.Errorf("%s: fn ran although the row says the effect committed", id)
			return nil
		})
		if ran || err != nil {
			t.Fatalf("%s: ran %v, err %v; want false, nil", id, ran, err)
		}
		// BEGIN, the row's INSERT (nothing written), the row's read, ROLLBACK.
		if d := e.stmts.Load() - before; d != 4 {
			t.Fatalf("%s: %d statements, want 4", id, d)
		}
		var fence, owner string
		if err := e.pool.QueryRow(e.ctx, `SELECT fence::text, owner FROM redisonce_inbox WHERE id = $1`, id).Scan(&fence, &owner); err != nil || owner != "other" {
			t.Fatalf("%s: the refused lease changed the row: fence %s owner %s (%v)", id, fence, owner, err)
		}
		if v, _ := rc.Do(e.ctx, rc.B().Get().Key("in:"+id).Build()).ToString(); v != "1" {
			t.Fatalf("%s: Redis holds %q, want the processed mark", id, v)
		}
	}
	if st := e.inbox.Stats(); st.AlreadyProcessed != 2 || st.Committed != 0 || st.Stale != 0 {
		t.Fatalf("stats %+v", st)
	}
	if got := e.ledger(t); len(got) != 0 {
		t.Fatalf("ledger %v, want empty", got)
	}
}

// TestInboxStaleOwnerEnded: both owners' fn insert the same unique key. The
// older owner, blind to its lost lease, holds its transaction open inside fn
// (its payment inserted, not committed). The newer owner does not wait
// behind it: its first statement finds the id's lock taken, ends the older
// owner's session, and its own insert of the key goes through at once. The
// older owner, released, finds its COMMIT refused: ErrStaleOwner, nothing
// committed. One payment, the newer owner's.
func TestInboxStaleOwnerEnded(t *testing.T) {
	e := newInboxEnv(t)
	if _, err := e.pool.Exec(e.ctx, `CREATE TABLE payments (msg_id text PRIMARY KEY, amount int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	rc := newRedis(t, e.rurl)
	blind, err := postgres.NewInboxWithClaimer(blindClaims{must.Store(store.NewClaims(rc, store.WithPrefix("in:")))}, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(amount int, inside, release chan struct{}) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO payments (msg_id, amount) VALUES ('m1', $1)`, amount); err != nil {
				return err
			}
			if inside != nil {
				close(inside)
				<-release
			}
			return nil
		}
	}
	type res struct {
		ran bool
		err error
	}
	inside, release := make(chan struct{}), make(chan struct{})
	older := make(chan res, 1)
	go func() {
		ran, err := blind.Do(e.ctx, "m1", 5*time.Second, insert(1, inside, release))
		older <- res{ran, err}
	}()
	<-inside
	var olderPID int
	if err := e.pool.QueryRow(e.ctx, `SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE '%payments%'`).Scan(&olderPID); err != nil {
		t.Fatalf("the older owner's open transaction: %v", err)
	}
	e.flush() // the older lease is gone from Redis
	start := time.Now()
	ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, insert(2, nil, nil))
	if !ran || err != nil {
		t.Fatalf("newer owner: ran %v, err %v; want true, nil", ran, err)
	}
	t.Logf("the newer owner committed %v after it started, the older transaction still open in its client", time.Since(start).Round(time.Millisecond))
	var alive int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, olderPID).Scan(&alive); err != nil || alive != 0 {
		t.Fatalf("the older owner's session (pid %d) is still there: %d, %v", olderPID, alive, err)
	}
	close(release)
	if r := <-older; r.ran || r.err != nil {
		// The newer owner committed first: the older one's COMMIT failed,
		// and the row it then finds is the newer owner's.
		t.Fatalf("older owner: ran %v, err %v; want false, nil", r.ran, r.err)
	}
	if st := blind.Stats(); st.Committed != 0 || st.AlreadyProcessed != 1 {
		t.Fatalf("older owner's stats %+v", st)
	}
	var amount int
	if err := e.pool.QueryRow(e.ctx, `SELECT amount FROM payments WHERE msg_id = 'm1'`).Scan(&amount); err != nil || amount != 2 {
		t.Fatalf("payment amount %d (%v), want the newer owner's 2", amount, err)
	}
}

// splitDB runs fn's transactions on one pool and every other statement (the
// read that resolves a failed COMMIT) on another.
type splitDB struct {
	tx   *pgxpool.Pool
	rest *pgxpool.Pool
}

func (d splitDB) BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error) {
	return d.tx.BeginTx(ctx, o)
}
func (d splitDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.rest.Exec(ctx, sql, args...)
}
func (d splitDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.rest.QueryRow(ctx, sql, args...)
}

// TestInboxCommitReplyLost: fn's COMMIT reaches the server, and the
// connection is lost before its reply comes back (a proxy delays every byte,
// and cuts the connection between the COMMIT's arrival and its reply's). Do
// resolves the failed COMMIT by reading the row on another connection: it
// names this lease, so the effect committed, and Do answers (true, nil) and
// commits the claim in Redis — not an error that would have the message
// redelivered. (When the machine is so slow that the cut comes before the
// COMMIT's arrival, nothing committed and Do must say so: the attempt is
// repeated with a longer delay.)
func TestInboxCommitReplyLost(t *testing.T) {
	e := newInboxEnv(t)
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultnet.Listen(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	host, port, _ := net.SplitHostPort(px.Addr())
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cut, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cut.Close)
	rc := newRedis(t, e.rurl)
	ib, err := postgres.NewInbox(must.Store(store.NewClaims(rc, store.WithPrefix("in:"))), splitDB{tx: cut, rest: e.pool})
	if err != nil {
		t.Fatal(err)
	}
	for i, lag := range []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second} {
		id := fmt.Sprintf("m%d", i)
		px.SetLatency(0)
		ran, err := ib.Do(e.ctx, id, 30*time.Second, func(ctx context.Context, tx pgx.Tx) error {
			if err := pay(id, 5)(ctx, tx); err != nil {
				return err
			}
			px.SetLatency(lag)
			time.AfterFunc(lag*3/2, px.Cut) // after the COMMIT's arrival, before its reply's
			return nil
		})
		rows := e.ledger(t)[id]
		t.Logf("lag %v: ran %v, err %v; ledger rows %d", lag, ran, err, rows)
		if rows == 0 {
			// The cut came first: nothing committed, and Do must not say it did.
			if err == nil {
				t.Fatalf("lag %v: Do answered (%v, nil) but nothing committed", lag, ran)
			}
			continue
		}
		if rows != 1 || !ran || err != nil {
			t.Fatalf("lag %v: the COMMIT landed (%d ledger rows); Do answered (%v, %v), want (true, nil)", lag, rows, ran, err)
		}
		if v, _ := rc.Do(e.ctx, rc.B().Get().Key("in:"+id).Build()).ToString(); v != "1" {
			t.Fatalf("lag %v: Redis holds %q for the id, want the processed mark", lag, v)
		}
		if st := ib.Stats(); st.Committed != 1 || st.Failed != 0 && st.Failed != uint64(i) {
			t.Fatalf("stats %+v", st)
		}
		return
	}
	t.Fatal("the cut never came after the COMMIT's arrival")
}

// TestInboxStaleOwnerNotEndable: a newer owner whose role may not end the
// stale owner's session (another role, without pg_signal_backend) gets a
// clear error naming the privilege, writes nothing and releases its claim;
// the stale owner's transaction is then the one that decides, as it would
// without the inbox.
func TestInboxStaleOwnerNotEndable(t *testing.T) {
	e := newInboxEnv(t)
	for _, q := range []string{
		`CREATE ROLE inbox_consumer2 LOGIN`,
		`GRANT ALL ON redisonce_inbox, ledger, ledger_seq_seq TO inbox_consumer2`,
	} {
		if _, err := e.pool.Exec(e.ctx, q); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = "inbox_consumer2"
	other, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	rc := newRedis(t, e.rurl)
	blind, err := postgres.NewInboxWithClaimer(blindClaims{must.Store(store.NewClaims(rc, store.WithPrefix("in:")))}, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := postgres.NewInbox(must.Store(store.NewClaims(rc, store.WithPrefix("in:"))), other)
	if err != nil {
		t.Fatal(err)
	}
	inside, release, older := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := blind.Do(e.ctx, "m1", 5*time.Second, func(ctx context.Context, tx pgx.Tx) error {
			if err := pay("m1", 1)(ctx, tx); err != nil {
				return err
			}
			close(inside)
			<-release
			return nil
		})
		older <- err
	}()
	<-inside
	e.flush() // the older lease is gone from Redis
	ran, err := newer.Do(e.ctx, "m1", 5*time.Second, pay("m1", 2))
	if ran || err == nil || !strings.Contains(err.Error(), "pg_signal_backend") {
		t.Fatalf("newer owner: ran %v, err %v; want false and an error naming pg_signal_backend", ran, err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("newer owner's error %v: want the server's insufficient_privilege (42501) inside", err)
	}
	if v, _ := rc.Do(e.ctx, rc.B().Get().Key("in:m1").Build()).ToString(); v != "" {
		t.Fatalf("the newer owner left %q in Redis, want its claim released", v)
	}
	close(release)
	if err := <-older; err != nil {
		t.Fatalf("older owner: %v", err)
	}
	if rows, sum := e.count(t, `SELECT count(*) FROM ledger WHERE msg_id = 'm1'`), e.count(t, `SELECT sum(amount) FROM ledger`); rows != 1 || sum != 1 {
		t.Fatalf("ledger: %d rows, amount %d; want the older owner's one row", rows, sum)
	}
}
