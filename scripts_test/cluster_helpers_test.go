package scripts_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// newCluster starts a private cluster of masters for this test only (for
// resharding and faults) and stops it when the test ends. Without a
// redis-server binary the test is skipped (failed under CI=true).
func newCluster(t *testing.T, masters int, o redisproc.Options) *redisproc.Cluster {
	t.Helper()
	if _, err := redisproc.LookPath(); err != nil {
		harnessFail(t, harnessMissing(true, "no redis-server binary: this test starts its own cluster"))
	}
	return redisproc.StartClusterT(t, masters, o)
}

// slotOwner returns the node of cl that serves slot, as that node itself
// says (the "myself" line of its CLUSTER NODES).
func slotOwner(t *testing.T, cl *redisproc.Cluster, slot int) *redisproc.Server {
	t.Helper()
	for _, n := range cl.Nodes {
		if ownsSlot(t, n)(slot) {
			return n
		}
	}
	t.Fatalf("no node owns slot %d", slot)
	return nil
}

// ownsSlot reads n's own slot ranges (the "myself" line of its CLUSTER
// NODES) and returns a test for membership.
func ownsSlot(t *testing.T, n *redisproc.Server) func(slot int) bool {
	t.Helper()
	out, err := n.Do("CLUSTER", "NODES")
	if err != nil {
		t.Fatalf("CLUSTER NODES on %s: %v", n.Addr, err)
	}
	var ranges [][2]int
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a migration in progress, not a range
				continue
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil {
				ranges = append(ranges, [2]int{a, b})
			}
		}
	}
	return func(slot int) bool {
		for _, r := range ranges {
			if r[0] <= slot && slot <= r[1] {
				return true
			}
		}
		return false
	}
}

// keySlot returns the cluster slot of key, as the server computes it.
func keySlot(t *testing.T, n *redisproc.Server, key string) int {
	t.Helper()
	out, err := n.Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	s, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %q = %q", key, out)
	}
	return s
}

// migrateSlot moves slot from one master to another by hand, the way
// redis-cli --cluster reshard does: IMPORTING on the target, MIGRATING on the
// source, MIGRATE the keys in batches of batch (with pause() between steps, to
// let a load hit the ASK redirections), then SETSLOT NODE on every master.
// It may run in a goroutine of its own: it returns errors, never fails a test.
func migrateSlot(cl *redisproc.Cluster, slot int, from, to *redisproc.Server, batch int, pause func()) error {
	fromID, err := from.Do("CLUSTER", "MYID")
	if err != nil {
		return err
	}
	toID, err := to.Do("CLUSTER", "MYID")
	if err != nil {
		return err
	}
	s := strconv.Itoa(slot)
	do := func(n *redisproc.Server, args ...string) (string, error) {
		out, err := n.Do(args...)
		if err != nil {
			return "", fmt.Errorf("%s on %s: %w", strings.Join(args, " "), n.Addr, err)
		}
		return out, nil
	}
	if _, err := do(to, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID); err != nil {
		return err
	}
	if _, err := do(from, "CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		return err
	}
	pause()
	for rounds := 0; ; rounds++ {
		out, err := do(from, "CLUSTER", "GETKEYSINSLOT", s, strconv.Itoa(batch))
		if err != nil {
			return err
		}
		if out == "" {
			break
		}
		if rounds > 100_000 {
			return fmt.Errorf("slot %d never drains", slot)
		}
		keys := strings.Split(out, "\n")
		args := append([]string{"MIGRATE", "127.0.0.1", strconv.Itoa(to.Port), "", "0", "5000", "KEYS"}, keys...)
		if _, err := do(from, args...); err != nil {
			return err
		}
		pause()
	}
	// The target first, then the source, then the others, as redis-cli does.
	order := []*redisproc.Server{to, from}
	for _, n := range cl.Nodes {
		if n != from && n != to {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if _, err := do(n, "CLUSTER", "SETSLOT", s, "NODE", toID); err != nil {
			return err
		}
	}
	return nil
}

// tagsInSlots returns n hash tags whose slots are all different and owned by
// node, so a workload using them hits only slots a test can move.
func tagsInSlots(t *testing.T, node *redisproc.Server, n int) (tags []string, slots []int) {
	t.Helper()
	seen := map[int]bool{}
	owns := ownsSlot(t, node)
	for i := 0; len(tags) < n && i < 10000; i++ {
		tag := fmt.Sprint("rs", i)
		slot := keySlot(t, node, "{"+tag+"}")
		if seen[slot] || !owns(slot) {
			continue
		}
		seen[slot] = true
		tags, slots = append(tags, tag), append(slots, slot)
	}
	if len(tags) < n {
		t.Fatalf("found %d tags on %s, want %d", len(tags), node.Addr, n)
	}
	return tags, slots
}
