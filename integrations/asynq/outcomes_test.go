package asynq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redisonce/redisonce/store"
)

// Every row of the outcome table (docs/integrations.md, "One behaviour per
// outcome"), on a real asynq server and Redis: one task "t1" per row, the
// state it ends in, how often asynq retried it as a failure, how often the
// handler ran, and the claim key after.
func TestOutcomeTable(t *testing.T) {
	boom := errors.New("boom")
	const lease = time.Second
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, claims *store.Claims)
		h       func(ctx context.Context, n int) error // run n, from 1
		state   asynq.TaskState
		retried int
		runs    int
		key     string // "" absent, "1" processed
	}{
		{name: "success", h: func(context.Context, int) error { return nil },
			state: asynq.TaskStateCompleted, runs: 1, key: "1"},
		{name: "duplicate", setup: func(t *testing.T, c *store.Claims) {
			if err := c.Remember(context.Background(), "t1"); err != nil {
				t.Fatal(err)
			}
		}, h: func(context.Context, int) error { return nil }, state: asynq.TaskStateCompleted, key: "1"},
		{name: "in flight", setup: func(t *testing.T, c *store.Claims) {
			holding := make(chan struct{})
			go func() {
				_, _ = c.Do(context.Background(), "t1", lease, func(context.Context) error {
					close(holding)
					time.Sleep(1500 * time.Millisecond)
					return nil
				})
			}()
			<-holding
		}, h: func(context.Context, int) error { return nil }, state: asynq.TaskStateCompleted, key: "1"},
		{name: "failure", h: func(_ context.Context, n int) error {
			if n == 1 {
				return boom
			}
			return nil
		}, state: asynq.TaskStateCompleted, retried: 1, runs: 2, key: "1"},
		{name: "panic", h: func(_ context.Context, n int) error {
			if n == 1 {
				panic("kaboom")
			}
			return nil
		}, state: asynq.TaskStateCompleted, retried: 1, runs: 2, key: "1"},
		{name: "permanent failure", h: func(context.Context, int) error { return store.Permanent(boom) },
			state: asynq.TaskStateArchived, runs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := name(t)
			claims := openClaims(t, q+":")
			if tc.setup != nil {
				tc.setup(t, claims)
			}
			var mu sync.Mutex
			runs := 0
			startServer(t, q, claims, lease, func(ctx context.Context, _ *asynq.Task) error {
				mu.Lock()
				runs++
				n := runs
				mu.Unlock()
				return tc.h(ctx, n)
			}, nil)
			enqueue(t, q, "t1", asynq.MaxRetry(3))
			info := waitState(t, q, "t1", tc.state, 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if runs != tc.runs || info.Retried != tc.retried {
				t.Errorf("handler ran %d times, asynq retried %d; want %d, %d", runs, info.Retried, tc.runs, tc.retried)
			}
			if v := rawGet(t, q+":t1"); v != tc.key {
				t.Errorf("claim key holds %q, want %q", v, tc.key)
			}
		})
	}

	t.Run("shutdown", func(t *testing.T) {
		// The server shuts down while the handler runs: its context is
		// cancelled, the id released, and asynq puts the task back; the next
		// server runs it.
		q := name(t)
		claims := openClaims(t, q+":")
		started := make(chan struct{}, 1)
		srv := newServer(t, q, claims, lease, func(ctx context.Context, _ *asynq.Task) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, nil)
		enqueue(t, q, "t1", asynq.MaxRetry(3))
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the handler never ran")
		}
		srv.Shutdown()
		if v := rawGet(t, q+":t1"); v != "" {
			t.Errorf("after the shutdown the claim key holds %q, want it released", v)
		}
		ran := make(chan struct{}, 1)
		startServer(t, q, claims, lease, func(context.Context, *asynq.Task) error { ran <- struct{}{}; return nil }, nil)
		waitState(t, q, "t1", asynq.TaskStateCompleted, 30*time.Second)
		if len(ran) != 1 || rawGet(t, q+":t1") != "1" {
			t.Errorf("the next server ran it %d times, key %q; want once, \"1\"", len(ran), rawGet(t, q+":t1"))
		}
	})
}
