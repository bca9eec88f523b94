//go:build !unix

package pgproc

import (
	"os"
	"syscall"
)

type credential struct{ uid, gid int }

func isRoot() bool { return false }

// Without Unix signals a fast shutdown is not possible: "terminate" kills.
var sigint os.Signal = os.Kill

func sysProcAttr(*credential) *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process) { _ = p.Kill() }
