//go:build unix && !linux

package proc

import "syscall"

// sysProcAttr puts the process in its own process group so killGroup
// reaches anything it forks, and runs it as cred when set.
func sysProcAttr(cred *Credential) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if cred != nil {
		a.Credential = &syscall.Credential{Uid: uint32(cred.UID), Gid: uint32(cred.GID), NoSetGroups: true}
	}
	return a
}

// childrenOf finds no children where there is no /proc to list them: a
// postmaster's backends notice its death and exit.
func childrenOf(int) []int { return nil }
