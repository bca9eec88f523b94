package redisproc

// TB is the part of testing.TB that StartT and StartClusterT use, so this
// package need not import "testing" outside its tests.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// StartT starts a server for a test: it calls Start, registers Stop with
// t.Cleanup, and fails the test with t.Fatalf if the server cannot start.
func StartT(t TB, o Options) *Server {
	t.Helper()
	s, err := Start(o)
	if err != nil {
		t.Fatalf("%v", err)
		return nil // only reached with a TB whose Fatalf returns
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Fatalf("%v", err)
		}
	})
	return s
}

// StartClusterT starts a cluster for a test: it calls StartCluster, registers
// Stop with t.Cleanup, and fails the test with t.Fatalf if the cluster cannot
// start.
func StartClusterT(t TB, masters int, o Options) *Cluster {
	t.Helper()
	c, err := StartCluster(masters, o)
	if err != nil {
		t.Fatalf("%v", err)
		return nil // only reached with a TB whose Fatalf returns
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Fatalf("%v", err)
		}
	})
	return c
}
