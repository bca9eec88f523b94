package jetstream_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
)

// ackTap records the acks the server receives for a stream: a core NATS
// subscription on the stream's ack subjects ($JS.ACK.<stream>.>) sees each
// one, and whether it asked for a confirmation (DoubleAck sends a reply
// subject, Ack none).
type ackTap struct {
	mu            sync.Mutex
	plain, double int
}

func tapAcks(t *testing.T, natsURL, stream string) *ackTap {
	t.Helper()
	nc, _ := connectJS(t, natsURL)
	a := &ackTap{}
	sub, err := nc.Subscribe("$JS.ACK."+stream+".>", func(m *nats.Msg) {
		if string(m.Data) != "+ACK" {
			return // InProgress, Nak, Term
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if m.Reply == "" {
			a.plain++
		} else {
			a.double++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return a
}

func (a *ackTap) counts() (plain, double int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.plain, a.double
}

// TestConsumeAcks: Consume's batches ack a message done or a duplicate with
// Ack, and with WithDoubleAck with DoubleAck, as Process always does; each
// message once, fn once per id.
func TestConsumeAcks(t *testing.T) {
	for _, double := range []bool{false, true} {
		t.Run("double="+strconv.FormatBool(double), func(t *testing.T) {
			e := newEnv(t, 0)
			cons := e.consumer(t, "c", 5*time.Second)
			tap := tapAcks(t, e.natsURL, e.stream.CachedInfo().Config.Name)
			const n = 30
			if err := e.claims.Remember(context.Background(), "m0"); err != nil { // a duplicate
				t.Fatal(err)
			}
			for i := range n {
				e.publish(t, "m"+strconv.Itoa(i), "x")
			}
			var mu sync.Mutex
			runs, outcomes := map[string]int{}, map[jetstream.Outcome]int{}
			opts := []jetstream.Option{jetstream.WithReport(func(_ natsjs.Msg, o jetstream.Outcome, err error) {
				if err != nil {
					t.Errorf("outcome %v, error %v", o, err)
				}
				mu.Lock()
				outcomes[o]++
				mu.Unlock()
			})}
			if double {
				opts = append(opts, jetstream.WithDoubleAck())
			}
			h := newHandler(t, e.claims, func(_ context.Context, msg natsjs.Msg) error {
				id, _ := jetstream.MsgID(msg)
				mu.Lock()
				runs[id]++
				mu.Unlock()
				return nil
			}, opts...)
			cc, err := h.Consume(cons)
			if err != nil {
				t.Fatal(err)
			}
			acked := func() bool { p, d := tap.counts(); return p+d >= n }
			if !waitFor(10*time.Second, acked) {
				p, d := tap.counts()
				t.Fatalf("%d Acks and %d DoubleAcks seen after 10 s, want %d", p, d, n)
			}
			cc.Stop()
			<-cc.Closed()
			time.Sleep(200 * time.Millisecond) // room for a wrong extra ack
			plain, dbl := tap.counts()
			if want := [2]int{n, 0}; double {
				if [2]int{plain, dbl} != [2]int{0, n} {
					t.Errorf("WithDoubleAck: %d Acks, %d DoubleAcks; want 0, %d", plain, dbl, n)
				}
			} else if [2]int{plain, dbl} != want {
				t.Errorf("%d Acks, %d DoubleAcks; want %d, 0", plain, dbl, n)
			}
			mu.Lock()
			defer mu.Unlock()
			if outcomes[jetstream.OutcomeDone] != n-1 || outcomes[jetstream.OutcomeDuplicate] != 1 || runs["m0"] != 0 || len(runs) != n-1 {
				t.Errorf("outcomes %v, fn ran for %d ids (m0 %d times); want %d done, 1 duplicate, m0 never", outcomes, len(runs), runs["m0"], n-1)
			}
			for id, k := range runs {
				if k != 1 {
					t.Errorf("fn ran %d times for %s", k, id)
				}
			}
			if n := pendingAcks(t, cons); n != 0 {
				t.Errorf("%d acks pending at the end", n)
			}
		})
	}
}

// TestProcessDoubleAcks: Process (and so Handle) confirms its ack.
func TestProcessDoubleAcks(t *testing.T) {
	e := newEnv(t, 0)
	c := e.consumer(t, "c", 5*time.Second)
	tap := tapAcks(t, e.natsURL, e.stream.CachedInfo().Config.Name)
	e.publish(t, "p1", "x")
	h := newHandler(t, e.claims, func(context.Context, natsjs.Msg) error { return nil })
	m := fetch1(t, c, 2*time.Second)
	if o, err := h.Process(context.Background(), m); o != jetstream.OutcomeDone || err != nil {
		t.Fatalf("Process = %v, %v; want done, nil", o, err)
	}
	if !waitFor(5*time.Second, func() bool { _, d := tap.counts(); return d == 1 }) {
		p, d := tap.counts()
		t.Fatalf("%d Acks, %d DoubleAcks after Process; want 0, 1", p, d)
	}
	if p, _ := tap.counts(); p != 0 {
		t.Errorf("%d Acks after Process; want its one DoubleAck only", p)
	}
}
