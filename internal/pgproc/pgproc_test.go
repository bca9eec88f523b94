package pgproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStartQueryStop(t *testing.T) {
	s := StartT(t, Options{})
	out, err := s.Psql("postgres", "SELECT 40 + 2")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "42" {
		t.Fatalf("SELECT 40 + 2 = %q, want 42", out)
	}
	if err := s.CreateDatabase("app_1"); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Psql("app_1", "SHOW fsync"); err != nil || strings.TrimSpace(out) != "off" {
		t.Fatalf("SHOW fsync on app_1 = %q, %v; want off", out, err)
	}
	if err := s.CreateDatabase(`x"; DROP`); err == nil {
		t.Fatal("CreateDatabase accepted a name with a quote")
	}
	if _, err := os.Stat(filepath.Join(s.SocketDir, fmt.Sprintf(".s.PGSQL.%d", s.Port))); err != nil {
		t.Fatalf("no Unix socket: %v", err)
	}
	if !strings.HasPrefix(s.URL("app_1"), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/app_1?", s.Port)) {
		t.Fatalf("URL = %q", s.URL("app_1"))
	}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses root: the server must run as the postgres account.
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
		if err == nil && strings.Contains(string(st), "\nUid:\t0\t") {
			t.Fatalf("postmaster %d runs as root", s.Pid())
		}
	}
	pid, dir := s.Pid(), s.Dir
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if s.Pid() != 0 {
		t.Fatal("Pid() != 0 after Stop")
	}
	if alive(pid) {
		t.Fatalf("postmaster %d alive after Stop", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stop left %s behind (%v)", dir, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestKillEndsBackends: Kill takes the whole process group, backends
// included, like a crash.
func TestKillEndsBackends(t *testing.T) {
	s := StartT(t, Options{})
	// A backend that would run for a minute.
	done := make(chan error, 1)
	go func() { _, err := s.Psql("postgres", "SELECT pg_sleep(60)"); done <- err }()
	var backend int
	for deadline := time.Now().Add(20 * time.Second); backend == 0; {
		out, err := s.Psql("postgres", "SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND pid <> pg_backend_pid()")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Sscan(strings.TrimSpace(out), &backend)
		if time.Now().After(deadline) {
			t.Fatal("the pg_sleep backend did not show in pg_stat_activity")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid := s.Pid()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("pg_sleep(60) returned without error after Kill")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("psql still waiting 20 s after Kill")
	}
	for _, p := range []int{pid, backend} {
		for deadline := time.Now().Add(5 * time.Second); alive(p); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d alive after Kill", p)
			}
		}
	}
}

// fakeTB records what StartT did with it.
type fakeTB struct {
	skipped, failed string
	cleanups        int
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Cleanup(func())                 { f.cleanups++ }
func (f *fakeTB) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }
func (f *fakeTB) Skipf(format string, a ...any)  { f.skipped = fmt.Sprintf(format, a...) }

func TestStartTMissingBinaries(t *testing.T) {
	o := Options{BinDir: t.TempDir()} // no initdb there
	t.Setenv("CI", "")
	var f fakeTB
	if s := StartT(&f, o); s != nil || f.skipped == "" || f.failed != "" || f.cleanups != 0 {
		t.Fatalf("outside CI: server %v, skipped %q, failed %q, cleanups %d; want a skip", s, f.skipped, f.failed, f.cleanups)
	}
	if !strings.Contains(f.skipped, "apt-get install postgresql") {
		t.Fatalf("the skip does not say how to install PostgreSQL: %q", f.skipped)
	}
	t.Setenv("CI", "true")
	f = fakeTB{}
	if s := StartT(&f, o); s != nil || f.failed == "" || f.skipped != "" {
		t.Fatalf("under CI=true: server %v, skipped %q, failed %q; want a failure", s, f.skipped, f.failed)
	}
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	// A zombie (reaped later by its parent, or by init) counts as gone.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 {
		return b[i+2] != 'Z'
	}
	return true
}
