package scripts_test

import "testing"

// TestClusterConformance runs every store's conformance suite on the shared
// three-master cluster (slots split by redis-cli --cluster create), so the
// suites' ids, and the batches among them, land on every master.
func TestClusterConformance(t *testing.T) {
	t.Parallel()
	c := newClient(t, cluster3URL(t))
	for _, k := range reliabilityStores {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			k.conformance(t, c, "")
		})
	}
}
