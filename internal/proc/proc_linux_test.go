package proc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestKillEndsTheProcessGroup(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// A shell that forks a sleeping child (same process group) and waits.
	p, err := Start(exec.Command(sh, "-c", "sleep 60 & echo child $!; wait"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	for deadline := time.Now().Add(10 * time.Second); child == 0; {
		if _, err := fmt.Sscanf(p.Log().String(), "child %d", &child); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("the shell did not report its child: %q", p.Log().String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var s Slot
	s.Start(p)
	if s.Pid() != p.Pid() {
		t.Fatalf("Pid %d, want %d", s.Pid(), p.Pid())
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Pid() != 0 {
		t.Fatalf("Pid %d after Kill, want 0", s.Pid())
	}
	// The child was SIGKILLed with the group: once reaped by init it is gone.
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil || strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d still alive after Kill: %s", child, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
