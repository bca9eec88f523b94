package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/internal/pgproc"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/internal/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	shared.stop()
	postgres.StopRecordsServers() // the Records tests' servers (records_harness_test.go)
	os.Exit(code)
}

// shared is the package's PostgreSQL server, started by the first test that
// asks for one (sharedPostgres) and stopped by TestMain; each test gets a
// database of its own on it (newDB).
var shared sharedServer

type sharedServer struct {
	once sync.Once
	srv  *pgproc.Server
	err  error
}

func (s *sharedServer) stop() {
	if s.srv != nil {
		_ = s.srv.Stop()
	}
}

// sharedPostgres returns the package's server. When PostgreSQL is not
// installed it skips the test, except under CI=true, where it fails it.
func sharedPostgres(t testing.TB) *pgproc.Server {
	t.Helper()
	shared.once.Do(func() { shared.srv, shared.err = pgproc.Start(pgproc.Options{}) })
	switch {
	case shared.err == nil:
		return shared.srv
	case errors.Is(shared.err, pgproc.ErrNotInstalled) && os.Getenv("CI") != "true":
		t.Skipf("%v\n(set CI=true to make this a failure)", shared.err)
	default:
		t.Fatalf("%v", shared.err)
	}
	return nil
}

var dbSeq atomic.Int64

// newDB creates a fresh database on the shared server and returns a pool on
// it (closed when the test ends), its URL, and a counter of the statements
// the pool sent.
func newDB(t testing.TB) (*pgxpool.Pool, string, *atomic.Int64) {
	t.Helper()
	s := sharedPostgres(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	if err := s.CreateDatabase(name); err != nil {
		t.Fatal(err)
	}
	url := s.URL(name)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	tr := &countingTracer{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, url, &tr.n
}

// countingTracer counts every statement a connection sends (BEGIN and
// COMMIT included).
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// startRedis runs a redis-server on a free loopback port (internal/redisproc).
func startRedis(t testing.TB) *redisproc.Server {
	t.Helper()
	return redisproc.StartT(t, redisproc.Options{})
}

// newRedis opens a client on url with the stores' options, closed when the test ends.
var newRedis = redistest.Client
