package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/pgproc"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// recSeq numbers the tables and prefixes of the records tests.
var recSeq atomic.Int64

// recServers are the servers of one top-level records test.
type recServers struct {
	pg    *pgproc.Server
	redis *redisproc.Server
}

// startRecServers starts a PostgreSQL server (pgproc.StartT: a missing
// PostgreSQL skips the test outside CI and fails it under CI=true) and a
// Redis server for t, both stopped when t ends.
func startRecServers(t testing.TB) *recServers {
	t.Helper()
	pg := pgproc.StartT(t, pgproc.Options{})
	return &recServers{pg: pg, redis: redisproc.StartT(t, redisproc.Options{})}
}

// recEnv is one test's share of the servers: a pool, a Redis client, a
// table and a prefix of its own.
type recEnv struct {
	pg     *pgproc.Server
	redis  *redisproc.Server
	pool   *pgxpool.Pool
	client rueidis.Client
	table  string // the records table
	prefix string // the Redis key prefix
}

func (srv *recServers) env(t testing.TB) *recEnv {
	t.Helper()
	pg, rs := srv.pg, srv.redis
	n := recSeq.Add(1)
	e := &recEnv{
		pg: pg, redis: rs,
		pool:   newPool(t, pg.URL("postgres")),
		client: newRedisClient(t, rs.Addr),
		table:  fmt.Sprintf("records_%d", n),
		prefix: fmt.Sprintf("pgrec%d:", n),
	}
	// Connected before the test starts: the suite compares the times in
	// records with its own clock, within half a tick.
	ctx := context.Background()
	if err := e.pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Do(ctx, e.client.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return e
}

func newPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func newRedisClient(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// records returns Records on e's table (created) and prefix, with a Redis
// store of its own client.
func (e *recEnv) records(t *testing.T, opts ...RecordsOption) *Records {
	t.Helper()
	s, err := NewRecords(mustStore(store.NewRecords(e.client, store.WithPrefix(e.prefix))), e.pool, append([]RecordsOption{WithRecordsTable(e.table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// exec runs sql on e's database and fails the test on an error.
func (e *recEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// count runs a SELECT count(*) ... and returns it.
func (e *recEnv) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// flushRedis empties the Redis server, as an operator's FLUSHALL or a restart
// without persistence would.
func (e *recEnv) flushRedis(t *testing.T) {
	t.Helper()
	if err := e.client.Do(context.Background(), e.client.B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every 20 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mustStore is a store constructor's result, for options that cannot fail:
// a constructor's error here is a broken test.
func mustStore[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}
