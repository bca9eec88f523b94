package redisonceotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	redisonceotel "github.com/redisonce/redisonce/observe/otel"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The key, and error texts that quote it, only with WithKey —
// read back from every span (name, attributes, status, events and their
// attributes) and every metric data point's attributes.
func TestKeyOnlyWithKeyOption(t *testing.T) {
	storetest.TestObserverKeys(t, true, func(withKey bool) (store.Observer, func() string) {
		var opts []redisonceotel.Option
		if withKey {
			opts = append(opts, redisonceotel.WithKey())
		}
		obs, spans, reader := setup(t, opts...)
		return obs, func() string {
			var b strings.Builder
			for _, s := range spans.Ended() {
				fmt.Fprintf(&b, "span %s status %v %q\n", s.Name(), s.Status().Code, s.Status().Description)
				for _, a := range s.Attributes() {
					fmt.Fprintf(&b, "  %s=%s\n", a.Key, a.Value.Emit())
				}
				for _, e := range s.Events() {
					fmt.Fprintf(&b, "  event %s\n", e.Name)
					for _, a := range e.Attributes {
						fmt.Fprintf(&b, "    %s=%s\n", a.Key, a.Value.Emit())
					}
				}
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					fmt.Fprintf(&b, "metric %s %+v\n", m.Name, m.Data)
				}
			}
			return b.String()
		}
	})
}

// A span of a failed operation still says what went wrong without the key:
// its status and exception event carry the error text without the id.
func TestErrorSpanWithoutKey(t *testing.T) {
	obs, spans, _ := setup(t)
	err := fmt.Errorf(`redisonce: claim %q: connection refused`, storetest.SecretKey)
	obs.Observe(context.Background(), store.Event{Store: "claims", Op: "claim", Key: storetest.SecretKey,
		N: 1, Outcome: store.Outcome("error"), Err: err})
	s := spans.Ended()[0]
	if d := s.Status().Description; d != "redisonce: claim: connection refused" {
		t.Errorf("status description %q, want the error without the key", d)
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Fatalf("events %+v, want one exception", s.Events())
	}
	msg := ""
	for _, a := range s.Events()[0].Attributes {
		if a.Key == "exception.message" {
			msg = a.Value.AsString()
		}
	}
	if msg != "redisonce: claim: connection refused" {
		t.Errorf("exception.message %q, want the error without the key", msg)
	}
}

// A nil option is refused, a nil context is not a panic.
func TestBadInputNeverPanics(t *testing.T) {
	if _, err := redisonceotel.New(nil); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v, want ErrInvalidArgument", err)
	}
	obs, spans, _ := setup(t)
	obs.Observe(nil, store.Event{Store: "claims", Op: "claim", N: 1, Outcome: store.Outcome("error"), Err: errors.New("x")}) //nolint:staticcheck // a nil context on purpose
	if len(spans.Ended()) != 1 {
		t.Errorf("%d spans for an event with a nil context, want 1", len(spans.Ended()))
	}
}
