package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/store"
)

// outcomeLog records each message id's reported outcomes in order.
type outcomeLog struct {
	mu sync.Mutex
	m  map[string][]jetstream.Outcome
}

func (l *outcomeLog) report(msg natsjs.Msg, o jetstream.Outcome, _ error) {
	id, _ := jetstream.MsgID(msg)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string][]jetstream.Outcome{}
	}
	l.m[id] = append(l.m[id], o)
}

func (l *outcomeLog) get(id string) []jetstream.Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]jetstream.Outcome(nil), l.m[id]...)
}

func (l *outcomeLog) last(id string) jetstream.Outcome {
	if o := l.get(id); len(o) > 0 {
		return o[len(o)-1]
	}
	return ""
}

// Every row of the Handler's table inside ONE batch of Handler.Consume, per
// message id: a success, a duplicate, an id in flight elsewhere, a failure,
// a panic, a permanent failure, another success. The batch is claimed up
// front (the last id's claim is held while the first one's fn runs), and
// each id's row is its own: the failures are released and redelivered
// alone, the permanent one terminated, the others acked.
func TestConsumeBatchOutcomeRows(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0)
	cons := e.consumer(t, "c", 5*time.Second)
	if err := e.claims.Remember(ctx, "dup"); err != nil {
		t.Fatal(err)
	}
	holding, held := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(held)
		_, _ = e.claims.Do(ctx, "held", 2*time.Second, func(context.Context) error {
			close(holding)
			time.Sleep(2 * time.Second)
			return nil
		})
	}()
	<-holding
	ids := []string{"ok1", "fail", "dup", "held", "panic", "perm", "ok2"}
	for _, id := range ids {
		e.publish(t, id, id)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	var lastHeldAtFirst string
	fn := func(ctx context.Context, msg natsjs.Msg) error {
		id, _ := jetstream.MsgID(msg)
		mu.Lock()
		runs[id]++
		n := runs[id]
		mu.Unlock()
		switch {
		case id == "ok1" && n == 1:
			lastHeldAtFirst, _ = e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+"ok2").Build()).ToString()
		case id == "fail" && n == 1:
			return errors.New("boom")
		case id == "panic" && n == 1:
			panic("kaboom")
		case id == "perm":
			return store.Permanent(errors.New("card declined"))
		}
		return e.rc.Do(ctx, e.rc.B().Hincrby().Key(e.prefix+"effects").Field(id).Increment(1).Build()).Error()
	}
	var log outcomeLog
	h := newHandler(t, e.claims, fn, jetstream.WithBatch(100, 500*time.Millisecond), jetstream.WithReport(log.report),
		jetstream.WithFailurePolicy(func(msg natsjs.Msg, err error) jetstream.Failure {
			if store.IsPermanent(err) {
				return jetstream.Failure{Term: true}
			}
			return jetstream.Failure{Delay: 200 * time.Millisecond}
		}))
	cc, err := h.Consume(cons)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]jetstream.Outcome{
		"ok1":   {jetstream.OutcomeDone},
		"fail":  {jetstream.OutcomeRetry, jetstream.OutcomeDone},
		"dup":   {jetstream.OutcomeDuplicate},
		"held":  {jetstream.OutcomeInFlight, jetstream.OutcomeDuplicate},
		"panic": {jetstream.OutcomeRetry, jetstream.OutcomeDone},
		"perm":  {jetstream.OutcomeTerm},
		"ok2":   {jetstream.OutcomeDone},
	}
	settled := func() bool {
		for id, w := range want {
			if len(log.get(id)) < len(w) {
				return false
			}
		}
		return true
	}
	if !waitFor(20*time.Second, settled) {
		t.Errorf("not every row settled after 20 s")
	}
	time.Sleep(300 * time.Millisecond) // room for a wrong extra delivery
	cc.Stop()
	<-cc.Closed()
	<-held
	if !strings.HasPrefix(lastHeldAtFirst, "~") {
		t.Errorf("while the batch's first fn ran, its last id's claim key held %q: want a lease (the batch claimed up front)", lastHeldAtFirst)
	}
	effects, err := e.rc.Do(ctx, e.rc.B().Hgetall().Key(e.prefix+"effects").Build()).AsIntMap()
	if err != nil {
		t.Fatal(err)
	}
	wantEffects := map[string]int64{"ok1": 1, "fail": 1, "panic": 1, "ok2": 1}
	for _, id := range ids {
		if got := log.get(id); !equalOutcomes(got, want[id]) {
			t.Errorf("%s: outcomes %v, want %v", id, got, want[id])
		}
		if effects[id] != wantEffects[id] {
			t.Errorf("%s: effect %d times, want %d", id, effects[id], wantEffects[id])
		}
		key, err := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+id).Build()).ToString()
		if id == "perm" {
			if err == nil {
				t.Errorf("perm: claim key %q after a permanent failure, want it released", key)
			}
		} else if key != "1" {
			t.Errorf("%s: claim key %q (%v), want processed", id, key, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["dup"] != 0 || runs["held"] != 0 || runs["perm"] != 1 {
		t.Errorf("fn ran dup %d, held %d, perm %d times; want 0, 0, 1", runs["dup"], runs["held"], runs["perm"])
	}
	if n := pendingAcks(t, cons); n != 0 {
		t.Errorf("%d acks pending at the end", n)
	}
}

func equalOutcomes(a, b []jetstream.Outcome) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Stop during a batch (the shutdown row): the fn running finishes and is
// acked; the batch's messages whose fn had not started are released at once
// (their claims given back, nak'd) and the next consumer runs each of them
// once, without waiting out a lease or AckWait.
func TestConsumeStopReleasesTheBatch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0)
	cons := e.consumer(t, "c", 30*time.Second)
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		e.publish(t, id, id)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	effect := func(ctx context.Context, msg natsjs.Msg) error {
		id, _ := jetstream.MsgID(msg)
		return e.rc.Do(ctx, e.rc.B().Hincrby().Key(e.prefix+"effects").Field(id).Increment(1).Build()).Error()
	}
	var log outcomeLog
	h := newHandler(t, e.claims, func(ctx context.Context, msg natsjs.Msg) error {
		if id, _ := jetstream.MsgID(msg); id == "a" {
			close(inside)
			<-release
		}
		return effect(ctx, msg)
	}, jetstream.WithBatch(100, 500*time.Millisecond), jetstream.WithReport(log.report))
	cc, err := h.Consume(cons)
	if err != nil {
		t.Fatal(err)
	}
	<-inside
	held := 0
	for _, id := range ids[1:] {
		if v, _ := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+id).Build()).ToString(); strings.HasPrefix(v, "~") {
			held++
		}
	}
	cc.Stop()
	close(release)
	select {
	case <-cc.Closed():
	case <-time.After(10 * time.Second):
		t.Fatal("Closed not closed 10 s after Stop")
	}
	if held != len(ids)-1 {
		t.Errorf("%d of the batch's %d other ids claimed while its first fn ran, want all", held, len(ids)-1)
	}
	if got := log.get("a"); !equalOutcomes(got, []jetstream.Outcome{jetstream.OutcomeDone}) {
		t.Errorf("a: outcomes %v, want done", got)
	}
	for _, id := range ids[1:] {
		if got := log.get(id); !equalOutcomes(got, []jetstream.Outcome{jetstream.OutcomeReleased}) {
			t.Errorf("%s: outcomes %v, want released", id, got)
		}
		if v, err := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+id).Build()).ToString(); err == nil {
			t.Errorf("%s: claim key %q after Stop, want it given back", id, v)
		}
	}
	// the next consumer: the released messages come back at once (AckWait is 30 s)
	var next outcomeLog
	h2 := newHandler(t, e.claims, effect, jetstream.WithReport(next.report))
	cc2, err := cons.Consume(h2.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cc2.Stop(); <-cc2.Closed() }()
	if !waitFor(10*time.Second, func() bool {
		for _, id := range ids[1:] {
			if next.last(id) != jetstream.OutcomeDone {
				return false
			}
		}
		return true
	}) {
		t.Errorf("the released messages were not all done by the next consumer within 10 s")
	}
	effects, _ := e.rc.Do(ctx, e.rc.B().Hgetall().Key(e.prefix+"effects").Build()).AsIntMap()
	for _, id := range ids {
		if effects[id] != 1 {
			t.Errorf("%s: effect %d times, want 1", id, effects[id])
		}
	}
}

// waitFor polls cond every 20 ms for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// ProcessBatch over one Fetch: the outcomes in the messages' order, each
// row per message (a success, a failure, a duplicate, an id in flight, a
// panic, a permanent failure, a message without an id), the errors joined,
// the batch claimed up front and each message settled on its own.
func TestProcessBatchOfAFetch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0)
	cons := e.consumer(t, "c", 10*time.Second)
	if err := e.claims.Remember(ctx, "dup"); err != nil {
		t.Fatal(err)
	}
	holding, held := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	go func() {
		defer close(held)
		_, _ = e.claims.Do(ctx, "held", 5*time.Second, func(context.Context) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	defer func() { close(release); <-held }()
	ids := []string{"ok1", "fail", "dup", "held", "panic", "perm", "noid", "ok2"}
	for _, id := range ids {
		e.publish(t, id, id)
	}
	var lastAtFirst string
	h := newHandler(t, e.claims, func(ctx context.Context, msg natsjs.Msg) error {
		switch id, _ := jetstream.MsgID(msg); id {
		case "ok1":
			lastAtFirst, _ = e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+"ok2").Build()).ToString()
		case "fail":
			return errors.New("boom")
		case "panic":
			panic("kaboom")
		case "perm":
			return store.Permanent(errors.New("card declined"))
		}
		return nil
	}, jetstream.WithID(func(msg natsjs.Msg) (string, error) {
		if string(msg.Data()) == "noid" {
			return "", errors.New("no id in payload")
		}
		return jetstream.MsgID(msg)
	}))
	b, err := cons.Fetch(len(ids), natsjs.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []natsjs.Msg
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != len(ids) {
		t.Fatalf("fetched %d messages, want %d", len(msgs), len(ids))
	}
	out, err := h.ProcessBatch(ctx, msgs)
	want := []jetstream.Outcome{jetstream.OutcomeDone, jetstream.OutcomeRetry, jetstream.OutcomeDuplicate, jetstream.OutcomeInFlight,
		jetstream.OutcomeRetry, jetstream.OutcomeTerm, jetstream.OutcomeError, jetstream.OutcomeDone}
	if !equalOutcomes(out, want) {
		t.Errorf("outcomes %v, want %v", out, want)
	}
	for _, s := range []string{"boom", "kaboom", "card declined", "no id in payload", store.ErrInFlight.Error()} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("joined error %v, want it to say %q", err, s)
		}
	}
	if !strings.HasPrefix(lastAtFirst, "~") {
		t.Errorf("while the first fn ran, the last id's claim key held %q, want a lease", lastAtFirst)
	}
	for id, want := range map[string]string{"ok1": "1", "ok2": "1", "dup": "1", "fail": "", "panic": "", "perm": ""} {
		got, _ := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+id).Build()).ToString()
		if got != want {
			t.Errorf("%s: claim key %q, want %q (\"\": released)", id, got, want)
		}
	}
	if out, err := h.ProcessBatch(ctx, []natsjs.Msg{nil}); out != nil || !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("ProcessBatch of a nil message = %v, %v; want nil, ErrInvalidArgument", out, err)
	}
	if out, err := h.ProcessBatch(nil, msgs); out != nil || !errors.Is(err, store.ErrInvalidArgument) { //nolint:staticcheck // the case under test
		t.Errorf("ProcessBatch with a nil context = %v, %v; want nil, ErrInvalidArgument", out, err)
	}
}
