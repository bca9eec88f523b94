package redisonceotel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	redisonceotel "github.com/redisonce/redisonce/observe/otel"
	"github.com/redisonce/redisonce/store"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A claims store reporting to OpenTelemetry. In a service the providers are
// the ones set up at start (otel.SetTracerProvider, otel.SetMeterProvider),
// and redisonceotel.New() takes them by default; here an in-memory span
// recorder and a manual metric reader show what is recorded.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	obs, err := redisonceotel.New(redisonceotel.WithTracerProvider(tp), redisonceotel.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	// store.NewClaims(client, store.WithObserver(obs)) for Redis: the same events.
	claims, err := store.NewMemoryClaims(store.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	claims.Claim(ctx, "order-1")
	claims.Claim(ctx, "order-1") // a redelivery
	claims.Do(ctx, "order-2", 30*time.Second, func(context.Context) error { return nil })

	for _, s := range spans.Ended() {
		var outcome string
		for _, a := range s.Attributes() {
			if a.Key == "redisonce.outcome" {
				outcome = a.Value.AsString()
			}
		}
		fmt.Println(s.Name(), outcome)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, p := range sum.DataPoints {
				op, _ := p.Attributes.Value("redisonce.op")
				out, _ := p.Attributes.Value("redisonce.outcome")
				fmt.Printf("%s{op=%s,outcome=%s} %d\n", m.Name, op.AsString(), out.AsString(), p.Value)
			}
		}
	}
	// Unordered output:
	// redisonce.claims.claim claimed
	// redisonce.claims.claim duplicate
	// redisonce.claims.do committed
	// redisonce.operations{op=claim,outcome=claimed} 1
	// redisonce.operations{op=claim,outcome=duplicate} 1
	// redisonce.operations{op=do,outcome=committed} 1
}
