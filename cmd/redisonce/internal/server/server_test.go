package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

func TestRedacted(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:sekret@h:1":      "redis://:xxxxx@h:1",
		"redis://u:sekret@h:1/2":   "redis://u:xxxxx@h:1/2",
		"redis://h:1":              "redis://h:1",
		"redis://u@h:1":            "redis://u@h:1",
		"redis://:se%zzkret@h:1":   "redis://:xxxxx@h:1", // found without parsing
		"rediss://:p@ss@word@h:10": "rediss://:xxxxx@h:10",
		"unix:///tmp/r.sock":       "unix:///tmp/r.sock",
	} {
		if got := Redacted(in); got != want || strings.Contains(got, "sekret") || strings.Contains(got, "ss@word") {
			t.Errorf("Redacted(%q) = %q, want %q", in, got, want)
		}
	}
}

// A URL that does not parse is refused without quoting it or the part of the
// password url.Parse complains about.
func TestConnectBadURLHidesPassword(t *testing.T) {
	for _, raw := range []string{"redis://:se%zzkret@h:1", "http://:sekret@h:1", "redis://:sekret@h:1/x/y"} {
		_, err := Connect(context.Background(), raw)
		if err == nil || strings.Contains(err.Error(), "sekret") || strings.Contains(err.Error(), "zz") || !strings.Contains(err.Error(), "bad --url") {
			t.Errorf("Connect(%q) = %v, want a bad --url error without the password", raw, err)
		}
	}
}

func TestExplainUnreachableHidesPassword(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = Connect(context.Background(), "redis://:sekret@"+addr)
	if err == nil || strings.Contains(err.Error(), "sekret") || !strings.Contains(err.Error(), "cannot connect to redis://:xxxxx@"+addr) {
		t.Errorf("Connect to a closed port = %v", err)
	}
	if got := Explain(errors.New("x"), "w"); got.Error() != "w: x" {
		t.Errorf("Explain passes an unknown error through as %q", got)
	}
}

func TestVersionError(t *testing.T) {
	for v, old := range map[string]bool{"6.2.14": true, "5.0.7": true, "7.0.0": false, "7.0.15": false, "8.2.1": false, "": false, "x": false} {
		err := versionError("h:1", v)
		if (err != nil) != old {
			t.Errorf("versionError(%q) = %v, want an error: %v", v, err, old)
		}
		if err != nil && !strings.Contains(err.Error(), "needs Redis >= 7.0") {
			t.Errorf("versionError(%q) = %v, want it to say what is needed", v, err)
		}
	}
}

func TestExplainOldServer(t *testing.T) {
	// What Redis 6.2 answers to SCRIPT LOAD of a script that starts with #!lua,
	// and what 7.x answers to a shebang it does not know.
	for _, msg := range []string{
		"ERR Error compiling script (new function): user_script:1: unexpected symbol near '#'",
		"ERR Unexpected engine in script shebang: #!lux",
		"ERR Unknown lua shebang option: flags=nope",
	} {
		if !IsOldServerError(msg) {
			t.Errorf("IsOldServerError(%q) = false", msg)
		}
	}
	if IsOldServerError("ERR Error compiling script (new function): user_script:7: '=' expected near 'x'") {
		t.Error("a syntax error on line 7 was taken for an old server")
	}
}
