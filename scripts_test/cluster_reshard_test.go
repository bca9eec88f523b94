package scripts_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestClusterReshardUnderLoad moves the slots a load is using from master to
// master (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE in small batches,
// SETSLOT NODE — what redis-cli --cluster reshard does) while every store runs
// a load on exactly those slots. rueidis follows MOVED and ASK itself; no
// error may reach the caller and no acknowledged write may be lost. The load
// runs as docs/security.md's least-privilege ACL user, which shows that its grants
// cover a cluster client (CLUSTER SLOTS, ASKING) too.
func TestClusterReshardUnderLoad(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3, redisproc.Options{})
	for _, n := range cl.Nodes {
		createACLUser(t, n)
	}
	admin := newClient(t, cl.URL())
	c := newClient(t, aclUserURL(cl.Nodes[0].Addr))
	tags, slots := tagsInSlots(t, cl.Nodes[0], 4)
	owner := map[int]int{} // slot -> index in cl.Nodes of its master
	for _, k := range reliabilityStores {
		t.Run(k.name, func(t *testing.T) {
			wl := k.workload(c, k.prefix+uniquePrefix(t), tags)
			redirectsBefore := errorStat(t, admin, "ASK") + errorStat(t, admin, "MOVED")
			var (
				mu     sync.Mutex
				migErr error
			)

			res := runLoad(t, wl, loadOpts{workers: 8, ops: 400, d: 4 * time.Second}, func(ctx context.Context) int64 {
				var moves int64
				for ctx.Err() == nil {
					for _, slot := range slots {
						from := owner[slot]
						to := (from + 1) % len(cl.Nodes)
						err := migrateSlot(cl, slot, cl.Nodes[from], cl.Nodes[to], 3, func() { time.Sleep(time.Millisecond) })
						if err != nil {
							mu.Lock()
							migErr = err
							mu.Unlock()
							return moves
						}
						owner[slot] = to
						moves++
					}
				}
				return moves
			})
			if migErr != nil {
				t.Fatalf("resharding failed: %v", migErr)
			}
			if res.nerrs > 0 {
				t.Errorf("%d of %d operations failed while slots moved: %v", res.nerrs, res.ops, res.errs)
			}
			if res.faults < int64(len(slots)) {
				t.Errorf("only %d slot moves happened during the load; the test proves little", res.faults)
			}
			redirects := errorStat(t, admin, "ASK") + errorStat(t, admin, "MOVED") - redirectsBefore
			if redirects == 0 {
				t.Error("the load met not one ASK or MOVED; the test proves nothing")
			}
			for _, n := range cl.Nodes {
				if denied := aclDenials(t, n); len(denied) > 0 {
					t.Errorf("%s refused the app user: %v", n.Addr, denied)
				}
			}
			n := wl.Check(t, admin)
			t.Logf("%d operations, %d slot moves, %d ASK/MOVED replies, %d keys checked", res.ops, res.faults, redirects, n)
		})
	}
}
