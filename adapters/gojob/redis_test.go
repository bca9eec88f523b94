package gojob_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// This module cannot import the root module's internal/redisproc, so it has
// its own small harness: REDIS_URL when set, else one redis-server started
// for the test binary on a unix socket in a temporary directory (no TCP port
// at all, so nothing to race for), stopped by TestMain. Without either the
// Redis tests are skipped — failed under CI=true.

var (
	redisOnce sync.Once
	redisAddr string // a URL for rueidis.ParseURL
	redisErr  error
	redisStop func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	if redisStop != nil {
		redisStop()
	}
	os.Exit(code)
}

// redisURL returns the URL of the shared Redis, or skips (fails under CI=true).
func redisURL(t *testing.T) string {
	t.Helper()
	redisOnce.Do(func() {
		if u := os.Getenv("REDIS_URL"); u != "" {
			redisAddr = u
			return
		}
		redisAddr, redisStop, redisErr = startRedis()
	})
	if redisErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Redis under CI=true: %v", redisErr)
		}
		t.Skipf("no Redis (%v): set REDIS_URL or install redis-server (apt-get install redis-server)", redisErr)
	}
	return redisAddr
}

func startRedis() (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		for _, p := range []string{"/usr/sbin/redis-server", "/usr/local/bin/redis-server", "/usr/bin/redis-server"} {
			if _, e := os.Stat(p); e == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "gojob-redis-") // short: a socket path is at most ~100 bytes
	if err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", dir)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	url := "unix://" + sock
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := newRueidis(url); err == nil {
			err = c.Do(context.Background(), c.B().Ping().Build()).Error()
			c.Close()
			if err == nil {
				return url, stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server did not answer PING within 10s; its output:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newRueidis(url string) (rueidis.Client, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.DisableCache = true
	return rueidis.NewClient(opt)
}

// newClient opens a client on the shared Redis, closed when t ends.
func newClient(t *testing.T) rueidis.Client {
	t.Helper()
	c, err := newRueidis(redisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
