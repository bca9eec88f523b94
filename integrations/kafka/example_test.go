package kafka_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/store"
)

// A payments consumer: each payment is applied once however often Kafka
// delivers it or the producer sends it. The example runs franz-go's
// in-process Kafka (kfake) and keeps its claims in memory; a real consumer
// passes store.NewClaims(redisClient) and its brokers.
func Example() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "payments"))
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	// The producer sends payment 7 twice (a retry after a timeout).
	prod, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	for _, id := range []string{"7", "8", "7"} {
		prod.ProduceSync(context.Background(), &kgo.Record{Topic: "payments", Value: []byte("100"),
			Headers: []kgo.RecordHeader{{Key: "payment-id", Value: []byte(id)}}})
	}
	prod.Close()

	var mu sync.Mutex
	balance, handled := 0, 0
	ctx, cancel := context.WithCancel(context.Background())
	claims, err := store.NewMemoryClaims() // store.NewClaims(redisClient) in production
	if err != nil {
		fmt.Println(err)
		cancel()
		return
	}
	c, err := kafka.New(claims, func(ctx context.Context, r *kgo.Record) error {
		// all-or-nothing: one write (here a variable; a real one is one SQL
		// transaction or one Redis command, sent with context.WithoutCancel)
		amount, err := strconv.Atoi(string(r.Value))
		if err != nil {
			return store.Permanent(err) // dead letter: a retry would fail again
		}
		mu.Lock()
		defer mu.Unlock()
		balance += amount
		return nil
	}, []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("ledger"), kgo.ConsumeTopics("payments"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
		kafka.WithID(kafka.HeaderID("payment-id")), kafka.WithLease(30*time.Second),
		kafka.WithReport(func(r *kgo.Record, o kafka.Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			if handled++; handled == 3 {
				cancel()
			}
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = c.Run(ctx) // returns once ctx is cancelled, offsets committed
	fmt.Println("balance:", balance)
	// Output: balance: 200
}
