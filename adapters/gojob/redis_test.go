package gojob_test

import (
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/internal/redistest"
)

// The Redis the tests share: REDIS_URL when set, else one redis-server
// started for the test binary through the root module's internal/redisproc
// (a free loopback port), stopped by TestMain. Without either the Redis
// tests are skipped — failed under CI=true.

var (
	redisOnce sync.Once
	redisAddr string // a URL for store.ClientOptions
	redisErr  error
	redisSrv  *redisproc.Server
)

func TestMain(m *testing.M) {
	code := m.Run()
	if redisSrv != nil {
		_ = redisSrv.Stop()
	}
	os.Exit(code)
}

// redisURL returns the URL of the shared Redis, or skips (fails under CI=true
// or when redis-server is there but does not start).
func redisURL(t *testing.T) string {
	t.Helper()
	redisOnce.Do(func() {
		if u := os.Getenv("REDIS_URL"); u != "" {
			redisAddr = u
			return
		}
		if redisSrv, redisErr = redisproc.Start(redisproc.Options{}); redisErr == nil {
			redisAddr = redisSrv.URL()
		}
	})
	switch {
	case redisErr == nil:
		return redisAddr
	case errors.Is(redisErr, redisproc.ErrNotInstalled) && os.Getenv("CI") != "true":
		t.Skipf("no Redis (%v): set REDIS_URL or install redis-server", redisErr)
	}
	t.Fatalf("no Redis: %v", redisErr)
	return ""
}

// newClient opens a client on the shared Redis, closed when t ends.
func newClient(t *testing.T) rueidis.Client { return redistest.Client(t, redisURL(t)) }
