// Command redisonce lists, prints and installs the redisonce script bundle for
// callers outside Go, shows the stores' state to an operator, and runs the demo:
//
//	redisonce scripts                 the scripts: name, SHA1, keys, read/write, summary
//	redisonce show NAME               one script's source, byte for byte
//	redisonce load [--url U]          SCRIPT LOAD every script on every primary
//	redisonce functions [--load]      print (or install) the Redis Functions library
//	redisonce call NAME KEY [ARG...]  run one script with EVALSHA (or --fcall FCALL)
//	redisonce inspect claim ID | tail CONN | record KEY
//	                                  one key's state in words (read-only; --json)
//	redisonce stats [--store S]       count keys by state on every primary (SCAN; --json)
//	redisonce version [--url U]       module and scripts' versions (and what a server holds)
//	redisonce demo [--url U]          the main job: a small fleet, exactly-once effects
//
// The server is taken from --url, else the REDIS_URL environment variable, else
// redis://127.0.0.1:6379 (demo: else a throwaway redis-server it starts itself;
// version: else no server). Every command takes --help. On failure the command
// prints one line saying what went wrong and what to do, never a password, and
// exits non-zero: 1, or 2 for a usage error; inspect exits 3 when the key is
// not found and 4 when it is not the store's.
//
// The commands reach Redis through internal/server (one client per URL:
// standalone, cluster or Sentinel; its primaries; errors explained), read
// the stores' keys through internal/inspect, and run the demo from
// internal/demo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// command is one subcommand.
type command struct {
	name    string
	args    string // positional arguments, for the usage line
	summary string
	// help is the text after the usage line and before the flags: what the
	// command does, with examples.
	help string
	// flags declares the command's flags on fs and returns what run needs.
	flags func(fs *flag.FlagSet) func(ctx context.Context, e *env, args []string) error
	// nargs checks the number of positional arguments.
	nargs func(n int) bool
}

// env is what every command writes to.
type env struct {
	stdout, stderr io.Writer
}

func (e *env) logf(format string, args ...any) { fmt.Fprintf(e.stderr, format+"\n", args...) }

// commands lists every subcommand, in help order.
func commands() []*command {
	return []*command{
		scriptsCommand(), showCommand(), loadCommand(), functionsCommand(), callCommand(),
		inspectCommand(), statsCommand(), versionCommand(), demoCommand(),
	}
}

// usageError is a bad command line: exit 2 with a pointer to --help.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// run is the whole program: it parses args (without the program name), runs
// the command and returns the exit code. Tests call it in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	args = commandFirst(args)
	if len(args) == 0 {
		topUsage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && name == "help" {
			if c := lookup(args[1]); c != nil {
				commandUsage(stdout, c, nil)
				return exitOK
			}
			fmt.Fprintf(stderr, "redisonce: no command %q; run 'redisonce --help'\n", args[1])
			return exitUsage
		}
		topUsage(stdout)
		return exitOK
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "redisonce: no command %q; run 'redisonce --help' for the list\n", name)
		return exitUsage
	}
	fs := flag.NewFlagSet("redisonce "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	runFn := c.flags(fs)
	pos, err := parseInterleaved(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		commandUsage(stdout, c, fs)
		return exitOK
	}
	if err == nil && !c.nargs(len(pos)) {
		err = usageError{fmt.Sprintf("usage: redisonce %s %s", c.name, c.args)}
	}
	if err != nil {
		fmt.Fprintf(stderr, "redisonce %s: %s; run 'redisonce %s --help'\n", c.name, oneLine(err.Error()), c.name)
		return exitUsage
	}
	if err := runFn(ctx, e, pos); err != nil {
		var ec exitCode
		if errors.As(err, &ec) {
			return int(ec)
		}
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "redisonce %s: %s; run 'redisonce %s --help'\n", c.name, oneLine(ue.msg), c.name)
			return exitUsage
		}
		fmt.Fprintf(stderr, "redisonce %s: %s\n", c.name, oneLine(err.Error()))
		return exitFail
	}
	return exitOK
}

// commandFirst moves --url U (or --url=U) given before the command name to
// after it, so "redisonce --url U stats" works like "redisonce stats --url U".
func commandFirst(args []string) []string {
	var lead []string
	for len(args) > 0 {
		switch a := args[0]; {
		case (a == "--url" || a == "-url") && len(args) > 1:
			lead, args = append(lead, args[:2]...), args[2:]
			continue
		case strings.HasPrefix(a, "--url=") || strings.HasPrefix(a, "-url="):
			lead, args = append(lead, a), args[1:]
			continue
		}
		break
	}
	if len(lead) == 0 || len(args) == 0 {
		return append(lead, args...)
	}
	return append(append([]string{args[0]}, lead...), args[1:]...)
}

// parseInterleaved lets flags and positional arguments mix ("call claim k 1
// --fcall"); everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stops at the first non-flag, or after a "--" it consumed.
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func lookup(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// oneLine folds a multi-line message into one line.
// oneLine is an error message on one line, with every character a terminal
// could act on escaped (as strconv.Quote writes it, without the quotes): an
// error may quote what it was given, a URL or a server's reply.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case strconv.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.Quote(string(r))
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

func topUsage(w io.Writer) {
	fmt.Fprint(w, `redisonce — exactly-once effects on at-least-once delivery, as atomic Redis scripts.

Usage: redisonce COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
The server comes from --url, else $REDIS_URL, else redis://127.0.0.1:6379
(redis://[user:password@]host:port[/db], rediss://... for TLS, unix:///path).
Start with: redisonce demo
Run 'redisonce COMMAND --help' for a command's flags and examples.
`)
}

func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: redisonce %s [flags] %s\n\n%s\n", c.name, c.args, strings.TrimSpace(c.help))
	if fs == nil {
		fs = flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	fmt.Fprint(w, "\nFlags:\n")
	for _, n := range names {
		f := fs.Lookup(n)
		arg, usage := flag.UnquoteUsage(f)
		if arg != "" {
			arg = " " + arg
		}
		fmt.Fprintf(w, "  --%s%s\n      %s\n", n, arg, usage)
	}
}

// urlFlag declares --url. Its default is $REDIS_URL, else fallback.
func urlFlag(fs *flag.FlagSet, fallback string) *string {
	def := os.Getenv("REDIS_URL")
	if def == "" {
		def = fallback
	}
	what := "the server: redis://[user:password@]host:port[/db], rediss://..., unix://... (default $REDIS_URL, else " + fallbackText(fallback) + ")"
	return fs.String("url", def, what)
}

func fallbackText(fallback string) string {
	if fallback == "" {
		return "a throwaway redis-server started for the run"
	}
	return fallback
}

// exactly returns a positional-argument check for n arguments.
func exactly(n int) func(int) bool { return func(m int) bool { return m == n } }

// atLeast returns a positional-argument check for n or more arguments.
func atLeast(n int) func(int) bool { return func(m int) bool { return m >= n } }
