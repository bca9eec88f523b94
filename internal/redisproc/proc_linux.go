//go:build linux

package redisproc

import "syscall"

// sysProcAttr puts the server in its own process group (so killGroup reaches
// anything it forks) and has the kernel SIGKILL it when the thread that
// started it dies, so a crashed test binary leaves no orphan server.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
