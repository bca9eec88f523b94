package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/store"
)

// The in-flight nak's delay follows the holder's lease, which the store's
// error tells (RetryAfter), not the handler's own: a holder on a 1.5 s lease
// that dies is taken over within about that, even by a handler whose lease is
// 30 s.
func TestInFlightDelayFromRetryAfter(t *testing.T) {
	const holderLease, ownLease = 1500 * time.Millisecond, 30 * time.Second
	ctx := context.Background()
	e := newEnv(t, 0)
	c := e.consumer(t, "c", time.Minute)
	// A holder died holding the id: its claim, "~<token>" with the rest of
	// its lease, is what a SIGKILLed consumer leaves (store.Claims' layout).
	if err := e.rc.Do(ctx, e.rc.B().Set().Key(e.prefix+"p1").Value("~dead").Px(holderLease).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var runs int
	h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error { runs++; return nil }, jetstream.WithLease(ownLease))
	e.publish(t, "p1", "x")
	m := fetch1(t, c, 2*time.Second)
	o, err := h.Process(ctx, m)
	naked := time.Now()
	retryAfter, ok := store.RetryAfter(err)
	if o != jetstream.OutcomeInFlight || !errors.Is(err, store.ErrInFlight) || !ok {
		t.Fatalf("Process = %v, %v (RetryAfter %v, %v); want in_flight with the holder's lease left", o, err, retryAfter, ok)
	}
	m = fetch1(t, c, 10*time.Second)
	if m == nil {
		t.Fatalf("not redelivered within 10 s of the nak (RetryAfter %v, own lease %v)", retryAfter, ownLease)
	}
	gap := time.Since(naked)
	t.Logf("RetryAfter %v; redelivered %v after the nak", retryAfter, gap)
	// Upper bound: RetryAfter plus a margin for a loaded machine, far below
	// the handler's own lease (the delay without RetryAfter).
	if gap < retryAfter || gap > retryAfter+3*time.Second {
		t.Errorf("redelivered %v after the nak; want RetryAfter %v to +3 s (not the own lease %v)", gap, retryAfter, ownLease)
	}
	if o, err := h.Process(ctx, m); o != jetstream.OutcomeDone || err != nil || runs != 1 {
		t.Errorf("after the dead holder's lease: %v, %v, %d runs; want done, 1 run", o, err, runs)
	}
}
