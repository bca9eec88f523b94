package scripts_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestFaultScriptFlush: SCRIPT FLUSH on every node every few milliseconds
// while every store runs a load. The stores fall back to EVAL (and batches to
// SCRIPT LOAD + retry) on NOSCRIPT, so not one error may reach the caller, and
// every acknowledged effect must be there.
func TestFaultScriptFlush(t *testing.T) {
	t.Parallel()
	for _, topo := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"standalone", func(t *testing.T) string { return newServer(t, redisproc.Options{}).URL() }},
		{"cluster3", func(t *testing.T) string { return newCluster(t, 3, redisproc.Options{}).URL() }},
	} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			url := topo.url(t)
			c := newClient(t, url)
			for _, k := range reliabilityStores {
				t.Run(k.name, func(t *testing.T) {
					wl := k.workload(c, uniquePrefix(t), nil)
					flusher := newClient(t, url)
					before := errorStat(t, flusher, "NOSCRIPT")
					res := runLoad(t, wl, loadOpts{workers: 8, ops: 300, d: 3 * time.Second}, func(ctx context.Context) int64 {
						return flushScriptsUntil(ctx, flusher, 2*time.Millisecond)
					})
					if res.nerrs > 0 {
						t.Errorf("%d of %d operations failed under SCRIPT FLUSH: %v", res.nerrs, res.ops, res.errs)
					}
					if res.faults < 20 {
						t.Errorf("only %d SCRIPT FLUSH ran during the load; the test proves nothing", res.faults)
					}
					noscript := errorStat(t, flusher, "NOSCRIPT") - before
					if noscript == 0 {
						t.Error("the servers answered NOSCRIPT not once; the test proves nothing")
					}
					n := wl.Check(t, newClient(t, url))
					t.Logf("%d operations, %d SCRIPT FLUSH, %d NOSCRIPT replies, %d keys checked", res.ops, res.faults, noscript, n)
				})
			}
		})
	}
}

// errorStat sums the count of error replies with code (INFO errorstats)
// over every node of c.
func errorStat(t *testing.T, c rueidis.Client, code string) int64 {
	t.Helper()
	var total int64
	for addr, n := range c.Nodes() {
		info, err := n.Do(context.Background(), n.B().Info().Section("errorstats").Build()).ToString()
		if err != nil {
			t.Fatalf("INFO errorstats on %s: %v", addr, err)
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+code+":count="); ok {
				k, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("INFO errorstats: %q", line)
				}
				total += k
			}
		}
	}
	return total
}

// flushScriptsUntil runs SCRIPT FLUSH (alternately SYNC and ASYNC) on every
// node of c every interval until ctx is done, and returns how many it ran.
func flushScriptsUntil(ctx context.Context, c rueidis.Client, interval time.Duration) int64 {
	var n int64
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for _, node := range c.Nodes() {
			cmd := node.B().ScriptFlush().Sync().Build()
			if n%2 == 1 {
				cmd = node.B().ScriptFlush().Async().Build()
			}
			if node.Do(context.Background(), cmd).Error() == nil {
				n++
			}
		}
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
	}
}
