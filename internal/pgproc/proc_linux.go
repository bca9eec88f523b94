//go:build linux

package pgproc

import "syscall"

// sysProcAttr puts the process in its own process group (so killGroup
// reaches the backends the postmaster forks), runs it as cred when set, and
// has the kernel SIGKILL it when the thread that started it dies, so a
// crashed test binary leaves no orphan server. (Go sets the parent-death
// signal after it changes the credentials, which would clear it.)
func sysProcAttr(cred *credential) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cred != nil {
		a.Credential = &syscall.Credential{Uid: uint32(cred.uid), Gid: uint32(cred.gid), NoSetGroups: true}
	}
	return a
}
