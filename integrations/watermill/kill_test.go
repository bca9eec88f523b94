package watermill_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/rueidis"

	wmonce "github.com/redisonce/redisonce/integrations/watermill"
	"github.com/redisonce/redisonce/store"
)

// workerEnv makes the test binary a consumer process (workerMain); its value
// is the key prefix.
const workerEnv = "REDISONCE_WATERMILL_WORKER"

// workerLease is the consumer process's claims lease.
const workerLease = 2 * time.Second

// workerMain is a consumer process: a router with the middleware whose
// handler records its start in the list <prefix>runs and never finishes;
// the process delivers message m1 to itself, as the broker would. It runs
// until it is killed.
func workerMain() int {
	addr, pfx := os.Getenv("REDISONCE_WATERMILL_ADDR"), os.Getenv(workerEnv)
	claims, err := store.OpenClaims("redis://"+addr, store.WithPrefix(pfx))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ps := gochannel.NewGoChannel(gochannel.Config{}, wm.NopLogger{})
	r, err := message.NewRouter(message.RouterConfig{}, wm.NopLogger{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r.AddMiddleware(wmonce.Middleware(claims, wmonce.WithLease(workerLease)))
	if os.Getenv("REDISONCE_WATERMILL_GATHER") != "" {
		return gatherWorker(r, ps, c, pfx)
	}
	r.AddConsumerHandler("work", "orders", ps, func(msg *message.Message) error {
		if err := c.Do(msg.Context(), c.B().Rpush().Key(pfx+"runs").Element("worker:"+strconv.Itoa(os.Getpid())).Build()).Error(); err != nil {
			return err
		}
		<-msg.Context().Done() // mid-handler, until killed
		return msg.Context().Err()
	})
	go func() { _ = r.Run(context.Background()) }()
	<-r.Running()
	if err := ps.Publish("orders", message.NewMessage("m1", []byte("p"))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return 0
}

// A consumer process is SIGKILLed in the middle of its handler; the broker
// then redelivers the message to another consumer (here: the test publishes
// it again to a router of its own, as a broker whose consumer's connection
// dropped would). The second consumer holds the message while the dead
// consumer's lease is live, never running the handler then, and runs it once
// the lease has run out: the effect happens once, no message is lost.
func TestConsumerKilledMidHandler(t *testing.T) {
	pfx := prefix(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	worker := exec.Command(os.Args[0], "-test.run=^$")
	worker.Env = append(os.Environ(), workerEnv+"="+pfx, "REDISONCE_WATERMILL_ADDR="+redisAddr)
	worker.Stdout, worker.Stderr = os.Stderr, os.Stderr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	waitFor(t, 30*time.Second, "the consumer process starts the handler", func() bool {
		n, err := c.Do(ctx, c.B().Llen().Key(pfx+"runs").Build()).AsInt64()
		return err == nil && n == 1
	})
	time.Sleep(2 * workerLease) // a few lease extensions
	if v := rawGet(t, "m1"); len(v) != 33 || v[0] != '~' {
		t.Fatalf("while the consumer runs the handler, the key holds %q, want a lease", v)
	}
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	killed := time.Now()
	pttl, err := c.Do(ctx, c.B().Pttl().Key(pfx+"m1").Build()).AsInt64()
	if err != nil || pttl <= 0 {
		t.Fatalf("after the kill the key's PTTL is %d (%v), want the dead consumer's lease still running", pttl, err)
	}
	leaseEnd := killed.Add(time.Duration(pttl) * time.Millisecond)

	l := newLedger()
	var mu sync.Mutex
	var starts []time.Time
	ps := newPubSub(t)
	startConsumer(t, ps, "orders", "second", l, func(msg *message.Message) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return c.Do(msg.Context(), c.B().Rpush().Key(pfx+"runs").Element("second").Build()).Error()
	}, wmonce.Middleware(openClaims(t), wmonce.WithLease(workerLease)))
	if err := ps.Publish("orders", message.NewMessage("m1", []byte("p"))); err != nil { // the redelivery
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the redelivery acked", func() bool { return l.acked() == 1 })

	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 1 {
		t.Fatalf("the second consumer ran the handler %d times, want once", len(starts))
	}
	if starts[0].Before(leaseEnd.Add(-5 * time.Millisecond)) {
		t.Errorf("the handler ran %v after the kill, while the dead consumer's lease was live until %v after it",
			starts[0].Sub(killed), leaseEnd.Sub(killed))
	}
	runs, err := c.Do(ctx, c.B().Lrange().Key(pfx+"runs").Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil || len(runs) != 2 || runs[1] != "second" {
		t.Errorf("runs %v (%v), want the killed consumer's then the second's", runs, err)
	}
	if v := rawGet(t, "m1"); v != "1" {
		t.Errorf("key holds %q, want \"1\"", v)
	}
	t.Logf("killed at 0; the dead consumer's lease ran to %v; the handler ran at %v after %d attempts",
		leaseEnd.Sub(killed), starts[0].Sub(killed), len(l.attempts))
}

// gatherTopics and gatherFast: gatherWorker's handlers (one per topic, so
// that they run at once) and the quick messages each gets before its slow one.
const gatherTopics, gatherFast = 4, 6

// gatherWorker is workerMain with gatherTopics handlers on one middleware
// (their claims, extensions and commits gathered): each gets gatherFast
// quick messages ("f-<topic>-<i>": one write, HINCRBY <prefix>effects <uuid>
// 1), then a slow one ("s-<topic>": records its start in <prefix>runs and
// never finishes). It runs until it is killed.
func gatherWorker(r *message.Router, ps *gochannel.GoChannel, c rueidis.Client, pfx string) int {
	for k := range gatherTopics {
		r.AddConsumerHandler(fmt.Sprintf("work-%d", k), fmt.Sprintf("orders-%d", k), ps, func(msg *message.Message) error {
			if string(msg.Payload) == "fast" {
				return c.Do(context.WithoutCancel(msg.Context()), c.B().Hincrby().Key(pfx+"effects").Field(msg.UUID).Increment(1).Build()).Error()
			}
			if err := c.Do(msg.Context(), c.B().Rpush().Key(pfx+"runs").Element(msg.UUID).Build()).Error(); err != nil {
				return err
			}
			<-msg.Context().Done() // mid-handler, until killed
			return msg.Context().Err()
		})
	}
	go func() { _ = r.Run(context.Background()) }()
	<-r.Running()
	for k := range gatherTopics {
		go func() {
			for i := range gatherFast {
				_ = ps.Publish(fmt.Sprintf("orders-%d", k), message.NewMessage(fmt.Sprintf("f-%d-%d", k, i), []byte("fast")))
			}
			_ = ps.Publish(fmt.Sprintf("orders-%d", k), message.NewMessage(fmt.Sprintf("s-%d", k), []byte("slow")))
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return 0
}

// A consumer process whose 4 handlers run at once on one middleware (their
// lease calls gathered into shared script calls) is SIGKILLed with the 4
// slow messages in flight, after 24 quick ones. The unacked 4 are then
// redelivered to a second consumer, which runs each once the dead lease on
// it has run out: every message's effect exactly once (per id).
func TestConsumerKilledMidGathering(t *testing.T) {
	pfx := prefix(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	worker := exec.Command(os.Args[0], "-test.run=^$")
	worker.Env = append(os.Environ(), workerEnv+"="+pfx, "REDISONCE_WATERMILL_ADDR="+redisAddr, "REDISONCE_WATERMILL_GATHER=1")
	worker.Stdout, worker.Stderr = os.Stderr, os.Stderr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	waitFor(t, 30*time.Second, "the quick messages done and the slow ones started", func() bool {
		n, err1 := c.Do(ctx, c.B().Llen().Key(pfx+"runs").Build()).AsInt64()
		e, err2 := c.Do(ctx, c.B().Hlen().Key(pfx+"effects").Build()).AsInt64()
		return err1 == nil && err2 == nil && n == gatherTopics && e == gatherTopics*gatherFast
	})
	time.Sleep(2 * workerLease) // a few gathered extensions
	for k := range gatherTopics {
		if v := rawGet(t, fmt.Sprintf("s-%d", k)); len(v) != 33 || v[0] != '~' {
			t.Fatalf("s-%d: while its handler runs, the key holds %q, want a lease", k, v)
		}
	}
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	killed := time.Now()
	leaseEnd := map[string]time.Time{}
	for k := range gatherTopics {
		id := fmt.Sprintf("s-%d", k)
		pttl, err := c.Do(ctx, c.B().Pttl().Key(pfx+id).Build()).AsInt64()
		if err != nil || pttl <= 0 {
			t.Fatalf("%s: after the kill the key's PTTL is %d (%v), want the dead consumer's lease still running", id, pttl, err)
		}
		leaseEnd[id] = killed.Add(time.Duration(pttl) * time.Millisecond)
	}

	l := newLedger()
	var mu sync.Mutex
	starts := map[string][]time.Time{}
	ps := newPubSub(t)
	mw := wmonce.Middleware(openClaims(t), wmonce.WithLease(workerLease))
	for k := range gatherTopics {
		startConsumer(t, ps, fmt.Sprintf("orders-%d", k), fmt.Sprintf("second-%d", k), l, func(msg *message.Message) error {
			mu.Lock()
			starts[msg.UUID] = append(starts[msg.UUID], time.Now())
			mu.Unlock()
			return c.Do(context.WithoutCancel(msg.Context()), c.B().Hincrby().Key(pfx+"effects").Field(msg.UUID).Increment(1).Build()).Error()
		}, mw)
	}
	for k := range gatherTopics { // the redeliveries of what was not acked
		if err := ps.Publish(fmt.Sprintf("orders-%d", k), message.NewMessage(fmt.Sprintf("s-%d", k), []byte("slow"))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "the redeliveries acked", func() bool { return l.acked() == gatherTopics })
	effects, err := c.Do(ctx, c.B().Hgetall().Key(pfx+"effects").Build()).AsIntMap()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range gatherTopics {
		for i := range gatherFast {
			if id := fmt.Sprintf("f-%d-%d", k, i); effects[id] != 1 {
				t.Errorf("%s: effect %d times, want 1", id, effects[id])
			}
		}
		id := fmt.Sprintf("s-%d", k)
		if effects[id] != 1 || len(starts[id]) != 1 {
			t.Errorf("%s: effect %d times, run %d times by the second consumer; want 1, 1", id, effects[id], len(starts[id]))
			continue
		}
		if starts[id][0].Before(leaseEnd[id].Add(-5 * time.Millisecond)) {
			t.Errorf("%s: the handler ran %v after the kill, while the dead lease was live until %v after it",
				id, starts[id][0].Sub(killed), leaseEnd[id].Sub(killed))
		}
		if v := rawGet(t, id); v != "1" {
			t.Errorf("%s: key holds %q, want \"1\"", id, v)
		}
	}
}
