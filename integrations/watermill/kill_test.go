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
