package jetstream_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/store"
)

// A payments consumer: each payment is applied once however often JetStream
// delivers it. The example runs its own nats-server in process and keeps its
// claims in memory; a real consumer passes store.NewClaims(redisClient).
func Example() {
	dir, _ := os.MkdirTemp("", "jetstream-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	go ns.Start()
	ns.ReadyForConnections(10 * time.Second)
	defer ns.Shutdown()

	ctx := context.Background()
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := natsjs.New(nc)
	stream, _ := js.CreateStream(ctx, natsjs.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})
	consumer, _ := stream.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{
		Durable: "ledger", AckPolicy: natsjs.AckExplicitPolicy, AckWait: 30 * time.Second})

	claims, err := store.NewMemoryClaims() // store.NewClaims(redisClient) in production
	if err != nil {
		fmt.Println(err)
		return
	}
	var mu sync.Mutex
	balance := 0
	var wg sync.WaitGroup
	wg.Add(3)
	h, err := jetstream.New(claims, func(ctx context.Context, msg natsjs.Msg) error {
		// all-or-nothing: one write (here a variable; a real one is one SQL
		// transaction or one Redis command, or fenced with
		// store.LeaseFromContext(ctx).Token)
		amount, err := strconv.Atoi(string(msg.Data()))
		if err != nil {
			return store.Permanent(err) // Term: a redelivery would fail again
		}
		mu.Lock()
		defer mu.Unlock()
		balance += amount
		return nil
	}, jetstream.WithLease(30*time.Second),
		jetstream.WithID(func(msg natsjs.Msg) (string, error) { return msg.Headers().Get("Payment-Id"), nil }),
		jetstream.WithReport(func(msg natsjs.Msg, o jetstream.Outcome, err error) { wg.Done() }))
	if err != nil {
		fmt.Println(err)
		return
	}
	cc, _ := consumer.Consume(h.Handle)
	defer cc.Stop()

	// The producer sends payment 7 twice (a retry with a new Nats-Msg-Id).
	for i, id := range []string{"7", "8", "7"} {
		m := nats.NewMsg("payments.new")
		m.Header.Set("Payment-Id", id)
		m.Header.Set(nats.MsgIdHdr, fmt.Sprint("attempt-", i))
		m.Data = []byte("100")
		_, _ = js.PublishMsg(ctx, m)
	}
	wg.Wait()
	mu.Lock()
	fmt.Println("balance:", balance)
	mu.Unlock()
	// Output: balance: 200
}
