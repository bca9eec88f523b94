package scripts_test

import (
	"context"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestFaultClientKill: CLIENT KILL TYPE normal every few milliseconds drops
// every client connection in the middle of a load on every store. An
// operation whose connection died may or may not have happened, but never in
// part: the raw keys must satisfy every invariant, and every acknowledged
// effect must be there. The stores may surface only errors a caller can retry,
// and the same clients must work again once the kills stop.
func TestFaultClientKill(t *testing.T) {
	t.Parallel()
	srv := newServer(t, redisproc.Options{})
	for _, k := range reliabilityStores {
		t.Run(k.name, func(t *testing.T) {
			c := newClient(t, srv.URL())
			wl := k.workload(c, uniquePrefix(t), nil)
			res := runLoad(t, wl, loadOpts{workers: 8, ops: 400, d: 3 * time.Second}, func(ctx context.Context) int64 {
				var kills int64
				for sleepCtx(ctx, 5*time.Millisecond) {
					// A fresh connection each time; SKIPME (the default) spares it.
					if _, err := srv.Do("CLIENT", "KILL", "TYPE", "normal"); err == nil {
						kills++
					}
				}
				return kills
			})
			if res.faults < 10 {
				t.Errorf("only %d CLIENT KILL ran during the load", res.faults)
			}
			if res.nerrs == 0 {
				t.Error("no operation failed under CLIENT KILL; the kills missed the load")
			}
			reportErrors(t, "CLIENT KILL", res, retryable)
			checkRecovers(t, wl)
			n := wl.Check(t, newClient(t, srv.URL()))
			t.Logf("%d operations (%d failed) across %d CLIENT KILL, %d keys checked; errors seen: %v",
				res.ops, res.nerrs, res.faults, n, errorKinds(res))
		})
	}
}
