package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// fetch1 waits up to wait for one delivery; nil when none came.
func fetch1(t *testing.T, c natsjs.Consumer, wait time.Duration) natsjs.Msg {
	t.Helper()
	b, err := c.Fetch(1, natsjs.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	var got natsjs.Msg
	for m := range b.Messages() {
		got = m
	}
	if b.Error() != nil && !errors.Is(b.Error(), natsjs.ErrNoMessages) && !errors.Is(b.Error(), context.DeadlineExceeded) {
		t.Fatal(b.Error())
	}
	return got
}

func numDelivered(t *testing.T, m natsjs.Msg) uint64 {
	t.Helper()
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return md.NumDelivered
}

// pendingAcks is the consumer's count of delivered, unacknowledged messages.
func pendingAcks(t *testing.T, c natsjs.Consumer) int {
	t.Helper()
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.NumAckPending
}

func newHandler(t *testing.T, claims *store.Claims, fn func(context.Context, natsjs.Msg) error, opts ...jetstream.Option) *jetstream.Handler {
	t.Helper()
	h, err := jetstream.New(claims, fn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Each row of the failure mapping, on a real nats-server and a real Redis.
func TestFailureMapping(t *testing.T) {
	ctx := context.Background()
	const ackWait = 600 * time.Millisecond

	t.Run("SuccessAcked", func(t *testing.T) {
		e := newEnv(t, 0)
		c := e.consumer(t, "c", ackWait)
		var runs atomic.Int32
		h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error { runs.Add(1); return nil })
		e.publish(t, "p1", "x")
		m := fetch1(t, c, 2*time.Second)
		if o, err := h.Process(ctx, m); o != jetstream.OutcomeDone || err != nil {
			t.Fatalf("Process = %v, %v; want done, nil", o, err)
		}
		if m := fetch1(t, c, 3*ackWait); m != nil {
			t.Errorf("an acked message was redelivered (delivery %d)", numDelivered(t, m))
		}
		if runs.Load() != 1 || pendingAcks(t, c) != 0 {
			t.Errorf("fn ran %d times, %d acks pending; want 1, 0", runs.Load(), pendingAcks(t, c))
		}
	})

	t.Run("RepublishedDuplicateAcked", func(t *testing.T) {
		// A producer that publishes again after the stream's duplicate window
		// (100 ms, the least JetStream takes) gets a second stored message
		// with the same Nats-Msg-Id: the handler acks it without running fn.
		e := newEnv(t, 100*time.Millisecond)
		c := e.consumer(t, "c", ackWait)
		var runs atomic.Int32
		h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error { runs.Add(1); return nil })
		e.publish(t, "p1", "x")
		if o, err := h.Process(ctx, fetch1(t, c, 2*time.Second)); o != jetstream.OutcomeDone || err != nil {
			t.Fatalf("first = %v, %v", o, err)
		}
		time.Sleep(300 * time.Millisecond)
		e.publish(t, "p1", "x")
		info, err := e.stream.Info(ctx)
		if err != nil || info.State.Msgs != 2 {
			t.Fatalf("stream holds %v messages (%v); want the republished duplicate stored", info.State.Msgs, err)
		}
		if o, err := h.Process(ctx, fetch1(t, c, 2*time.Second)); o != jetstream.OutcomeDuplicate || err != nil {
			t.Fatalf("duplicate = %v, %v; want duplicate, nil", o, err)
		}
		if m := fetch1(t, c, 3*ackWait); m != nil {
			t.Error("an acked duplicate was redelivered")
		}
		if runs.Load() != 1 {
			t.Errorf("fn ran %d times, want 1", runs.Load())
		}
	})

	t.Run("InFlightNakedForTheLease", func(t *testing.T) {
		// Another consumer holds the id for hold; every delivery meanwhile is
		// nak'd with a delay of (about) the holder's lease, so the number of
		// redeliveries is bounded by hold/lease, not by the broker's rate;
		// once the holder committed, the next one is acked.
		// A lease of seconds: the holder's heartbeat must keep it on a loaded
		// machine (2 cores, many tests at once).
		const lease, hold = 2 * time.Second, 5 * time.Second
		e := newEnv(t, 0)
		c := e.consumer(t, "c", 5*time.Second)
		h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error {
			t.Error("fn ran while another consumer held the id")
			return nil
		}, jetstream.WithLease(lease))
		holding, done := make(chan struct{}), make(chan struct{})
		var holderEnd time.Time
		go func() {
			defer close(done)
			_, err := e.claims.Do(ctx, "p1", lease, func(context.Context) error {
				close(holding)
				time.Sleep(hold)
				return nil
			})
			holderEnd = time.Now()
			if err != nil {
				t.Errorf("holder: %v", err)
			}
		}()
		<-holding
		e.publish(t, "p1", "x")
		var naks []time.Time
		deadline := time.Now().Add(hold + 5*time.Second)
		for time.Now().Before(deadline) {
			m := fetch1(t, c, 2*lease)
			if m == nil {
				continue
			}
			o, err := h.Process(ctx, m)
			if o == jetstream.OutcomeDuplicate {
				break
			}
			if o != jetstream.OutcomeInFlight || !errors.Is(err, store.ErrInFlight) {
				t.Fatalf("delivery %d = %v, %v; want in_flight, ErrInFlight", numDelivered(t, m), o, err)
			}
			naks = append(naks, time.Now())
		}
		<-done
		// The holder's lease is extended every lease/4, so the time left on
		// it is at least 3/4 of it; the delay is never below 2/3 of it (the
		// rest is room for a beat delayed by a loaded machine).
		for i := 1; i < len(naks); i++ {
			if gap := naks[i].Sub(naks[i-1]); gap < 2*lease/3 {
				t.Errorf("redelivery %d came %v after the previous nak, before 2/3 of the lease (%v)", i+1, gap, lease)
			}
		}
		maxNaks := int(hold/(2*lease/3)) + 1
		t.Logf("%d in-flight naks while the id was held for %v (lease %v; bound %d)", len(naks), hold, lease, maxNaks)
		if len(naks) == 0 || len(naks) > maxNaks {
			t.Errorf("%d in-flight naks, want 1..%d", len(naks), maxNaks)
		}
		if pendingAcks(t, c) != 0 || holderEnd.IsZero() {
			t.Errorf("%d acks pending after the holder's commit", pendingAcks(t, c))
		}
	})

	t.Run("FailureRetriedAfterThePolicysDelay", func(t *testing.T) {
		const delay = 400 * time.Millisecond
		e := newEnv(t, 0)
		c := e.consumer(t, "c", 5*time.Second)
		var runs, effects atomic.Int32
		boom := errors.New("boom")
		h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error {
			if runs.Add(1) == 1 {
				return boom
			}
			effects.Add(1)
			return nil
		}, jetstream.WithFailurePolicy(func(_ natsjs.Msg, err error) jetstream.Failure {
			if !errors.Is(err, boom) {
				t.Errorf("policy got %v, want fn's error", err)
			}
			return jetstream.Failure{Delay: delay}
		}))
		e.publish(t, "p1", "x")
		o, err := h.Process(ctx, fetch1(t, c, 2*time.Second))
		naked := time.Now()
		if o != jetstream.OutcomeRetry || !errors.Is(err, boom) {
			t.Fatalf("Process = %v, %v; want retry, boom", o, err)
		}
		m := fetch1(t, c, 5*time.Second)
		if m == nil {
			t.Fatal("a failed message was not redelivered")
		}
		if gap := time.Since(naked); gap < delay*9/10 {
			t.Errorf("redelivered %v after the nak, before the policy's delay %v", gap, delay)
		}
		if o, err := h.Process(ctx, m); o != jetstream.OutcomeDone || err != nil {
			t.Fatalf("retry = %v, %v; want done (the failure released the claim)", o, err)
		}
		if runs.Load() != 2 || effects.Load() != 1 {
			t.Errorf("fn ran %d times, effect %d; want 2, 1", runs.Load(), effects.Load())
		}
	})

	t.Run("PanicRecoveredAndRetried", func(t *testing.T) {
		// A panic in fn is a failure: recovered (the worker lives on), the
		// claim released, the message nak'd with the policy's delay; its
		// redelivery runs fn again.
		e := newEnv(t, 0)
		c := e.consumer(t, "c", 10*time.Second)
		var runs, effects atomic.Int32
		h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error {
			if runs.Add(1) == 1 {
				panic("kaboom")
			}
			effects.Add(1)
			return nil
		}, jetstream.WithFailurePolicy(func(natsjs.Msg, error) jetstream.Failure { return jetstream.Failure{Delay: 100 * time.Millisecond} }))
		e.publish(t, "p1", "x")
		o, err := h.Process(ctx, fetch1(t, c, 2*time.Second))
		if o != jetstream.OutcomeRetry || err == nil || !strings.Contains(err.Error(), "kaboom") {
			t.Fatalf("Process = %v, %v; want retry, the panic's value", o, err)
		}
		if v, err := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+"p1").Build()).ToString(); err == nil {
			t.Errorf("after the panic the claim key holds %q, want it released", v)
		}
		m := fetch1(t, c, 5*time.Second)
		if m == nil {
			t.Fatal("the panicked message was not redelivered before its AckWait (10 s)")
		}
		if o, err := h.Process(ctx, m); o != jetstream.OutcomeDone || err != nil {
			t.Fatalf("redelivery = %v, %v; want done", o, err)
		}
		if runs.Load() != 2 || effects.Load() != 1 || pendingAcks(t, c) != 0 {
			t.Errorf("fn ran %d times, effect %d, %d acks pending; want 2, 1, 0", runs.Load(), effects.Load(), pendingAcks(t, c))
		}
	})

	t.Run("PermanentTerminated", func(t *testing.T) {
		e := newEnv(t, 0)
		c := e.consumer(t, "c", ackWait)
		var runs atomic.Int32
		h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error {
			runs.Add(1)
			return store.Permanent(errors.New("card declined"))
		})
		e.publish(t, "p1", "x")
		if o, err := h.Process(ctx, fetch1(t, c, 2*time.Second)); o != jetstream.OutcomeTerm || err == nil {
			t.Fatalf("Process = %v, %v; want term, the error", o, err)
		}
		if m := fetch1(t, c, 3*ackWait); m != nil {
			t.Error("a terminated message was redelivered")
		}
		if runs.Load() != 1 || pendingAcks(t, c) != 0 {
			t.Errorf("fn ran %d times, %d acks pending; want 1, 0", runs.Load(), pendingAcks(t, c))
		}
	})

	t.Run("CancelledNakedAtOnce", func(t *testing.T) {
		e := newEnv(t, 0)
		c := e.consumer(t, "c", 10*time.Second)
		var runs atomic.Int32
		h := newHandler(t, e.claims, func(ctx context.Context, _ natsjs.Msg) error {
			if runs.Add(1) == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		e.publish(t, "p1", "x")
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		if o, err := h.Process(cctx, fetch1(t, c, 2*time.Second)); o != jetstream.OutcomeReleased || !errors.Is(err, context.Canceled) {
			t.Fatalf("Process = %v, %v; want released, context.Canceled", o, err)
		}
		start := time.Now()
		m := fetch1(t, c, 5*time.Second)
		if m == nil || time.Since(start) > 5*time.Second {
			t.Fatal("a cancelled message was not redelivered before its AckWait (10 s)")
		}
		if o, err := h.Process(ctx, m); o != jetstream.OutcomeDone || err != nil {
			t.Fatalf("redelivery = %v, %v; want done (the claim was released)", o, err)
		}
	})

	t.Run("IDWithoutHeader", func(t *testing.T) {
		e := newEnv(t, 0)
		c := e.consumer(t, "c", ackWait)
		e.publish(t, "", "x")
		m := fetch1(t, c, 2*time.Second)
		id, err := jetstream.MsgID(m)
		if want := e.stream.CachedInfo().Config.Name + ":1"; id != want || err != nil {
			t.Errorf("MsgID without Nats-Msg-Id = %q, %v; want %q", id, err, want)
		}
		e.publish(t, "abc", "y")
		if id, err := jetstream.MsgID(fetch1(t, c, 2*time.Second)); id != "abc" || err != nil {
			t.Errorf("MsgID = %q, %v; want the header's abc", id, err)
		}
		h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error { return nil },
			jetstream.WithID(func(natsjs.Msg) (string, error) { return "", errors.New("no id in payload") }))
		if o, err := h.Process(ctx, m); o != jetstream.OutcomeError || err == nil || !strings.Contains(err.Error(), "no id in payload") {
			t.Errorf("Process with a failing id = %v, %v; want error", o, err)
		}
	})
}

// A handler slower than AckWait: the wrapper's InProgress on every lease
// extension keeps JetStream from redelivering; the same handler without it is
// redelivered (the fault is real).
func TestHandlerSlowerThanAckWait(t *testing.T) {
	ctx := context.Background()
	const ackWait, lease, work = 1500 * time.Millisecond, 1500 * time.Millisecond, 4 * time.Second
	for _, wrapped := range []bool{true, false} {
		t.Run(fmt.Sprintf("wrapped=%v", wrapped), func(t *testing.T) {
			e := newEnv(t, 0)
			c := e.consumer(t, "c", ackWait)
			fn := func(ctx context.Context, _ natsjs.Msg) error {
				time.Sleep(work)
				return nil
			}
			h := newHandler(t, e.claims, fn, jetstream.WithLease(lease))
			e.publish(t, "p1", "x")
			m := fetch1(t, c, 2*time.Second)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				if wrapped {
					o, err := h.Process(ctx, m)
					if o != jetstream.OutcomeDone || err != nil {
						t.Errorf("Process = %v, %v; want done", o, err)
					}
				} else {
					_ = fn(ctx, m)
					_ = m.Ack()
				}
			}()
			redelivered := fetch1(t, c, work+ackWait)
			wg.Wait()
			switch {
			case wrapped && redelivered != nil:
				t.Errorf("redelivered (delivery %d) while the handler ran %v with AckWait %v", numDelivered(t, redelivered), work, ackWait)
			case !wrapped && redelivered == nil:
				t.Errorf("without InProgress a %v handler was not redelivered with AckWait %v: the test cannot tell", work, ackWait)
			}
		})
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	claims := must.Store(store.NewMemoryClaims())
	fn := func(context.Context, natsjs.Msg) error { return nil }
	for name, c := range map[string]struct {
		claims *store.Claims
		fn     func(context.Context, natsjs.Msg) error
		opts   []jetstream.Option
	}{
		"nil claims":  {nil, fn, nil},
		"nil fn":      {claims, nil, nil},
		"zero lease":  {claims, fn, []jetstream.Option{jetstream.WithLease(0)}},
		"nil id":      {claims, fn, []jetstream.Option{jetstream.WithID(nil)}},
		"nil policy":  {claims, fn, []jetstream.Option{jetstream.WithFailurePolicy(nil)}},
		"nil context": {claims, fn, []jetstream.Option{jetstream.WithContext(nil)}}, //nolint:staticcheck // the case under test
		"ack timeout": {claims, fn, []jetstream.Option{jetstream.WithAckTimeout(-time.Second)}},
		"zero batch":  {claims, fn, []jetstream.Option{jetstream.WithBatch(0, 0)}},
		"huge batch":  {claims, fn, []jetstream.Option{jetstream.WithBatch(501, 0)}},
		"batch wait":  {claims, fn, []jetstream.Option{jetstream.WithBatch(10, -time.Millisecond)}},
	} {
		if h, err := jetstream.New(c.claims, c.fn, c.opts...); h != nil || !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: New = %v, %v; want nil, ErrInvalidArgument", name, h, err)
		}
	}
}
