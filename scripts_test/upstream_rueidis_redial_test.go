package scripts_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestUpstreamRueidisRedialSharesContext is the minimal reproduction of the
// rueidis behaviour in docs/upstream-rueidis-redial.md: after a connection
// breaks, the commands waiting for its replacement share one dial, run under
// the context of the command that started it. When that context ends first
// (a short timeout) while the server stalls, every waiting command fails with
// its context.DeadlineExceeded, a command with a long budget of its own
// included, without having been sent. (SET, not GET: rueidis retries a
// read-only command by itself, a write it does not.) rueidis only, no store.
//
// Not part of `make test` (it asserts an upstream behaviour, which a fixed
// rueidis would change); run it with
//
//	cd scripts_test && REDISONCE_UPSTREAM_REDIAL=1 go test -run TestUpstreamRueidisRedialSharesContext -count=1 -v .
//
// The store's side of it, the final write retried, is in make test:
// TestLeaseFinalWriteSurvivesStall.
func TestUpstreamRueidisRedialSharesContext(t *testing.T) {
	if os.Getenv("REDISONCE_UPSTREAM_REDIAL") == "" {
		t.Skip("reproduction of an upstream rueidis behaviour: set REDISONCE_UPSTREAM_REDIAL=1")
	}
	srv := newServer(t, redisproc.Options{})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, PipelineMultiplex: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// Break the client's connection, then stall the server for 2 s.
	if _, err := srv.Do("CLIENT", "KILL", "TYPE", "normal"); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = srv.Do("DEBUG", "SLEEP", "2") }()
	time.Sleep(100 * time.Millisecond)
	// The first command finds the dead connection (EOF); the client drops it.
	t.Logf("first write after the break: %v", c.Do(ctx, c.B().Set().Key("k").Value("first").Build()).Error())

	var wg sync.WaitGroup
	start := time.Now()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	wg.Add(1)
	go func() { // the next command: it starts the redial, under its own ctx
		defer wg.Done()
		err := c.Do(short, c.B().Set().Key("k").Value("short").Build()).Error()
		t.Logf("short (200 ms budget): %v after %v", err, time.Since(start).Round(time.Millisecond))
	}()
	time.Sleep(20 * time.Millisecond)
	long, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	err = c.Do(long, c.B().Set().Key("k").Value("long").Build()).Error()
	took := time.Since(start)
	wg.Wait()
	t.Logf("long (10 s budget): %v after %v; its own context: %v", err, took.Round(time.Millisecond), long.Err())
	if !errors.Is(err, context.DeadlineExceeded) || long.Err() != nil {
		t.Fatalf("the 10 s command = %v after %v: the shared-dial behaviour did not reproduce", err, took)
	}
}
