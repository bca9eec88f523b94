//go:build unix && !linux

package pgproc

import "syscall"

// sysProcAttr puts the process in its own process group so killGroup
// reaches the backends the postmaster forks, and runs it as cred when set.
func sysProcAttr(cred *credential) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if cred != nil {
		a.Credential = &syscall.Credential{Uid: uint32(cred.uid), Gid: uint32(cred.gid), NoSetGroups: true}
	}
	return a
}

// childrenOf finds no children where there is no /proc to list them: killing
// the postmaster leaves its backends to notice its death and exit.
func childrenOf(int) []int { return nil }
