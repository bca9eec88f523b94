package jetstream_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/internal/redistest"
	"github.com/redisonce/redisonce/store"
)

// The consumer benchmark's size: rounds per side, messages per round.
const (
	benchRounds   = 7
	benchMessages = 5000
)

// BenchmarkConsumer: the cost of exactly-once on a JetStream consumer. A
// Handler's Consume (the messages queued by Consume's callback claimed
// together, each fn once the previous one returned, each message's commit
// and DoubleAck behind it) against the plain consumer a user writes without
// it (Consume, the handler, Ack), with the same handler (one INCRBY on
// Redis), on an in-process nats-server and one redis-server, both with
// Consume's default buffering. Rounds alternate (plain,
// Handler, plain...), each on a fresh stream whose messages are published
// before the consumer starts; a round is timed from its first handler call
// to its last message done (plain: acked; Handler: reported OutcomeDone).
// Reported: the medians of each side's msgs/s and of the rounds' ratios, and
// the server's CPU time per message (INFO cpu over the round), after a
// warm-up round per side. The run ignores b.N: make bench runs it with
// -benchtime 1x.
func BenchmarkConsumer(b *testing.B) {
	natsURL := startNATS(b)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	rc := redistest.Client(b, redisproc.StartT(b, redisproc.Options{}).URL())
	var rates, cpus [2][]float64 // [0] plain, [1] Handler
	var ratios, cpuRatios []float64
	// A first round per side, not counted, warms up what only the first
	// round pays for: the connections' dials, the scripts' NOSCRIPT and
	// load, the server's first stream and consumer.
	for side := range 2 {
		jetstreamRound(b, js, rc, side == 1, fmt.Sprintf("JBW_%d", side))
	}
	for round := range benchRounds {
		for side := range 2 {
			rate, cpu := jetstreamRound(b, js, rc, side == 1, fmt.Sprintf("JB%d_%d", round, side))
			rates[side], cpus[side] = append(rates[side], rate), append(cpus[side], cpu)
		}
		ratios = append(ratios, rates[1][round]/rates[0][round])
		cpuRatios = append(cpuRatios, cpus[1][round]/cpus[0][round])
	}
	b.ReportMetric(median(rates[0]), "plain-msgs/s")
	b.ReportMetric(median(rates[1]), "handler-msgs/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(median(cpus[0]), "plain-srv-µs/msg")
	b.ReportMetric(median(cpus[1]), "handler-srv-µs/msg")
	fmt.Printf("jetstream BenchmarkConsumer: Handler/plain = %.2fx msgs/s (median of %d interleaved rounds of %d messages; "+
		"rounds %s; Handler %.0f, plain %.0f msgs/s); Redis CPU per message %.1f vs %.1f µs (%.2fx); goal >= 0.85x msgs/s\n",
		median(ratios), benchRounds, benchMessages, roundList(ratios), median(rates[1]), median(rates[0]),
		median(cpus[1]), median(cpus[0]), median(cpuRatios))
}

// jetstreamRound publishes benchMessages messages to a fresh stream and
// consumes them with the Handler (withClaims) or the plain consumer; it
// returns the messages per second and the Redis server's CPU µs per message.
func jetstreamRound(b *testing.B, js natsjs.JetStream, rc rueidis.Client, withClaims bool, name string) (rate, cpuPerMsg float64) {
	b.Helper()
	ctx := context.Background()
	subject := strings.ToLower(name)
	stream, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{subject + ".>"}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(ctx, name) }()
	for i := range benchMessages {
		if _, err := js.PublishAsync(subject+".pay", []byte(strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publish did not complete")
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "c", AckPolicy: natsjs.AckExplicitPolicy})
	if err != nil {
		b.Fatal(err)
	}

	var first atomic.Int64 // the first handler call, unix ns
	var done atomic.Int64
	finished := make(chan struct{})
	count := func() {
		if done.Add(1) == benchMessages {
			close(finished)
		}
	}
	ledger := name + ":ledger"
	handler := func(ctx context.Context, _ natsjs.Msg) error {
		first.CompareAndSwap(0, time.Now().UnixNano())
		return rc.Do(ctx, rc.B().Incrby().Key(ledger).Increment(1).Build()).Error()
	}
	var cb natsjs.MessageHandler
	var h *jetstream.Handler
	if withClaims {
		h, err = jetstream.New(must.Store(store.NewClaims(rc, store.WithPrefix(name+":claims:"))), handler,
			jetstream.WithReport(func(_ natsjs.Msg, o jetstream.Outcome, err error) {
				if o == jetstream.OutcomeDone && err == nil {
					count()
				}
			}))
		if err != nil {
			b.Fatal(err)
		}
	} else {
		// the plain consumer: the handler, then Ack (at least once: no dedupe)
		cb = func(m natsjs.Msg) {
			if handler(ctx, m) == nil && m.Ack() == nil {
				count()
			}
		}
	}
	cpu0 := redistest.ServerCPU(b, rc)
	var cc natsjs.ConsumeContext
	if h != nil {
		cc, err = h.Consume(cons)
	} else {
		cc, err = cons.Consume(cb)
	}
	if err != nil {
		b.Fatal(err)
	}
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d messages done after 2 minutes", done.Load(), benchMessages)
	}
	elapsed := time.Since(time.Unix(0, first.Load()))
	cpu := float64((redistest.ServerCPU(b, rc) - cpu0).Nanoseconds()) / 1e3 // µs
	cc.Stop()
	<-cc.Closed()
	if got, err := rc.Do(ctx, rc.B().Get().Key(ledger).Build()).AsInt64(); err != nil || got != benchMessages {
		b.Fatalf("ledger %d (%v) after %d messages", got, err, benchMessages)
	}
	return benchMessages / elapsed.Seconds(), cpu / benchMessages
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func roundList(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}
