package jetstream_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The process test's worker: the test binary re-executed with workerEnv set.
const workerEnv = "REDISONCE_JETSTREAM_WORKER"

const (
	// Leases of seconds, so that a live holder's heartbeat keeps its lease
	// on a loaded machine; the lease is extended (and InProgress sent) every
	// second, half the AckWait.
	procLease   = 3 * time.Second
	procAckWait = 2 * time.Second
	procSlow    = 4 * time.Second // slower than AckWait
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runWorker consumes the stream until SIGTERM. fn's effect is one Redis
// command (HINCRBY effects <id> 1), so it is all-or-nothing; a slow message
// first says which worker holds it (SET inside:<worker> <id>). Every outcome is
// counted in Redis as it happens, so a SIGKILLed worker's counts survive.
func runWorker() error {
	w, prefix := os.Getenv(workerEnv), os.Getenv("JS_PREFIX")
	opt, err := store.ClientOptions(os.Getenv("JS_REDIS"))
	if err != nil {
		return err
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return err
	}
	defer rc.Close()
	nc, err := nats.Connect(os.Getenv("JS_NATS"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cons, err := js.Consumer(ctx, os.Getenv("JS_STREAM"), "workers")
	if err != nil {
		return err
	}
	do := func(cmd rueidis.Completed) { _ = rc.Do(context.WithoutCancel(ctx), cmd).Error() }
	h, err := jetstream.New(must.Store(store.NewClaims(rc, store.WithPrefix(prefix+"claims:"))),
		func(ctx context.Context, msg natsjs.Msg) error {
			id, _ := jetstream.MsgID(msg)
			if msg.Headers().Get("Slow") == "1" {
				do(rc.B().Set().Key(prefix + "inside:" + w).Value(id).Build())
				select {
				case <-time.After(procSlow):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return rc.Do(context.WithoutCancel(ctx), rc.B().Hincrby().Key(prefix+"effects").Field(id).Increment(1).Build()).Error()
		},
		jetstream.WithLease(procLease), jetstream.WithContext(ctx), jetstream.WithBatch(100, 500*time.Millisecond),
		jetstream.WithReport(func(msg natsjs.Msg, o jetstream.Outcome, err error) {
			id, _ := jetstream.MsgID(msg)
			do(rc.B().Hincrby().Key(prefix + "outcomes").Field(string(o)).Increment(1).Build())
			if o == jetstream.OutcomeInFlight {
				do(rc.B().Hincrby().Key(prefix + "inflight").Field(id).Increment(1).Build())
			}
		}))
	if err != nil {
		return err
	}
	var cc natsjs.ConsumeContext
	if os.Getenv("JS_BATCH") != "" {
		// Handler.Consume, every message the consumer has queued within
		// 500 ms in one batch
		cc, err = h.Consume(cons)
	} else {
		cc, err = cons.Consume(h.Handle, natsjs.PullMaxMessages(1))
	}
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	return nil
}

// Three consumer processes share one durable consumer (AckWait 2 s); one in
// 40 handlers runs 4 s; one process is SIGKILLed inside such a handler; one
// payment in 10, and half the slow ones, are published again after the
// stream's duplicate window (JetStream stores them again).
// Afterwards every payment's effect happened exactly once, the slow handlers
// of live processes were never redelivered under them, and in-flight
// redeliveries are bounded by the lease.
func TestProcessesKilledMidHandler(t *testing.T) {
	const n, workers = 300, 3
	e := newEnv(t, 100*time.Millisecond)
	ctx := context.Background()
	if _, err := e.stream.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "workers",
		AckPolicy: natsjs.AckExplicitPolicy, AckWait: procAckWait, MaxAckPending: 1000}); err != nil {
		t.Fatal(err)
	}
	rc := newRedis(t, e.redisURL)
	prefix := "jsproc:"
	id := func(i int) string { return fmt.Sprintf("pay-%04d", i) }
	slow := func(i int) bool { return i%40 == 5 }
	// republished: one payment in 10, and half the slow ones (those meet
	// their original in flight)
	dup := func(i int) bool { return i%10 == 0 || i%80 == 45 }
	// publish stores payment i, again when it was stored before: JetStream
	// drops a copy within its duplicate window (100 ms, purged a little
	// later), so a republish is retried (bounded) until it is stored.
	publish := func(i int) {
		m := nats.NewMsg(e.subject + ".pay")
		m.Header.Set(nats.MsgIdHdr, id(i))
		if slow(i) {
			m.Header.Set("Slow", "1")
		}
		for range 50 {
			ack, err := e.js.PublishMsg(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if !ack.Duplicate {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: JetStream kept dropping it as a duplicate", id(i))
	}
	dups := 0
	for i := range n {
		publish(i)
		if dup(i) && slow(i) {
			// right behind its original, past the duplicate window: two
			// workers get the two copies at once
			publish(i)
			dups++
		}
	}

	procs := make([]*exec.Cmd, workers)
	for w := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+strconv.Itoa(w), "JS_PREFIX="+prefix,
			"JS_REDIS="+e.redisURL, "JS_NATS="+e.natsURL, "JS_STREAM="+e.stream.CachedInfo().Config.Name)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[w] = cmd
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	get := func(cmd rueidis.Completed) string {
		s, err := rc.Do(ctx, cmd).ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		return s
	}

	// Kill worker 0 inside a slow handler (bounded wait).
	start := time.Now()
	var victimID string
	for victimID == "" && time.Since(start) < 30*time.Second {
		victimID = get(rc.B().Get().Key(prefix + "inside:0").Build())
		time.Sleep(20 * time.Millisecond)
	}
	if victimID == "" {
		t.Fatal("worker 0 never entered a slow handler")
	}
	time.Sleep(500 * time.Millisecond) // well inside the 4 s handler
	if err := procs[0].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = procs[0].Wait()
	killedAt := time.Since(start)

	// Publish duplicates while the others consume (past the duplicate
	// window, so JetStream stores them again).
	for i := range n {
		if dup(i) && !slow(i) {
			publish(i)
			dups++
		}
	}

	// Wait (bounded) until every payment has its effect and nothing is pending.
	var info *natsjs.ConsumerInfo
	for time.Since(start) < 90*time.Second {
		hlen, err := rc.Do(ctx, rc.B().Hlen().Key(prefix+"effects").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.js.Consumer(ctx, e.stream.CachedInfo().Config.Name, "workers")
		if err != nil {
			t.Fatal(err)
		}
		if info, err = c.Info(ctx); err != nil {
			t.Fatal(err)
		}
		if hlen == n && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	for _, p := range procs[1:] {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait()
	}

	effects, err := rc.Do(ctx, rc.B().Hgetall().Key(prefix+"effects").Build()).AsIntMap()
	if err != nil {
		t.Fatal(err)
	}
	outcomes, _ := rc.Do(ctx, rc.B().Hgetall().Key(prefix+"outcomes").Build()).AsIntMap()
	inflight, _ := rc.Do(ctx, rc.B().Hgetall().Key(prefix+"inflight").Build()).AsIntMap()
	lost, twice := 0, 0
	for i := range n {
		switch effects[id(i)] {
		case 0:
			lost++
		case 1:
		default:
			twice++
			t.Errorf("%s: effect ran %d times", id(i), effects[id(i)])
		}
	}
	var totalInFlight int64
	var slowRedelivered []string
	for k, v := range inflight {
		totalInFlight += v
		var i int
		if _, err := fmt.Sscanf(k, "pay-%d", &i); err == nil && slow(i) && !dup(i) && k != victimID {
			slowRedelivered = append(slowRedelivered, fmt.Sprintf("%s:%d", k, v))
		}
	}
	// Each id is held at most procSlow + procLease (a live slow handler, or the
	// victim's until its lease runs out); every in-flight nak delays the next
	// delivery by at least 2/3 of a lease. The ids that can meet a holder: the
	// victim's, and the republished ones.
	perHeld := int64((procSlow+procLease)/(2*procLease/3)) + 2
	bound := int64(dups+1) * perHeld
	t.Logf("%d payments (%d slow, %d republished), %d worker processes, worker 0 SIGKILLed at %v inside %s; done in %v",
		n, n/40, dups, workers, killedAt.Round(time.Millisecond), victimID, took.Round(time.Millisecond))
	t.Logf("effects: %d exactly once, %d lost, %d more than once; outcomes %v; consumer: %d redelivered, %d ack pending, %d pending",
		len(effects)-twice, lost, twice, outcomes, info.NumRedelivered, info.NumAckPending, info.NumPending)
	t.Logf("in-flight naks: %d in all (bound %d = %d ids that can meet a holder x %d), victim's id %d",
		totalInFlight, bound, dups+1, perHeld, inflight[victimID])
	if lost != 0 || len(effects) != n {
		t.Errorf("%d payments lost, %d effects for %d payments", lost, len(effects), n)
	}
	if len(slowRedelivered) > 0 {
		t.Errorf("slow handlers of live workers met redeliveries (id:naks): %s", strings.Join(slowRedelivered, " "))
	}
	if totalInFlight > bound {
		t.Errorf("%d in-flight naks, more than the lease allows (%d): a busy redelivery loop", totalInFlight, bound)
	}
	if totalInFlight == 0 {
		t.Error("no in-flight nak: the republished slow payments never met their original in flight")
	}
	if outcomes[string(jetstream.OutcomeDuplicate)] == 0 {
		t.Error("no duplicate was acked: the republished payments did not reach the handlers")
	}
}

// A worker SIGKILLed in the middle of a batch of Handler.Consume: 60
// payments published before it starts, so one batch holds them all and
// claims them together; payment 20 takes 4 s, and the worker is killed
// 500 ms into it, holding the claims of payments 20..59 (checked on the raw
// keys), its payments 0..19 done and committed. A second worker then
// consumes: every payment's effect exactly once (per id), the ones the
// victim held once their redeliveries found the victim's leases run out,
// and nothing left pending.
func TestProcessKilledMidBatch(t *testing.T) {
	const n, slowAt = 60, 20
	e := newEnv(t, 0)
	ctx := context.Background()
	name := e.stream.CachedInfo().Config.Name
	if _, err := e.stream.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "workers",
		AckPolicy: natsjs.AckExplicitPolicy, AckWait: procAckWait, MaxAckPending: 1000}); err != nil {
		t.Fatal(err)
	}
	rc := newRedis(t, e.redisURL)
	prefix := "jsbatch:"
	id := func(i int) string { return fmt.Sprintf("pay-%04d", i) }
	for i := range n {
		m := nats.NewMsg(e.subject + ".pay")
		m.Header.Set(nats.MsgIdHdr, id(i))
		if i == slowAt {
			m.Header.Set("Slow", "1")
		}
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	worker := func(w int) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+strconv.Itoa(w), "JS_PREFIX="+prefix, "JS_BATCH=1",
			"JS_REDIS="+e.redisURL, "JS_NATS="+e.natsURL, "JS_STREAM="+name)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	get := func(key string) string {
		s, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		return s
	}

	victim := worker(0)
	start := time.Now()
	for get(prefix+"inside:0") != id(slowAt) {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the worker never entered the slow payment")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // well inside the 4 s handler
	held, committed := 0, 0
	for i := range n {
		switch v := get(prefix + "claims:" + id(i)); {
		case i >= slowAt && strings.HasPrefix(v, "~"):
			held++
		case i < slowAt && v == "1":
			committed++
		}
	}
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	atKill, _ := rc.Do(ctx, rc.B().Hgetall().Key(prefix+"effects").Build()).AsIntMap()

	second := worker(1)
	var info *natsjs.ConsumerInfo
	var effects map[string]int64
	for time.Since(start) < 60*time.Second {
		var err error
		if effects, err = rc.Do(ctx, rc.B().Hgetall().Key(prefix+"effects").Build()).AsIntMap(); err != nil {
			t.Fatal(err)
		}
		c, err := e.js.Consumer(ctx, name, "workers")
		if err != nil {
			t.Fatal(err)
		}
		if info, err = c.Info(ctx); err != nil {
			t.Fatal(err)
		}
		if len(effects) == n && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	_ = second.Process.Signal(syscall.SIGTERM)
	_ = second.Wait()
	outcomes, _ := rc.Do(ctx, rc.B().Hgetall().Key(prefix+"outcomes").Build()).AsIntMap()
	t.Logf("killed inside %s holding %d of the %d claims from it on, %d of the %d before it committed, %d effects at the kill; "+
		"done in %v: outcomes %v, %d ack pending, %d pending", id(slowAt), held, n-slowAt, committed, slowAt, len(atKill),
		took.Round(time.Millisecond), outcomes, info.NumAckPending, info.NumPending)
	if held != n-slowAt {
		t.Errorf("the victim held %d claims of payments %d..%d, want all %d: the batch was not claimed together", held, slowAt, n-1, n-slowAt)
	}
	for i := range n {
		if effects[id(i)] != 1 {
			t.Errorf("%s: effect ran %d times, want 1", id(i), effects[id(i)])
		}
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("%d ack pending, %d pending at the end", info.NumAckPending, info.NumPending)
	}
}
