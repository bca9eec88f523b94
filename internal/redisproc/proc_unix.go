//go:build unix

package redisproc

import (
	"os"
	"syscall"
)

var sigterm os.Signal = syscall.SIGTERM

// killGroup sends SIGKILL to the server's whole process group (the server and
// any child it forked, such as an AOF rewrite). The group id is the server's
// pid because sysProcAttr sets Setpgid.
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}

var (
	sigstop os.Signal = syscall.SIGSTOP
	sigcont os.Signal = syscall.SIGCONT
)
