package streams_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// redisAddr is the server the Examples talk to ("localhost:6379" in your
// code): TestMain starts a throwaway one.
var redisAddr string

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" { // a worker process of TestProcesses
		os.Exit(m.Run())
	}
	if _, err := redisproc.LookPath(); err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "CI=true:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "skipping the streams tests:", err)
		os.Exit(0)
	}
	srv, err := redisproc.Start(redisproc.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = srv.Addr
	code := m.Run()
	_ = srv.Stop()
	os.Exit(code)
}

// A payment consumer: each payment's effect is applied once, however often
// the stream delivers it and however many workers run. The producer puts its
// own payment id in a field, so a payment it XADDs twice is one claim.
func Example() {
	ctx := context.Background()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	claims, err := store.NewClaims(client, store.WithTTL(7*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}

	// The producer: pay-1 is published twice (a retry after a timeout).
	for _, p := range [][2]string{{"pay-1", "10"}, {"pay-2", "5"}, {"pay-1", "10"}} {
		client.Do(ctx, client.B().Xadd().Key("payments").Id("*").FieldValue().
			FieldValue("payment_id", p[0]).FieldValue("amount", p[1]).Build())
	}

	// The handler's effect is one write: all or nothing (see the package doc).
	credit := func(ctx context.Context, m streams.Message) error {
		amount, err := strconv.ParseInt(m.Values["amount"], 10, 64)
		if err != nil {
			return err
		}
		return client.Do(ctx, client.B().Incrby().Key("ledger").Increment(amount).Build()).Error()
	}
	settled := make(chan store.Outcome, 3)
	consumer, err := streams.New(client, claims, "payments", "ledger", "worker-1", credit,
		streams.WithIDField("payment_id"),
		streams.WithDeadLetter("payments:dead", 5),
		streams.WithObserver(store.ObserverFunc(func(_ context.Context, e store.Event) {
			settled <- e.Outcome
		})))
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- consumer.Run(runCtx) }()
	count := map[store.Outcome]int{}
	for range 3 {
		count[<-settled]++
	}
	stop() // graceful: stops reading, lets running handlers finish
	fmt.Println("Run:", <-done)
	fmt.Println("acked:", count[store.Outcome("acked")], "duplicates:", count[store.Outcome("duplicate")])
	fmt.Println("ledger:", ledger(ctx, client))
	// Output:
	// Run: <nil>
	// acked: 2 duplicates: 1
	// ledger: 15
}

func ledger(ctx context.Context, c rueidis.Client) int64 {
	n, _ := c.Do(ctx, c.B().Get().Key("ledger").Build()).AsInt64()
	return n
}
