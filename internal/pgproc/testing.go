package pgproc

import (
	"errors"
	"os"

	"github.com/redisonce/redisonce/internal/proc"
)

// TB is the part of testing.TB that StartT uses, so this package need not
// import "testing" outside its tests.
type TB interface {
	proc.TB
	Skipf(format string, args ...any)
}

// StartT starts a server for a test and registers Stop with t.Cleanup. When
// the PostgreSQL binaries are missing it skips the test with a message saying
// how to install them, except under CI=true, where it fails the test: CI must
// run every test. Any other start error fails the test.
func StartT(t TB, o Options) *Server {
	t.Helper()
	s, err := Start(o)
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") != "true" {
			t.Skipf("%v\n(set CI=true to make this a failure)", err)
			return nil // only reached with a TB whose Skipf returns
		}
		err = errors.Join(err, errors.New("CI=true, so a missing PostgreSQL is a failure, not a skip"))
	}
	return proc.Started(t, s, err)
}
