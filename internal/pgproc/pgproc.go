// Package pgproc starts and stops throwaway PostgreSQL servers for tests and
// benchmarks, from the server binaries of a local installation (Debian's
// postgresql package puts them in /usr/lib/postgresql/<version>/bin).
//
// Start runs initdb into a fresh data directory, then the postgres server in
// the foreground, listening on 127.0.0.1 on a free port and on a Unix socket
// in its own directory, with trust authentication for the superuser
// "postgres" and durability off (fsync, synchronous_commit and
// full_page_writes off): a test server is thrown away, never recovered. The
// server's output is kept in memory; its last lines are quoted in a start
// error and available from Server.Log.
//
// initdb and postgres refuse to run as root. When the caller is root (a test
// in a container, CI), both run as the "postgres" user that the distribution's
// package creates, and the server's directory is given to that user.
//
// On Unix the server runs in its own process group; Kill SIGKILLs it and, on
// Linux, each of its children (backends run in sessions of their own, so they
// are named one by one); elsewhere the backends exit when they notice their
// postmaster died. On Linux the server is also sent SIGKILL when the thread
// that started it dies, so a crashed test binary leaves no orphan server.
//
// The package uses the standard library only.
package pgproc

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redisonce/redisonce/internal/proc"
)

const (
	// readyTimeout bounds how long Start waits for the server to accept
	// connections (initdb runs before, bounded by initTimeout).
	readyTimeout = 30 * time.Second
	// initTimeout bounds initdb.
	initTimeout = 2 * time.Minute
	// stopTimeout is how long Stop waits after a fast shutdown request
	// (SIGINT) before it sends SIGKILL.
	stopTimeout = 10 * time.Second
	// User is the superuser initdb creates; it connects without a password
	// (trust authentication) from 127.0.0.1 and the socket.
	User = "postgres"
	// runAsUser is the system account initdb and postgres run as when the
	// caller is root.
	runAsUser = "postgres"
)

// ErrNotInstalled is wrapped by the errors of LookPath and Start when the
// PostgreSQL server binaries (initdb, postgres) cannot be found.
var ErrNotInstalled = errors.New("not installed")

// Options configures a server. The zero value is a server on a free loopback
// port in a fresh temporary directory.
type Options struct {
	// BinDir is the directory holding initdb and postgres. Default: the
	// result of LookPath.
	BinDir string
	// Dir holds the data directory (Dir/data) and the socket directory
	// (Dir/sock). Default: a new temporary directory, removed by Stop. A Dir
	// given here is created if missing and never removed; a data directory
	// already in it is used as it is (no initdb).
	Dir string
	// Port is the TCP port on 127.0.0.1. Default (0): a free port.
	Port int
	// Fsync turns durability back on (fsync, synchronous_commit and
	// full_page_writes on), for a benchmark that wants a server's real commit
	// cost. Default: off.
	Fsync bool
	// Settings are extra server settings, passed as -c name=value, e.g.
	// {"max_connections": "200"}. They override the defaults.
	Settings map[string]string
}

// LookPath finds the directory of the server binaries: $PG_BINDIR when set,
// then the directory of an initdb on PATH, then the newest
// /usr/lib/postgresql/<version>/bin (Debian, Ubuntu), then /usr/local/pgsql/bin
// and Homebrew's. When there is none, the error wraps ErrNotInstalled and says
// how to install them.
func LookPath() (string, error) {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		if hasBinaries(d) {
			return d, nil
		}
		return "", fmt.Errorf("pgproc: PG_BINDIR=%s has no initdb and postgres: the PostgreSQL server is %w there; %s", d, ErrNotInstalled, installHint)
	}
	if p, err := exec.LookPath("initdb"); err == nil && hasBinaries(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	var candidates []string
	if ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(ms) > 0 {
		// Newest major version first.
		slices.SortFunc(ms, func(a, b string) int { return majorOf(b) - majorOf(a) })
		candidates = append(candidates, ms...)
	}
	candidates = append(candidates, "/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin")
	for _, d := range candidates {
		if hasBinaries(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgproc: the PostgreSQL server (initdb, postgres) is %w: not in $PG_BINDIR, on PATH, "+
		"or in /usr/lib/postgresql/*/bin; %s", ErrNotInstalled, installHint)
}

const installHint = "install it with `sudo apt-get install postgresql` (Debian/Ubuntu; `make postgres-deps` does it) " +
	"or `brew install postgresql@15` (macOS), or set PG_BINDIR to the directory of initdb and postgres"

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func hasBinaries(dir string) bool {
	return proc.IsExecutable(filepath.Join(dir, "initdb")) && proc.IsExecutable(filepath.Join(dir, "postgres"))
}

// Server is one running (or stopped) PostgreSQL server. Its methods are safe
// for concurrent use.
type Server struct {
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Dir holds the data directory (Dir/data) and the socket (Dir/sock).
	Dir string
	// SocketDir is the directory of the server's Unix socket
	// (.s.PGSQL.<Port>).
	SocketDir string

	opts Options
	cred *proc.Credential // the account the server runs as; nil: the caller's
	slot proc.Slot
}

// Start runs initdb (unless Dir already holds a data directory) and starts a
// server, and waits until it accepts connections. When the port was chosen by
// Start and is taken by the time the server binds it, Start retries with
// another port.
func Start(o Options) (*Server, error) {
	if o.BinDir == "" {
		d, err := LookPath()
		if err != nil {
			return nil, err
		}
		o.BinDir = d
	} else if !hasBinaries(o.BinDir) {
		return nil, fmt.Errorf("pgproc: %s has no initdb and postgres: the PostgreSQL server is %w there; %s", o.BinDir, ErrNotInstalled, installHint)
	}
	s := &Server{}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	s.cred = cred
	dir, own, err := proc.WorkDir(o.Dir, "pgproc-", 0o700)
	if err != nil {
		return nil, fmt.Errorf("pgproc: %w", err)
	}
	if own {
		s.slot.Own(dir)
	}
	o.Dir, s.Dir, s.SocketDir = dir, dir, filepath.Join(dir, "sock")
	if err := s.prepareDirs(); err != nil {
		_ = s.slot.RemoveOwnDir()
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(s.dataDir(), "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := s.initdb(o); err != nil {
			_ = s.slot.RemoveOwnDir()
			return nil, err
		}
	}
	autoPort := o.Port == 0
	for attempt := 1; ; attempt++ {
		if autoPort {
			port, err := proc.FreePort()
			if err != nil {
				_ = s.slot.RemoveOwnDir()
				return nil, fmt.Errorf("pgproc: %w", err)
			}
			o.Port = port
		}
		s.opts, s.Port = o, o.Port
		p, err := s.launch()
		if err == nil {
			s.slot.Start(p)
			return s, nil
		}
		if !autoPort || attempt >= 5 || !errors.Is(err, proc.ErrAddrInUse) {
			_ = s.slot.RemoveOwnDir()
			return nil, err
		}
	}
}

// runAs returns the credential of the postgres account when the caller is
// root (initdb and postgres refuse to run as root), else nil.
func runAs() (*proc.Credential, error) {
	if !proc.IsRoot() {
		return nil, nil
	}
	u, err := user.Lookup(runAsUser)
	if err != nil {
		return nil, fmt.Errorf("pgproc: running as root, and PostgreSQL refuses to run as root; "+
			"the %q account it would run as is missing (%v): install Debian's postgresql package, which creates it, "+
			"or run the tests as another user", runAsUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgproc: account %q: uid %q gid %q", runAsUser, u.Uid, u.Gid)
	}
	return &proc.Credential{UID: int(uid), GID: int(gid)}, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }

// prepareDirs creates the socket directory and, when the server runs as
// another account, gives it Dir and everything below.
func (s *Server) prepareDirs() error {
	if err := os.MkdirAll(s.SocketDir, 0o700); err != nil {
		return fmt.Errorf("pgproc: %w", err)
	}
	if s.cred == nil {
		return nil
	}
	err := filepath.Walk(s.Dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, s.cred.UID, s.cred.GID)
	})
	if err != nil {
		return fmt.Errorf("pgproc: give %s to the %s account: %w", s.Dir, runAsUser, err)
	}
	return nil
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.opts.BinDir, name), args...)
	cmd.Dir = s.Dir
	// A clean environment: no PGDATA, PGPORT or locale of the caller's.
	cmd.Env = []string{"LC_ALL=C", "LANG=C", "PATH=" + os.Getenv("PATH"), "HOME=" + s.Dir, "TZ=UTC"}
	return cmd
}

// start starts a command of s.command's, as the server's account; its
// children (postgres's backends) start sessions of their own.
func (s *Server) start(cmd *exec.Cmd) (*proc.Process, error) {
	return proc.Start(cmd, proc.Options{Cred: s.cred, Sessions: true})
}

func (s *Server) initdb(o Options) error {
	s.opts = o
	cmd := s.command("initdb", "-D", s.dataDir(), "-U", User, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	p, err := s.start(cmd)
	if err != nil {
		return fmt.Errorf("pgproc: start initdb: %w", err)
	}
	select {
	case <-p.Done():
		if err := p.Err(); err != nil {
			return fmt.Errorf("pgproc: initdb -D %s: %w\n--- initdb output ---\n%s", s.dataDir(), err, p.Log().Tail(proc.LogTailLines))
		}
		return nil
	case <-time.After(initTimeout):
		p.Kill()
		return fmt.Errorf("pgproc: initdb -D %s: not done after %s\n--- initdb output ---\n%s", s.dataDir(), initTimeout, p.Log().Tail(proc.LogTailLines))
	}
}

// serverArgs renders the options as postgres command-line arguments.
func (s *Server) serverArgs() []string {
	o := s.opts
	set := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(o.Port),
		"unix_socket_directories": s.SocketDir,
		"fsync":                   "off",
		"synchronous_commit":      "off",
		"full_page_writes":        "off",
		"shared_buffers":          "32MB",
		"max_connections":         "100",
		"logging_collector":       "off",
		"log_min_messages":        "warning",
		"log_destination":         "stderr",
	}
	if o.Fsync {
		set["fsync"], set["synchronous_commit"], set["full_page_writes"] = "on", "on", "on"
	}
	for k, v := range o.Settings {
		set[k] = v
	}
	args := []string{"-D", s.dataDir()}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		args = append(args, "-c", k+"="+set[k])
	}
	return args
}

// launch starts the server on s.Port and waits until it is ready. On failure
// the process is gone when launch returns.
func (s *Server) launch() (*proc.Process, error) {
	p, err := s.start(s.command("postgres", s.serverArgs()...))
	if err != nil {
		return nil, fmt.Errorf("pgproc: start postgres: %w", err)
	}
	if err := s.waitReady(p); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// waitReady waits until postmaster.pid names this process and reports the
// status "ready" (its 8th line, which pg_ctl reads too).
func (s *Server) waitReady(p *proc.Process) error {
	deadline := time.Now().Add(readyTimeout)
	pidFile := filepath.Join(s.dataDir(), "postmaster.pid")
	for {
		select {
		case <-p.Done():
			return p.ExitedEarly("pgproc: postgres", s.Port)
		default:
		}
		if b, err := os.ReadFile(pidFile); err == nil {
			lines := strings.Split(string(b), "\n")
			if len(lines) >= 8 && strings.TrimSpace(lines[0]) == strconv.Itoa(p.Pid()) &&
				strings.TrimSpace(lines[7]) == "ready" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgproc: postgres on port %d not ready after %s\n--- server log tail ---\n%s",
				s.Port, readyTimeout, p.Log().Tail(proc.LogTailLines))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL returns a postgres:// URL for database db on the TCP port, as the
// superuser, without TLS: postgres://postgres@127.0.0.1:<port>/<db>?sslmode=disable.
func (s *Server) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(User), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)),
		Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// SocketURL is URL over the Unix socket instead of TCP.
func (s *Server) SocketURL(db string) string {
	q := url.Values{"host": {s.SocketDir}, "port": {strconv.Itoa(s.Port)}, "sslmode": {"disable"}}
	return "postgres://" + User + "@/" + url.PathEscape(db) + "?" + q.Encode()
}

// Psql runs the server's psql on database db as the superuser over the
// socket, with ON_ERROR_STOP, and returns its standard output (unaligned,
// tuples only). A failure quotes psql's standard error.
func (s *Server) Psql(db, sql string) (string, error) {
	bin := filepath.Join(s.opts.BinDir, "psql")
	if !proc.IsExecutable(bin) {
		p, err := exec.LookPath("psql")
		if err != nil {
			return "", fmt.Errorf("pgproc: psql %w next to %s or on PATH", ErrNotInstalled, s.opts.BinDir)
		}
		bin = p
	}
	cmd := exec.Command(bin, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", s.SocketDir, "-p", strconv.Itoa(s.Port), "-U", User, "-d", db, "-c", sql)
	cmd.Env = []string{"LC_ALL=C", "PATH=" + os.Getenv("PATH"), "PGCONNECT_TIMEOUT=10"}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("pgproc: psql -c %q: %w: %s", sql, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// CreateDatabase creates database db (a plain identifier: letters, digits and
// underscores).
func (s *Server) CreateDatabase(db string) error {
	for _, r := range db {
		if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("pgproc: database name %q: letters, digits and underscores only", db)
		}
	}
	if db == "" {
		return errors.New("pgproc: empty database name")
	}
	_, err := s.Psql("postgres", `CREATE DATABASE "`+db+`"`)
	return err
}

// Log returns the recent output (up to 64 KiB) of the server's current or
// last process.
func (s *Server) Log() string { return s.slot.Log() }

// Pid returns the process id of the running postmaster, or 0 when it is not
// running. Its backends are its children (each in a session of its own).
func (s *Server) Pid() int { return s.slot.Pid() }

// Stop ends the server: a fast shutdown (SIGINT: open transactions roll
// back, clients are disconnected), then SIGKILL to its process group if it
// has not exited after 10 seconds. It removes Dir if Start created it. Stop is
// idempotent.
func (s *Server) Stop() error {
	if err := s.slot.End(proc.SIGINT, stopTimeout); err != nil {
		return fmt.Errorf("pgproc: %w", err)
	}
	return nil
}

// Kill sends SIGKILL to the postmaster and its backends and waits for the
// postmaster to exit, like a crash. Dir is kept.
func (s *Server) Kill() error { return s.slot.Kill() }
