package asynq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/rueidis"

	asynqonce "github.com/redisonce/redisonce/integrations/asynq"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// TestCoalesce: 20 "rebuild product 1" tasks on a real asynq server (4
// workers) with WithCoalesce, each rebuild taking 300 ms: every task
// completes, the rebuilds never overlap, and the 20 tasks cost a few
// rebuilds, not 20 (the first, then one per batch that arrived during a
// rebuild), the last one with a task's payload.
func TestCoalesce(t *testing.T) {
	q := name(t)
	var mu sync.Mutex
	var runs []string
	active, overlap := 0, 0
	co := must.Store(store.NewCoalescer(rdb(t), func(ctx context.Context, key string, payload []byte) error {
		mu.Lock()
		runs = append(runs, string(payload))
		active++
		overlap += active - 1
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		active--
		mu.Unlock()
		return nil
	}, store.CoalesceOptions{Lease: 5 * time.Second}, store.WithPrefix(q+":co:")))
	defer co.Close()
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: redisAddr}, asynq.Config{
		Concurrency: 4, Queues: map[string]int{q: 1}, LogLevel: quietLogger, ShutdownTimeout: 5 * time.Second,
		TaskCheckInterval: 50 * time.Millisecond,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.Middleware(nil, asynqonce.WithCoalesce(co, func(context.Context, *asynq.Task) (string, error) {
		return "product-1", nil
	})))
	mux.HandleFunc("job", func(context.Context, *asynq.Task) error {
		t.Error("the wrapped handler ran; with WithCoalesce the Coalescer's fn runs")
		return nil
	})
	for i := range 20 {
		enqueue(t, q, fmt.Sprintf("v%02d", i))
	}
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	for i := range 20 {
		waitState(t, q, fmt.Sprintf("v%02d", i), asynq.TaskStateCompleted, 20*time.Second)
	}
	// The last rebuilds, handed over in the background: until the key is idle.
	c := rdb(t)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, err := c.Do(context.Background(), c.B().Exists().Key(q+":co:product-1").Build()).AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key is not idle after 10 s")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if overlap != 0 {
		t.Errorf("%d rebuilds overlapped", overlap)
	}
	if len(runs) < 2 || len(runs) > 10 {
		t.Errorf("%d rebuilds for 20 tasks (%v), want 2..10", len(runs), runs)
	}
	t.Logf("20 tasks, %d rebuilds: %v", len(runs), runs)
}

// TestCoalesceBadOption: a nil Coalescer or key function fails every task
// with ErrInvalidArgument.
func TestCoalesceBadOption(t *testing.T) {
	mw := asynqonce.Middleware(nil, asynqonce.WithCoalesce(nil, nil))
	err := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })).ProcessTask(context.Background(), asynq.NewTask("job", nil))
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("a task through WithCoalesce(nil, nil) = %v, want ErrInvalidArgument", err)
	}
}
