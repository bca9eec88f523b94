package watermill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/rueidis"

	wmonce "github.com/redisonce/redisonce/integrations/watermill"
	"github.com/redisonce/redisonce/store"
)

// attempt is one delivery of a message to a consumer, as the probe (the
// outermost middleware) saw it: what the router then did with it is acked
// when err is nil, nacked (and redelivered by GoChannel) otherwise.
type attempt struct {
	consumer, id string
	start, end   time.Time
	err          error
}

// ledger records the attempts and the handler's runs and effects.
type ledger struct {
	mu       sync.Mutex
	attempts []attempt
	runs     map[string]int // handler started
	effects  map[string]int // handler succeeded
	ends     map[string]time.Time
}

func newLedger() *ledger {
	return &ledger{runs: map[string]int{}, effects: map[string]int{}, ends: map[string]time.Time{}}
}

func (l *ledger) probe(consumer string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			start := time.Now()
			out, err := h(msg)
			l.mu.Lock()
			l.attempts = append(l.attempts, attempt{consumer, msg.UUID, start, time.Now(), err})
			l.mu.Unlock()
			return out, err
		}
	}
}

func (l *ledger) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.attempts {
		if a.err == nil {
			n++
		}
	}
	return n
}

// waitFor polls cond every 10ms until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startConsumer runs a router with one consumer handler on topic: the probe,
// then mws, then h. It returns once the router is running.
func startConsumer(t *testing.T, ps *gochannel.GoChannel, topic, name string, l *ledger, h message.NoPublishHandlerFunc, mws ...message.HandlerMiddleware) {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, wm.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	r.AddMiddleware(l.probe(name))
	r.AddMiddleware(mws...)
	r.AddConsumerHandler(name, topic, ps, h)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router %s: %v", name, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("router %s not running after 10s", name)
	}
}

func newPubSub(t *testing.T) *gochannel.GoChannel {
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 256}, wm.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	return ps
}

// Two consumers receive every message (GoChannel fans out to both, as a
// rebalance or a redelivery to another instance would), and every message is
// published twice; a quarter of the ids fail on their first run. Every id's
// effect happens exactly once, every delivery ends acked, and each id's key
// holds the processed mark.
func TestMiddlewareOncePerIDAcrossConsumersAndRedeliveries(t *testing.T) {
	const n, topic = 40, "orders"
	l := newLedger()
	ps := newPubSub(t)
	handler := func(msg *message.Message) error {
		l.mu.Lock()
		l.runs[msg.UUID]++
		first := l.runs[msg.UUID] == 1
		l.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		var i int
		fmt.Sscanf(msg.UUID, "m%d", &i)
		if first && i%4 == 0 {
			return errors.New("first run fails")
		}
		l.mu.Lock()
		l.effects[msg.UUID]++
		l.mu.Unlock()
		return nil
	}
	for _, c := range []string{"a", "b"} {
		startConsumer(t, ps, topic, c, l, handler, wmonce.Middleware(openClaims(t), wmonce.WithLease(2*time.Second)))
	}
	for round := 0; round < 2; round++ {
		for i := 0; i < n; i++ {
			if err := ps.Publish(topic, message.NewMessage(fmt.Sprintf("m%d", i), []byte("p"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 2 publishes x 2 consumers: every delivery ends acked.
	waitFor(t, 60*time.Second, "every delivery acked", func() bool { return l.acked() == 4*n })
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("m%d", i)
		if l.effects[id] != 1 {
			t.Errorf("%s: effect ran %d times, want 1 (handler started %d times)", id, l.effects[id], l.runs[id])
		}
		if want := 1 + btoi(i%4 == 0); l.runs[id] != want {
			t.Errorf("%s: handler started %d times, want %d", id, l.runs[id], want)
		}
		if v := rawGet(t, id); v != "1" {
			t.Errorf("%s: key holds %q, want the processed mark \"1\"", id, v)
		}
	}
	var inflight int
	for _, a := range l.attempts {
		if errors.Is(a.err, store.ErrInFlight) {
			inflight++
		}
	}
	t.Logf("%d attempts for %d deliveries (%d held as in flight)", len(l.attempts), 4*n, inflight)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A handler that runs for four leases keeps its message (the lease is
// extended), and the other consumer's copy is held back, not spun: each of
// its in-flight attempts waits for the holder's lease time left before the
// nack, so their number is bounded by the handler's run over a third of the
// lease (the heartbeat, extending every lease/4, leaves three quarters of it;
// a third leaves room for a delayed beat), and its last attempt acks it as a
// duplicate after the commit.
func TestMiddlewareSlowHandlerHoldsDuplicates(t *testing.T) {
	// Seconds, not milliseconds: on a loaded machine a sub-second lease can
	// starve its live holder's heartbeat.
	const topic, lease, slow = "slow", 1500 * time.Millisecond, 6 * time.Second
	l := newLedger()
	ps := newPubSub(t)
	handler := func(msg *message.Message) error {
		l.mu.Lock()
		l.runs[msg.UUID]++
		l.mu.Unlock()
		time.Sleep(slow)
		if err := msg.Context().Err(); err != nil {
			return err // the lease was lost
		}
		l.mu.Lock()
		l.effects[msg.UUID]++
		l.ends[msg.UUID] = time.Now()
		l.mu.Unlock()
		return nil
	}
	for _, c := range []string{"a", "b"} {
		startConsumer(t, ps, topic, c, l, handler, wmonce.Middleware(openClaims(t), wmonce.WithLease(lease)))
	}
	start := time.Now()
	if err := ps.Publish(topic, message.NewMessage("s1", []byte("p"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "both deliveries acked", func() bool { return l.acked() == 2 })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs["s1"] != 1 || l.effects["s1"] != 1 {
		t.Fatalf("handler started %d times, succeeded %d times; want 1 and 1", l.runs["s1"], l.effects["s1"])
	}
	var inflight []attempt
	var dupAck *attempt
	for i, a := range l.attempts {
		switch {
		case errors.Is(a.err, store.ErrInFlight):
			inflight = append(inflight, a)
		case a.err == nil && a.end.Before(l.ends["s1"]):
			t.Errorf("%s acked at %v, before the handler's effect at %v", a.consumer, a.end.Sub(start), l.ends["s1"].Sub(start))
		case a.err == nil && a.end.Sub(a.start) < slow/2:
			dupAck = &l.attempts[i]
		case a.err != nil:
			t.Errorf("%s: unexpected error %v", a.consumer, a.err)
		}
	}
	if dupAck == nil {
		t.Fatalf("no duplicate acked after the commit: %+v", l.attempts)
	}
	if len(inflight) == 0 {
		t.Errorf("the other consumer's copy was never held as in flight: %+v", l.attempts)
	}
	if max := int(slow/(lease/3)) + 2; len(inflight) > max {
		t.Errorf("%d in-flight attempts during a %v handler with a %v lease, want at most %d (a busy redelivery?)", len(inflight), slow, lease, max)
	}
	for _, a := range inflight {
		if a.consumer != dupAck.consumer {
			t.Errorf("in-flight attempt on %s, the holder; want only on %s", a.consumer, dupAck.consumer)
		}
	}
	t.Logf("handler done at %v; %d in-flight holds on %s, duplicate acked at %v",
		l.ends["s1"].Sub(start), len(inflight), dupAck.consumer, dupAck.end.Sub(start))
}

// A failing handler releases the id (the key is gone after each failure)
// and its message is nacked and redelivered until it succeeds: three runs,
// one effect, the processed mark.
func TestMiddlewareFailureReleasesAndRedelivers(t *testing.T) {
	const topic = "fail"
	l := newLedger()
	ps := newPubSub(t)
	var afterFailure []string // the key as each failed attempt left it
	check := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil {
				afterFailure = append(afterFailure, rawGet(t, msg.UUID))
			}
			return out, err
		}
	}
	handler := func(msg *message.Message) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.runs[msg.UUID]++
		if v := rawGet(t, msg.UUID); len(v) != 33 || v[0] != '~' {
			t.Errorf("run %d: key holds %q while the handler runs, want a lease", l.runs[msg.UUID], v)
		}
		if l.runs[msg.UUID] <= 2 {
			return fmt.Errorf("run %d fails", l.runs[msg.UUID])
		}
		l.effects[msg.UUID]++
		return nil
	}
	startConsumer(t, ps, topic, "a", l, handler, check, wmonce.Middleware(openClaims(t)))
	if err := ps.Publish(topic, message.NewMessage("f1", []byte("p"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the message acked", func() bool { return l.acked() == 1 })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs["f1"] != 3 || l.effects["f1"] != 1 {
		t.Errorf("handler started %d times, succeeded %d; want 3 and 1", l.runs["f1"], l.effects["f1"])
	}
	if len(afterFailure) != 2 || afterFailure[0] != "" || afterFailure[1] != "" {
		t.Errorf("after the failures the key held %q, want it released (absent) twice", afterFailure)
	}
	if v := rawGet(t, "f1"); v != "1" {
		t.Errorf("key holds %q, want \"1\"", v)
	}
}

// WithMetadataID: two messages with different UUIDs and one business id run
// the handler once; a message without the field fails with
// ErrInvalidArgument, runs nothing and writes nothing.
func TestMiddlewareMetadataID(t *testing.T) {
	claims := openClaims(t)
	runs := 0
	h := wmonce.Middleware(claims, wmonce.WithMetadataID("order_id"))(func(msg *message.Message) ([]*message.Message, error) {
		runs++
		return nil, nil
	})
	for _, uuid := range []string{"u1", "u2"} {
		msg := message.NewMessage(uuid, nil)
		msg.Metadata.Set("order_id", "o-42")
		if _, err := h(msg); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 1 {
		t.Errorf("handler ran %d times for one order id, want 1", runs)
	}
	if v := rawGet(t, "o-42"); v != "1" {
		t.Errorf("key o-42 holds %q, want \"1\"", v)
	}
	_, err := h(message.NewMessage("u3", nil))
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("no metadata: err = %v, want ErrInvalidArgument", err)
	}
	if runs != 1 || rawGet(t, "u3") != "" {
		t.Errorf("no metadata: handler ran (%d runs) or key u3 written (%q)", runs, rawGet(t, "u3"))
	}
}

// An invalid option fails every message, before anything is sent.
func TestMiddlewareInvalidOptions(t *testing.T) {
	claims := openClaims(t)
	for name, opt := range map[string]wmonce.Option{
		"WithLease(0)":  wmonce.WithLease(0),
		"WithLease(-1)": wmonce.WithLease(-time.Second),
		"WithID(nil)":   wmonce.WithID(nil),
	} {
		ran := false
		h := wmonce.Middleware(claims, opt)(func(*message.Message) ([]*message.Message, error) { ran = true; return nil, nil })
		_, err := h(message.NewMessage("x-"+name, nil))
		if !errors.Is(err, store.ErrInvalidArgument) || ran || rawGet(t, "x-"+name) != "" {
			t.Errorf("%s: err %v, ran %v, key %q; want ErrInvalidArgument, no run, no key", name, err, ran, rawGet(t, "x-"+name))
		}
	}
}

// The handler's message context carries the lease; the handler's outputs
// reach the router, and the id is committed once the router acks the input
// (after publishing them), not before.
func TestMiddlewareLeaseInContextAndOutputs(t *testing.T) {
	claims := openClaims(t)
	h := wmonce.Middleware(claims, wmonce.WithLease(time.Second))(func(msg *message.Message) ([]*message.Message, error) {
		lease, ok := store.LeaseFromContext(msg.Context())
		if !ok || lease.ID != msg.UUID || lease.Token == "" {
			t.Errorf("LeaseFromContext = %+v, %v; want the lease on %s", lease, ok, msg.UUID)
		}
		return []*message.Message{message.NewMessage("out-"+msg.UUID, nil)}, nil
	})
	msg := message.NewMessage("l1", nil)
	out, err := h(msg)
	if err != nil || len(out) != 1 || out[0].UUID != "out-l1" {
		t.Fatalf("got %v, %v; want the handler's output", out, err)
	}
	if v := rawGet(t, "l1"); len(v) != 33 || v[0] != '~' {
		t.Errorf("before the ack the key holds %q, want the lease", v)
	}
	msg.Ack() // the router published the outputs
	waitFor(t, 10*time.Second, "the commit after the ack", func() bool { return rawGet(t, "l1") == "1" })
	out, err = h(message.NewMessage("l1", nil))
	if err != nil || len(out) != 0 {
		t.Errorf("duplicate: got %v, %v; want nothing, acked", out, err)
	}
}

// failingPublisher fails its first fails publishes, as a broker that is
// briefly down would.
type failingPublisher struct {
	message.Publisher
	mu    sync.Mutex
	fails int
}

func (p *failingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	fail := p.fails > 0
	p.fails--
	p.mu.Unlock()
	if fail {
		return errors.New("broker down")
	}
	return p.Publisher.Publish(topic, msgs...)
}

// A handler's output messages are not lost when the router fails to publish
// them: the id is committed only once the router has published them and
// acked the input, so the nack that follows a failed publish releases the
// id, and the redelivery runs the handler and publishes again.
func TestMiddlewareOutputsNotLostWhenPublishFails(t *testing.T) {
	l := newLedger()
	ps := newPubSub(t)
	out, err := ps.Subscribe(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, wm.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	// GoChannel redelivers the nacked input at once, and the redelivery may
	// find the id still leased (the release follows the nack): it is then
	// held for the lease's time left, so a short lease.
	r.AddMiddleware(l.probe("a"), wmonce.Middleware(openClaims(t), wmonce.WithLease(500*time.Millisecond)))
	r.AddHandler("a", "in", ps, "out", &failingPublisher{Publisher: ps, fails: 1}, func(msg *message.Message) ([]*message.Message, error) {
		l.mu.Lock()
		l.runs[msg.UUID]++
		l.mu.Unlock()
		return []*message.Message{message.NewMessage("out-"+msg.UUID, nil)}, nil
	})
	go func() { _ = r.Run(context.Background()) }()
	defer r.Close()
	<-r.Running()
	if err := ps.Publish("in", message.NewMessage("p1", nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-out:
		m.Ack()
		if m.UUID != "out-p1" {
			t.Errorf("published %s, want out-p1", m.UUID)
		}
	case <-time.After(20 * time.Second):
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Fatalf("the output was never published (handler runs: %d): lost after the failed publish", l.runs["p1"])
	}
	waitFor(t, 10*time.Second, "the claim committed", func() bool { return rawGet(t, "p1") == "1" })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs["p1"] != 2 {
		t.Errorf("handler ran %d times, want 2 (the failed publish's run, then the redelivery's)", l.runs["p1"])
	}
}

// A handler that panics releases the id like a failure, and the middleware
// turns the panic into a nack by itself (no Recoverer in the router: a panic
// left to the router would crash the process); the redelivery runs the
// handler again.
func TestMiddlewarePanicReleasesAndRedelivers(t *testing.T) {
	l := newLedger()
	ps := newPubSub(t)
	handler := func(msg *message.Message) error {
		l.mu.Lock()
		l.runs[msg.UUID]++
		n := l.runs[msg.UUID]
		l.mu.Unlock()
		if n == 1 {
			panic("first run panics")
		}
		l.mu.Lock()
		l.effects[msg.UUID]++
		l.mu.Unlock()
		return nil
	}
	startConsumer(t, ps, "panic", "a", l, handler, wmonce.Middleware(openClaims(t)))
	if err := ps.Publish("panic", message.NewMessage("x1", nil)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the message acked", func() bool { return l.acked() == 1 })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs["x1"] != 2 || l.effects["x1"] != 1 {
		t.Errorf("handler started %d times, succeeded %d; want 2 and 1", l.runs["x1"], l.effects["x1"])
	}
	if len(l.attempts) != 2 || l.attempts[0].err == nil {
		t.Errorf("attempts %+v, want a recovered panic (nacked) then an ack", l.attempts)
	}
	if v := rawGet(t, "x1"); v != "1" {
		t.Errorf("key holds %q, want \"1\"", v)
	}
}

// A duplicate whose holder died (its lease left raw in Redis, 1.5s to go) is
// held for the holder's lease time left, never less (a nack before the lease
// can have run out would only come back in flight), and never more than the
// middleware's own lease (5s). With a store that says the time left
// (RetryAfter) the hold is that time plus 10ms; without, the own lease.
func TestInFlightHoldFollowsHolderLease(t *testing.T) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const holder, own = 1500 * time.Millisecond, 5 * time.Second
	if err := c.Do(context.Background(), c.B().Set().Key(prefix(t)+"d1").Value("~0123456789abcdef0123456789abcdef").
		Px(holder).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := wmonce.Middleware(openClaims(t), wmonce.WithLease(own))(func(*message.Message) ([]*message.Message, error) {
		ran++
		return nil, nil
	})
	start := time.Now()
	_, err = h(message.NewMessage("d1", nil))
	held := time.Since(start)
	if !errors.Is(err, store.ErrInFlight) || ran != 0 {
		t.Fatalf("err %v, ran %d; want in flight, not run", err, ran)
	}
	if held < holder-100*time.Millisecond || held > own+2*time.Second {
		t.Errorf("held %v; want between the holder's lease time left (~%v) and the own lease %v", held, holder, own)
	}
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		if held > ra.RetryAfter()+10*time.Millisecond+time.Second {
			t.Errorf("held %v with RetryAfter %v; want RetryAfter + 10ms", held, ra.RetryAfter())
		}
		t.Logf("RetryAfter %v, held %v", ra.RetryAfter(), held)
	} else {
		t.Logf("the store gives no RetryAfter: held %v, the own lease", held)
	}
	if _, err := h(message.NewMessage("d1", nil)); err != nil || ran != 1 {
		t.Errorf("after the hold: err %v, ran %d; want the handler run once", err, ran)
	}
}
