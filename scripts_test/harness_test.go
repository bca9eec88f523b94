// Package scripts_test runs the scripts and the stores against a real Redis.
//
// The harness in this file finds a Redis for every test in the package, in
// this order:
//
//  1. REDIS_URL: a standalone server you run (standaloneURL only; the cluster
//     helpers still need a redis-server binary).
//  2. A redis-server binary (PATH, /usr/sbin, /usr/local/bin): throwaway
//     servers and clusters on free loopback ports, through internal/redisproc.
//  3. Docker, through testcontainers-go (harness_docker_test.go): a redis:7.2
//     container, standalone only.
//  4. None: the test is skipped with a message that says how to get one —
//     except under CI=true, where a missing Redis fails the test.
//
// Shared servers (standaloneURL, clusterURL, cluster3URL) start lazily, once
// per test binary, and are stopped by TestMain. Tests share them, so each test
// must use keys of its own (a prefix from t.Name(), say) and never FLUSHALL.
// A test that kills, restarts or fills up a server gets a private one from
// newServer.
//
// For benchmarks, benchURL and harnessNewClient take a testing.TB. Other helper
// names start with "harness" to stay out of the way of the tests.
package scripts_test

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestMain runs the tests, then stops the shared servers they started.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := harnessStopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "scripts_test: stopping shared Redis:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// standaloneURL returns the URL of a standalone Redis shared by the whole test
// binary: REDIS_URL if set, else a redis-server started here, else a Docker
// container. Without any, the test is skipped (failed under CI=true).
func standaloneURL(t *testing.T) string {
	t.Helper()
	return harnessStandaloneURL(t)
}

// harnessStandaloneURL is standaloneURL for any testing.TB (benchmarks).
func harnessStandaloneURL(tb testing.TB) string {
	tb.Helper()
	return harnessStandalone.get(tb, func() (string, func() error, error) {
		if u := os.Getenv("REDIS_URL"); u != "" {
			return u, nil, nil
		}
		if _, err := redisproc.LookPath(); err == nil {
			s, err := redisproc.Start(redisproc.Options{})
			if err != nil {
				return "", nil, err
			}
			return s.URL(), s.Stop, nil
		}
		u, stop, err := harnessDockerRedis()
		if err != nil {
			return "", nil, harnessMissing(false, "no Redis: REDIS_URL is unset, there is no redis-server binary, and Docker is not usable (%v)", err)
		}
		return u, stop, nil
	})
}

// clusterURL returns the URL of a one-node Redis Cluster holding all 16384
// slots, shared by the whole test binary. A client opened on it takes its
// cluster code path (rueidis: Mode() == ClientModeCluster) while every key
// lives on the one node. It needs a redis-server binary.
func clusterURL(t *testing.T) string {
	t.Helper()
	return harnessCluster1.get(t, func() (string, func() error, error) {
		return harnessStartCluster(1)
	})
}

// cluster3URL returns the URL of a three-master Redis Cluster (slots split by
// redis-cli --cluster create), shared by the whole test binary and started
// only when a test first asks for it. It needs redis-server and redis-cli.
func cluster3URL(t *testing.T) string {
	t.Helper()
	return harnessCluster3.get(t, func() (string, func() error, error) {
		return harnessStartCluster(3)
	})
}

// newClient opens a rueidis client on url (redis:// or rediss://, parsed by
// rueidis.ParseURL) and closes it when the test ends.
func newClient(t *testing.T, url string) rueidis.Client {
	t.Helper()
	return harnessNewClient(t, url)
}

// harnessNewClient is newClient for any testing.TB (benchmarks).
func harnessNewClient(tb testing.TB, url string) rueidis.Client {
	tb.Helper()
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		tb.Fatalf("parse %q: %v", url, err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatalf("connect to %s: %v", url, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// newServer starts a private redis-server for this test only (for faults:
// Kill, Restart, maxmemory...) and stops it when the test ends. It needs a
// redis-server binary: without one the test is skipped (failed under CI=true).
func newServer(t *testing.T, o redisproc.Options) *redisproc.Server {
	t.Helper()
	if _, err := redisproc.LookPath(); err != nil {
		harnessFail(t, harnessMissing(true, "no redis-server binary: this test starts its own server"))
	}
	return redisproc.StartT(t, o)
}

// benchURL is standaloneURL for benchmarks: the shared standalone Redis.
func benchURL(tb testing.TB) string {
	tb.Helper()
	return harnessStandaloneURL(tb)
}

// harnessShared is one lazily started server (or cluster) shared by the test
// binary. The outcome of the first start, success or not, is kept for all.
type harnessShared struct {
	once sync.Once
	url  string
	stop func() error // nil when nothing was started here (REDIS_URL)
	err  error
}

var (
	harnessStandalone harnessShared
	harnessCluster1   harnessShared
	harnessCluster3   harnessShared
	harnessReplicated harnessShared // a primary with one replica (bench_wait_test.go)
)

func (h *harnessShared) get(tb testing.TB, start func() (string, func() error, error)) string {
	tb.Helper()
	h.once.Do(func() { h.url, h.stop, h.err = start() })
	if h.err != nil {
		harnessFail(tb, h.err)
	}
	return h.url
}

// harnessStopShared stops every shared server that was started.
func harnessStopShared() error {
	var errs []error
	for _, h := range []*harnessShared{&harnessStandalone, &harnessCluster1, &harnessCluster3, &harnessReplicated} {
		// Once.Do here waits for a start still in flight and marks one that
		// never ran as done, so nothing can start after this.
		h.once.Do(func() { h.err = errors.New("scripts_test: shared Redis requested after TestMain finished") })
		if h.stop != nil {
			errs = append(errs, h.stop())
		}
	}
	return errors.Join(errs...)
}

// harnessStartCluster starts a shared cluster of masters masters.
func harnessStartCluster(masters int) (string, func() error, error) {
	if _, err := redisproc.LookPath(); err != nil {
		if os.Getenv("REDIS_URL") != "" {
			return "", nil, harnessMissing(true, "no redis-server binary: cluster tests start their own servers (REDIS_URL serves standalone tests only)")
		}
		return "", nil, harnessMissing(true, "no redis-server binary: cluster tests start their own servers")
	}
	c, err := redisproc.StartCluster(masters, redisproc.Options{})
	if errors.Is(err, redisproc.ErrNotInstalled) { // redis-cli, for 3+ masters
		return "", nil, harnessMissing(true, "%v", err)
	}
	if err != nil {
		return "", nil, err
	}
	return c.URL(), c.Stop, nil
}

// harnessMissingError means no Redis could be found, as opposed to a Redis
// that was found and failed to start (always a test failure).
type harnessMissingError struct {
	msg        string
	binaryOnly bool // only a redis-server binary would do (clusters, private servers)
}

func (e *harnessMissingError) Error() string { return e.msg }

func harnessMissing(binaryOnly bool, format string, args ...any) error {
	return &harnessMissingError{msg: fmt.Sprintf(format, args...), binaryOnly: binaryOnly}
}

// harnessInstall says how to install redis-server and redis-cli.
const harnessInstall = "install Redis (`sudo apt-get install redis-server redis-tools` on Debian/Ubuntu, `brew install redis` on macOS)"

// harnessHowTo tells the reader how to give a test the Redis it lacks.
func (e *harnessMissingError) howTo() string {
	if e.binaryOnly {
		return "To run this test, " + harnessInstall + "."
	}
	return "To run this test, do one of: " + harnessInstall + "; " +
		"or set REDIS_URL=redis://127.0.0.1:6379 to a standalone Redis >= 7.0 you run; " +
		"or start a Docker daemon (the harness then runs " + harnessDockerImage + " with testcontainers-go)."
}

// harnessFail skips the test when Redis is missing, or fails it when Redis is
// missing under CI=true or when it is present but broken.
func harnessFail(t testing.TB, err error) {
	t.Helper()
	var missing *harnessMissingError
	switch {
	case !errors.As(err, &missing):
		t.Fatalf("scripts_test: %v", err)
	case os.Getenv("CI") == "true":
		t.Fatalf("scripts_test: %v\nCI=true, so a missing Redis is a failure, not a skip. %s", err, missing.howTo())
	default:
		t.Skipf("scripts_test: %v\n%s", err, missing.howTo())
	}
}
