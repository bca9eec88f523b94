package watermill_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// redisURL is the test binary's redis-server, started by TestMain on a free
// loopback port (tests share it: each uses a key prefix of its own).
var redisURL, redisAddr string

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain()) // the consumer process of TestConsumerKilledMidHandler
	}
	os.Exit(redisproc.Main(m, redisproc.Options{}, func(srv *redisproc.Server) { redisURL, redisAddr = srv.URL(), srv.Addr }))
}

// prefixes holds each test's key prefix: its name and the how-manieth run
// of that name it is (go test -count=N reruns a test on the same server).
var (
	prefixes sync.Map // *testing.T -> string
	runs     sync.Map // test name -> *atomic.Int64
)

// prefix is the test's own key prefix.
func prefix(t *testing.T) string {
	if p, ok := prefixes.Load(t); ok {
		return p.(string)
	}
	n, _ := runs.LoadOrStore(t.Name(), new(atomic.Int64))
	p := fmt.Sprintf("wm:%s:%d:", strings.NewReplacer("/", ":", " ", "_").Replace(t.Name()), n.(*atomic.Int64).Add(1))
	prefixes.Store(t, p)
	return p
}

// openClaims opens a Claims store (a client of its own: one consumer
// process) on the test server, under the test's prefix.
func openClaims(t *testing.T, opts ...store.Option) *store.Claims {
	t.Helper()
	c, err := store.OpenClaims(redisURL, append([]store.Option{store.WithPrefix(prefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawGet reads a key of the test's prefix straight from Redis ("" when absent).
func rawGet(t *testing.T, id string) string {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.Do(context.Background(), c.B().Get().Key(prefix(t)+id).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}
