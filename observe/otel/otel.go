// Package redisonceotel reports the operations of redisonce stores to
// OpenTelemetry: a span per operation and two metrics.
//
//	obs, err := redisonceotel.New() // the global TracerProvider and MeterProvider
//	claims, err := store.NewClaims(client, store.WithObserver(obs))
//
// # Spans
//
// One span per store operation, named "redisonce.<store>.<op>" (for example
// "redisonce.claims.claim"), a child of the span in the operation's context.
// It starts when the operation started and ends when it ended (the span is
// written after the operation, from the store's Event). Attributes:
//
//	db.system          "redis" (also for a memory twin: it stands in for Redis)
//	redisonce.store    claims | outbox | records
//	redisonce.op       claim, append, acquire, do, ...
//	redisonce.script   the script run (claim for claim.lua); absent for a memory
//	                   twin and for a flow made of several scripts (do)
//	redisonce.prefix   the store's key prefix
//	redisonce.outcome  claimed, duplicate, stale_owner, ... (store.Outcome)
//	redisonce.n        items in a batch, 1 otherwise
//	redisonce.key      the id, connection or record key: only with WithKey
//
// The status is Error, with the error recorded (an "exception" event), for
// the outcome "error" only (connection, server, corrupt data). The status
// description and exception.message are the error's text without the key
// (store.Event.ErrorText: every store error quotes its id) unless WithKey. Verdicts such as duplicate, in_flight or
// stale_owner are answers, not failures of the operation: their status is
// left unset; alert on them through the metrics.
//
// # Metrics
//
//	redisonce.operations          counter    {operation}  redisonce.store, redisonce.op, redisonce.outcome
//	redisonce.operation.duration  histogram  s            redisonce.store, redisonce.op
//
// The counter adds an event's N: a batch counts its items, so that
// duplicates suppressed by ClaimMany count like those of Claim. The histogram
// records one duration per event; its buckets are DurationBuckets. The key is never a metric
// attribute: its cardinality is unbounded.
//
// # Per-command spans
//
// A store's span covers its whole operation. For a span per Redis command as
// well (EVALSHA, its EVAL fallback, the round trips of a Do flow), give the
// store a client wrapped by rueidisotel (module
// github.com/redis/rueidis/rueidisotel):
//
//	opt, err := store.ClientOptions("redis://127.0.0.1:6379")
//	client, err := rueidisotel.NewClient(opt) // or rueidisotel.WithClient(c)
//	claims, err := store.NewClaims(client, store.WithObserver(obs))
//
// Both use the TracerProvider in effect (each takes WithTracerProvider). The
// command spans are children of the caller's span, siblings of the
// store's span, because the store's span is written after the operation ends.
package redisonceotel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redisonce/redisonce/store"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/redisonce/redisonce/observe/otel"

// DurationBuckets are the histogram's bucket bounds in seconds: a store
// operation is one round trip (tens of µs to a few ms), a Do flow runs the
// caller's function too.
var DurationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// Option configures New.
type Option func(*config)

type config struct {
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	withKey bool
}

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider()
// at the time of New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets where metrics go. Default: otel.GetMeterProvider()
// at the time of New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithKey adds the operation's key (claim id, connection, record key) to its
// span as redisonce.key, and records an error's text as it is (store errors
// quote the key). Default: off, because keys can carry user data (an order
// number, an e-mail address): no key attribute, and error texts without the
// key (store.Event.ErrorText). Never added to metrics.
func WithKey() Option {
	return func(c *config) { c.withKey = true }
}

// Observer is a store.Observer that writes spans and metrics. Safe for
// concurrent use.
type Observer struct {
	tracer   trace.Tracer
	ops      metric.Int64Counter
	duration metric.Float64Histogram
	withKey  bool

	// measurement options by (store, op, outcome), built once: an attribute
	// set per event would cost an allocation and a sort each time.
	opts sync.Map // labels -> *measureOpts
}

type labels struct {
	store, op string
	outcome   store.Outcome
}

type measureOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

var _ store.Observer = (*Observer)(nil)

// New returns an Observer that writes to the given providers (the global
// ones by default). It fails when an instrument cannot be created, and on a
// nil Option (ErrInvalidArgument).
func New(opts ...Option) (*Observer, error) {
	var c config
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redisonceotel: option %d: %w: a nil Option", i, store.ErrInvalidArgument)
		}
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	meter := c.mp.Meter(ScopeName)
	ops, err := meter.Int64Counter("redisonce.operations",
		metric.WithUnit("{operation}"),
		metric.WithDescription("redisonce store operations, by store, op and outcome"))
	if err != nil {
		return nil, err
	}
	duration, err := meter.Float64Histogram("redisonce.operation.duration",
		metric.WithUnit("s"),
		metric.WithDescription("duration of redisonce store operations, by store and op"),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	if err != nil {
		return nil, err
	}
	return &Observer{
		tracer:   c.tp.Tracer(ScopeName),
		ops:      ops,
		duration: duration,
		withKey:  c.withKey,
	}, nil
}

// Observe records e as a span and in the metrics.
func (o *Observer) Observe(ctx context.Context, e store.Event) {
	if ctx == nil {
		ctx = context.Background()
	}
	m := o.measure(e.Store, e.Op, e.Outcome)
	o.ops.Add(ctx, int64(items(e.N)), m.add...)
	o.duration.Record(ctx, e.Duration.Seconds(), m.record...)

	kind := trace.SpanKindInternal
	if e.Script != "" {
		kind = trace.SpanKindClient // one script, one round trip to Redis
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		attribute.String("db.system", "redis"),
		attribute.String("redisonce.store", e.Store),
		attribute.String("redisonce.op", e.Op),
		attribute.String("redisonce.prefix", e.Prefix),
		attribute.String("redisonce.outcome", string(e.Outcome)),
		attribute.Int("redisonce.n", e.N),
	)
	if e.Script != "" {
		attrs = append(attrs, attribute.String("redisonce.script", e.Script))
	}
	if o.withKey && e.Key != "" {
		attrs = append(attrs, attribute.String("redisonce.key", e.Key))
	}
	start := e.Start
	if start.IsZero() {
		start = time.Now().Add(-e.Duration)
	}
	_, span := o.tracer.Start(ctx, "redisonce."+e.Store+"."+e.Op,
		trace.WithTimestamp(start),
		trace.WithSpanKind(kind),
		trace.WithAttributes(attrs...))
	if e.Outcome == store.Outcome("error") {
		if e.Err != nil {
			// The error's text without the key unless WithKey: store errors
			// quote the id (store.Event.ErrorText). The exception event is
			// RecordError's, with that text.
			text := e.ErrorText(o.withKey)
			span.AddEvent(semconv.ExceptionEventName, trace.WithTimestamp(start.Add(e.Duration)),
				trace.WithAttributes(semconv.ExceptionType(fmt.Sprintf("%T", e.Err)), semconv.ExceptionMessage(text)))
			span.SetStatus(codes.Error, text)
		} else {
			span.SetStatus(codes.Error, string(e.Outcome))
		}
	}
	span.End(trace.WithTimestamp(start.Add(e.Duration)))
}

// items is what an event adds to the counter: a batch counts its items.
func items(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

func (o *Observer) measure(st, op string, out store.Outcome) *measureOpts {
	k := labels{st, op, out}
	if m, ok := o.opts.Load(k); ok {
		return m.(*measureOpts)
	}
	both := attribute.NewSet(
		attribute.String("redisonce.store", st),
		attribute.String("redisonce.op", op),
		attribute.String("redisonce.outcome", string(out)))
	noOutcome := attribute.NewSet(
		attribute.String("redisonce.store", st),
		attribute.String("redisonce.op", op))
	m := &measureOpts{
		add:    []metric.AddOption{metric.WithAttributeSet(both)},
		record: []metric.RecordOption{metric.WithAttributeSet(noOutcome)},
	}
	actual, _ := o.opts.LoadOrStore(k, m)
	return actual.(*measureOpts)
}
