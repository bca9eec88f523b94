//go:build unix

package pgproc

import (
	"os"
	"syscall"
)

// credential is a system account to run initdb and postgres as.
type credential struct{ uid, gid int }

func isRoot() bool { return os.Geteuid() == 0 }

// sigint asks the postmaster for a fast shutdown.
var sigint os.Signal = syscall.SIGINT

// killGroup sends SIGKILL to the postmaster, its process group (the group id
// is its pid: Setpgid) and its children. The children must be named one by
// one: every backend and auxiliary process calls setsid() when it starts, so
// it is in a group of its own. The postmaster is stopped first so that it
// forks no child meanwhile, and its children are listed while it is still
// their parent.
func killGroup(p *os.Process) {
	_ = syscall.Kill(p.Pid, syscall.SIGSTOP)
	children := childrenOf(p.Pid)
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
}
