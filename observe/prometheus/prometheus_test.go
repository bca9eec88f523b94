package redisonceprom_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	redisonceprom "github.com/redisonce/redisonce/observe/prometheus"
	"github.com/redisonce/redisonce/store"
)

func event(st, op string, out store.Outcome, d time.Duration) store.Event {
	return store.Event{Store: st, Op: op, Script: op, Prefix: "p:", Key: "secret-key",
		N: 1, Outcome: out, Start: time.Now(), Duration: d}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs := redisonceprom.New(redisonceprom.WithBuckets([]float64{0.1, 0.5, 1}))
	reg.MustRegister(obs)
	ctx := context.Background()
	obs.Observe(ctx, event("claims", "claim", store.Outcome("claimed"), 62500*time.Microsecond))
	obs.Observe(ctx, event("claims", "claim", store.Outcome("duplicate"), 250*time.Millisecond))
	obs.Observe(ctx, event("claims", "claim", store.Outcome("duplicate"), 250*time.Millisecond))
	obs.Observe(ctx, event("outbox", "ack", store.Outcome("stale_owner"), 2*time.Second))
	batch := event("outbox", "ack_many", store.Outcome("acked"), 2*time.Second)
	batch.N = 4
	obs.Observe(ctx, batch) // counts its 4 items, one duration

	// durations exact in binary floating point, so that the sum is too
	want := `
# HELP redisonce_operation_duration_seconds Duration of redisonce store operations, by store and op.
# TYPE redisonce_operation_duration_seconds histogram
redisonce_operation_duration_seconds_bucket{op="ack",store="outbox",le="0.1"} 0
redisonce_operation_duration_seconds_bucket{op="ack",store="outbox",le="0.5"} 0
redisonce_operation_duration_seconds_bucket{op="ack",store="outbox",le="1"} 0
redisonce_operation_duration_seconds_bucket{op="ack",store="outbox",le="+Inf"} 1
redisonce_operation_duration_seconds_sum{op="ack",store="outbox"} 2
redisonce_operation_duration_seconds_count{op="ack",store="outbox"} 1
redisonce_operation_duration_seconds_bucket{op="ack_many",store="outbox",le="0.1"} 0
redisonce_operation_duration_seconds_bucket{op="ack_many",store="outbox",le="0.5"} 0
redisonce_operation_duration_seconds_bucket{op="ack_many",store="outbox",le="1"} 0
redisonce_operation_duration_seconds_bucket{op="ack_many",store="outbox",le="+Inf"} 1
redisonce_operation_duration_seconds_sum{op="ack_many",store="outbox"} 2
redisonce_operation_duration_seconds_count{op="ack_many",store="outbox"} 1
redisonce_operation_duration_seconds_bucket{op="claim",store="claims",le="0.1"} 1
redisonce_operation_duration_seconds_bucket{op="claim",store="claims",le="0.5"} 3
redisonce_operation_duration_seconds_bucket{op="claim",store="claims",le="1"} 3
redisonce_operation_duration_seconds_bucket{op="claim",store="claims",le="+Inf"} 3
redisonce_operation_duration_seconds_sum{op="claim",store="claims"} 0.5625
redisonce_operation_duration_seconds_count{op="claim",store="claims"} 3
# HELP redisonce_operations_total redisonce store operations, by store, op and outcome.
# TYPE redisonce_operations_total counter
redisonce_operations_total{op="ack",outcome="stale_owner",store="outbox"} 1
redisonce_operations_total{op="ack_many",outcome="acked",store="outbox"} 4
redisonce_operations_total{op="claim",outcome="claimed",store="claims"} 1
redisonce_operations_total{op="claim",outcome="duplicate",store="claims"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 7 {
		t.Fatalf("GatherAndCount = %d, %v; want 7 series", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == "secret-key" {
					t.Errorf("%s carries the key as label %s", f.GetName(), l.GetName())
				}
			}
		}
	}
}

func TestConstLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	billing := redisonceprom.New(redisonceprom.WithConstLabels(prometheus.Labels{"app": "billing"}))
	mail := redisonceprom.New(redisonceprom.WithConstLabels(prometheus.Labels{"app": "mail"}))
	reg.MustRegister(billing, mail)
	billing.Observe(context.Background(), event("records", "acquire", store.Outcome("taken_over"), time.Millisecond))
	mail.Observe(context.Background(), event("records", "acquire", store.Outcome("acquired"), time.Millisecond))
	want := `
# HELP redisonce_operations_total redisonce store operations, by store, op and outcome.
# TYPE redisonce_operations_total counter
redisonce_operations_total{app="billing",op="acquire",outcome="taken_over",store="records"} 1
redisonce_operations_total{app="mail",op="acquire",outcome="acquired",store="records"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "redisonce_operations_total"); err != nil {
		t.Fatal(err)
	}
	// one Observer registered twice is a mistake Prometheus reports
	if err := reg.Register(redisonceprom.New(redisonceprom.WithConstLabels(prometheus.Labels{"app": "mail"}))); err == nil {
		t.Error("registering a second observer with the same labels succeeded")
	}
}

// The observer is called from many goroutines at once (run with -race).
func TestConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs := redisonceprom.New()
	reg.MustRegister(obs)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				out := store.Outcome("appended")
				if i%2 == 1 {
					out = store.Outcome("retried_append")
				}
				obs.Observe(context.Background(), event("outbox", "append", out, time.Microsecond))
			}
		}()
	}
	wg.Wait()
	want := `
# HELP redisonce_operations_total redisonce store operations, by store, op and outcome.
# TYPE redisonce_operations_total counter
redisonce_operations_total{op="append",outcome="appended",store="outbox"} 400
redisonce_operations_total{op="append",outcome="retried_append",store="outbox"} 400
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "redisonce_operations_total"); err != nil {
		t.Fatal(err)
	}
}
