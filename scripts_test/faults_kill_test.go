package scripts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestFaultKillServer: SIGKILL redis-server (appendonly yes, appendfsync
// always) in the middle of a load on every store, restart it from its AOF, and
// check that every acknowledged effect survived and no operation was applied
// in part. While the server is down the stores may only surface errors a
// caller can retry (the connection was lost); afterwards the same clients
// must work again without a single error.
func TestFaultKillServer(t *testing.T) {
	t.Parallel()
	for _, k := range reliabilityStores {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, redisproc.Options{AppendOnly: true, AppendFsync: "always"})
			c := newClient(t, srv.URL())
			wl := k.workload(c, uniquePrefix(t), nil)
			var restartErr error
			// The load runs for its whole time (its op count is a bound it
			// does not reach), so both kills land in it.
			res := runLoad(t, wl, loadOpts{workers: 8, ops: 20000, d: 2500 * time.Millisecond}, func(ctx context.Context) int64 {
				var kills int64
				for range 2 {
					if !sleepCtx(ctx, 500*time.Millisecond) {
						break
					}
					if err := srv.Kill(); err != nil {
						restartErr = err
						return kills
					}
					kills++
					time.Sleep(100 * time.Millisecond)
					if err := srv.Restart(); err != nil {
						restartErr = fmt.Errorf("restart: %w\n%s", err, srv.Log())
						return kills
					}
				}
				return kills
			})
			if restartErr != nil {
				t.Fatal(restartErr)
			}
			if res.faults < 2 {
				t.Fatalf("the server was killed %d times during the load, want 2 (%d operations)", res.faults, res.ops)
			}
			if res.nerrs == 0 {
				t.Error("no operation failed while the server was down; the kill missed the load")
			}
			reportErrors(t, "SIGKILL", res, retryable)
			// The same clients recover: reconnect, and EVAL the scripts the
			// restarted server no longer has cached.
			checkRecovers(t, wl)
			n := wl.Check(t, newClient(t, srv.URL()))
			t.Logf("%d operations (%d failed) across %d SIGKILLs, %d keys checked after restart; errors seen: %v",
				res.ops, res.nerrs, res.faults, n, errorKinds(res))
		})
	}
}

// sleepCtx sleeps for d and reports whether ctx is still live afterwards.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
