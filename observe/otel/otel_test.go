package redisonceotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	redisonceotel "github.com/redisonce/redisonce/observe/otel"
	"github.com/redisonce/redisonce/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// setup returns an Observer writing to an in-memory span recorder and a
// manual metric reader.
func setup(t *testing.T, opts ...redisonceotel.Option) (*redisonceotel.Observer, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	obs, err := redisonceotel.New(append([]redisonceotel.Option{
		redisonceotel.WithTracerProvider(tp),
		redisonceotel.WithMeterProvider(mp),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return obs, spans, reader
}

type spanView struct {
	Name       string
	Kind       trace.SpanKind
	Start, End time.Time
	Attrs      map[string]string
	Status     codes.Code
	Events     []string
	Parent     trace.SpanID
}

func view(s sdktrace.ReadOnlySpan) spanView {
	v := spanView{
		Name: s.Name(), Kind: s.SpanKind(), Start: s.StartTime(), End: s.EndTime(),
		Attrs: map[string]string{}, Status: s.Status().Code, Parent: s.Parent().SpanID(),
	}
	for _, a := range s.Attributes() {
		v.Attrs[string(a.Key)] = a.Value.Emit()
	}
	for _, e := range s.Events() {
		v.Events = append(v.Events, e.Name)
	}
	return v
}

func TestSpans(t *testing.T) {
	obs, spans, _ := setup(t)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	parentCtx, parent := sdktrace.NewTracerProvider().Tracer("app").Start(context.Background(), "handler")
	defer parent.End()

	obs.Observe(parentCtx, store.Event{
		Store: "claims", Op: "claim", Script: "claim", Prefix: "once:", Key: "order-1",
		N: 1, Outcome: store.Outcome("duplicate"), Start: t0, Duration: 3 * time.Millisecond,
	})
	boom := errors.New("redisonce: claim \"order-2\": connection refused")
	obs.Observe(context.Background(), store.Event{
		Store: "records", Op: "do", Prefix: "rec:", Key: "k",
		N: 1, Outcome: store.Outcome("error"), Start: t0, Duration: time.Second, Err: boom,
	})

	got := make([]spanView, 0, 2)
	for _, s := range spans.Ended() {
		got = append(got, view(s))
	}
	want := []spanView{{
		Name: "redisonce.claims.claim", Kind: trace.SpanKindClient,
		Start: t0, End: t0.Add(3 * time.Millisecond),
		Attrs: map[string]string{
			"db.system": "redis", "redisonce.store": "claims", "redisonce.op": "claim",
			"redisonce.script": "claim", "redisonce.prefix": "once:",
			"redisonce.outcome": "duplicate", "redisonce.n": "1",
		},
		Status: codes.Unset, Parent: parent.SpanContext().SpanID(),
	}, {
		Name: "redisonce.records.do", Kind: trace.SpanKindInternal,
		Start: t0, End: t0.Add(time.Second),
		Attrs: map[string]string{
			"db.system": "redis", "redisonce.store": "records", "redisonce.op": "do",
			"redisonce.prefix": "rec:", "redisonce.outcome": "error", "redisonce.n": "1",
		},
		Status: codes.Error, Events: []string{"exception"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("spans (-want +got):\n%s", diff)
	}
	// Without WithKey the description is the error without the id it quotes.
	if d, want := spans.Ended()[1].Status().Description, "redisonce: claim: connection refused"; d != want {
		t.Errorf("error status description = %q, want %q", d, want)
	}
}

func TestSpanKeyOnlyWithOption(t *testing.T) {
	for _, withKey := range []bool{false, true} {
		var opts []redisonceotel.Option
		if withKey {
			opts = append(opts, redisonceotel.WithKey())
		}
		obs, spans, _ := setup(t, opts...)
		obs.Observe(context.Background(), store.Event{
			Store: "outbox", Op: "append", Script: "append", Prefix: "outbox:", Key: "conn-7",
			N: 1, Outcome: store.Outcome("appended"), Start: time.Now(), Duration: time.Millisecond,
		})
		got, ok := view(spans.Ended()[0]).Attrs["redisonce.key"]
		if withKey && got != "conn-7" || !withKey && ok {
			t.Errorf("WithKey %v: redisonce.key = %q (present %v)", withKey, got, ok)
		}
	}
}

func TestMetrics(t *testing.T) {
	obs, _, reader := setup(t)
	ctx := context.Background()
	ev := func(op string, out store.Outcome, d time.Duration) store.Event {
		return store.Event{Store: "claims", Op: op, Script: op, Prefix: "once:", Key: "secret-key",
			N: 1, Outcome: out, Start: time.Now(), Duration: d}
	}
	obs.Observe(ctx, ev("claim", store.Outcome("claimed"), 2*time.Millisecond))
	obs.Observe(ctx, ev("claim", store.Outcome("duplicate"), 4*time.Millisecond))
	obs.Observe(ctx, ev("claim", store.Outcome("duplicate"), 4*time.Millisecond))
	obs.Observe(ctx, ev("forget", store.Outcome("forgotten"), 20*time.Second))
	batch := ev("claim_many", store.Outcome("duplicate"), time.Millisecond)
	batch.N, batch.Key = 5, ""
	obs.Observe(ctx, batch) // counts its 5 items, one duration

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.ScopeMetrics) != 1 || rm.ScopeMetrics[0].Scope.Name != redisonceotel.ScopeName {
		t.Fatalf("scope metrics = %+v, want one scope %q", rm.ScopeMetrics, redisonceotel.ScopeName)
	}
	set := func(kv ...string) attribute.Set {
		var a []attribute.KeyValue
		for i := 0; i < len(kv); i += 2 {
			a = append(a, attribute.String(kv[i], kv[i+1]))
		}
		return attribute.NewSet(a...)
	}
	wantOps := metricdata.Metrics{
		Name: "redisonce.operations", Unit: "{operation}",
		Description: "redisonce store operations, by store, op and outcome",
		Data: metricdata.Sum[int64]{
			Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
			DataPoints: []metricdata.DataPoint[int64]{
				{Attributes: set("redisonce.store", "claims", "redisonce.op", "claim", "redisonce.outcome", "claimed"), Value: 1},
				{Attributes: set("redisonce.store", "claims", "redisonce.op", "claim", "redisonce.outcome", "duplicate"), Value: 2},
				{Attributes: set("redisonce.store", "claims", "redisonce.op", "forget", "redisonce.outcome", "forgotten"), Value: 1},
				{Attributes: set("redisonce.store", "claims", "redisonce.op", "claim_many", "redisonce.outcome", "duplicate"), Value: 5},
			},
		},
	}
	bounds := redisonceotel.DurationBuckets
	counts := func(at ...float64) []uint64 {
		c := make([]uint64, len(bounds)+1)
		for _, v := range at {
			i := 0
			for i < len(bounds) && v > bounds[i] {
				i++
			}
			c[i]++
		}
		return c
	}
	wantDur := metricdata.Metrics{
		Name: "redisonce.operation.duration", Unit: "s",
		Description: "duration of redisonce store operations, by store and op",
		Data: metricdata.Histogram[float64]{
			Temporality: metricdata.CumulativeTemporality,
			DataPoints: []metricdata.HistogramDataPoint[float64]{
				{Attributes: set("redisonce.store", "claims", "redisonce.op", "claim"), Count: 3,
					Bounds: bounds, BucketCounts: counts(0.002, 0.004, 0.004), Sum: 0.010,
					Min: metricdata.NewExtrema(0.002), Max: metricdata.NewExtrema(0.004)},
				{Attributes: set("redisonce.store", "claims", "redisonce.op", "claim_many"), Count: 1,
					Bounds: bounds, BucketCounts: counts(0.001), Sum: 0.001,
					Min: metricdata.NewExtrema(0.001), Max: metricdata.NewExtrema(0.001)},
				{Attributes: set("redisonce.store", "claims", "redisonce.op", "forget"), Count: 1,
					Bounds: bounds, BucketCounts: counts(20), Sum: 20,
					Min: metricdata.NewExtrema(20.0), Max: metricdata.NewExtrema(20.0)},
			},
		},
	}
	byName := map[string]metricdata.Metrics{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		byName[m.Name] = m
	}
	metricdatatest.AssertEqual(t, wantOps, byName["redisonce.operations"], metricdatatest.IgnoreTimestamp())
	metricdatatest.AssertEqual(t, wantDur, byName["redisonce.operation.duration"], metricdatatest.IgnoreTimestamp())
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if findValue(m, "secret-key") != "" {
			t.Errorf("%s carries the key as an attribute", m.Name)
		}
	}
}

// findValue returns v when any data point of m has an attribute whose value is v.
func findValue(m metricdata.Metrics, v string) string {
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	}
	for _, s := range sets {
		for _, kv := range s.ToSlice() {
			if kv.Value.Emit() == v {
				return v
			}
		}
	}
	return ""
}

// The observer is called from many goroutines at once (run with -race).
func TestConcurrent(t *testing.T) {
	obs, spans, reader := setup(t)
	done := make(chan struct{})
	for g := 0; g < 8; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 100; i++ {
				out := store.Outcome("claimed")
				if i%2 == 1 {
					out = store.Outcome("duplicate")
				}
				obs.Observe(context.Background(), store.Event{Store: "claims", Op: "claim",
					N: 1, Outcome: out, Start: time.Now(), Duration: time.Microsecond})
			}
		}()
	}
	for g := 0; g < 8; g++ {
		<-done
	}
	if n := len(spans.Ended()); n != 800 {
		t.Errorf("%d spans, want 800", n)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if s, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, p := range s.DataPoints {
				total += p.Value
			}
		}
	}
	if total != 800 {
		t.Errorf("redisonce.operations sums to %d, want 800", total)
	}
}
