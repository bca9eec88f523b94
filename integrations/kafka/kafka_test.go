package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Every record's effect once, republished duplicates acked without running fn,
// and the group's committed offsets at the end of every partition.
func TestOncePerIDAndCommitted(t *testing.T) {
	const parts, n = 4, 200
	e := newEnv(t, parts)
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, payment(int32(i%parts), fmt.Sprintf("pay-%d", i)))
	}
	for i := 0; i < n; i += 10 { // a producer retry: the same payment again
		rs = append(rs, payment(int32((i+1)%parts), fmt.Sprintf("pay-%d", i)))
	}
	e.produce(t, rs...)
	var mu sync.Mutex
	outcomes := map[kafka.Outcome]int{}
	c, err := kafka.New(e.claims, e.effect, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")),
		kafka.WithReport(func(_ *kgo.Record, o kafka.Outcome, err error) {
			mu.Lock()
			outcomes[o]++
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	if !waitFor(20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return outcomes[kafka.OutcomeDone]+outcomes[kafka.OutcomeDuplicate] == len(rs)
	}) {
		t.Fatalf("outcomes %v after 20 s, want %d records handled", outcomes, len(rs))
	}
	stop()
	eff := e.effects(t)
	for i := range n {
		if got := eff[fmt.Sprintf("pay-%d", i)]; got != 1 {
			t.Errorf("pay-%d: effect ran %d times, want 1", i, got)
		}
	}
	if outcomes[kafka.OutcomeDone] != n || outcomes[kafka.OutcomeDuplicate] != n/10 {
		t.Errorf("outcomes %v; want %d done, %d duplicate", outcomes, n, n/10)
	}
	per := make([]int64, parts)
	for _, r := range rs {
		per[r.Partition]++
	}
	if got := e.committed(t, parts); !slices.Equal(got, per) {
		t.Errorf("committed offsets %v, want the end of every partition %v", got, per)
	}
}

// A failing record holds its partition back: later records wait (order
// kept), the committed offset stays at the failing record until it is done;
// other partitions go on.
func TestFailureHoldsItsPartitionBack(t *testing.T) {
	const parts = 2
	e := newEnv(t, parts)
	e.produce(t, payment(0, "a0"), payment(0, "a1"), payment(0, "a2"), payment(0, "a3"),
		payment(1, "b0"), payment(1, "b1"))
	boom := errors.New("boom")
	var failing atomic.Bool
	failing.Store(true)
	var mu sync.Mutex
	var order []string
	attempts := map[string]int{}
	c, err := kafka.New(e.claims, func(ctx context.Context, r *kgo.Record) error {
		id := string(r.Value)
		mu.Lock()
		attempts[id]++
		mu.Unlock()
		if id == "a1" && failing.Load() {
			return boom
		}
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		return e.effect(ctx, r)
	}, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")),
		kafka.WithFailurePolicy(func(_ *kgo.Record, err error, attempt int) kafka.Failure {
			if !errors.Is(err, boom) {
				t.Errorf("policy got %v, want fn's error", err)
			}
			return kafka.Failure{Delay: 50 * time.Millisecond}
		}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	if !waitFor(10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return attempts["a1"] >= 5 }) {
		t.Fatal("a1 was not retried")
	}
	// partition 1's commit reaches its end; partition 0's stays at a1
	var got []int64
	if !waitFor(10*time.Second, func() bool { got = e.committed(t, parts); return got[1] == 2 }) {
		t.Errorf("partition 1 committed %v, want 2 while partition 0 is held", got)
	}
	if got[0] != 1 {
		t.Errorf("partition 0 committed %d while a1 (offset 1) fails; want 1", got[0])
	}
	mu.Lock()
	held := slices.Clone(order)
	mu.Unlock()
	if slices.Contains(held, "a2") || slices.Contains(held, "a3") {
		t.Errorf("records after the failing a1 ran while it failed: %v", held)
	}
	if !slices.Contains(held, "b0") || !slices.Contains(held, "b1") {
		t.Errorf("partition 1 did not go on while partition 0 was held: %v", held)
	}
	failing.Store(false)
	if !waitFor(20*time.Second, func() bool { return len(e.effects(t)) == 6 }) {
		t.Fatalf("effects %v, want all 6 once a1 succeeds", e.effects(t))
	}
	stop()
	mu.Lock()
	var p0 []string
	for _, id := range order {
		if id[0] == 'a' {
			p0 = append(p0, id)
		}
	}
	mu.Unlock()
	if !slices.Equal(p0, []string{"a0", "a1", "a2", "a3"}) {
		t.Errorf("partition 0 ran in order %v, want a0 a1 a2 a3", p0)
	}
	if got := e.committed(t, parts); got[0] != 4 || got[1] != 2 {
		t.Errorf("committed %v at the end, want [4 2]", got)
	}
}

// A record in flight in another consumer is tried again once the holder's
// lease can have run out, not in a busy loop; it holds its partition's later
// records back; once the holder commits it is a duplicate.
func TestInFlightElsewhereWaitsForTheLease(t *testing.T) {
	const lease, hold = 2 * time.Second, 5 * time.Second // seconds: the holder keeps its lease under load
	e := newEnv(t, 1)
	holding := make(chan struct{})
	holderDone := make(chan time.Time, 1)
	go func() {
		_, err := e.claims.Do(context.Background(), "x0", lease, func(context.Context) error {
			close(holding)
			time.Sleep(hold)
			return nil
		})
		if err != nil {
			t.Errorf("holder: %v", err)
		}
		holderDone <- time.Now()
	}()
	<-holding
	e.produce(t, payment(0, "x0"), payment(0, "x1"))
	var mu sync.Mutex
	var inflight []time.Time
	var x1At time.Time
	outcomes := map[string]kafka.Outcome{}
	c, err := kafka.New(e.claims, func(ctx context.Context, r *kgo.Record) error {
		if string(r.Value) == "x0" {
			t.Error("fn ran for x0 while another consumer held it")
		}
		mu.Lock()
		x1At = time.Now()
		mu.Unlock()
		return nil
	}, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")), kafka.WithLease(lease),
		kafka.WithReport(func(r *kgo.Record, o kafka.Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			if o == kafka.OutcomeInFlight {
				inflight = append(inflight, time.Now())
			}
			outcomes[string(r.Value)] = o
		}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	if !waitFor(hold+5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return !x1At.IsZero() }) {
		t.Fatal("x1 never ran")
	}
	end := <-holderDone
	mu.Lock()
	defer mu.Unlock()
	if x1At.Before(end) {
		t.Errorf("x1 ran %v before x0's holder finished: its partition was not held back", end.Sub(x1At))
	}
	for i := 1; i < len(inflight); i++ {
		if gap := inflight[i].Sub(inflight[i-1]); gap < 2*lease/3 {
			t.Errorf("in-flight retry %d came %v after the previous, before 2/3 of the lease (%v)", i+1, gap, lease)
		}
	}
	maxTries := int(hold/(2*lease/3)) + 1
	t.Logf("%d in-flight attempts while x0 was held %v elsewhere (lease %v, bound %d); x0 then %s", len(inflight), hold, lease, maxTries, outcomes["x0"])
	if len(inflight) == 0 || len(inflight) > maxTries || outcomes["x0"] != kafka.OutcomeDuplicate {
		t.Errorf("%d in-flight attempts (want 1..%d), x0 ended %q (want duplicate)", len(inflight), maxTries, outcomes["x0"])
	}
}

// A rebalance while handlers run: a second member joins, the first one's
// revoked partitions have their handlers' contexts cancelled, and no handler
// of the new owner starts for a record while the old owner's handler of it is
// still running. Every effect once at the end.
func TestRebalanceWhileHandlersRun(t *testing.T) {
	const parts, perPart = 4, 6
	e := newEnv(t, parts)
	var rs []*kgo.Record
	for i := range parts * perPart {
		rs = append(rs, payment(int32(i%parts), fmt.Sprintf("pay-%d", i)))
	}
	e.produce(t, rs...)
	type span struct {
		member     string
		start, end time.Time
		cancelled  bool
	}
	var mu sync.Mutex
	spans := map[string][]span{}
	var running atomic.Int32
	fn := func(member string) func(context.Context, *kgo.Record) error {
		return func(ctx context.Context, r *kgo.Record) error {
			id := string(r.Value)
			s := span{member: member, start: time.Now()}
			running.Add(1)
			defer running.Add(-1)
			var err error
			select {
			case <-time.After(300 * time.Millisecond): // the work
				err = e.effect(ctx, r)
			case <-ctx.Done():
				s.cancelled, err = true, ctx.Err()
			}
			s.end = time.Now()
			mu.Lock()
			spans[id] = append(spans[id], s)
			mu.Unlock()
			return err
		}
	}
	newMember := func(name string) *kafka.Consumer {
		c, err := kafka.New(e.claims, fn(name), e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")),
			kafka.WithLease(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	stopA := run(t, newMember("A"))
	if !waitFor(10*time.Second, func() bool { return running.Load() >= parts }) {
		t.Fatal("member A never ran a handler on every partition")
	}
	joined := time.Now()
	stopB := run(t, newMember("B"))
	if !waitFor(30*time.Second, func() bool { return len(e.effects(t)) == len(rs) }) {
		t.Fatalf("%d of %d effects after 30 s", len(e.effects(t)), len(rs))
	}
	stopA()
	stopB()
	mu.Lock()
	defer mu.Unlock()
	cancelled := 0
	for id, ss := range spans {
		for i, a := range ss {
			if a.cancelled {
				cancelled++
			}
			for _, b := range ss[i+1:] {
				if b.start.Before(a.end) && a.start.Before(b.end) {
					t.Errorf("%s: handlers of %s and %s overlapped (%v-%v, %v-%v)", id, a.member, b.member,
						a.start.Sub(joined), a.end.Sub(joined), b.start.Sub(joined), b.end.Sub(joined))
				}
			}
		}
	}
	eff := e.effects(t)
	for _, r := range rs {
		if eff[string(r.Value)] != 1 {
			t.Errorf("%s: effect ran %d times", r.Value, eff[string(r.Value)])
		}
	}
	t.Logf("%d records, %d handler runs cancelled by the rebalance, every effect once", len(rs), cancelled)
	if cancelled == 0 {
		t.Error("no handler saw its context cancelled when B joined: the rebalance did not revoke a running partition")
	}
	if got := e.committed(t, parts); !slices.Equal(got, []int64{perPart, perPart, perPart, perPart}) {
		t.Errorf("committed %v, want %d on every partition", got, perPart)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	claims := must.Store(store.NewMemoryClaims())
	fn := func(context.Context, *kgo.Record) error { return nil }
	for name, c := range map[string]struct {
		claims *store.Claims
		fn     func(context.Context, *kgo.Record) error
		opts   []kafka.Option
	}{
		"nil claims":     {nil, fn, nil},
		"nil fn":         {claims, nil, nil},
		"zero lease":     {claims, fn, []kafka.Option{kafka.WithLease(0)}},
		"nil id":         {claims, fn, []kafka.Option{kafka.WithID(nil)}},
		"nil policy":     {claims, fn, []kafka.Option{kafka.WithFailurePolicy(nil)}},
		"zero buffer":    {claims, fn, []kafka.Option{kafka.WithMaxBuffered(0)}},
		"revoke timeout": {claims, fn, []kafka.Option{kafka.WithRevokeTimeout(0)}},
	} {
		if k, err := kafka.New(c.claims, c.fn, []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, c.opts...); k != nil || !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: New = %v, %v; want nil, ErrInvalidArgument", name, k, err)
		}
	}
}

// A handler that ignores its cancelled context outlives the revoke timeout:
// the member stops waiting for it (Run returns), its record is not marked, and
// the next owner finds the id in flight until that handler commits, then acks
// it as a duplicate. The effect runs once.
func TestHandlerOutlivingTheRevokeTimeout(t *testing.T) {
	const revokeTimeout, work = 500 * time.Millisecond, 4 * time.Second
	e := newEnv(t, 1)
	e.produce(t, payment(0, "s0"))
	started := make(chan struct{})
	var startOnce sync.Once
	a, err := kafka.New(e.claims, func(ctx context.Context, r *kgo.Record) error {
		startOnce.Do(func() { close(started) })
		time.Sleep(work) // ignores ctx
		return e.effect(ctx, r)
	}, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")), kafka.WithLease(2*time.Second),
		kafka.WithRevokeTimeout(revokeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	stopA := run(t, a)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("A's handler never started")
	}
	t0 := time.Now()
	stopA()
	if took := time.Since(t0); took > work/2 {
		t.Errorf("A's Run took %v to return, want about the revoke timeout %v, not the handler's %v", took, revokeTimeout, work)
	}
	var mu sync.Mutex
	var outcomes []kafka.Outcome
	b, err := kafka.New(e.claims, func(context.Context, *kgo.Record) error {
		t.Error("B ran s0's fn, which A's handler was still running")
		return nil
	}, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")), kafka.WithLease(2*time.Second),
		kafka.WithReport(func(_ *kgo.Record, o kafka.Outcome, _ error) {
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	stopB := run(t, b)
	if !waitFor(15*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(outcomes, kafka.OutcomeDuplicate)
	}) {
		t.Fatalf("B's outcomes %v: no duplicate after A's handler finished", outcomes)
	}
	stopB()
	mu.Lock()
	defer mu.Unlock()
	if outcomes[0] != kafka.OutcomeInFlight {
		t.Errorf("B's outcomes %v, want in_flight first (A's handler held the id)", outcomes)
	}
	if eff := e.effects(t); eff["s0"] != 1 {
		t.Errorf("effect ran %d times, want 1", eff["s0"])
	}
	if got := e.committed(t, 1); got[0] != 1 {
		t.Errorf("committed %v, want [1]", got)
	}
}

// A partition whose fetching was paused (its queue reached WithMaxBuffered)
// resumes once its queue has drained, down to the smallest buffer, 1: the
// records produced after the first ones arrive and run.
func TestSmallBufferResumes(t *testing.T) {
	e := newEnv(t, 1)
	var done atomic.Int32
	c, err := kafka.New(e.claims, e.effect, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")), kafka.WithMaxBuffered(1),
		kafka.WithReport(func(_ *kgo.Record, o kafka.Outcome, _ error) {
			if o == kafka.OutcomeDone {
				done.Add(1)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	for round := range 2 {
		e.produce(t, payment(0, fmt.Sprintf("r%d-a", round)), payment(0, fmt.Sprintf("r%d-b", round)), payment(0, fmt.Sprintf("r%d-c", round)))
		want := int32(3 * (round + 1))
		if !waitFor(20*time.Second, func() bool { return done.Load() == want }) {
			t.Fatalf("round %d: %d records done after 20 s, want %d", round, done.Load(), want)
		}
	}
	for id, n := range e.effects(t) {
		if n != 1 {
			t.Errorf("%s: effect ran %d times, want 1", id, n)
		}
	}
}

// One id's failure inside a batch is that id's only: ten records of one
// partition claimed together (the last one's claim is a lease while the
// first one's fn runs), the fifth failing once. When its failure is
// reported, the four before it are processed (their claims committed), its
// own claim is released, and the five behind it hold no lease (given back,
// not left to expire); then every record runs once, in order.
func TestBatchFailureReleasesOnlyItsID(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	var rs []*kgo.Record
	for i := range 10 {
		rs = append(rs, payment(0, fmt.Sprintf("a%d", i)))
	}
	e.produce(t, rs...)
	boom := errors.New("boom")
	var failed atomic.Bool
	var mu sync.Mutex
	var order []string
	keysAtFailure := map[string]string{}
	claimKey := func(id string) string {
		v, err := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+"claims:"+id).Build()).ToString()
		if err != nil {
			return "" // absent
		}
		return v
	}
	var a9AtFirst string
	c, err := kafka.New(e.claims, func(ctx context.Context, r *kgo.Record) error {
		id := string(r.Value)
		if id == "a0" {
			a9AtFirst = claimKey("a9")
		}
		if id == "a4" && failed.CompareAndSwap(false, true) {
			return boom
		}
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		return e.effect(ctx, r)
	}, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")),
		kafka.WithFailurePolicy(func(*kgo.Record, error, int) kafka.Failure { return kafka.Failure{Delay: 100 * time.Millisecond} }),
		kafka.WithReport(func(r *kgo.Record, o kafka.Outcome, err error) {
			if o == kafka.OutcomeRetry && errors.Is(err, boom) {
				for i := range 10 {
					id := fmt.Sprintf("a%d", i)
					keysAtFailure[id] = claimKey(id)
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	if !waitFor(20*time.Second, func() bool { return len(e.effects(t)) == 10 }) {
		t.Fatalf("effects %v after 20 s, want all 10", e.effects(t))
	}
	stop()
	if !strings.HasPrefix(a9AtFirst, "~") {
		t.Errorf("while a0's fn ran, a9's claim key held %q: want a lease (the ten claimed together)", a9AtFirst)
	}
	for i := range 10 {
		id := fmt.Sprintf("a%d", i)
		want := "1"
		if i >= 4 {
			want = "" // a4 released; a5..a9 given back
		}
		if got := keysAtFailure[id]; got != want {
			t.Errorf("%s: claim key %q when a4's failure was reported, want %q", id, got, want)
		}
	}
	if !strings.HasPrefix(claimKey("a9"), "1") {
		t.Errorf("a9's claim key %q at the end, want processed", claimKey("a9"))
	}
	for id, n := range e.effects(t) {
		if n != 1 {
			t.Errorf("%s: effect ran %d times, want 1", id, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9"}; !slices.Equal(order, want) {
		t.Errorf("effects in the order %v, want %v", order, want)
	}
}
