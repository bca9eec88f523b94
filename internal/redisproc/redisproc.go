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
	"sync"
	"time"
)

const (
	// readyTimeout bounds how long Start and Restart wait for PING to answer.
	readyTimeout = 10 * time.Second
	// stopTimeout is how long Stop waits after SIGTERM before it sends SIGKILL.
	stopTimeout = 10 * time.Second
	// logTailLines is how many lines of the server's output a start error quotes.
	logTailLines = 25
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
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("redisproc: redis-server %w: not found on PATH, /usr/sbin or /usr/local/bin; "+
		"install it with `sudo apt-get install redis-server redis-tools` (Debian/Ubuntu) "+
		"or `brew install redis` (macOS)", ErrNotInstalled)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
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

	opts   Options // resolved: Binary, Dir and Port are set
	ownDir bool    // Dir was created by Start and is removed by Stop

	mu      sync.Mutex
	proc    *process    // nil when not running
	log     *tailBuffer // output of the current or last process
	stopped bool        // Stop was called: the Server is finished
}

// process is one incarnation of the server (Restart makes a new one).
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd.Wait returns
	err  error         // cmd.Wait's result; read only after done is closed
	log  *tailBuffer
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
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "redisproc-")
		if err != nil {
			return nil, fmt.Errorf("redisproc: %w", err)
		}
		o.Dir, s.ownDir = dir, true
	} else {
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("redisproc: %w", err)
		}
		abs, err := filepath.Abs(o.Dir)
		if err != nil {
			return nil, fmt.Errorf("redisproc: %w", err)
		}
		o.Dir = abs
	}
	s.Dir = o.Dir

	autoPort := o.Port == 0
	for attempt := 1; ; attempt++ {
		if autoPort {
			port, err := freePort(o.Cluster)
			if err != nil {
				s.removeOwnDir()
				return nil, err
			}
			o.Port = port
		}
		s.opts = o
		s.Port = o.Port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port))
		p, err := s.launch()
		if err == nil {
			s.proc, s.log = p, p.log
			return s, nil
		}
		if !autoPort || attempt >= 5 || !errors.Is(err, errAddrInUse) {
			s.removeOwnDir()
			return nil, err
		}
		if s.ownDir {
			// The failed node may have written its identity; start afresh.
			_ = os.Remove(filepath.Join(o.Dir, "nodes.conf"))
		}
	}
}

var errAddrInUse = errors.New("address already in use")

// launch starts one process on s.Port and waits until it is ready. On failure
// the process is gone when launch returns.
func (s *Server) launch() (*process, error) {
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
	log := &tailBuffer{}
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = sysProcAttr()
	// A child the server forked may hold the output pipe after the server
	// died; do not let Wait hang on it.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redisproc: start %s: %w", o.Binary, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := s.waitReady(p); err != nil {
		killGroup(p.cmd.Process)
		<-p.done
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
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for {
		select {
		case <-p.done:
			err := fmt.Errorf("redisproc: redis-server on port %d exited before it was ready (%v)\n--- server log tail ---\n%s",
				s.Port, p.err, p.log.Tail(logTailLines))
			if strings.Contains(p.log.String(), "Address already in use") {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return err
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: redis-server on port %d not ready after %s (last PING: %v)\n--- server log tail ---\n%s",
				s.Port, readyTimeout, lastErr, p.log.Tail(logTailLines))
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
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// Pid returns the process id of the running server, or 0 when it is not
// running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Stop ends the server: SIGTERM (a clean shutdown, which fsyncs the AOF), then
// SIGKILL if it has not exited after 10 seconds. It waits for the process and
// removes Dir if Start created it. Stop is idempotent; after Stop the Server
// cannot be restarted.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	if s.proc != nil {
		s.proc.terminate()
		s.proc = nil
	}
	return s.removeOwnDir()
}

// Kill sends SIGKILL (to the server and anything it forked) and waits for it
// to exit, like a crash: nothing is flushed. Dir is kept, so Restart can
// recover from the AOF. Killing a server that is not running does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	killGroup(s.proc.cmd.Process)
	<-s.proc.done
	s.proc = nil
	return nil
}

// Pause stops the server's process with SIGSTOP, as a long GC pause or a
// stalled VM would: it keeps its connections but answers nothing (the kernel
// still accepts and buffers bytes for it) until Resume. Unix only.
func (s *Server) Pause() error { return s.signal(sigstop, "pause") }

// Resume continues a paused server (SIGCONT). Unix only.
func (s *Server) Resume() error { return s.signal(sigcont, "resume") }

func (s *Server) signal(sig os.Signal, what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("redisproc: %s: the server on port %d is not running", what, s.Port)
	}
	if sig == nil {
		return fmt.Errorf("redisproc: %s: not supported on this system", what)
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
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
	s.mu.Lock()
	var args []string
	for i := 0; i < len(s.opts.Args); i++ {
		if s.opts.Args[i] == "--replicaof" || s.opts.Args[i] == "--slaveof" {
			i += 2 // the directive and its host and port
			continue
		}
		args = append(args, s.opts.Args[i])
	}
	s.opts.Args = append(args, "--replicaof", host, port)
	s.mu.Unlock()
	return s.Restart()
}

// Restart starts the server again on the same port and Dir with the same
// options and waits until it answers PING. A server still running is first
// stopped cleanly (SIGTERM). Restart after Stop is an error.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("redisproc: restart of a stopped server")
	}
	if s.proc != nil {
		s.proc.terminate()
		s.proc = nil
	}
	// The port was just released; if something else grabbed it (or the old
	// socket lingers) retry for a little while.
	var err error
	for attempt := 1; attempt <= 20; attempt++ {
		var p *process
		if p, err = s.launch(); err == nil {
			s.proc, s.log = p, p.log
			return nil
		}
		if !errors.Is(err, errAddrInUse) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// terminate sends SIGTERM, escalates to SIGKILL after stopTimeout, waits for
// the process, and finally kills whatever is left in its process group.
func (p *process) terminate() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sigterm)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			killGroup(p.cmd.Process)
			<-p.done
		}
	}
	killGroup(p.cmd.Process) // stragglers (forked children), if any
}

func (s *Server) removeOwnDir() error {
	if !s.ownDir {
		return nil
	}
	s.ownDir = false
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("redisproc: remove %s: %w", s.Dir, err)
	}
	return nil
}

// tailBuffer keeps the last maxTail bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const maxTail = 64 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - maxTail; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Tail returns the last n lines.
func (b *tailBuffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
