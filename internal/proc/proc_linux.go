//go:build linux

package proc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts the process in its own process group (so killGroup
// reaches anything it forks), runs it as cred when set, and has the kernel
// SIGKILL it when the thread that started it dies, so a crashed test binary
// leaves no orphan server. (Go sets the parent-death signal after it changes
// the credentials, which would clear it.)
func sysProcAttr(cred *Credential) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cred != nil {
		a.Credential = &syscall.Credential{Uid: uint32(cred.UID), Gid: uint32(cred.GID), NoSetGroups: true}
	}
	return a
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil || c == pid {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state, ppid, ...
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}
