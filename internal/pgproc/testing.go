package pgproc

import (
	"errors"
	"os"
)

// TB is the part of testing.TB that StartT uses, so this package need not
// import "testing" outside its tests.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// StartT starts a server for a test and registers Stop with t.Cleanup. When
// the PostgreSQL binaries are missing it skips the test with a message saying
// how to install them, except under CI=true, where it fails the test: CI must
// run every test. Any other start error fails the test.
func StartT(t TB, o Options) *Server {
	t.Helper()
	s, err := Start(o)
	switch {
	case err == nil:
	case errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true":
		t.Skipf("%v\n(set CI=true to make this a failure)", err)
		return nil // only reached with a TB whose Skipf returns
	case errors.Is(err, ErrNotInstalled):
		t.Fatalf("%v\nCI=true, so a missing PostgreSQL is a failure, not a skip", err)
		return nil
	default:
		t.Fatalf("%v", err)
		return nil
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Fatalf("%v", err)
		}
	})
	return s
}
