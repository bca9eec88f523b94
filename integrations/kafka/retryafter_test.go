package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/store"
)

// A record in flight is tried again when the holder's lease, which the
// store's error tells (RetryAfter), can have run out, not after the
// consumer's own lease: a holder on a 1.5 s lease that died is taken over
// within about that, even by a consumer whose lease is 30 s.
func TestInFlightDelayFromRetryAfter(t *testing.T) {
	const holderLease, ownLease = 1500 * time.Millisecond, 30 * time.Second
	ctx := context.Background()
	e := newEnv(t, 1)
	// A holder died holding the id: its claim, "~<token>" with the rest of
	// its lease, is what a SIGKILLed consumer leaves (store.Claims' layout).
	if err := e.rc.Do(ctx, e.rc.B().Set().Key(e.prefix+"claims:x0").Value("~dead").Px(holderLease).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	e.produce(t, payment(0, "x0"))
	var mu sync.Mutex
	var inflightAt, doneAt time.Time
	var retryAfter time.Duration
	typed := true
	c, err := kafka.New(e.claims, e.effect, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")), kafka.WithLease(ownLease),
		kafka.WithReport(func(r *kgo.Record, o kafka.Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch o {
			case kafka.OutcomeInFlight:
				d, ok := store.RetryAfter(err)
				if typed = ok; typed && inflightAt.IsZero() {
					inflightAt, retryAfter = time.Now(), d
				}
			case kafka.OutcomeDone:
				doneAt = time.Now()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	ok := waitFor(10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return !doneAt.IsZero() || !typed })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if !typed {
		t.Fatal("an in-flight attempt's error did not carry the holder's lease left (store.RetryAfter)")
	}
	if !ok || inflightAt.IsZero() {
		t.Fatalf("x0: in flight at %v, done at %v; want an in-flight attempt, then done within 10 s", inflightAt, doneAt)
	}
	gap := doneAt.Sub(inflightAt)
	t.Logf("RetryAfter %v; done %v after the in-flight attempt", retryAfter, gap)
	if gap < retryAfter || gap > retryAfter+3*time.Second {
		t.Errorf("done %v after the in-flight attempt; want RetryAfter %v to +3 s (not the own lease %v)", gap, retryAfter, ownLease)
	}
	if eff := e.effects(t); eff["x0"] != 1 {
		t.Errorf("effect ran %d times, want 1", eff["x0"])
	}
}
