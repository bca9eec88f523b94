package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/internal/redistest"
	"github.com/redisonce/redisonce/store"
)

// The consumer benchmark's size: rounds per side, records per round, the
// topic's partitions (a goroutine each, on both sides).
const (
	benchRounds     = 7
	benchRecords    = 10000
	benchPartitions = 4
)

// BenchmarkConsumer: the cost of exactly-once on a Kafka topic. A Consumer
// (a Claims.Do per record: claim, fn, commit) against the plain franz-go
// consumer a user writes without it (poll, each partition's records in
// order on a goroutine of its own, CommitRecords after the poll), with the
// same handler (one INCRBY on Redis), on kfake and one redis-server. Rounds
// alternate (plain, consumer, plain...), each on a fresh kfake cluster with
// the round's records produced before the consumer starts; a round is timed
// from its first handler call (the group join is not the consumer's cost)
// to its last record done (plain: its poll committed; Consumer: reported
// OutcomeDone). Reported: the medians of each side's msgs/s and of the
// rounds' ratios, and the server's CPU time per record (INFO cpu over the
// round). The run ignores b.N: make bench runs it with -benchtime 1x.
func BenchmarkConsumer(b *testing.B) {
	srv := redisproc.StartT(b, redisproc.Options{})
	rc := redistest.Client(b, srv.URL())
	var rates, cpus [2][]float64 // [0] plain, [1] Consumer
	var ratios, cpuRatios []float64
	for round := range benchRounds {
		for side := range 2 {
			rate, cpu := kafkaRound(b, rc, side == 1, fmt.Sprintf("kb%d-%d:", round, side))
			rates[side], cpus[side] = append(rates[side], rate), append(cpus[side], cpu)
		}
		ratios = append(ratios, rates[1][round]/rates[0][round])
		cpuRatios = append(cpuRatios, cpus[1][round]/cpus[0][round])
	}
	b.ReportMetric(median(rates[0]), "plain-msgs/s")
	b.ReportMetric(median(rates[1]), "consumer-msgs/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(median(cpus[0]), "plain-srv-µs/msg")
	b.ReportMetric(median(cpus[1]), "consumer-srv-µs/msg")
	fmt.Printf("kafka BenchmarkConsumer: Consumer/plain = %.2fx msgs/s (median of %d interleaved rounds of %d records, %d partitions; "+
		"rounds %s; Consumer %.0f, plain %.0f msgs/s); Redis CPU per record %.1f vs %.1f µs (%.2fx); goal >= 0.85x msgs/s\n",
		median(ratios), benchRounds, benchRecords, benchPartitions, roundList(ratios), median(rates[1]), median(rates[0]),
		median(cpus[1]), median(cpus[0]), median(cpuRatios))
}

// kafkaRound produces benchRecords records over benchPartitions partitions
// of a fresh kfake cluster and consumes them, with the Consumer (withClaims)
// or the plain consumer; it returns the records per second and the Redis
// server's CPU µs per record.
func kafkaRound(b *testing.B, rc rueidis.Client, withClaims bool, prefix string) (rate, cpuPerMsg float64) {
	b.Helper()
	topic, group := prefix+"t", prefix+"g"
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(benchPartitions, topic))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	brokers := cl.ListenAddrs()
	produceBench(b, brokers, topic)

	var first atomic.Int64 // the first handler call, unix ns
	var done atomic.Int64
	finished := make(chan struct{})
	count := func(n int64) {
		if done.Add(n) == benchRecords {
			close(finished)
		}
	}
	ledger := prefix + "ledger"
	handler := func(ctx context.Context, r *kgo.Record) error {
		first.CompareAndSwap(0, time.Now().UnixNano())
		return rc.Do(ctx, rc.B().Incrby().Key(ledger).Increment(1).Build()).Error()
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var run func() error
	if withClaims {
		c, err := kafka.New(must.Store(store.NewClaims(rc, store.WithPrefix(prefix+"claims:"))), handler, opts,
			kafka.WithReport(func(_ *kgo.Record, o kafka.Outcome, err error) {
				if o == kafka.OutcomeDone && err == nil {
					count(1)
				}
			}))
		if err != nil {
			b.Fatal(err)
		}
		run = func() error { return c.Run(ctx) }
	} else {
		run = func() error { return plainKafka(ctx, append(opts, kgo.DisableAutoCommit()), handler, count) }
	}
	cpu0 := redistest.ServerCPU(b, rc)
	errc := make(chan error, 1)
	go func() { errc <- run() }()
	select {
	case <-finished:
	case err := <-errc:
		b.Fatalf("consumer returned early: %v", err)
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d records done after 2 minutes", done.Load(), benchRecords)
	}
	elapsed := time.Since(time.Unix(0, first.Load()))
	cpu := float64((redistest.ServerCPU(b, rc) - cpu0).Nanoseconds()) / 1e3 // µs
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	if got, err := rc.Do(context.Background(), rc.B().Get().Key(ledger).Build()).AsInt64(); err != nil || got != benchRecords {
		b.Fatalf("ledger %d (%v) after %d records", got, err, benchRecords)
	}
	return benchRecords / elapsed.Seconds(), cpu / benchRecords
}

// plainKafka is the consumer a user writes without redisonce: poll, hand each
// partition's records to a goroutine that runs them in order, wait for all,
// commit the poll's offsets (at least once: no dedupe).
func plainKafka(ctx context.Context, opts []kgo.Opt, h func(context.Context, *kgo.Record) error, count func(int64)) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollRecords(ctx, 1000)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		var wg sync.WaitGroup
		var failed atomic.Bool
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			wg.Go(func() {
				for _, r := range p.Records {
					if h(ctx, r) != nil {
						failed.Store(true)
						return
					}
				}
			})
		})
		wg.Wait()
		if failed.Load() {
			return fmt.Errorf("plain consumer: a handler failed")
		}
		rs := fs.Records()
		if err := cl.CommitRecords(ctx, rs...); err != nil {
			return err
		}
		count(int64(len(rs)))
	}
}

// produceBench sends benchRecords records, round robin over the partitions.
func produceBench(b *testing.B, brokers []string, topic string) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, benchRecords)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Partition: int32(i % benchPartitions), Value: []byte(strconv.Itoa(i))}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
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
