package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/internal/redistest"
	"github.com/redisonce/redisonce/store"
)

// startKafka runs franz-go's in-process Kafka (kfake) with the topic, on a
// free loopback port; group sessions may be as short as 300 ms, so a killed
// member's partitions move on quickly.
func startKafka(t *testing.T, topic string, partitions int32) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic),
		kfake.GroupMinSessionTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func startRedis(t *testing.T) string {
	t.Helper()
	return redisproc.StartT(t, redisproc.Options{}).URL()
}

// newRedis opens a client on url with the stores' options, closed when the test ends.
var newRedis = redistest.Client

var seq atomic.Int64

type env struct {
	brokers  []string
	redisURL string
	rc       rueidis.Client
	topic    string
	group    string
	claims   *store.Claims
	prefix   string
}

func newEnv(t *testing.T, partitions int32) *env {
	t.Helper()
	n := seq.Add(1)
	e := &env{topic: fmt.Sprintf("t%d", n), group: fmt.Sprintf("g%d", n), redisURL: startRedis(t), prefix: fmt.Sprintf("kt%d:", n)}
	e.brokers = startKafka(t, e.topic, partitions)
	e.rc = newRedis(t, e.redisURL)
	e.claims = must.Store(store.NewClaims(e.rc, store.WithPrefix(e.prefix+"claims:")))
	return e
}

// groupOpts are a consumer's client options: the group, short sessions (3 s:
// shorter would expire on a loaded machine), a short rebalance timeout (a
// member killed during a rebalance holds the group's join up to it: 60 s by
// default) and fast commits.
func (e *env) groupOpts() []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(e.brokers...), kgo.ConsumerGroup(e.group), kgo.ConsumeTopics(e.topic),
		kgo.SessionTimeout(3 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond), kgo.RebalanceTimeout(6 * time.Second),
		kgo.AutoCommitInterval(100 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
}

// produce sends records (to the partition the record names) and waits for them.
func (e *env) produce(t *testing.T, rs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range rs {
		r.Topic = e.topic
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func payment(partition int32, id string) *kgo.Record {
	return &kgo.Record{Partition: partition, Value: []byte(id), Headers: []kgo.RecordHeader{{Key: "payment-id", Value: []byte(id)}}}
}

// committed returns the group's committed offset per partition (-1: none).
func (e *env) committed(t *testing.T, partitions int32) []int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = e.group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = e.topic
	for p := range partitions {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, partitions)
	for i := range out {
		out[i] = -1
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition >= 0 && rp.Partition < partitions {
				out[rp.Partition] = rp.Offset
			}
		}
	}
	return out
}

// run starts a consumer and returns a stop that cancels Run and waits for it.
func run(t *testing.T, c *kafka.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
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

func (e *env) effects(t *testing.T) map[string]int64 {
	t.Helper()
	m, err := e.rc.Do(context.Background(), e.rc.B().Hgetall().Key(e.prefix+"effects").Build()).AsIntMap()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// effect is fn's one write: HINCRBY effects <payment id> 1. It is sent
// without ctx's cancel: a rebalance that cancels ctx while the command is on
// the wire would make the client return the context's error for a write that
// landed, fn would report a failure for an effect that happened, and the next
// owner would run it again (seen in TestProcessesKilledMidHandler before).
func (e *env) effect(ctx context.Context, r *kgo.Record) error {
	return e.rc.Do(context.WithoutCancel(ctx), e.rc.B().Hincrby().Key(e.prefix+"effects").Field(string(r.Value)).Increment(1).Build()).Error()
}
