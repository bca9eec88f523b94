//go:build unix && !linux

package redisproc

import "syscall"

// sysProcAttr puts the server in its own process group so killGroup reaches
// anything it forks.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
