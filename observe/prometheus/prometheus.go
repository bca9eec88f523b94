// Package redisonceprom counts the operations of redisonce stores for
// Prometheus (client_golang).
//
//	obs := redisonceprom.New()
//	prometheus.MustRegister(obs) // or any prometheus.Registerer
//	claims, err := store.NewClaims(client, store.WithObserver(obs))
//
// Metrics:
//
//	redisonce_operations_total{store,op,outcome}      counter
//	redisonce_operation_duration_seconds{store,op}    histogram
//
// store is claims, outbox or records; op the operation (claim, append,
// acquire, do, ...); outcome how it ended (claimed, duplicate, stale_owner,
// ..., the values of store.Outcome). The counter adds an event's N: a batch
// counts its items, so that duplicates suppressed by ClaimMany count like
// those of Claim; the histogram records one duration per event. The key an
// operation was about is never a label: its cardinality is unbounded.
//
// Alerts worth having, in PromQL:
//
//	sum by (store, op) (rate(redisonce_operations_total{outcome=~"stale_owner|lease_lost|taken_over"}[5m])) > 0
//	sum by (store) (rate(redisonce_operations_total{outcome="full"}[5m])) > 0
//	sum by (store, op) (rate(redisonce_operations_total{outcome="error"}[5m])) > 0
package redisonceprom

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redisonce/redisonce/store"
)

// DefaultBuckets are the duration histogram's bucket bounds in seconds: a
// store operation is one round trip (tens of µs to a few ms), a Do flow runs
// the caller's function too.
var DefaultBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// Option configures New.
type Option func(*config)

type config struct {
	buckets []float64
	labels  prometheus.Labels
}

// WithBuckets sets the duration histogram's bucket bounds, in seconds.
// Default: DefaultBuckets.
func WithBuckets(b []float64) Option {
	return func(c *config) { c.buckets = b }
}

// WithConstLabels adds fixed labels to both metrics, for example to tell
// two stores of one process apart ({"app": "billing"}), each with its own
// Observer registered on a Registerer. Default: none.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) { c.labels = l }
}

// Observer is a store.Observer and a prometheus.Collector: register it, then
// give it to the stores with store.WithObserver. Safe for concurrent use.
type Observer struct {
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec

	// the children by label values, looked up once: WithLabelValues hashes
	// and allocates on each call.
	children sync.Map // labels -> *child
}

type labels struct {
	store, op string
	outcome   store.Outcome
}

type child struct {
	ops      prometheus.Counter
	duration prometheus.Observer
}

var (
	_ store.Observer       = (*Observer)(nil)
	_ prometheus.Collector = (*Observer)(nil)
)

// New returns an Observer with its two metrics. Register it on a
// prometheus.Registerer to export them.
func New(opts ...Option) *Observer {
	c := config{buckets: DefaultBuckets}
	for _, o := range opts {
		if o != nil { // a nil Option changes nothing
			o(&c)
		}
	}
	return &Observer{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "redisonce_operations_total",
			Help:        "redisonce store operations, by store, op and outcome.",
			ConstLabels: c.labels,
		}, []string{"store", "op", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "redisonce_operation_duration_seconds",
			Help:        "Duration of redisonce store operations, by store and op.",
			ConstLabels: c.labels,
			Buckets:     c.buckets,
		}, []string{"store", "op"}),
	}
}

// Observe counts e and records its duration.
func (o *Observer) Observe(_ context.Context, e store.Event) {
	k := labels{e.Store, e.Op, e.Outcome}
	v, ok := o.children.Load(k)
	if !ok {
		v, _ = o.children.LoadOrStore(k, &child{
			ops:      o.ops.WithLabelValues(e.Store, e.Op, string(e.Outcome)),
			duration: o.duration.WithLabelValues(e.Store, e.Op),
		})
	}
	c := v.(*child)
	n := e.N
	if n < 1 {
		n = 1
	}
	c.ops.Add(float64(n))
	c.duration.Observe(e.Duration.Seconds())
}

// Describe is prometheus.Collector's Describe.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.ops.Describe(ch)
	o.duration.Describe(ch)
}

// Collect is prometheus.Collector's Collect.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.ops.Collect(ch)
	o.duration.Collect(ch)
}
