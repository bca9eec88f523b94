package streams_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redistest"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// TestAckDelay: an entry's XACK waits the ack delay for the entries settled
// after it, so that one XACK carries them; a lone entry is acked within the
// delay of its settlement, not before; Run's end sends the waiting XACK at
// once. Batched and not.
func TestAckDelay(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run("batch="+strconv.FormatBool(batch), func(t *testing.T) {
			_, rc := newServer(t)
			ctx := context.Background()
			claims := must.Store(store.NewClaims(rc, store.WithPrefix("ad:")))
			const delay = 600 * time.Millisecond
			settled := make(chan time.Time, 1000)
			obs := store.ObserverFunc(func(_ context.Context, e store.Event) {
				if e.Op == "handle" && e.Outcome == "acked" {
					settled <- time.Now()
				}
			})
			c, err := streams.New(rc, claims, "s", "g", "c1", func(context.Context, streams.Message) error { return nil },
				streams.WithAckDelay(delay), streams.WithBatching(batch), streams.WithObserver(obs))
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.Do(ctx, rc.B().XgroupCreate().Key("s").Group("g").Id("0").Mkstream().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)

			// A lone entry: pending until the delay has passed since it
			// was settled, acked soon after.
			xadd(t, rc, "s", "v", "1")
			at := <-settled
			if time.Sleep(time.Until(at.Add(delay / 3))); pending(t, rc, "s", "g") != 1 {
				t.Fatalf("the entry was acked within %v of its settlement, before the ack delay %v", delay/3, delay)
			}
			waitFor(t, delay+5*time.Second, "the lone entry acked", func() bool { return pending(t, rc, "s", "g") == 0 })
			if took := time.Since(at); took < delay {
				t.Fatalf("acked %v after its settlement, before the ack delay %v", took, delay)
			}

			// 200 entries settled within the delay of one another share
			// their XACKs: far fewer calls than entries.
			if err := rc.Do(ctx, rc.B().ConfigResetstat().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			const n = 200
			for i := range n {
				xadd(t, rc, "s", "v", strconv.Itoa(i))
			}
			start := time.Now()
			for range n {
				<-settled
			}
			spread := time.Since(start)
			waitFor(t, delay+5*time.Second, "the 200 entries acked", func() bool { return pending(t, rc, "s", "g") == 0 })
			// One XACK per delay the settlements spread over, and one more.
			if calls, most := redistest.Calls(t, rc, "xack"), int(spread/delay)+2; calls > most {
				t.Fatalf("%d XACKs for %d entries settled over %v: want at most %d with an ack delay of %v", calls, n, spread, most, delay)
			}

			// Run's end does not wait for the delay: the last ids go out at once.
			xadd(t, rc, "s", "v", "last")
			<-settled
			t0 := time.Now()
			stop()
			if took := time.Since(t0); took >= delay {
				t.Errorf("Run returned %v after its context ended: it waited for the ack delay %v", took, delay)
			}
			if p := pending(t, rc, "s", "g"); p != 0 {
				t.Errorf("%d entries pending after Run returned: the waiting XACK was not sent", p)
			}
		})
	}
}

// TestAckDelayInvalid: a negative delay, or one not shorter than the lease,
// is refused.
func TestAckDelayInvalid(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewMemoryClaims())
	h := func(context.Context, streams.Message) error { return nil }
	for name, opts := range map[string][]streams.Option{
		"negative":      {streams.WithAckDelay(-time.Millisecond)},
		"lease":         {streams.WithLease(time.Second), streams.WithAckDelay(time.Second)},
		"default lease": {streams.WithAckDelay(10 * time.Second)},
	} {
		if _, err := streams.New(rc, claims, "s", "g", "c", h, opts...); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := streams.New(rc, claims, "s", "g", "c", h, streams.WithAckDelay(0)); err != nil {
		t.Errorf("WithAckDelay(0): %v", err)
	}
}
