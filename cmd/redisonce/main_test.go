package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/demo"
	"github.com/redisonce/redisonce/internal/redisproc"
)

// cli runs the command in-process with REDIS_URL unset (tests that want it set
// call t.Setenv after) and returns the exit code and both outputs.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// oneLineErr checks that a failure printed exactly one line to stderr that
// contains every want, and returns it.
func oneLineErr(t *testing.T, stderr string, want ...string) string {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("stderr is not exactly one line:\n%s", stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q does not contain %q", stderr, w)
		}
	}
	return stderr
}

// startServer starts a throwaway redis-server, skipping the test when there is
// no binary (a failure under CI=true).
func startServer(t *testing.T, o redisproc.Options) *redisproc.Server {
	t.Helper()
	if _, err := redisproc.LookPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skip(err)
	}
	return redisproc.StartT(t, o)
}

func mustDo(t *testing.T, s *redisproc.Server, args ...string) string {
	t.Helper()
	out, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return out
}

func TestMain(m *testing.M) {
	os.Unsetenv("REDIS_URL") // the tests pick their servers themselves
	os.Exit(m.Run())
}

func TestUsage(t *testing.T) {
	code, out, _ := cli(t, "--help")
	if code != 0 || !strings.Contains(out, "Usage: redisonce COMMAND") {
		t.Errorf("--help: exit %d, stdout %q", code, out)
	}
	for _, c := range commands() {
		if !strings.Contains(out, "  "+c.name+" ") {
			t.Errorf("--help does not list %s", c.name)
		}
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			code, out, errs := cli(t, args...)
			if code != 0 || !strings.HasPrefix(out, "Usage: redisonce "+c.name+" ") || errs != "" {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errs)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"nope"}, `no command "nope"`},
		{[]string{"scripts", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"scripts", "extra"}, "usage: redisonce scripts"},
		{[]string{"show"}, "usage: redisonce show NAME"},
		{[]string{"show", "nope"}, `no script named "nope"`},
		{[]string{"call", "claim"}, "usage: redisonce call NAME KEY [ARG...]"},
		{[]string{"help", "nope"}, `no command "nope"`},
	} {
		code, out, errs := cli(t, tc.args...)
		if code != exitUsage || out != "" {
			t.Errorf("%v: exit %d (want %d), stdout %q", tc.args, code, exitUsage, out)
		}
		if tc.args != nil {
			oneLineErr(t, errs, tc.want)
		}
	}
}

func TestCommandFirst(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"--url", "U", "stats", "--json"}, []string{"stats", "--url", "U", "--json"}},
		{[]string{"--url=U", "inspect", "claim", "x"}, []string{"inspect", "--url=U", "claim", "x"}},
		{[]string{"stats", "--url", "U"}, []string{"stats", "--url", "U"}},
		{[]string{"--url"}, []string{"--url"}},
		{[]string{"--url", "U"}, []string{"--url", "U"}},
		{nil, nil},
	} {
		if got := commandFirst(tc.in); !cmp.Equal(got, tc.want, cmpopts.EquateEmpty()) {
			t.Errorf("commandFirst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args, pos []string
		fcall     bool
	}{
		{[]string{"claim", "k", "1", "--fcall"}, []string{"claim", "k", "1"}, true},
		{[]string{"--fcall", "claim", "k"}, []string{"claim", "k"}, true},
		{[]string{"claim", "--", "-1", "--fcall"}, []string{"claim", "-1", "--fcall"}, false},
		{nil, nil, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fcall := fs.Bool("fcall", false, "")
		pos, err := parseInterleaved(fs, tc.args)
		if err != nil || !cmp.Equal(pos, tc.pos) || *fcall != tc.fcall {
			t.Errorf("parseInterleaved(%q) = %q, fcall %v, %v; want %q, fcall %v", tc.args, pos, *fcall, err, tc.pos, tc.fcall)
		}
	}
}

func TestScripts(t *testing.T) {
	code, out, errs := cli(t, "scripts")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	all := redisonce.All()
	if len(lines) != len(all)+1 {
		t.Fatalf("%d lines for %d scripts:\n%s", len(lines), len(all), out)
	}
	if f := strings.Fields(lines[0]); !cmp.Equal(f, []string{"NAME", "SHA1", "KEYS", "MODE", "SUMMARY"}) {
		t.Errorf("header %q", lines[0])
	}
	for i, s := range all {
		mode := "write"
		switch {
		case s.ReadOnly:
			mode = "read-only"
		case s.AllowOOM:
			mode = "write,allow-oom"
		}
		// KEYS is what the header's "KEYS (n=...)" says: 1, or 1..500 for a batch.
		m := regexp.MustCompile(`KEYS \(n=([0-9.]+)\)`).FindStringSubmatch(s.Doc)
		if m == nil {
			t.Fatalf("%s: header has no KEYS (n=...)", s.Name)
		}
		re := regexp.MustCompile(`^` + s.Name + ` +` + s.SHA1 + ` +` + regexp.QuoteMeta(m[1]) + ` +` + mode + ` +` + regexp.QuoteMeta(s.Summary()) + `$`)
		if !re.MatchString(lines[i+1]) {
			t.Errorf("line for %s is %q, want it to match %s", s.Name, lines[i+1], re)
		}
	}
}

func TestShowIsByteForByte(t *testing.T) {
	for _, s := range redisonce.All() {
		code, out, errs := cli(t, "show", s.Name)
		if code != 0 || errs != "" || out != s.Source {
			t.Errorf("show %s: exit %d, stderr %q, stdout differs from the source: %v", s.Name, code, errs, out != s.Source)
		}
	}
}

func TestFunctionsPrintsTheLibrary(t *testing.T) {
	_, code := redisonce.FunctionsLibrary()
	c, out, errs := cli(t, "functions")
	if c != 0 || errs != "" || out != code {
		t.Errorf("functions: exit %d, stderr %q, stdout is the library: %v", c, errs, out == code)
	}
}

func TestErrorNoServer(t *testing.T) {
	// A port that was free a moment ago and that nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, args := range [][]string{
		{"load", "--url", "redis://" + addr},
		{"functions", "--load", "--url", "redis://" + addr},
		{"call", "seen", "k", "--url", "redis://" + addr},
		{"demo", "--url", "redis://" + addr},
	} {
		code, out, errs := cli(t, args...)
		if code != exitFail || out != "" && args[0] != "demo" {
			t.Errorf("%v: exit %d, stdout %q", args, code, out)
		}
		oneLineErr(t, errs, "redisonce "+args[0]+": cannot connect to redis://"+addr, "connection refused", "is redis-server running there?")
	}
	// REDIS_URL is the default.
	t.Setenv("REDIS_URL", "redis://"+addr)
	code, _, errs := cli(t, "load")
	if code != exitFail {
		t.Errorf("load with REDIS_URL: exit %d", code)
	}
	oneLineErr(t, errs, "cannot connect to redis://"+addr)
	// A bad URL.
	code, _, errs = cli(t, "load", "--url", "http://:sekret@h:1")
	if code != exitFail || strings.Contains(errs, "sekret") {
		t.Errorf("bad URL: exit %d, stderr %q (must not show the password)", code, errs)
	}
	oneLineErr(t, errs, "bad --url", "want redis://")
}

func TestErrorPassword(t *testing.T) {
	srv := startServer(t, redisproc.Options{Password: "sekret"})
	wrong := "redis://:wrong-pw@" + srv.Addr
	for _, args := range [][]string{
		{"load", "--url", wrong},
		{"functions", "--load", "--url", wrong},
		{"call", "seen", "k", "--url", wrong},
		{"demo", "--url", wrong},
	} {
		code, _, errs := cli(t, args...)
		if code != exitFail || strings.Contains(errs, "wrong-pw") {
			t.Errorf("%v: exit %d, stderr %q (must not show the password)", args, code, errs)
		}
		oneLineErr(t, errs, "refused the user or password (WRONGPASS", "fix the credentials in --url / REDIS_URL")
	}
	code, _, errs := cli(t, "load", "--url", "redis://"+srv.Addr)
	if code != exitFail {
		t.Errorf("no password: exit %d", code)
	}
	oneLineErr(t, errs, "needs a password (NOAUTH)", "redis://:PASSWORD@host:port")

	// The right password works, and the output never shows it.
	code, out, errs := cli(t, "load", "--url", srv.URL())
	if code != 0 || strings.Contains(out+errs, "sekret") {
		t.Errorf("right password: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestLoadAndCall(t *testing.T) {
	srv := startServer(t, redisproc.Options{})
	url := srv.URL()

	// Before anything is loaded: NOSCRIPT and "Function not found", explained.
	code, _, errs := cli(t, "call", "claim", "k1", "60000", "1", "--url", url)
	if code != exitFail {
		t.Errorf("call before load: exit %d", code)
	}
	oneLineErr(t, errs, "script claim (sha1 ", "is not loaded", "NOSCRIPT", "run 'redisonce load' with the same --url")
	code, _, errs = cli(t, "call", "--fcall", "seen", "k1", "--url", url)
	if code != exitFail {
		t.Errorf("call --fcall before functions --load: exit %d", code)
	}
	oneLineErr(t, errs, "function redisonce_seen is not loaded", "run 'redisonce functions --load' with the same --url")
	if got := mustDo(t, srv, "EXISTS", "k1"); got != "0" {
		t.Fatalf("a failed call wrote k1: EXISTS = %s", got)
	}

	code, out, errs := cli(t, "load", "--url", url)
	if code != 0 {
		t.Fatalf("load: exit %d, stderr %q", code, errs)
	}
	var want strings.Builder
	for _, s := range redisonce.All() {
		want.WriteString(s.Name + " " + s.SHA1 + "\n")
		if got := mustDo(t, srv, "SCRIPT", "EXISTS", s.SHA1); got != "1" {
			t.Errorf("after load, SCRIPT EXISTS %s (%s) = %s", s.SHA1, s.Name, got)
		}
	}
	if diff := cmp.Diff(want.String(), out); diff != "" {
		t.Errorf("load stdout (-want +got):\n%s", diff)
	}
	if !strings.Contains(errs, "on 1 primary: "+srv.Addr) {
		t.Errorf("load stderr %q does not name the primary", errs)
	}

	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"call", "claim", "k1", "60000", "1"}, "1\n"},
		{[]string{"call", "claim", "k1", "60000", "1"}, "0\n"},
		{[]string{"call", "seen", "k1"}, "1\n"},
		{[]string{"call", "forget", "k1"}, "1\n"},
		{[]string{"call", "seen", "k1"}, "0\n"},
		// A batch script: --keys says how many arguments are keys.
		{[]string{"call", "--keys", "3", "claim_many", "{o}a", "{o}b", "{o}a", "60000", "1"}, "1\n1\n0\n"},
		{[]string{"call", "--keys", "2", "seen_many", "{o}a", "{o}c"}, "1\n0\n"},
	} {
		code, out, errs := cli(t, append(tc.args, "--url", url)...)
		if code != 0 || out != tc.out {
			t.Errorf("%v: exit %d, stdout %q (want %q), stderr %q", tc.args, code, out, tc.out, errs)
		}
	}
	code, _, errs = cli(t, "call", "--keys", "2", "claim", "k2", "k3", "60000", "1", "--url", url)
	if code == 0 || !strings.Contains(errs, "--keys is for batch scripts") {
		t.Errorf("call --keys on a single-key script: exit %d, stderr %q", code, errs)
	}
	code, _, errs = cli(t, "call", "claim", "k2", "soon", "1", "--url", url)
	if code != exitFail {
		t.Errorf("call with a bad ttl: exit %d", code)
	}
	oneLineErr(t, errs, "BADARG ttl_ms")
}

func TestFunctionsLoad(t *testing.T) {
	srv := startServer(t, redisproc.Options{})
	url := srv.URL()
	name, code := redisonce.FunctionsLibrary()
	older := "redisonce_000000000000"
	olderCode := strings.Replace(code, "#!lua name="+name, "#!lua name="+older, 1)
	mustDo(t, srv, "FUNCTION", "LOAD", olderCode)

	libs := func() string {
		return mustDo(t, srv, "FUNCTION", "LIST")
	}
	// First install: the older library holds the names and is replaced.
	c, out, errs := cli(t, "functions", "--load", "--url", url)
	if c != 0 {
		t.Fatalf("functions --load: exit %d, stderr %q", c, errs)
	}
	loaded := srv.Addr + ": loaded library " + name + " (" + strconv.Itoa(len(redisonce.All())) + " functions)\n"
	wantOut := srv.Addr + ": deleted older library " + older + "\n" + loaded
	if out != wantOut {
		t.Errorf("stdout %q, want %q", out, wantOut)
	}
	if l := libs(); strings.Contains(l, older) || !strings.Contains(l, name) {
		t.Errorf("FUNCTION LIST after the install:\n%s", l)
	}
	// Re-running is safe.
	for range 2 {
		c, out, errs = cli(t, "functions", "--load", "--url", url)
		if c != 0 || out != loaded {
			t.Errorf("re-run: exit %d, stdout %q, stderr %q", c, out, errs)
		}
	}
	if got := mustDo(t, srv, "FCALL", "redisonce_claim", "1", "fk", "0", "1"); got != "1" {
		t.Errorf("FCALL redisonce_claim = %q, want 1", got)
	}
	if got := mustDo(t, srv, "FCALL_RO", "redisonce_seen", "1", "fk"); got != "1" {
		t.Errorf("FCALL_RO redisonce_seen = %q, want 1", got)
	}
	c, out, _ = cli(t, "call", "--fcall", "seen", "fk", "--url", url)
	if c != 0 || out != "1\n" {
		t.Errorf("call --fcall seen: exit %d, stdout %q", c, out)
	}
}

func TestFunctionsLoadConflictRestores(t *testing.T) {
	srv := startServer(t, redisproc.Options{})
	name, _ := redisonce.FunctionsLibrary()
	// An older redisonce library, and a foreign library that holds one of our
	// function names: the install must fail and leave both as they were.
	older := "#!lua name=redisonce_000000000000\nredis.register_function('redisonce_claim', function() return 'old' end)\n"
	foreign := "#!lua name=other\nredis.register_function('redisonce_forget', function() return 'other' end)\n"
	mustDo(t, srv, "FUNCTION", "LOAD", older)
	mustDo(t, srv, "FUNCTION", "LOAD", foreign)
	// FUNCTION LIST's order is a hash table's: compare library by library.
	state := func() []string {
		return []string{
			mustDo(t, srv, "FUNCTION", "LIST", "LIBRARYNAME", "redisonce_000000000000", "WITHCODE"),
			mustDo(t, srv, "FUNCTION", "LIST", "LIBRARYNAME", "other", "WITHCODE"),
			strconv.Itoa(strings.Count(mustDo(t, srv, "FUNCTION", "LIST"), "library_name")),
		}
	}
	before := state()

	c, out, errs := cli(t, "functions", "--load", "--url", srv.URL())
	if c != exitFail || out != "" {
		t.Errorf("exit %d, stdout %q", c, out)
	}
	oneLineErr(t, errs, "install library "+name, "another library on "+srv.Addr+" already defines", "FUNCTION DELETE", "older libraries were left in place")
	if diff := cmp.Diff(before, state()); diff != "" {
		t.Errorf("the libraries changed (-before +after):\n%s", diff)
	}
	if got := mustDo(t, srv, "FCALL", "redisonce_claim", "0"); got != "old" {
		t.Errorf("the older library's function answers %q, want it restored", got)
	}
}

func TestDemo(t *testing.T) {
	srv := startServer(t, redisproc.Options{})
	mustDo(t, srv, "SET", "user-key", "kept")
	code, out, errs := cli(t, "demo", "--url", srv.URL())
	if code != 0 {
		t.Fatalf("demo: exit %d, stderr %q\n%s", code, errs, out)
	}
	checkDemoOutput(t, out)
	// The demo removes every key it wrote, and nothing else.
	if got := mustDo(t, srv, "KEYS", "*"); got != "user-key" {
		t.Errorf("keys after the demo: %q, want only user-key", got)
	}
}

func TestDemoStartsItsOwnServer(t *testing.T) {
	startServer(t, redisproc.Options{}) // only to skip without a binary
	code, out, errs := cli(t, "demo")
	if code != 0 {
		t.Fatalf("demo: exit %d, stderr %q\n%s", code, errs, out)
	}
	if !regexp.MustCompile(`server: started a throwaway redis-server from /\S+ on 127\.0\.0\.1:\d+`).MatchString(out) {
		t.Errorf("the demo does not say where it found redis-server:\n%s", out)
	}
	checkDemoOutput(t, out)
}

// checkDemoOutput checks the final table: one row per section, effects equal to
// unique messages, and the ok line.
func checkDemoOutput(t *testing.T, out string) {
	t.Helper()
	for _, s := range demo.Sections() {
		re := regexp.MustCompile(`(?m)^ *` + s.Name + ` +(\d+) +(\d+) +(\d+) +(\d+) +(-|\d+) +(-|\d+) +ok$`)
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no ok row for %s in the demo output:\n%s", s.Name, out)
			continue
		}
		if m[3] != m[4] {
			t.Errorf("%s: unique %s, effects %s", s.Name, m[3], m[4])
		}
	}
	if !strings.Contains(out, "\nok: every effect applied exactly once") {
		t.Errorf("no ok line:\n%s", out)
	}
}
