// Package redisproc starts and stops throwaway redis-server processes for tests,
// the demo and benchmarks.
//
// Every server binds 127.0.0.1 only, runs in the foreground (daemonize no) with
// protected mode off and RDB snapshots off (save ""), and answers PING before
// Start returns. DEBUG is enabled for local connections (enable-debug-command
// local) so fault tests can use DEBUG SLEEP and friends. The server's stdout and
// stderr are kept in memory; the last lines are quoted in any start error and
// are available from Server.Log.
//
// On Unix the server runs in its own process group, so Stop and Kill also end
// any child it forked (an AOF rewrite, for example); on Linux the server is also
// sent SIGKILL when the process that started it dies, so a crashed test binary
// leaves no orphan behind.
//
// StartCluster builds a Redis Cluster of such servers, and StartSentinel a
// primary with replicas watched by Redis Sentinel, for failover tests (Pause,
// Kill and RestartAsReplicaOf play the faults).
//
// The package uses the standard library only.
package redisproc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redisonce/redisonce/internal/proc"
)

const (
	// readyTimeout bounds how long Start and Restart wait for PING to answer.
	readyTimeout = 10 * time.Second
	// stopTimeout is how long Stop waits after SIGTERM before it sends SIGKILL.
	stopTimeout = 10 * time.Second
	// clusterBusOffset is the distance of the cluster bus port from the client
	// port, as Redis computes it when cluster-port is not set.
	clusterBusOffset = 10000
)

// ErrNotInstalled is wrapped by the errors of LookPath, Start and StartCluster
// when redis-server (or, for StartCluster, redis-cli) cannot be found.
var ErrNotInstalled = errors.New("not installed")

// Options configures a server. The zero value is a plain standalone server on a
// free loopback port in a fresh temporary directory.
type Options struct {
	// Binary is the redis-server executable. Default: the result of LookPath.
	Binary string
	// Dir is the server's working directory (AOF, cluster config). Default: a
	// new temporary directory, removed by Stop. A Dir given here is created if
	// missing and never removed.
	Dir string
	// Port is the TCP port on 127.0.0.1. Default (0): a free port; for a
	// cluster node, one whose bus port (Port+10000) is free too.
	Port int
	// AppendOnly turns on the append-only file (appendonly yes).
	AppendOnly bool
	// AppendFsync is "always", "everysec" or "no". Default (""): the server's
	// default, everysec.
	AppendFsync string
	// MaxMemory is the maxmemory directive, e.g. "2mb". Default (""): no limit.
	MaxMemory string
	// MaxMemoryPolicy is the maxmemory-policy directive, e.g. "noeviction".
	// Default (""): the server's default, noeviction.
	MaxMemoryPolicy string
	// Cluster starts the server with cluster-enabled yes and its cluster
	// config file (nodes.conf) in Dir. Use StartCluster to get a working
	// cluster; a lone cluster-enabled server owns no slots.
	Cluster bool
	// ACLFile is the aclfile directive: a path to an existing ACL file.
	ACLFile string
	// Password is the requirepass directive. Do and URL use it.
	Password string
	// Args are extra raw command-line arguments appended last, as separate
	// elements, e.g. []string{"--cluster-node-timeout", "2000"}.
	Args []string
	// SentinelConfig, when set, runs the process as a Redis Sentinel: Start
	// writes it to Dir/sentinel.conf (unless that file exists: a Sentinel
	// rewrites its own config, and Restart keeps what it learnt) and starts
	// `redis-server Dir/sentinel.conf --sentinel` with the usual directives.
	// StartSentinel builds a whole deployment.
	SentinelConfig string
}

// LookPath finds a redis-server executable: on PATH first, then in /usr/sbin,
// /usr/local/bin, /usr/bin and /opt/homebrew/bin. When there is none, the error
// wraps ErrNotInstalled and says how to install it.
func LookPath() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/bin", "/usr/bin", "/opt/homebrew/bin"} {
		p := filepath.Join(dir, "redis-server")
		if proc.IsExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("redisproc: redis-server %w: not found on PATH, /usr/sbin or /usr/local/bin; "+
		"install it with `sudo apt-get install redis-server redis-tools` (Debian/Ubuntu) "+
		"or `brew install redis` (macOS)", ErrNotInstalled)
}

// Server is one running (or stopped) redis-server process. Its methods are safe
// for concurrent use.
type Server struct {

	// Addr is "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port the server listens on; it stays the same across
	// Restart.
	Port int
	// Dir is the server's working directory (absolute).
	Dir string

	opts Options // resolved: Binary, Dir and Port are set
	slot proc.Slot
}

// Start starts a redis-server with the given options and waits until it
// answers PING (up to about 10 seconds). When the port was chosen by Start and
// turns out to be taken by the time the server binds it, Start retries with
// another port.
func Start(o Options) (*Server, error) {
	if o.Binary == "" {
		bin, err := LookPath()
		if err != nil {
			return nil, err
		}
		o.Binary = bin
	}
	s := &Server{}
	dir, own, err := proc.WorkDir(o.Dir, "redisproc-", 0o755)
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	if own {
		s.slot.Own(dir)
	}
	o.Dir, s.Dir = dir, dir

	autoPort := o.Port == 0
	for attempt := 1; ; attempt++ {
		if autoPort {
			port, err := freePort(o.Cluster)
			if err != nil {
				_ = s.slot.RemoveOwnDir()
				return nil, err
			}
			o.Port = port
		}
		s.opts = o
		s.Port = o.Port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port))
		p, err := s.launch()
		if err == nil {
			s.slot.Start(p)
			return s, nil
		}
		if !autoPort || attempt >= 5 || !errors.Is(err, proc.ErrAddrInUse) {
			_ = s.slot.RemoveOwnDir()
			return nil, err
		}
		if own {
			// The failed node may have written its identity; start afresh.
			_ = os.Remove(filepath.Join(o.Dir, "nodes.conf"))
		}
	}
}

// launch starts one process on s.Port and waits until it is ready. On failure
// the process is gone when launch returns.
func (s *Server) launch() (*proc.Process, error) {
	o := s.opts
	args := serverArgs(o)
	if o.SentinelConfig != "" {
		conf := filepath.Join(o.Dir, "sentinel.conf")
		if _, err := os.Stat(conf); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(conf, []byte(o.SentinelConfig), 0o644); err != nil {
				return nil, fmt.Errorf("redisproc: %w", err)
			}
		}
		args = append([]string{conf, "--sentinel"}, args...)
	}
	cmd := exec.Command(o.Binary, args...)
	cmd.Dir = o.Dir
	p, err := proc.Start(cmd, proc.Options{})
	if err != nil {
		return nil, fmt.Errorf("redisproc: start %s: %w", o.Binary, err)
	}
	if err := s.waitReady(p); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// serverArgs renders the options as redis-server command-line directives.
func serverArgs(o Options) []string {
	args := []string{
		"--port", strconv.Itoa(o.Port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--save", "",
		"--dir", o.Dir,
		"--logfile", "",
		"--enable-debug-command", "local",
	}
	if o.AppendOnly {
		args = append(args, "--appendonly", "yes")
	}
	if o.AppendFsync != "" {
		args = append(args, "--appendfsync", o.AppendFsync)
	}
	if o.MaxMemory != "" {
		args = append(args, "--maxmemory", o.MaxMemory)
	}
	if o.MaxMemoryPolicy != "" {
		args = append(args, "--maxmemory-policy", o.MaxMemoryPolicy)
	}
	if o.Cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(o.Dir, "nodes.conf"))
	}
	if o.ACLFile != "" {
		args = append(args, "--aclfile", o.ACLFile)
	}
	if o.Password != "" {
		args = append(args, "--requirepass", o.Password)
	}
	return append(args, o.Args...)
}

// waitReady polls PING until the server answers with anything but LOADING
// (an authentication error counts as an answer: the server is up).
func (s *Server) waitReady(p *proc.Process) error {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for {
		select {
		case <-p.Done():
			return p.ExitedEarly("redisproc: redis-server", s.Port)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: redis-server on port %d not ready after %s (last PING: %v)\n--- server log tail ---\n%s",
				s.Port, readyTimeout, lastErr, p.Log().Tail(proc.LogTailLines))
		}
		_, err := s.do(time.Second, "PING")
		var re ReplyError
		if err == nil || (errors.As(err, &re) && !strings.HasPrefix(string(re), "LOADING")) {
			return nil
		}
		lastErr = err
		time.Sleep(10 * time.Millisecond)
	}
}

// freePort returns a loopback port that was free a moment ago. For a cluster
// node the bus port (port+10000) must be a valid, free port as well.
func freePort(cluster bool) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redisproc: find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !cluster {
			l.Close()
			return port, nil
		}
		if port+clusterBusOffset > 65535 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+clusterBusOffset)))
		l.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("redisproc: no free port pair for a cluster node")
}

// URL returns the server's address as a redis:// URL, with the password when
// one is set (redis://:pw@127.0.0.1:port).
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr}
	if s.opts.Password != "" {
		u.User = url.UserPassword("", s.opts.Password)
	}
	return u.String()
}

// Log returns the recent stdout and stderr (up to 64 KiB) of the server's
// current or last process, also after Kill or Stop.
func (s *Server) Log() string { return s.slot.Log() }

// Pid returns the process id of the running server, or 0 when it is not
// running.
func (s *Server) Pid() int { return s.slot.Pid() }

// Kill sends SIGKILL (to the server and anything it forked) and waits for it
// to exit, like a crash: nothing is flushed. Dir is kept, so Restart can
// recover from the AOF. Killing a server that is not running does nothing.
func (s *Server) Kill() error { return s.slot.Kill() }

// Stop ends the server: SIGTERM (a clean shutdown, which fsyncs the AOF), then
// SIGKILL if it has not exited after 10 seconds. It waits for the process and
// removes Dir if Start created it. Stop is idempotent; after Stop the Server
// cannot be restarted.
func (s *Server) Stop() error {
	if err := s.slot.End(proc.SIGTERM, stopTimeout); err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	return nil
}

// Pause stops the server's process with SIGSTOP, as a long GC pause or a
// stalled VM would: it keeps its connections but answers nothing (the kernel
// still accepts and buffers bytes for it) until Resume. Unix only.
func (s *Server) Pause() error { return s.signal(proc.SIGSTOP, "pause") }

// Resume continues a paused server (SIGCONT). Unix only.
func (s *Server) Resume() error { return s.signal(proc.SIGCONT, "resume") }

func (s *Server) signal(sig os.Signal, what string) error {
	if sig == nil {
		return fmt.Errorf("redisproc: %s: not supported on this system", what)
	}
	running, err := s.slot.Signal(sig)
	switch {
	case !running:
		return fmt.Errorf("redisproc: %s: the server on port %d is not running", what, s.Port)
	case err != nil:
		return fmt.Errorf("redisproc: %s: %w", what, err)
	}
	return nil
}

// RestartAsReplicaOf restarts the server (see Restart) as a replica of
// primary ("host:port"): any --replicaof among its Args is replaced, for this
// and every later Restart. A failover test brings a killed primary back this
// way, as the replica of the one that was promoted in its place.
func (s *Server) RestartAsReplicaOf(primary string) error {
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return fmt.Errorf("redisproc: replica of %q: %w", primary, err)
	}
	return s.restart(func() {
		var args []string
		for i := 0; i < len(s.opts.Args); i++ {
			if s.opts.Args[i] == "--replicaof" || s.opts.Args[i] == "--slaveof" {
				i += 2 // the directive and its host and port
				continue
			}
			args = append(args, s.opts.Args[i])
		}
		s.opts.Args = append(args, "--replicaof", host, port)
	})
}

// Restart starts the server again on the same port and Dir with the same
// options and waits until it answers PING. A server still running is first
// stopped cleanly (SIGTERM). Restart after Stop is an error.
func (s *Server) Restart() error { return s.restart(nil) }

// restart is Restart, with change applied to the options (under the Slot's
// lock, once the old process is gone) when not nil.
func (s *Server) restart(change func()) error {
	err := s.slot.Replace(proc.SIGTERM, stopTimeout, func() (*proc.Process, error) {
		if change != nil {
			change()
		}
		// The port was just released; if something else grabbed it (or the
		// old socket lingers) retry for a little while.
		var err error
		for attempt := 1; attempt <= 20; attempt++ {
			var p *proc.Process
			if p, err = s.launch(); err == nil || !errors.Is(err, proc.ErrAddrInUse) {
				return p, err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil, err
	})
	if errors.Is(err, proc.ErrEnded) {
		return errors.New("redisproc: restart of a stopped server")
	}
	return err
}
