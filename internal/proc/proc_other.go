//go:build !unix

package proc

import (
	"os"
	"syscall"
)

func IsRoot() bool { return false }

// Without Unix signals a clean shutdown is not possible: SIGINT and SIGTERM
// kill; a server cannot be paused (SIGSTOP and SIGCONT are nil).
var (
	SIGINT  os.Signal = os.Kill
	SIGTERM os.Signal = os.Kill
	SIGSTOP os.Signal
	SIGCONT os.Signal
)

func sysProcAttr(*Credential) *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process, _ bool) { _ = p.Kill() }
