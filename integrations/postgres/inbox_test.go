package postgres_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redisonce/redisonce/integrations/postgres"
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
// claim statement replaces the row's owner without waiting for the older
// transaction, and the older one, blind to its lost lease, is refused by the
// database when it comes to commit: rolled back, whether the newer owner has
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
	if _, err := e.pool.Exec(e.ctx, `UPDATE redisonce_inbox SET claimed_at = now() - interval '2 hours'
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

// TestInboxFenceLowerThanTheRowsIsRefused: a row left by an owner whose
// lease carried a higher fence (it died before its commit) refuses a lease
// with a lower one — nothing is written and fn does not run — and a row left
// by a dead owner with a fence not above the lease's is taken over.
func TestInboxFenceLowerThanTheRowsIsRefused(t *testing.T) {
	e := newInboxEnv(t)
	const maxFence = "18446744073709551615" // every fence is at most a uint64
	if _, err := e.pool.Exec(e.ctx, `INSERT INTO redisonce_inbox (id, fence, owner) VALUES ('high', $1::numeric, 'dead'), ('low', 0, 'dead')`, maxFence); err != nil {
		t.Fatal(err)
	}
	ran, err := e.inbox.Do(e.ctx, "high", 5*time.Second, func(context.Context, pgx.Tx) error {
		t.Error("fn ran under a lease whose fence is below the row's")
		return nil
	})
	if ran || !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("lower fence: ran %v, err %v; want false, ErrStaleOwner", ran, err)
	}
	var fence, owner string
	var processed bool
	if err := e.pool.QueryRow(e.ctx, `SELECT fence::text, owner, processed_at IS NOT NULL FROM redisonce_inbox WHERE id = 'high'`).
		Scan(&fence, &owner, &processed); err != nil || fence != maxFence || owner != "dead" || processed {
		t.Fatalf("the refused lease changed the row: fence %s owner %s processed %v (%v)", fence, owner, processed, err)
	}
	// The claim was released in Redis: the id is not marked processed.
	rc := newRedis(t, e.rurl)
	if v, _ := rc.Do(e.ctx, rc.B().Get().Key("in:high").Build()).ToString(); v == "1" {
		t.Fatal("the refused id is marked processed in Redis")
	}

	ran, err = e.inbox.Do(e.ctx, "low", 5*time.Second, pay("low", 3))
	if !ran || err != nil {
		t.Fatalf("a dead owner's row with a lower fence: ran %v, err %v; want true, nil", ran, err)
	}
	if err := e.pool.QueryRow(e.ctx, `SELECT owner, processed_at IS NOT NULL FROM redisonce_inbox WHERE id = 'low'`).
		Scan(&owner, &processed); err != nil || owner == "dead" || !processed {
		t.Fatalf("row low: owner %s processed %v (%v)", owner, processed, err)
	}
	if got := e.ledger(t); len(got) != 1 || got["low"] != 1 {
		t.Fatalf("ledger %v", got)
	}
}

// TestInboxUniqueKeyBlocking: both owners' fn insert the same unique key.
// The newer owner's claim statement takes the inbox row at once (the older
// transaction holds no lock on it); its fn then waits on the older owner's
// uncommitted insert. The older owner, blind to its lost lease, comes to
// commit: the row names the newer lease, so it rolls back — which frees the
// newer owner's insert, and the newer owner commits. One row, the newer
// owner's.
func TestInboxUniqueKeyBlocking(t *testing.T) {
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
	older, newer := make(chan res, 1), make(chan res, 1)
	go func() {
		ran, err := blind.Do(e.ctx, "m1", 5*time.Second, insert(1, inside, release))
		older <- res{ran, err}
	}()
	<-inside
	var olderOwner string
	if err := e.pool.QueryRow(e.ctx, `SELECT owner FROM redisonce_inbox WHERE id = 'm1'`).Scan(&olderOwner); err != nil {
		t.Fatal(err)
	}
	e.flush() // the older lease is gone from Redis
	go func() {
		ran, err := e.inbox.Do(e.ctx, "m1", 5*time.Second, insert(2, nil, nil))
		newer <- res{ran, err}
	}()
	// The newer owner's claim statement lands while the older transaction is open.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var owner string
		if err := e.pool.QueryRow(e.ctx, `SELECT owner FROM redisonce_inbox WHERE id = 'm1'`).Scan(&owner); err != nil {
			t.Fatal(err)
		}
		if owner != olderOwner {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the newer owner's claim statement did not land while the older transaction was open")
		}
	}
	select {
	case r := <-newer:
		t.Fatalf("the newer owner finished while the older one held the key: %v, %v", r.ran, r.err)
	case <-time.After(200 * time.Millisecond): // it waits on the older owner's insert
	}
	close(release)
	if r := <-older; r.ran || !errors.Is(r.err, store.ErrStaleOwner) {
		t.Fatalf("older owner: ran %v, err %v; want false, ErrStaleOwner", r.ran, r.err)
	}
	if r := <-newer; !r.ran || r.err != nil {
		t.Fatalf("newer owner: ran %v, err %v; want true, nil", r.ran, r.err)
	}
	var amount int
	if err := e.pool.QueryRow(e.ctx, `SELECT amount FROM payments WHERE msg_id = 'm1'`).Scan(&amount); err != nil || amount != 2 {
		t.Fatalf("payment amount %d (%v), want the newer owner's 2", amount, err)
	}
}
