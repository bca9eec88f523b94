package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/pgproc"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// startPostgres runs a throwaway PostgreSQL server (internal/pgproc), stopped
// when the test ends; it skips the test when PostgreSQL is not installed,
// except under CI=true.
func startPostgres(t testing.TB) *pgproc.Server {
	t.Helper()
	return pgproc.StartT(t, pgproc.Options{})
}

var dbSeq atomic.Int64

// newDB creates a fresh database on s and returns a pool on it, closed when
// the test ends.
func newDB(t testing.TB, s *pgproc.Server) (*pgxpool.Pool, string) {
	t.Helper()
	name := fmt.Sprintf("t%d", dbSeq.Add(1))
	if err := s.CreateDatabase(name); err != nil {
		t.Fatal(err)
	}
	url := s.URL(name)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, url
}

// startRedis runs a redis-server on a free loopback port (internal/redisproc).
func startRedis(t testing.TB) *redisproc.Server {
	t.Helper()
	return redisproc.StartT(t, redisproc.Options{})
}

func newRedis(t testing.TB, url string) rueidis.Client {
	t.Helper()
	opt, err := store.ClientOptions(url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestHarness(t *testing.T) {
	pg := startPostgres(t)
	pool, _ := newDB(t, pg)
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT 40 + 2").Scan(&n); err != nil || n != 42 {
		t.Fatalf("SELECT 40 + 2 = %d, %v", n, err)
	}
	rc := newRedis(t, startRedis(t).URL())
	if err := rc.Do(context.Background(), rc.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
}
