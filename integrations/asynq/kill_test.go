package asynq_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/rueidis"

	asynqonce "github.com/redisonce/redisonce/integrations/asynq"
	"github.com/redisonce/redisonce/store"
)

// workerEnv makes the test binary a worker process (workerMain).
const workerEnv = "REDISONCE_ASYNQ_WORKER"

// workerLease is the worker process's claims lease.
const workerLease = 2 * time.Second

// workerMain is a worker process: an asynq server on the queue and Redis the
// environment names, with the middleware; its handler records its start in
// the list <queue>:runs and then never finishes. It runs until it is killed.
func workerMain() int {
	addr, queue := os.Getenv("REDISONCE_ASYNQ_ADDR"), os.Getenv(workerEnv)
	claims, err := store.OpenClaims("redis://"+addr, store.WithPrefix(queue+":"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	conc := 1
	if n, err := strconv.Atoi(os.Getenv("REDISONCE_ASYNQ_CONCURRENCY")); err == nil {
		conc = n
	}
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{
		Concurrency: conc, Queues: map[string]int{queue: 1}, LogLevel: asynq.ErrorLevel,
		IsFailure: asynqonce.IsFailure, RetryDelayFunc: asynqonce.RetryDelay(nil),
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.Middleware(claims, asynqonce.WithLease(workerLease)))
	mux.HandleFunc("job", func(ctx context.Context, task *asynq.Task) error {
		if id := string(task.Payload()); strings.HasPrefix(id, "fast-") {
			// one write, seen through once sent (not cancelled with ctx)
			return c.Do(context.WithoutCancel(ctx), c.B().Hincrby().Key(queue+":effects").Field(id).Increment(1).Build()).Error()
		}
		if err := c.Do(ctx, c.B().Rpush().Key(queue+":runs").Element("worker:"+strconv.Itoa(os.Getpid())).Build()).Error(); err != nil {
			return err
		}
		<-ctx.Done() // mid-task, until killed
		return ctx.Err()
	})
	if err := srv.Start(mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	srv.Shutdown()
	return 0
}

// A worker process is SIGKILLed in the middle of a task. asynq's recoverer
// retries the task once its own lease has expired; the retry runs the
// handler only after the dead worker's claims lease has run out (never
// while it was live), and the effect happens once.
//
// asynq's recoverer takes a task back 30s after its asynq lease (30s, kept
// alive by the worker's heartbeat) expired, checking every minute. Instead
// of waiting those 60-90s, the test ages the task's entry in asynq's lease
// set (asynq:{queue}:lease, scored by expiry in Unix seconds) past the
// cutoff, then starts the second worker, whose recoverer runs at start: the
// same path asynq takes, a minute early.
func TestWorkerKilledMidTask(t *testing.T) {
	q := name(t)
	c := rdb(t)
	ctx := context.Background()
	enqueue(t, q, "k1", asynq.MaxRetry(3))

	worker := exec.Command(os.Args[0], "-test.run=^$")
	worker.Env = append(os.Environ(), workerEnv+"="+q, "REDISONCE_ASYNQ_ADDR="+redisAddr)
	worker.Stdout, worker.Stderr = os.Stderr, os.Stderr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := c.Do(ctx, c.B().Llen().Key(q+":runs").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker process did not start the task within 30s (runs: %d)", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Let the worker extend its lease a few times, then kill it.
	time.Sleep(2 * workerLease)
	if v := rawGet(t, q+":k1"); len(v) != 33 || v[0] != '~' {
		t.Fatalf("while the worker runs the task, its claim key holds %q, want a lease", v)
	}
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	killed := time.Now()
	pttl, err := c.Do(ctx, c.B().Pttl().Key(q+":k1").Build()).AsInt64()
	if err != nil || pttl <= 0 {
		t.Fatalf("after the kill, the claim key's PTTL is %d (%v), want the dead worker's lease still running", pttl, err)
	}
	leaseEnd := killed.Add(time.Duration(pttl) * time.Millisecond)

	// asynq's recovery, a minute early (see above).
	if err := c.Do(ctx, c.B().Zadd().Key("asynq:{"+q+"}:lease").Xx().ScoreMember().
		ScoreMember(float64(time.Now().Add(-61*time.Second).Unix()), "k1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var starts []time.Time
	effects := 0
	startServer(t, q, openClaims(t, q+":"), workerLease, func(ctx context.Context, task *asynq.Task) error {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, time.Now())
		effects++
		return c.Do(ctx, c.B().Rpush().Key(q+":runs").Element("second").Build()).Error()
	}, nil)
	info := waitState(t, q, "k1", asynq.TaskStateCompleted, 30*time.Second)

	mu.Lock()
	defer mu.Unlock()
	if effects != 1 || len(starts) != 1 {
		t.Fatalf("the second worker ran the task %d times (effects %d), want once", len(starts), effects)
	}
	if starts[0].Before(leaseEnd.Add(-5 * time.Millisecond)) {
		t.Errorf("the retry ran the handler %v after the kill, while the dead worker's lease was live until %v after it",
			starts[0].Sub(killed), leaseEnd.Sub(killed))
	}
	runs, err := c.Do(ctx, c.B().Lrange().Key(q+":runs").Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil || len(runs) != 2 || runs[1] != "second" {
		t.Errorf("runs %v (%v), want the killed worker's then the second's", runs, err)
	}
	if v := rawGet(t, q+":k1"); v != "1" {
		t.Errorf("claim key holds %q, want \"1\"", v)
	}
	// The lease-expiry recovery counts as one failure (asynq's own
	// ErrLeaseExpired); in-flight rounds, if the retry came early, do not.
	if info.Retried != 1 {
		t.Errorf("Retried = %d, want 1 (asynq's lease-expiry recovery)", info.Retried)
	}
	t.Logf("killed at 0; dead worker's lease ran to %v; the retry ran the handler at %v", leaseEnd.Sub(killed), starts[0].Sub(killed))
}

// A worker process running 8 tasks at once (Concurrency 8: their claims,
// extensions and commits gathered into shared script calls) is SIGKILLed
// with 8 tasks in flight, after 24 quick ones. asynq's recovery retries the
// 8 on a second worker, which runs each once the dead worker's lease on it
// has run out: every task's effect exactly once (per id), none run again.
func TestWorkerKilledMidGathering(t *testing.T) {
	const fast, slow = 24, 8
	q := name(t)
	c := rdb(t)
	ctx := context.Background()
	for i := range fast {
		enqueue(t, q, fmt.Sprintf("fast-%02d", i), asynq.MaxRetry(3))
	}
	for i := range slow {
		enqueue(t, q, fmt.Sprintf("slow-%02d", i), asynq.MaxRetry(3))
	}
	worker := exec.Command(os.Args[0], "-test.run=^$")
	worker.Env = append(os.Environ(), workerEnv+"="+q, "REDISONCE_ASYNQ_ADDR="+redisAddr, "REDISONCE_ASYNQ_CONCURRENCY=8")
	worker.Stdout, worker.Stderr = os.Stderr, os.Stderr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := c.Do(ctx, c.B().Llen().Key(q+":runs").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		done, err := c.Do(ctx, c.B().Hlen().Key(q+":effects").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n == slow && done == fast {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not finish the quick tasks and start the slow ones within 30s (runs %d, effects %d)", n, done)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(2 * workerLease) // a few gathered extensions
	leased := 0
	for i := range slow {
		if v := rawGet(t, fmt.Sprintf("%s:slow-%02d", q, i)); len(v) == 33 && v[0] == '~' {
			leased++
		}
	}
	if leased != slow {
		t.Fatalf("%d of the %d running tasks hold a lease before the kill, want all", leased, slow)
	}
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	killed := time.Now()
	leaseEnd := map[string]time.Time{}
	for i := range slow {
		id := fmt.Sprintf("slow-%02d", i)
		pttl, err := c.Do(ctx, c.B().Pttl().Key(q+":"+id).Build()).AsInt64()
		if err != nil || pttl <= 0 {
			t.Fatalf("%s: after the kill its claim key's PTTL is %d (%v), want the dead worker's lease still running", id, pttl, err)
		}
		leaseEnd[id] = killed.Add(time.Duration(pttl) * time.Millisecond)
		// asynq's recovery, a minute early (TestWorkerKilledMidTask)
		if err := c.Do(ctx, c.B().Zadd().Key("asynq:{"+q+"}:lease").Xx().ScoreMember().
			ScoreMember(float64(time.Now().Add(-61*time.Second).Unix()), id).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	starts := map[string][]time.Time{}
	startServer(t, q, openClaims(t, q+":"), workerLease, func(ctx context.Context, task *asynq.Task) error {
		id := string(task.Payload())
		mu.Lock()
		starts[id] = append(starts[id], time.Now())
		mu.Unlock()
		return c.Do(context.WithoutCancel(ctx), c.B().Hincrby().Key(q+":effects").Field(id).Increment(1).Build()).Error()
	}, nil)
	for i := range slow {
		waitState(t, q, fmt.Sprintf("slow-%02d", i), asynq.TaskStateCompleted, 30*time.Second)
	}
	effects, err := c.Do(ctx, c.B().Hgetall().Key(q+":effects").Build()).AsIntMap()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range fast {
		id := fmt.Sprintf("fast-%02d", i)
		if effects[id] != 1 || len(starts[id]) != 0 {
			t.Errorf("%s: effect %d times, run %d times by the second worker; want 1, 0", id, effects[id], len(starts[id]))
		}
	}
	for i := range slow {
		id := fmt.Sprintf("slow-%02d", i)
		if effects[id] != 1 || len(starts[id]) != 1 {
			t.Errorf("%s: effect %d times, run %d times by the second worker; want 1, 1", id, effects[id], len(starts[id]))
			continue
		}
		if starts[id][0].Before(leaseEnd[id].Add(-5 * time.Millisecond)) {
			t.Errorf("%s: the retry ran %v after the kill, while the dead worker's lease was live until %v after it",
				id, starts[id][0].Sub(killed), leaseEnd[id].Sub(killed))
		}
		if v := rawGet(t, q+":"+id); v != "1" {
			t.Errorf("%s: claim key holds %q, want \"1\"", id, v)
		}
	}
}
