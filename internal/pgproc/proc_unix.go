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

// killGroup sends SIGKILL to the server's whole process group: the postmaster
// and its backends. The group id is the postmaster's pid (Setpgid).
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}
