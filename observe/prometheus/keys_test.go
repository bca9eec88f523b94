package redisonceprom_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	redisonceprom "github.com/redisonce/redisonce/observe/prometheus"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// No key in any metric (it has no key option: keys are unbounded
// in cardinality), read back from the registry's exposition text.
func TestNoKeyInMetrics(t *testing.T) {
	storetest.TestObserverKeys(t, false, func(bool) (store.Observer, func() string) {
		reg := prometheus.NewRegistry()
		obs := redisonceprom.New()
		reg.MustRegister(obs)
		return obs, func() string {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, mf := range mfs {
				b.WriteString(mf.String())
				b.WriteString("\n")
			}
			if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
				t.Fatalf("%d metrics gathered, %v", n, err)
			}
			return b.String()
		}
	})
}

// A nil option is ignored, a nil context is not a panic.
func TestBadInputNeverPanics(t *testing.T) {
	obs := redisonceprom.New(nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(obs)
	obs.Observe(nil, store.Event{Store: "claims", Op: "claim", N: 1, Outcome: store.Outcome("claimed")}) //nolint:staticcheck // a nil context on purpose
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Errorf("%d metrics after one event, %v", n, err)
	}
}
