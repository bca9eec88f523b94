package proc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTailBufferKeepsTheLastBytes(t *testing.T) {
	var b TailBuffer
	for i := range 10000 {
		fmt.Fprintf(&b, "line %05d\n", i) // 11 bytes a line: 110,000 in all
	}
	s := b.String()
	if len(s) != maxTail {
		t.Fatalf("kept %d bytes, want %d", len(s), maxTail)
	}
	if !strings.HasSuffix(s, "line 09999\n") {
		t.Fatalf("the last line is not kept: %q", s[len(s)-20:])
	}
	if got, want := b.Tail(2), "line 09998\nline 09999"; got != want {
		t.Fatalf("Tail(2) = %q, want %q", got, want)
	}
}

func TestWorkDirOwnsOnlyATemporaryDirectory(t *testing.T) {
	tmp, own, err := WorkDir("", "proc-test-", 0o700)
	if err != nil || !own {
		t.Fatalf("WorkDir(\"\") = %q, own %v, %v; want a new directory it owns", tmp, own, err)
	}
	var s Slot
	s.Own(tmp)
	given := filepath.Join(t.TempDir(), "a", "b")
	dir, own, err := WorkDir(given, "proc-test-", 0o700)
	if err != nil || own || dir != given {
		t.Fatalf("WorkDir(%q) = %q, own %v, %v; want it, created, not owned", given, dir, own, err)
	}
	if err := s.End(SIGTERM, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("End left the slot's own directory %s (%v)", tmp, err)
	}
	if st, err := os.Stat(given); err != nil || !st.IsDir() {
		t.Fatalf("the given directory %s: %v", given, err)
	}
	if err := s.Replace(SIGTERM, time.Second, func() (*Process, error) { return nil, errors.New("not called") }); !errors.Is(err, ErrEnded) {
		t.Fatalf("Replace after End: %v, want ErrEnded", err)
	}
}
