package redisproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// needBinary skips a test that starts servers when redis-server is missing,
// except under CI=true, where that is a failure.
func needBinary(t *testing.T) {
	t.Helper()
	if _, err := LookPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skip(err)
	}
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

func mustDo(t *testing.T, s *Server, args ...string) string {
	t.Helper()
	out, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), s.Addr, err)
	}
	return out
}

func TestStandalone(t *testing.T) {
	needBinary(t)
	t.Parallel()
	s, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()

	if got := mustDo(t, s, "PING"); got != "PONG" {
		t.Errorf("PING = %q, want PONG", got)
	}
	if got := mustDo(t, s, "SET", "k", "v\r\nwith crlf"); got != "OK" {
		t.Errorf("SET = %q, want OK", got)
	}
	if got := mustDo(t, s, "GET", "k"); got != "v\r\nwith crlf" {
		t.Errorf("GET = %q", got)
	}
	if got := mustDo(t, s, "GET", "missing"); got != "" {
		t.Errorf("GET missing = %q, want empty", got)
	}
	if got := mustDo(t, s, "INCRBY", "n", "41"); got != "41" {
		t.Errorf("INCRBY = %q, want 41", got)
	}
	for param, want := range map[string]string{"save": "", "bind": "127.0.0.1", "appendonly": "no", "protected-mode": "no"} {
		if got := mustDo(t, s, "CONFIG", "GET", param); got != param+"\n"+want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got, param+"\n"+want)
		}
	}
	if _, err := s.Do("NOSUCHCOMMAND"); err == nil {
		t.Error("unknown command: no error")
	} else if re := (ReplyError("")); !errors.As(err, &re) || !strings.HasPrefix(string(re), "ERR") {
		t.Errorf("unknown command: error %v, want a ReplyError starting with ERR", err)
	}
	if want := fmt.Sprintf("redis://127.0.0.1:%d", s.Port); s.URL() != want {
		t.Errorf("URL = %q, want %q", s.URL(), want)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Log(), "Ready to accept connections") {
		t.Errorf("Log after Stop lacks the ready line:\n%s", s.Log())
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if alive(pid) {
		t.Errorf("pid %d still alive after Stop", pid)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s not removed: %v", s.Dir, err)
	}
	if err := s.Restart(); err == nil {
		t.Error("Restart after Stop: no error")
	}
}

func TestAOFSurvivesKill(t *testing.T) {
	needBinary(t)
	t.Parallel()
	s := StartT(t, Options{AppendOnly: true, AppendFsync: "always"})
	mustDo(t, s, "SET", "durable", "yes")
	oldPid := s.Pid()

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if alive(oldPid) {
		t.Fatalf("pid %d alive after Kill", oldPid)
	}
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if _, err := os.Stat(s.Dir); err != nil {
		t.Fatalf("Kill removed Dir: %v", err)
	}
	port := s.Port
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Port != port || s.Pid() == oldPid {
		t.Errorf("after Restart: port %d pid %d, want port %d and a new pid", s.Port, s.Pid(), port)
	}
	if got := mustDo(t, s, "GET", "durable"); got != "yes" {
		t.Errorf("GET durable after kill -9 and restart = %q, want yes", got)
	}
}

func TestPassword(t *testing.T) {
	needBinary(t)
	t.Parallel()
	s := StartT(t, Options{Password: "s3cret/:@"})
	if got := mustDo(t, s, "PING"); got != "PONG" {
		t.Errorf("PING with password = %q", got)
	}
	anon := &Server{Addr: s.Addr}
	_, err := anon.Do("PING")
	var re ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), "NOAUTH") {
		t.Errorf("PING without password: %v, want NOAUTH", err)
	}
	want := fmt.Sprintf("redis://:s3cret%%2F%%3A%%40@127.0.0.1:%d", s.Port)
	if s.URL() != want {
		t.Errorf("URL = %q, want %q", s.URL(), want)
	}
}

func TestCluster1(t *testing.T) {
	needBinary(t)
	t.Parallel()
	c := StartClusterT(t, 1, Options{})
	n := c.Nodes[0]
	info := parseInfo(mustDo(t, n, "CLUSTER", "INFO"))
	if info["cluster_state"] != "ok" || info["cluster_slots_assigned"] != "16384" {
		t.Errorf("CLUSTER INFO: state %q slots %q", info["cluster_state"], info["cluster_slots_assigned"])
	}
	if got := mustDo(t, n, "CLUSTER", "KEYSLOT", "foo"); got != "12182" {
		t.Errorf("CLUSTER KEYSLOT foo = %q, want 12182", got)
	}
	if got := mustDo(t, n, "SET", "foo", "bar"); got != "OK" {
		t.Errorf("SET in cluster = %q", got)
	}
	if c.URL() != n.URL() || len(c.Addrs()) != 1 || c.Addrs()[0] != n.Addr {
		t.Errorf("URL %q Addrs %v", c.URL(), c.Addrs())
	}
	if _, err := os.Stat(filepath.Join(n.Dir, "nodes.conf")); err != nil {
		t.Errorf("cluster config file: %v", err)
	}
}

func TestCluster3(t *testing.T) {
	needBinary(t)
	t.Parallel()
	// A password and a caller's Dir: redis-cli must authenticate, and each
	// node gets a directory of its own.
	dir := t.TempDir()
	c := StartClusterT(t, 3, Options{Password: "pw", Dir: dir})
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(c.Nodes))
	}
	for i, n := range c.Nodes {
		if want := filepath.Join(dir, fmt.Sprintf("node%d", i)); n.Dir != want {
			t.Errorf("node %d Dir = %q, want %q", i, n.Dir, want)
		}
	}
	for _, n := range c.Nodes {
		info := parseInfo(mustDo(t, n, "CLUSTER", "INFO"))
		if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != "16384" || info["cluster_size"] != "3" {
			t.Errorf("%s: state %q slots_ok %q size %q", n.Addr, info["cluster_state"], info["cluster_slots_ok"], info["cluster_size"])
		}
	}
	// Exactly one node owns the key's slot; the others redirect with MOVED.
	var owners, moved int
	for _, n := range c.Nodes {
		_, err := n.Do("SET", "foo", "bar")
		var re ReplyError
		switch {
		case err == nil:
			owners++
		case errors.As(err, &re) && strings.HasPrefix(string(re), "MOVED 12182 "):
			moved++
		default:
			t.Errorf("SET foo on %s: %v", n.Addr, err)
		}
	}
	if owners != 1 || moved != 2 {
		t.Errorf("SET foo: %d nodes accepted, %d redirected; want 1 and 2", owners, moved)
	}
}

func TestStartCluster2Refused(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, 0, 2} {
		if c, err := StartCluster(n, Options{Binary: "/nonexistent"}); err == nil {
			c.Stop()
			t.Errorf("StartCluster(%d): no error", n)
		}
	}
}

func TestStartErrorQuotesLog(t *testing.T) {
	needBinary(t)
	t.Parallel()
	dir := t.TempDir()
	_, err := Start(Options{Dir: dir, Args: []string{"--no-such-directive", "x"}})
	if err == nil {
		t.Fatal("Start with a bad directive: no error")
	}
	if !strings.Contains(err.Error(), "server log tail") || !strings.Contains(strings.ToLower(err.Error()), "bad directive") {
		t.Errorf("error does not quote the server log:\n%v", err)
	}
	if _, statErr := os.Stat(dir); statErr != nil {
		t.Errorf("a caller's Dir must survive a failed Start: %v", statErr)
	}
}

type fakeTB struct {
	fatal    string
	cleanups []func()
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Cleanup(fn func())                 { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }

func TestStartTReportsFailure(t *testing.T) {
	t.Parallel()
	f := &fakeTB{}
	if s := StartT(f, Options{Binary: "/nonexistent/redis-server"}); s != nil {
		t.Errorf("StartT returned a server for a missing binary")
	}
	if f.fatal == "" || len(f.cleanups) != 0 {
		t.Errorf("fatal %q, %d cleanups; want a message and none", f.fatal, len(f.cleanups))
	}
}

func TestReadReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "+OK\r\n", want: "OK"},
		{in: ":-12\r\n", want: "-12"},
		{in: "$5\r\na\r\nbc\r\n", want: "a\r\nbc"},
		{in: "$0\r\n\r\n", want: ""},
		{in: "$-1\r\n", want: ""},
		{in: "*-1\r\n", want: ""},
		{in: "*0\r\n", want: ""},
		{in: "*3\r\n$1\r\na\r\n*2\r\n:1\r\n-ERR x\r\n$-1\r\n", want: "a\n1\nERR x\n"},
		{in: "-WRONGTYPE Operation\r\n", wantErr: "WRONGTYPE Operation"},
		{in: "$3\r\nab\r\n", wantErr: "EOF"},
		{in: "$-2\r\n", wantErr: "bad bulk length"},
		{in: "%1\r\n", wantErr: "unsupported reply type"},
		{in: "+OK\n", wantErr: "not terminated by CRLF"},
	}
	for _, tt := range tests {
		got, err := readReply(bufio.NewReader(strings.NewReader(tt.in)))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("readReply(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("readReply(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := StartCluster(3, Options{Binary: filepath.Join(t.TempDir(), "redis-server")}); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "redis-cli") {
		t.Errorf("StartCluster without redis-cli: %v, want ErrNotInstalled naming redis-cli", err)
	}
	if _, err := LookPath(); err == nil {
		t.Skip("redis-server found outside PATH; cannot test its absence")
	} else if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "apt-get install redis-server") {
		t.Errorf("LookPath: %v, want ErrNotInstalled with install advice", err)
	}
}
