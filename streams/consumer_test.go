package streams_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/internal/redistest"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// newServer starts a throwaway redis-server (skipping without one, failing
// under CI=true) and returns a client for it.
func newServer(t *testing.T) (*redisproc.Server, rueidis.Client) {
	t.Helper()
	if _, err := redisproc.LookPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skip(err)
	}
	srv := redisproc.StartT(t, redisproc.Options{})
	return srv, newClient(t, srv.URL())
}

// newClient opens a client on url with the stores' options, closed when the test ends.
var newClient = redistest.Client

// events counts a Consumer's outcomes.
type events struct {
	mu sync.Mutex
	n  map[store.Outcome]int
}

func (e *events) Observe(_ context.Context, ev store.Event) {
	if ev.Op != "handle" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[store.Outcome]int{}
	}
	e.n[ev.Outcome]++
}

func (e *events) get(o store.Outcome) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[o]
}

func xadd(t *testing.T, c rueidis.Client, stream string, kv ...string) string {
	t.Helper()
	cmd := c.B().Xadd().Key(stream).Id("*").FieldValue()
	for i := 0; i+1 < len(kv); i += 2 {
		cmd = cmd.FieldValue(kv[i], kv[i+1])
	}
	id, err := c.Do(context.Background(), cmd.Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func pending(t *testing.T, c rueidis.Client, stream, group string) int64 {
	t.Helper()
	res, err := c.Do(context.Background(), c.B().Arbitrary("XPENDING").Keys(stream).Args(group).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := res[0].AsInt64()
	return n
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runConsumer runs c until the test ends, and returns a function that stops
// it and waits for Run to return.
func runConsumer(t *testing.T, c *streams.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestConsumerOncePerEntry: every entry handled once and acked, the group
// created on a stream that did not exist.
func TestConsumerOncePerEntry(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("once:")))
	var ev events
	var mu sync.Mutex
	seen := map[string]int{}
	h := func(ctx context.Context, m streams.Message) error {
		if _, ok := store.LeaseFromContext(ctx); !ok {
			t.Error("the handler's context has no lease")
		}
		mu.Lock()
		seen[m.Values["n"]]++
		mu.Unlock()
		return nil
	}
	c, err := streams.New(rc, claims, "s", "g", "c1", h, streams.WithConcurrency(8), streams.WithObserver(&ev))
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	const n = 300
	for i := range n {
		xadd(t, rc, "s", "n", strconv.Itoa(i))
	}
	waitFor(t, 10*time.Second, "every entry acked", func() bool { return ev.get(store.Outcome("acked")) == n })
	stop()
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if seen[strconv.Itoa(i)] != 1 {
			t.Errorf("entry %d handled %d times, want 1", i, seen[strconv.Itoa(i)])
		}
	}
	if p := pending(t, rc, "s", "g"); p != 0 {
		t.Errorf("%d entries pending after every one was acked", p)
	}
}

// TestConsumerDuplicateXADD: a producer that XADDs one message twice (the
// id in a field) gets one effect; both entries are acked.
func TestConsumerDuplicateXADD(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("dup:")))
	var ev events
	var runs atomic.Int64
	h := func(context.Context, streams.Message) error { runs.Add(1); return nil }
	// The copies read in the same batch as the first wait for it in this
	// process, then find the id processed.
	c, err := streams.New(rc, claims, "s", "g", "c1", h, streams.WithIDField("msg_id"), streams.WithLease(300*time.Millisecond),
		streams.WithObserver(&ev))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	for range 3 {
		xadd(t, rc, "s", "msg_id", "pay-1", "amount", "5")
	}
	waitFor(t, 10*time.Second, "3 entries settled", func() bool {
		return ev.get(store.Outcome("acked"))+ev.get(store.Outcome("duplicate")) == 3
	})
	xadd(t, rc, "s", "msg_id", "pay-1", "amount", "5") // a later retry: a duplicate at once
	waitFor(t, 10*time.Second, "4 entries settled", func() bool {
		return ev.get(store.Outcome("acked"))+ev.get(store.Outcome("duplicate")) == 4
	})
	if got := runs.Load(); got != 1 || ev.get(store.Outcome("acked")) != 1 || ev.get(store.Outcome("duplicate")) != 3 {
		t.Errorf("runs %d, acked %d, duplicate %d; want 1, 1, 3", got, ev.get(store.Outcome("acked")), ev.get(store.Outcome("duplicate")))
	}
	waitFor(t, 5*time.Second, "nothing pending", func() bool { return pending(t, rc, "s", "g") == 0 })
}

// TestConsumerSlowHandlerPacedByLease: a handler that runs 3 leases long
// while a second consumer keeps reclaiming its entry: no second run starts
// while a first run's context is live (on a machine loaded enough to delay
// the lease extensions past the lease, the first run is cancelled, and only
// then may another start), and the in-flight redeliveries are paced by the
// lease (RetryAfter), not by the reclaim interval.
func TestConsumerSlowHandlerPacedByLease(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("slow:")))
	const lease = time.Second
	const handler = 3 * lease
	type span struct{ start, end time.Time }
	var mu sync.Mutex
	var runs []span // each run: its start, and when its context ended (or it returned)
	h := func(ctx context.Context, m streams.Message) error {
		mu.Lock()
		i := len(runs)
		runs = append(runs, span{start: time.Now()})
		mu.Unlock()
		defer func() {
			mu.Lock()
			runs[i].end = time.Now()
			mu.Unlock()
		}()
		select {
		case <-time.After(handler):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var ev1, ev2 events
	reclaim := 20 * time.Millisecond
	c1, err := streams.New(rc, claims, "s", "g", "c1", h, streams.WithLease(lease), streams.WithReclaimInterval(reclaim), streams.WithObserver(&ev1))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := streams.New(rc, claims, "s", "g", "c2", h, streams.WithLease(lease), streams.WithReclaimInterval(reclaim), streams.WithObserver(&ev2))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runConsumer(t, c1)
	runConsumer(t, c2)
	xadd(t, rc, "s", "n", "1")
	waitFor(t, 10*handler, "the entry acked", func() bool { return ev1.get(store.Outcome("acked"))+ev2.get(store.Outcome("acked")) == 1 })
	elapsed := time.Since(start)
	inFlight := ev1.get(store.Outcome("in_flight")) + ev2.get(store.Outcome("in_flight"))
	// Each in-flight redelivery parks the entry for the lease time left (3/4
	// of the lease or more: the holder extends every lease/4; lease/2 leaves
	// lease/4 for an extension delayed by a loaded machine), and the first
	// one comes a lease after the delivery: at most elapsed/(lease/2) of
	// them. A reclaim every 20 ms without the pacing would make ~elapsed/20ms.
	bound := int(elapsed/(lease/2)) + 1
	mu.Lock()
	defer mu.Unlock()
	var spans []string
	for _, r := range runs {
		spans = append(spans, fmt.Sprintf("+%v..+%v", r.start.Sub(start).Round(time.Millisecond), r.end.Sub(start).Round(time.Millisecond)))
	}
	t.Logf("handler %v, elapsed %v: %d run(s) %v, %d in-flight redeliveries (bound %d; %d reclaim ticks)",
		handler, elapsed.Round(time.Millisecond), len(runs), spans, inFlight, bound, elapsed/reclaim)
	if len(runs) == 0 {
		t.Fatal("the handler never ran")
	}
	for i := 1; i < len(runs); i++ {
		if runs[i].start.Before(runs[i-1].end) {
			t.Errorf("run %d started at +%v while run %d's context was live (until +%v)", i, runs[i].start.Sub(start), i-1, runs[i-1].end.Sub(start))
		}
	}
	if len(runs) > 1 {
		t.Logf("the first run lost its lease (extensions delayed past the lease on a loaded machine) and was cancelled first")
	}
	if inFlight < 1 || inFlight > bound {
		t.Errorf("%d in-flight redeliveries, want 1..%d (the entry was idle past the lease, so reclaimed at least once)", inFlight, bound)
	}
}

// TestConsumerFailureRetriedThenDeadLettered: a failing handler is retried
// after the retry delay; one that fails maxDeliveries times is dead-lettered
// (XADD to the named stream, then XACK) and never retried again.
func TestConsumerFailureRetriedThenDeadLettered(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("dl:")))
	var ev events
	var mu sync.Mutex
	tries := map[string][]time.Time{}
	h := func(_ context.Context, m streams.Message) error {
		mu.Lock()
		defer mu.Unlock()
		tries[m.Values["n"]] = append(tries[m.Values["n"]], time.Now())
		if m.Values["n"] == "flaky" && len(tries["flaky"]) == 1 {
			panic("transient") // a panic is a failure: retried, not a crash
		}
		if m.Values["n"] == "poison" {
			return fmt.Errorf("cannot apply (delivery %d)", m.Deliveries)
		}
		if m.Values["n"] == "declined" {
			return store.Permanent(errors.New("card declined"))
		}
		return nil
	}
	const retry = 100 * time.Millisecond
	c, err := streams.New(rc, claims, "s", "g", "c1", h, streams.WithLease(500*time.Millisecond),
		streams.WithRetryDelay(retry), streams.WithReclaimInterval(20*time.Millisecond),
		streams.WithDeadLetter("s:dead", 3), streams.WithObserver(&ev))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	poison := xadd(t, rc, "s", "n", "poison")
	xadd(t, rc, "s", "n", "flaky")
	xadd(t, rc, "s", "n", "declined")
	waitFor(t, 15*time.Second, "flaky acked, poison and declined dead-lettered", func() bool {
		return ev.get(store.Outcome("acked")) == 1 && ev.get(streams.OutcomeDeadLettered) == 2
	})
	mu.Lock()
	flaky, poisonTries, declinedTries := tries["flaky"], len(tries["poison"]), len(tries["declined"])
	mu.Unlock()
	if declinedTries != 1 {
		t.Errorf("declined (a store.Permanent error) ran %d times, want 1: dead-lettered at once", declinedTries)
	}
	if len(flaky) != 2 || flaky[1].Sub(flaky[0]) < retry {
		t.Errorf("flaky ran at %v, want twice, the retry at least %v later", flaky, retry)
	}
	if poisonTries != 3 {
		t.Errorf("poison ran %d times, want 3 (WithDeadLetter(..., 3))", poisonTries)
	}
	dead, err := rc.Do(context.Background(), rc.B().Xrange().Key("s:dead").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(dead) != 2 {
		t.Fatalf("dead letters = %v, %v; want 2", dead, err)
	}
	if dead[0].FieldValues["n"] == "declined" {
		dead[0], dead[1] = dead[1], dead[0]
	}
	if v := dead[1].FieldValues; v["n"] != "declined" || v["redisonce.error"] != "card declined" || v["redisonce.deliveries"] != "1" {
		t.Errorf("dead letter of the declined entry = %v", v)
	}
	v := dead[0].FieldValues
	if v["n"] != "poison" || v["redisonce.stream"] != "s" || v["redisonce.id"] != poison || v["redisonce.deliveries"] != "3" ||
		v["redisonce.error"] != "cannot apply (delivery 3)" {
		t.Errorf("dead letter = %v", v)
	}
	waitFor(t, 5*time.Second, "nothing pending", func() bool { return pending(t, rc, "s", "g") == 0 })
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(tries["poison"]) != 3 {
		t.Errorf("poison ran %d times after it was dead-lettered, want 3", len(tries["poison"]))
	}
}

// TestConsumerShutdown: Run stops reading when its context is done, lets a
// handler finish within the grace, and cancels one that outlives it; that
// entry is left pending and reclaimed at once by another consumer, which
// runs it (the released claim lets it).
func TestConsumerShutdown(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("shut:")))
	var ev1, ev2 events
	started := make(chan string, 2)
	var runs2 atomic.Int64
	h1 := func(ctx context.Context, m streams.Message) error {
		started <- m.Values["n"]
		if m.Values["n"] == "quick" {
			time.Sleep(100 * time.Millisecond)
			return nil
		}
		<-ctx.Done() // the long one: only the end of the grace stops it
		return ctx.Err()
	}
	const lease = 2 * time.Second
	c1, err := streams.New(rc, claims, "s", "g", "c1", h1, streams.WithLease(lease), streams.WithShutdownGrace(300*time.Millisecond), streams.WithObserver(&ev1))
	if err != nil {
		t.Fatal(err)
	}
	stop1 := runConsumer(t, c1)
	xadd(t, rc, "s", "n", "quick")
	xadd(t, rc, "s", "n", "long")
	<-started
	<-started
	t0 := time.Now()
	stop1()
	took := time.Since(t0)
	if ev1.get(store.Outcome("acked")) != 1 || ev1.get(store.Outcome("released")) != 1 {
		t.Errorf("at shutdown: acked %d, released %d; want 1, 1", ev1.get(store.Outcome("acked")), ev1.get(store.Outcome("released")))
	}
	if took > lease {
		t.Errorf("shutdown took %v, more than the lease %v (grace 300ms)", took, lease)
	}
	xadd(t, rc, "s", "n", "after") // read by nobody until c2 starts
	h2 := func(ctx context.Context, m streams.Message) error { runs2.Add(1); return nil }
	c2, err := streams.New(rc, claims, "s", "g", "c2", h2, streams.WithLease(lease), streams.WithReclaimInterval(20*time.Millisecond), streams.WithObserver(&ev2))
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	runConsumer(t, c2)
	waitFor(t, 5*time.Second, "c2 acked the released and the new entry", func() bool { return ev2.get(store.Outcome("acked")) == 2 })
	// The released entry was parked idle for the whole min idle time: c2
	// reclaims it on its first ticks, well before a lease has passed.
	if d := time.Since(t1); d >= lease {
		t.Errorf("the released entry was reclaimed after %v, want before the lease %v", d, lease)
	}
	if pending(t, rc, "s", "g") != 0 {
		t.Error("entries pending after c2 acked them")
	}
}

// TestNewInvalid: bad arguments are refused before anything is sent.
func TestNewInvalid(t *testing.T) {
	claims := must.Store(store.NewMemoryClaims())
	h := func(context.Context, streams.Message) error { return nil }
	var rc rueidis.Client // nil: New must refuse before using it
	for name, err := range map[string]error{
		"nil client":   second(streams.New(rc, claims, "s", "g", "c", h)),
		"empty stream": second(streams.New(nil, claims, "", "g", "c", h)),
		"concurrency":  second(streams.New(nil, claims, "s", "g", "c", h, streams.WithConcurrency(0))),
		"lease":        second(streams.New(nil, claims, "s", "g", "c", h, streams.WithLease(0))),
		"dead letter":  second(streams.New(nil, claims, "s", "g", "c", h, streams.WithDeadLetter("", 3))),
		"max 0":        second(streams.New(nil, claims, "s", "g", "c", h, streams.WithDeadLetter("d", 0))),
		"id field":     second(streams.New(nil, claims, "s", "g", "c", h, streams.WithIDField(""))),
		"start id":     second(streams.New(nil, claims, "s", "g", "c", h, streams.WithStartID(""))),
		"nil claims":   second(streams.New(nil, nil, "s", "g", "c", h)),
		"same streams": second(streams.New(newClient(t, "redis://"+redisAddr), claims, "s", "g", "c", h, streams.WithDeadLetter("s", 3))),
	} {
		if !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestConsumerCluster: on a 3-master cluster, the stream, the dead-letter
// stream and the claim keys live in different slots (on different masters).
func TestConsumerCluster(t *testing.T) {
	if _, err := redisproc.LookPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skip(err)
	}
	cl := redisproc.StartClusterT(t, 3, redisproc.Options{})
	rc := newClient(t, cl.URL())
	ctx := context.Background()
	slot := func(key string) int64 {
		n, err := rc.Do(ctx, rc.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The claim keys "c:pay/<entry id>" spread over every slot.
	if slot("pay") == slot("pay:dead") || slot("pay") == slot("c:pay/1-0") {
		t.Fatalf("the keys share a slot: %d %d %d", slot("pay"), slot("pay:dead"), slot("c:pay/1-0"))
	}
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("c:")))
	var ev events
	var runs sync.Map
	h := func(_ context.Context, m streams.Message) error {
		if m.Values["n"] == "poison" {
			return errors.New("poison")
		}
		if _, dup := runs.LoadOrStore(m.Values["n"], true); dup {
			t.Errorf("entry %s ran twice", m.Values["n"])
		}
		return nil
	}
	for _, name := range []string{"c1", "c2"} {
		c, err := streams.New(rc, claims, "pay", "g", name, h, streams.WithLease(500*time.Millisecond),
			streams.WithRetryDelay(10*time.Millisecond), streams.WithDeadLetter("pay:dead", 2), streams.WithObserver(&ev))
		if err != nil {
			t.Fatal(err)
		}
		runConsumer(t, c)
	}
	const n = 200
	xadd(t, rc, "pay", "n", "poison")
	for i := range n {
		xadd(t, rc, "pay", "n", strconv.Itoa(i))
	}
	waitFor(t, 20*time.Second, "every entry acked and the poison dead-lettered", func() bool {
		return ev.get(store.Outcome("acked")) == n && ev.get(streams.OutcomeDeadLettered) == 1
	})
	if l, err := rc.Do(ctx, rc.B().Xlen().Key("pay:dead").Build()).AsInt64(); err != nil || l != 1 {
		t.Errorf("XLEN pay:dead = %d, %v; want 1", l, err)
	}
	waitFor(t, 5*time.Second, "nothing pending", func() bool { return pending(t, rc, "pay", "g") == 0 })
}

const workerEnv = "REDISONCE_STREAMS_WORKER"

// TestConsumerMissingIDField: an entry without the WithIDField field is not
// handled: dead-lettered when a dead-letter stream is set, else left pending
// and reported invalid (never dropped).
func TestConsumerMissingIDField(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("mid:")))
	var runs atomic.Int64
	h := func(context.Context, streams.Message) error { runs.Add(1); return nil }
	var evDL, evNone events
	withDL, err := streams.New(rc, claims, "a", "g", "c1", h, streams.WithIDField("msg_id"), streams.WithDeadLetter("a:dead", 3), streams.WithObserver(&evDL))
	if err != nil {
		t.Fatal(err)
	}
	without, err := streams.New(rc, claims, "b", "g", "c1", h, streams.WithIDField("msg_id"), streams.WithObserver(&evNone))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, withDL)
	runConsumer(t, without)
	xadd(t, rc, "a", "other", "x")
	xadd(t, rc, "b", "other", "x")
	waitFor(t, 10*time.Second, "both settled", func() bool {
		return evDL.get(streams.OutcomeDeadLettered) == 1 && evNone.get(store.Outcome("invalid")) == 1
	})
	if runs.Load() != 0 {
		t.Errorf("the handler ran %d times for entries without an id", runs.Load())
	}
	if l, _ := rc.Do(context.Background(), rc.B().Xlen().Key("a:dead").Build()).AsInt64(); l != 1 {
		t.Errorf("XLEN a:dead = %d, want 1", l)
	}
	waitFor(t, 5*time.Second, "a acked", func() bool { return pending(t, rc, "a", "g") == 0 })
	if p := pending(t, rc, "b", "g"); p != 1 {
		t.Errorf("b: %d pending, want 1 (left for an operator, not dropped)", p)
	}
}

// TestConsumerShutdownReleasesReadAhead: entries read ahead and not started
// when Run's context is done are left pending with their idle time past the
// min idle, so another consumer reclaims them at once; none of them runs in
// the stopping consumer.
func TestConsumerShutdownReleasesReadAhead(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("ra:")))
	release := make(chan struct{})
	var started atomic.Int64
	h := func(ctx context.Context, m streams.Message) error {
		started.Add(1)
		<-release
		return nil
	}
	var ev events
	const lease = 5 * time.Second
	c1, err := streams.New(rc, claims, "s", "g", "c1", h, streams.WithConcurrency(2), streams.WithLease(lease), streams.WithObserver(&ev))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		xadd(t, rc, "s", "n", strconv.Itoa(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c1.Run(ctx) }()
	// 2 handlers busy, 2 entries read ahead and waiting for a worker.
	waitFor(t, 5*time.Second, "2 handlers started and 4 entries read", func() bool {
		return started.Load() == 2 && pending(t, rc, "s", "g") == 4
	})
	cancel()
	// The entries waiting for a worker are released while both handlers
	// still run.
	waitFor(t, 5*time.Second, "the 2 read-ahead entries released", func() bool { return ev.get(store.Outcome("released")) == 2 })
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if started.Load() != 2 || ev.get(store.Outcome("acked")) != 2 || ev.get(store.Outcome("released")) != 2 {
		t.Errorf("started %d, acked %d, released %d; want 2, 2, 2", started.Load(), ev.get(store.Outcome("acked")), ev.get(store.Outcome("released")))
	}
	// The released entries are idle for the whole min idle (the lease)
	// already: XAUTOCLAIM with it takes them now.
	res, err := rc.Do(context.Background(), rc.B().Xautoclaim().Key("s").Group("g").Consumer("c2").
		MinIdleTime(strconv.FormatInt(lease.Milliseconds(), 10)).Start("0-0").Count(10).Justid().Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := res[1].AsStrSlice()
	if len(ids) != 2 {
		t.Errorf("XAUTOCLAIM min-idle %v took %v, want the 2 released entries", lease, ids)
	}
}

// TestConsumerOwnReclaim: a consumer's own entry, reclaimed while its handler
// runs longer than the lease, is not run again and does not take a worker:
// with 2 handlers, a new entry is handled while the slow one runs.
func TestConsumerOwnReclaim(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("own:")))
	const lease = 200 * time.Millisecond
	var runs atomic.Int64
	var fastDone atomic.Int64
	h := func(ctx context.Context, m streams.Message) error {
		if m.Values["n"] == "slow" {
			runs.Add(1)
			time.Sleep(6 * lease)
			if fastDone.Load() == 0 {
				t.Error("the fast entry waited for the slow one")
			}
			return nil
		}
		fastDone.Add(1)
		return nil
	}
	var ev events
	c, err := streams.New(rc, claims, "s", "g", "c1", h, streams.WithConcurrency(2), streams.WithLease(lease),
		streams.WithReclaimInterval(10*time.Millisecond), streams.WithObserver(&ev))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	xadd(t, rc, "s", "n", "slow")
	time.Sleep(4 * lease) // reclaimed by its own consumer, several times
	xadd(t, rc, "s", "n", "fast")
	waitFor(t, 10*time.Second, "both acked", func() bool { return ev.get(store.Outcome("acked")) == 2 })
	if runs.Load() != 1 {
		t.Errorf("the slow handler ran %d times, want 1", runs.Load())
	}
	if ev.get(store.Outcome("in_flight")) < 1 {
		t.Error("the slow entry was never reclaimed (it was idle for 6 leases)")
	}
}
