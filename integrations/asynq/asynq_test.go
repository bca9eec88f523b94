package asynq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	asynqonce "github.com/redisonce/redisonce/integrations/asynq"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// counts records the handler's runs and effects per task.
type counts struct {
	mu      sync.Mutex
	runs    map[string]int
	effects map[string]int
}

func newCounts() *counts { return &counts{runs: map[string]int{}, effects: map[string]int{}} }

func (c *counts) get(id string) (runs, effects int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id], c.effects[id]
}

// A handler that fails twice is retried by asynq (the failures counted: the
// id is released each time) and its effect happens once, on the third run.
func TestFailuresRetriedEffectOnce(t *testing.T) {
	q := name(t)
	c := newCounts()
	startServer(t, q, openClaims(t, q+":"), 2*time.Second, func(ctx context.Context, task *asynq.Task) error {
		id := string(task.Payload())
		c.mu.Lock()
		defer c.mu.Unlock()
		c.runs[id]++
		if c.runs[id] <= 2 {
			return fmt.Errorf("run %d fails", c.runs[id])
		}
		c.effects[id]++
		return nil
	}, nil)
	enqueue(t, q, "f1", asynq.MaxRetry(5))
	info := waitState(t, q, "f1", asynq.TaskStateCompleted, 30*time.Second)
	if runs, effects := c.get("f1"); runs != 3 || effects != 1 {
		t.Errorf("handler ran %d times, effect %d; want 3 and 1", runs, effects)
	}
	if info.Retried != 2 {
		t.Errorf("Retried = %d, want 2 (two failures)", info.Retried)
	}
	if v := rawGet(t, q+":f1"); v != "1" {
		t.Errorf("claim key holds %q, want \"1\"", v)
	}
}

// A task whose id another worker holds is not run, not counted as a failure
// (IsFailure), and retried after the holder's lease time left (RetryDelay),
// not at asynq's backoff: with MaxRetry(1), three in-flight rounds would
// archive it if they counted. Once the holder commits, the retry completes
// the task as a duplicate, without running the handler.
func TestInFlightNotCountedRetriedAfterLease(t *testing.T) {
	q := name(t)
	// Seconds, not milliseconds: on a loaded machine a sub-second lease can
	// starve its live holder's heartbeat.
	const lease, hold = 1200 * time.Millisecond, 6 * time.Second
	claims := openClaims(t, q+":")
	var mu sync.Mutex
	var rounds []time.Time // the middleware's in-flight answers
	var others []error
	asynqRuns := 0
	startServer(t, q, claims, lease, func(ctx context.Context, task *asynq.Task) error {
		mu.Lock()
		asynqRuns++
		mu.Unlock()
		return nil
	}, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if d, ok := store.RetryAfter(err); ok && errors.Is(err, store.ErrInFlight) && d > 0 && d <= lease {
			rounds = append(rounds, time.Now())
		} else {
			others = append(others, err)
		}
	})
	// The other worker: slow, its lease kept alive by the heartbeat.
	held := make(chan struct{})
	var committed time.Time
	done := make(chan error, 1)
	go func() {
		_, err := claims.Do(context.Background(), "i1", lease, func(ctx context.Context) error {
			close(held)
			time.Sleep(hold)
			return nil
		})
		committed = time.Now()
		done <- err
	}()
	<-held
	enqueue(t, q, "i1", asynq.MaxRetry(1))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	info := waitState(t, q, "i1", asynq.TaskStateCompleted, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if asynqRuns != 0 {
		t.Errorf("the handler ran %d times on the asynq worker, want 0 (the holder did the work)", asynqRuns)
	}
	if info.Retried != 0 {
		t.Errorf("Retried = %d, want 0: an in-flight round is not a failure", info.Retried)
	}
	if len(others) > 0 {
		t.Errorf("errors other than in flight: %v", others)
	}
	if len(rounds) < 2 {
		t.Errorf("%d in-flight rounds during a %v hold, want at least 2 (with MaxRetry(1), a counted round would archive it)", len(rounds), hold)
	}
	// Each retry waits the holder's lease time left plus a second (asynq
	// truncates retry times to whole seconds, so it lands at least the lease
	// time left later): at most hold/(lease/3) rounds (the heartbeat, every
	// lease/4, keeps the time left above three quarters of the lease; a third
	// leaves room for a beat delayed by a loaded machine), plus the first and
	// the last.
	for i := 1; i < len(rounds); i++ {
		if gap := rounds[i].Sub(rounds[i-1]); gap < lease/3 {
			t.Errorf("in-flight rounds %d and %d %v apart, less than the least lease time left %v", i-1, i, gap, lease/3)
		}
	}
	if max := int(hold/(lease/3)) + 2; len(rounds) > max {
		t.Errorf("%d in-flight rounds in %v with a %v lease, want at most %d (a busy retry?)", len(rounds), hold, lease, max)
	}
	for _, r := range rounds {
		if r.After(committed.Add(50 * time.Millisecond)) {
			t.Errorf("an in-flight answer at %v, after the holder committed at %v", r, committed)
		}
	}
	var gaps []time.Duration
	for i := 1; i < len(rounds); i++ {
		gaps = append(gaps, rounds[i].Sub(rounds[i-1]).Round(time.Millisecond))
	}
	t.Logf("%d in-flight rounds during the %v hold, %v apart; completed as a duplicate", len(rounds), hold, gaps)
}

// The id comes from WithID when the producer may enqueue one job under two
// task ids: the second task completes without running the handler.
func TestWithIDFromPayload(t *testing.T) {
	q := name(t)
	c := newCounts()
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: redisAddr}, asynq.Config{
		Queues: map[string]int{q: 1}, IsFailure: asynqonce.IsFailure, RetryDelayFunc: asynqonce.RetryDelay(nil),
		TaskCheckInterval: 50 * time.Millisecond, LogLevel: quietLogger,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.Middleware(openClaims(t, q+":"), asynqonce.WithID(func(_ context.Context, task *asynq.Task) (string, error) {
		return "order:" + string(task.Payload()), nil
	})))
	mux.HandleFunc("job", func(ctx context.Context, task *asynq.Task) error {
		c.mu.Lock()
		c.effects["order"]++
		c.mu.Unlock()
		return nil
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	cl := asynq.NewClient(asynq.RedisClientOpt{Addr: redisAddr})
	defer cl.Close()
	for _, id := range []string{"t1", "t2"} {
		if _, err := cl.Enqueue(asynq.NewTask("job", []byte("42")), asynq.Queue(q), asynq.TaskID(id), asynq.Retention(time.Hour)); err != nil {
			t.Fatal(err)
		}
		waitState(t, q, id, asynq.TaskStateCompleted, 30*time.Second)
	}
	if _, effects := c.get("order"); effects != 1 {
		t.Errorf("effect ran %d times for one order, want 1", effects)
	}
	if v := rawGet(t, q+":order:42"); v != "1" {
		t.Errorf("claim key holds %q, want \"1\"", v)
	}
}

// IsFailure and RetryDelay, on their own.
func TestIsFailureAndRetryDelay(t *testing.T) {
	inflight := inFlightError(t, 2*time.Second)
	left, _ := store.RetryAfter(inflight)
	wrapped := fmt.Errorf("redisonce: do %q: %w", "x", store.ErrInFlight)
	for _, c := range []struct {
		err  error
		want bool
	}{{nil, false}, {inflight, false}, {wrapped, false}, {errors.New("boom"), true}, {asynq.SkipRetry, true}} {
		if got := asynqonce.IsFailure(c.err); got != c.want {
			t.Errorf("IsFailure(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	fallback := func(n int, err error, task *asynq.Task) time.Duration { return time.Duration(n) * time.Hour }
	d := asynqonce.RetryDelay(fallback)
	if got := d(3, inflight, nil); got != left+time.Second {
		t.Errorf("in flight, %v left: delay %v, want %v (asynq truncates retry times to the second)", left, got, left+time.Second)
	}
	if got := d(3, errors.New("boom"), nil); got != 3*time.Hour {
		t.Errorf("a failure: delay %v, want the fallback's 3h", got)
	}
	if !errors.Is(inflight, store.ErrInFlight) {
		t.Error("the in-flight error does not match store.ErrInFlight")
	}
}

// inFlightError is a store's real in-flight error: a Do on an id another
// Do holds with a lease of holder.
func inFlightError(t *testing.T, holder time.Duration) error {
	t.Helper()
	claims := must.Store(store.NewMemoryClaims())
	var inFlight error
	_, err := claims.Do(context.Background(), "x", holder, func(ctx context.Context) error {
		_, inFlight = claims.Do(ctx, "x", time.Second, func(context.Context) error { return nil })
		return nil
	})
	if d, ok := store.RetryAfter(inFlight); err != nil || !ok || d <= 0 || d > holder {
		t.Fatalf("Do = %v, nested Do = %v (RetryAfter %v, %v); want an in-flight error with (0, %v] left", err, inFlight, d, ok, holder)
	}
	return inFlight
}

// An invalid option, or a handler called without an asynq task id, fails
// the task before anything is sent.
func TestInvalidOptionsAndNoTaskID(t *testing.T) {
	q := name(t)
	claims := openClaims(t, q+":")
	ran := false
	h := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran = true; return nil })
	for name, mw := range map[string]asynq.MiddlewareFunc{
		"WithLease(0)": asynqonce.Middleware(claims, asynqonce.WithLease(0)),
		"WithID(nil)":  asynqonce.Middleware(claims, asynqonce.WithID(nil)),
		"no task id":   asynqonce.Middleware(claims),
	} {
		err := mw(h).ProcessTask(context.Background(), asynq.NewTask("job", nil))
		if !errors.Is(err, store.ErrInvalidArgument) || ran {
			t.Errorf("%s: err %v, ran %v; want ErrInvalidArgument, not run", name, err, ran)
		}
	}
}

// A handler that panics releases the id (Claims.Do gives it back before the
// panic goes on); asynq recovers the panic as a failure and retries the task,
// whose retry runs the handler again.
func TestPanicReleasedAndRetried(t *testing.T) {
	q := name(t)
	c := newCounts()
	startServer(t, q, openClaims(t, q+":"), 2*time.Second, func(ctx context.Context, task *asynq.Task) error {
		id := string(task.Payload())
		c.mu.Lock()
		c.runs[id]++
		n := c.runs[id]
		c.mu.Unlock()
		if n == 1 {
			panic("first run panics")
		}
		c.mu.Lock()
		c.effects[id]++
		c.mu.Unlock()
		return nil
	}, nil)
	enqueue(t, q, "p1", asynq.MaxRetry(3))
	info := waitState(t, q, "p1", asynq.TaskStateCompleted, 30*time.Second)
	if runs, effects := c.get("p1"); runs != 2 || effects != 1 {
		t.Errorf("handler ran %d times, effect %d; want 2 and 1", runs, effects)
	}
	if info.Retried != 1 {
		t.Errorf("Retried = %d, want 1 (the panic, a failure)", info.Retried)
	}
	if v := rawGet(t, q+":p1"); v != "1" {
		t.Errorf("claim key holds %q, want \"1\"", v)
	}
}

// A task whose id a dead worker holds (its lease left raw in Redis, 1.5s to
// go) gets the store's in-flight error, whose store.RetryAfter is the
// holder's lease time left.
func TestInFlightRetryAfterFollowsHolderLease(t *testing.T) {
	q := name(t)
	c := rdb(t)
	const holder, own = 1500 * time.Millisecond, 5 * time.Second
	if err := c.Do(context.Background(), c.B().Set().Key(q+":d1").Value("~0123456789abcdef0123456789abcdef").
		Px(holder).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	ran := false
	mw := asynqonce.Middleware(openClaims(t, q+":"), asynqonce.WithLease(own),
		asynqonce.WithID(func(context.Context, *asynq.Task) (string, error) { return "d1", nil }))
	err := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran = true; return nil })).
		ProcessTask(context.Background(), asynq.NewTask("job", nil))
	if !errors.Is(err, store.ErrInFlight) || ran {
		t.Fatalf("err %v, ran %v; want ErrInFlight, not run", err, ran)
	}
	if got, ok := store.RetryAfter(err); !ok || got <= 0 || got > holder {
		t.Errorf("RetryAfter %v, %v with the holder's lease at %v, want (0, %v], true", got, ok, holder, holder)
	}
	if !asynqonce.IsFailure(errors.New("x")) || asynqonce.IsFailure(err) {
		t.Error("IsFailure counts the in-flight error, or not a plain one")
	}
}
