package redisproc

import "github.com/redisonce/redisonce/internal/proc"

// TB is the part of testing.TB that StartT and StartClusterT use, so this
// package need not import "testing" outside its tests.
type TB = proc.TB

// StartT starts a server for a test: it calls Start, registers Stop with
// t.Cleanup, and fails the test with t.Fatalf if the server cannot start.
func StartT(t TB, o Options) *Server {
	t.Helper()
	s, err := Start(o)
	return proc.Started(t, s, err)
}

// StartClusterT starts a cluster for a test: it calls StartCluster, registers
// Stop with t.Cleanup, and fails the test with t.Fatalf if the cluster cannot
// start.
func StartClusterT(t TB, masters int, o Options) *Cluster {
	t.Helper()
	c, err := StartCluster(masters, o)
	return proc.Started(t, c, err)
}
