// Package proc runs the process of a throwaway server for tests, the demo and
// benchmarks (internal/redisproc's redis-server, internal/pgproc's postgres):
// in a process group of its own, with its output kept in memory, stopped with
// a signal and a deadline, or killed with everything it forked. On Linux the
// kernel also kills it when the thread that started it dies, so a crashed test
// binary leaves no orphan server.
//
// The package uses the standard library only.
package proc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Credential is a system account to run a process as.
type Credential struct{ UID, GID int }

// Options says how Start runs a command.
type Options struct {
	// Cred is the account the process runs as; nil: the caller's.
	Cred *Credential
	// Sessions says the process's children start sessions of their own
	// (postgres's backends call setsid), so that a process-group kill does
	// not reach them: Kill names them one by one (Linux, from /proc).
	Sessions bool
}

// Process is one started process. Its methods are safe for concurrent use.
type Process struct {
	cmd      *exec.Cmd
	sessions bool
	done     chan struct{} // closed when cmd.Wait returns
	err      error         // cmd.Wait's result; read only after done is closed
	log      *TailBuffer
}

// Start starts cmd in a process group of its own (and as o.Cred), its
// standard output and error kept in a TailBuffer, and waits for it in the
// background.
func Start(cmd *exec.Cmd, o Options) (*Process, error) {
	log := &TailBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr(o.Cred)
	// A child the process forked may hold the output pipe after the process
	// died; do not let Wait hang on it.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, sessions: o.Sessions, done: make(chan struct{}), log: log}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit (cmd.Wait's error); only after Done is closed.
func (p *Process) Err() error { return p.err }

// Log is the process's output.
func (p *Process) Log() *TailBuffer { return p.log }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process (not its group).
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL to the process, its process group and (with
// Options.Sessions) its children, and waits for it to exit: a crash.
func (p *Process) Kill() {
	killGroup(p.cmd.Process, p.sessions)
	<-p.done
}

// Terminate asks the process to exit (sig), sends SIGKILL after timeout,
// waits for it, and finally kills whatever is left of its group.
func (p *Process) Terminate(sig os.Signal, timeout time.Duration) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(timeout):
			p.Kill()
		}
	}
	killGroup(p.cmd.Process, p.sessions) // stragglers, if any
}

// ExitedEarly is the error of a server's process that exited before it was
// ready: it quotes the last lines of its output, and wraps ErrAddrInUse when
// the port was taken.
func (p *Process) ExitedEarly(what string, port int) error {
	err := fmt.Errorf("%s on port %d exited before it was ready (%v)\n--- server log tail ---\n%s",
		what, port, p.err, p.log.Tail(LogTailLines))
	if strings.Contains(p.log.String(), "Address already in use") {
		err = fmt.Errorf("%w: %w", ErrAddrInUse, err)
	}
	return err
}

// ErrAddrInUse is wrapped by a start error when the server could not bind its
// port: a caller that picked the port itself tries another.
var ErrAddrInUse = errors.New("address already in use")

// LogTailLines is how many lines of a server's output a start error quotes.
const LogTailLines = 25

// Slot is a server's current process, across restarts, and the working
// directory the server owns. Its methods are safe for concurrent use.
type Slot struct {
	mu      sync.Mutex
	proc    *Process    // nil when not running
	log     *TailBuffer // output of the current or last process
	stopped bool        // Stop was called: the server is finished
	ownDir  string      // a directory Start created, removed by Stop ("": none)
}

// Start keeps p as the running process.
func (s *Slot) Start(p *Process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc, s.log = p, p.log
}

// Own makes dir the slot's own: Stop (or RemoveOwnDir) removes it.
func (s *Slot) Own(dir string) { s.ownDir = dir }

// Log returns the recent output (up to 64 KiB) of the server's current or
// last process, also after Kill or Stop.
func (s *Slot) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// Pid returns the process id of the running server, or 0 when it is not
// running.
func (s *Slot) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

// Kill sends SIGKILL to the server (its process group, and its children in
// sessions of their own) and waits for it to exit, like a crash: nothing is
// flushed. Its directory is kept. Killing a server that is not running does
// nothing.
func (s *Slot) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.Kill()
		s.proc = nil
	}
	return nil
}

// Signal sends sig to the running server; false when it is not running.
func (s *Slot) Signal(sig os.Signal) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false, nil
	}
	return true, s.proc.Signal(sig)
}

// End ends the server for good (Terminate with sig and timeout) and removes
// its own directory; a second End does nothing.
func (s *Slot) End(sig os.Signal, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	if s.proc != nil {
		s.proc.Terminate(sig, timeout)
		s.proc = nil
	}
	return s.RemoveOwnDir()
}

// ErrEnded is Replace's error after End.
var ErrEnded = errors.New("the server was stopped")

// Replace ends the running process, if any (Terminate with sig and timeout),
// and keeps the one start returns. After End it is ErrEnded.
func (s *Slot) Replace(sig os.Signal, timeout time.Duration, start func() (*Process, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrEnded
	}
	if s.proc != nil {
		s.proc.Terminate(sig, timeout)
		s.proc = nil
	}
	p, err := start()
	if err != nil {
		return err
	}
	s.proc, s.log = p, p.log
	return nil
}

// RemoveOwnDir removes the directory the slot owns, if any, once.
func (s *Slot) RemoveOwnDir() error {
	dir := s.ownDir
	if dir == "" {
		return nil
	}
	s.ownDir = ""
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// WorkDir returns a server's directory: dir made absolute and created if
// missing (perm), or, when dir is "", a new temporary directory (pattern, as
// os.MkdirTemp's) with own true: the server removes it when it stops.
func WorkDir(dir, pattern string, perm os.FileMode) (abs string, own bool, err error) {
	if dir == "" {
		d, err := os.MkdirTemp("", pattern)
		return d, err == nil, err
	}
	if abs, err = filepath.Abs(dir); err != nil {
		return "", false, err
	}
	return abs, false, os.MkdirAll(abs, perm)
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// IsExecutable reports whether p is an executable file.
func IsExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// TailBuffer keeps the last 64 KiB written to it.
type TailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const maxTail = 64 << 10

func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - maxTail; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Tail returns the last n lines.
func (b *TailBuffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TB is the part of testing.TB that the servers' StartT functions use, so
// these packages need not import "testing" outside their tests.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Started ends a StartT: it fails t with err, or registers s's Stop with
// t.Cleanup (a failed Stop fails the test) and returns s.
func Started[S interface{ Stop() error }](t TB, s S, err error) S {
	t.Helper()
	if err != nil {
		t.Fatalf("%v", err)
		return s // only reached with a TB whose Fatalf returns
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Fatalf("%v", err)
		}
	})
	return s
}
