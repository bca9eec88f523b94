package redisonceprom_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"
	redisonceprom "github.com/redisonce/redisonce/observe/prometheus"
	"github.com/redisonce/redisonce/store"
)

// An outbox counted for Prometheus. In a service, register the observer on
// the registry your /metrics handler serves (prometheus.MustRegister for the
// default one, promhttp.Handler() to serve it).
func Example() {
	reg := prometheus.NewRegistry()
	obs := redisonceprom.New()
	reg.MustRegister(obs)
	// store.NewOutbox(client, store.WithObserver(obs)) for Redis: the same events.
	outbox, err := store.NewMemoryOutbox(store.WithObserver(obs), store.WithMaxUnacked(1))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	outbox.AppendWithID(ctx, "conn-1", "m1", []byte("hello"))
	outbox.AppendWithID(ctx, "conn-1", "m1", []byte("hello")) // a retry
	outbox.AppendWithID(ctx, "conn-1", "m2", []byte("world")) // the tail is full
	outbox.Ack(ctx, "conn-1", "m1", 2)
	outbox.Ack(ctx, "conn-1", "m1", 1) // an old owner

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != "redisonce_operations_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			fmt.Printf("%s{op=%q,outcome=%q} %v\n", f.GetName(), labels["op"], labels["outcome"], m.GetCounter().GetValue())
		}
	}
	// Output:
	// redisonce_operations_total{op="ack",outcome="acked"} 1
	// redisonce_operations_total{op="ack",outcome="stale_owner"} 1
	// redisonce_operations_total{op="append",outcome="appended"} 1
	// redisonce_operations_total{op="append",outcome="full"} 1
	// redisonce_operations_total{op="append",outcome="retried_append"} 1
}
