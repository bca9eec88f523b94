package store_test

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// The conformance suites on a real Redis: a redis-server this package starts
// (internal/redisproc), or the one REDIS_URL names. The same suites run on the
// memory backends in memory_test.go. The runs on a cluster, and the scripts'
// own tests (raw keys, headers, non-Go callers, faults), are in scripts_test/.
// A -short run skips them, and so does a machine without redis-server (a
// failure under CI=true).

// TestRedisClaims runs storetest.TestClaims on Redis.
func TestRedisClaims(t *testing.T) {
	c := redisClient(t)
	storetest.TestClaims(t, storetest.ClaimsHarness{
		New: func(t *testing.T, opts ...store.Option) (*store.Claims, error) {
			return store.NewClaims(c, append([]store.Option{store.WithPrefix(testPrefix(t))}, opts...)...)
		},
		Wait: time.Sleep,
		Tick: 100 * time.Millisecond,
	})
}

// TestRedisOutbox runs storetest.TestOutbox on Redis.
func TestRedisOutbox(t *testing.T) {
	c := redisClient(t)
	storetest.TestOutbox(t, storetest.OutboxHarness{
		New: func(t *testing.T, opts ...store.Option) (*store.Outbox, error) {
			return store.NewOutbox(c, append([]store.Option{store.WithPrefix(testPrefix(t))}, opts...)...)
		},
		Wait: time.Sleep,
		Tick: 100 * time.Millisecond,
	})
}

// TestRedisRecords runs storetest.TestRecords on Redis.
func TestRedisRecords(t *testing.T) {
	c := redisClient(t)
	storetest.TestRecords(t, storetest.RecordsHarness{
		New: func(t *testing.T, opts ...store.Option) (*store.Records, error) {
			return store.NewRecords(c, append([]store.Option{store.WithPrefix(testPrefix(t))}, opts...)...)
		},
		Wait: time.Sleep,
		Now:  time.Now, // the server runs on this machine
		Tick: 100 * time.Millisecond,
	})
}

// TestRedisRecordsOnExtend: Records.Do on Redis calls store.OnExtend's fn
// after each renew.lua that kept the lease.
func TestRedisRecordsOnExtend(t *testing.T) {
	storetest.TestRecordsOnExtend(t, must.Store(store.NewRecords(redisClient(t), store.WithPrefix(testPrefix(t)))))
}

var testPrefixes atomic.Int64

// testPrefix is a key prefix no other test uses.
func testPrefix(t *testing.T) string {
	return fmt.Sprintf("t%d:%s:", testPrefixes.Add(1), t.Name())
}

// redis is the package's one Redis server, started by the first test that
// needs it and stopped by TestMain.
var redis struct {
	once sync.Once
	url  string
	srv  *redisproc.Server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if redis.srv != nil {
		_ = redis.srv.Stop()
	}
	os.Exit(code)
}

// redisClient connects to the package's Redis server (closed when t ends).
func redisClient(t *testing.T) rueidis.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("the Redis runs of the suites are not -short")
	}
	redis.once.Do(func() {
		if redis.url = os.Getenv("REDIS_URL"); redis.url != "" {
			return
		}
		if _, redis.err = redisproc.LookPath(); redis.err != nil {
			return
		}
		if redis.srv, redis.err = redisproc.Start(redisproc.Options{}); redis.err == nil {
			redis.url = redis.srv.URL()
		}
	})
	if redis.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Redis: %v", redis.err)
		}
		t.Skipf("no Redis (REDIS_URL unset, no redis-server): %v", redis.err)
	}
	opt, err := rueidis.ParseURL(redis.url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to %s: %v", redis.url, err)
	}
	t.Cleanup(c.Close)
	return c
}
