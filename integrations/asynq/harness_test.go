package asynq_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/rueidis"

	asynqonce "github.com/redisonce/redisonce/integrations/asynq"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// redisURL, redisAddr: the test binary's redis-server, started by TestMain
// on a free loopback port. asynq and the claims share it, as in production;
// each test uses a queue and a key prefix of its own.
var redisURL, redisAddr string

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain()) // the worker process of TestWorkerKilledMidTask
	}
	os.Exit(redisproc.Main(m, redisproc.Options{}, func(srv *redisproc.Server) { redisURL, redisAddr = srv.URL(), srv.Addr }))
}

// name is the test's queue name and key prefix stem.
func name(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
}

func openClaims(t *testing.T, prefix string) *store.Claims {
	t.Helper()
	c, err := store.OpenClaims(redisURL, store.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rdb is a plain client for the raw keys.
func rdb(t *testing.T) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func rawGet(t *testing.T, key string) string {
	t.Helper()
	c := rdb(t)
	v, err := c.Do(context.Background(), c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// quietLogger drops asynq's logs below errors (a retried task logs a warning).
var quietLogger = asynq.ErrorLevel

// startServer runs an asynq server on queue with the middleware over claims
// and the package's IsFailure and RetryDelay (fallback: a fixed short delay,
// so a failed task is retried at once), polling its delayed tasks every
// 100ms. It is shut down at the end of the test.
// onErr, when not nil, hears every error a task run returns (asynq's
// ErrorHandler).
func startServer(t *testing.T, queue string, claims *store.Claims, lease time.Duration, h asynq.HandlerFunc, onErr func(error)) {
	t.Helper()
	srv := newServer(t, queue, claims, lease, h, onErr)
	t.Cleanup(srv.Shutdown)
}

// newServer is startServer's server, started; the caller shuts it down.
func newServer(t *testing.T, queue string, claims *store.Claims, lease time.Duration, h asynq.HandlerFunc, onErr func(error)) *asynq.Server {
	t.Helper()
	var eh asynq.ErrorHandler
	if onErr != nil {
		eh = asynq.ErrorHandlerFunc(func(_ context.Context, _ *asynq.Task, err error) { onErr(err) })
	}
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: redisAddr}, asynq.Config{
		Concurrency:              4,
		Queues:                   map[string]int{queue: 1},
		IsFailure:                asynqonce.IsFailure,
		RetryDelayFunc:           asynqonce.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 10 * time.Millisecond }),
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        50 * time.Millisecond,
		LogLevel:                 quietLogger,
		ShutdownTimeout:          5 * time.Second,
		ErrorHandler:             eh,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.Middleware(claims, asynqonce.WithLease(lease)))
	mux.Handle("job", h)
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	return srv
}

func enqueue(t *testing.T, queue, id string, opts ...asynq.Option) {
	t.Helper()
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: redisAddr})
	defer c.Close()
	opts = append([]asynq.Option{asynq.Queue(queue), asynq.TaskID(id), asynq.Retention(time.Hour)}, opts...)
	if _, err := c.Enqueue(asynq.NewTask("job", []byte(id)), opts...); err != nil {
		t.Fatal(err)
	}
}

// waitState polls the task's state until it is want (bounded).
func waitState(t *testing.T, queue, id string, want asynq.TaskState, within time.Duration) *asynq.TaskInfo {
	t.Helper()
	in := asynq.NewInspector(asynq.RedisClientOpt{Addr: redisAddr})
	defer in.Close()
	deadline := time.Now().Add(within)
	for {
		info, err := in.GetTaskInfo(queue, id)
		if err == nil && info.State == want {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s not %v within %v: %+v, %v", id, want, within, info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
