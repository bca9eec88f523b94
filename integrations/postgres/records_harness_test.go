package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
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

// recShared are the servers the records tests share, started by the first
// test that asks (startRecServers) and stopped by the package's TestMain
// (StopRecordsServers): a test takes a table and a key prefix of its own.
var recShared struct {
	once sync.Once
	srv  recServers
	err  error
}

// startRecServers returns the shared PostgreSQL and Redis servers. When
// PostgreSQL is not installed it skips the test, except under CI=true, where
// it fails it.
func startRecServers(t testing.TB) *recServers {
	t.Helper()
	recShared.once.Do(func() {
		if recShared.srv.pg, recShared.err = pgproc.Start(pgproc.Options{}); recShared.err != nil {
			return
		}
		recShared.srv.redis, recShared.err = redisproc.Start(redisproc.Options{})
	})
	switch err := recShared.err; {
	case err == nil:
		return &recShared.srv
	case errors.Is(err, pgproc.ErrNotInstalled) && os.Getenv("CI") != "true":
		t.Skipf("%v\n(set CI=true to make this a failure)", err)
	default:
		t.Fatalf("starting the records tests' servers: %v", err)
	}
	return nil
}

// StopRecordsServers stops the servers of the records tests, if they were
// started; the package's TestMain calls it after the tests.
func StopRecordsServers() {
	if recShared.srv.pg != nil {
		_ = recShared.srv.pg.Stop()
	}
	if recShared.srv.redis != nil {
		_ = recShared.srv.redis.Stop()
	}
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
	s, err := NewRecords(must.Store(store.NewRecords(e.client, store.WithPrefix(e.prefix))), e.pool, append([]RecordsOption{WithRecordsTable(e.table)}, opts...)...)
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
