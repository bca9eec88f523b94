package redisproc

import (
	"fmt"
	"os"

	"github.com/redisonce/redisonce/internal/proc"
)

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

// Main is the body of a test binary's TestMain around one server the tests
// share: it starts a server with o (none can start: the error on stderr,
// exit code 1), hands it to use, runs the tests, stops the server and
// returns the exit code for os.Exit (1 when the tests passed but Stop
// failed).
func Main(m interface{ Run() int }, o Options, use func(*Server)) int {
	srv, err := Start(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	use(srv)
	code := m.Run()
	if err := srv.Stop(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}
