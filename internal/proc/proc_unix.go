//go:build unix

package proc

import (
	"os"
	"syscall"
)

// IsRoot reports whether the process runs as root.
func IsRoot() bool { return os.Geteuid() == 0 }

// The signals a server is stopped, paused and continued with.
var (
	SIGINT  os.Signal = syscall.SIGINT
	SIGTERM os.Signal = syscall.SIGTERM
	SIGSTOP os.Signal = syscall.SIGSTOP
	SIGCONT os.Signal = syscall.SIGCONT
)

// killGroup sends SIGKILL to p's process group (the group id is its pid:
// Setpgid), which holds anything it forked; with sessions, also to each of
// its children, which left the group with setsid() (postgres's backends and
// auxiliary processes). p is stopped first so that it forks no child
// meanwhile, and its children are listed while it is still their parent.
func killGroup(p *os.Process, sessions bool) {
	var children []int
	if sessions {
		_ = syscall.Kill(p.Pid, syscall.SIGSTOP)
		children = childrenOf(p.Pid)
	}
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
}
