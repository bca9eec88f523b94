//go:build !unix

package redisproc

import (
	"os"
	"syscall"
)

// Without Unix signals a clean shutdown is not possible: "terminate" kills.
var sigterm os.Signal = os.Kill

func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process) { _ = p.Kill() }

// Without Unix signals a server cannot be paused: Pause and Resume fail.
var sigstop, sigcont os.Signal
