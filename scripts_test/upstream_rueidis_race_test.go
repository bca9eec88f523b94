package scripts_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestUpstreamRueidisRetryRace is the minimal reproduction of the rueidis data
// race described in docs/upstream-rueidis-race.md: a read-only command whose
// connection dies is retried on a new connection and, once the retry
// succeeds, recycled into the command pool while the dead connection's writer
// goroutine may still be reading it. It uses rueidis alone (no store, no
// script), so it can be pasted into an upstream issue.
//
// It is not part of `make test`: the race detector fails the whole test binary
// when it fires, and the point is to watch it fire. Run it with
//
//	cd scripts_test && REDISONCE_UPSTREAM_RACE=1 go test -race -run TestUpstreamRueidisRetryRace -count=1 .
//
// On rueidis v1.0.79 it reports "WARNING: DATA RACE" (a write in
// internal/cmds's pool reuse against a read in pipe's writer). With
// REDISONCE_UPSTREAM_RACE=pinned every command is pinned (Completed.Pin, the
// workaround in store/script.go) and the race detector stays quiet. When an
// upgrade makes the unpinned run pass, the pinning in store/script.go
// (evalsha, eval) can go.
func TestUpstreamRueidisRetryRace(t *testing.T) {
	mode := os.Getenv("REDISONCE_UPSTREAM_RACE")
	if mode == "" {
		t.Skip("reproduction of an upstream rueidis data race: set REDISONCE_UPSTREAM_RACE=1 and run with -race")
	}
	srv := newServer(t, redisproc.Options{})
	opt, err := rueidis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				// GET is read-only, hence retried by rueidis after a connection
				// error, and built from (and recycled into) the command pool.
				cmd := c.B().Get().Key("race:" + strconv.Itoa(i%64)).Build()
				if mode == "pinned" {
					cmd = cmd.Pin() // never recycled: the workaround
				}
				_ = c.Do(ctx, cmd).Error()
			}
		}()
	}
	kills := 0
	for ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
		if _, err := srv.Do("CLIENT", "KILL", "TYPE", "normal"); err == nil {
			kills++
		}
	}
	wg.Wait()
	t.Logf("%d CLIENT KILL under 8 readers (mode %q); with -race, a report above is the upstream bug", kills, mode)
}
