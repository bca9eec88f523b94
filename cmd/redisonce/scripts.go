package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/redisonce/redisonce"
)

func scriptsCommand() *command {
	return &command{
		name:    "scripts",
		summary: "list the scripts: name, SHA1, keys, read-only or write, summary",
		help: `
Lists every embedded script: its name, its SHA1 (the name EVALSHA uses, and
the script's version), how many keys it takes, whether it only reads (run it
with EVALSHA_RO / FCALL_RO) or writes, and the one-line summary from its header.

  redisonce scripts
  redisonce show claim      the full source, with the KEYS/ARGV header`,
		nargs: exactly(0),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(_ context.Context, e *env, _ []string) error {
				return printScripts(e.stdout, redisonce.All())
			}
		},
	}
}

// printScripts writes the table of scripts.
func printScripts(w io.Writer, scripts []redisonce.Script) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSHA1\tKEYS\tMODE\tSUMMARY")
	for _, s := range scripts {
		mode := "write"
		switch {
		case s.ReadOnly:
			mode = "read-only"
		case s.AllowOOM:
			mode = "write,allow-oom"
		}
		keys := strconv.Itoa(s.NumKeys)
		if s.Batch {
			keys += ".." + strconv.Itoa(s.MaxKeys) // as the header's KEYS (n=1..500)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.SHA1, keys, mode, s.Summary())
	}
	return tw.Flush()
}

func showCommand() *command {
	return &command{
		name:    "show",
		args:    "NAME",
		summary: "print one script's source, byte for byte",
		help: `
Prints the script exactly as embedded (shebang and header included), so that
its SHA1 is the one 'redisonce scripts' lists:

  redisonce show claim | sha1sum
  redisonce show claim | redis-cli -x SCRIPT LOAD

(Do not load it with "$(redisonce show claim)": the shell strips the trailing
newline, which changes the SHA1.)`,
		nargs: exactly(1),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			return func(_ context.Context, e *env, args []string) error {
				s, err := scriptNamed(args[0])
				if err != nil {
					return err
				}
				_, err = io.WriteString(e.stdout, s.Source)
				return err
			}
		},
	}
}

// scriptNamed finds a script or says how to list them.
func scriptNamed(name string) (redisonce.Script, error) {
	s, ok := redisonce.Get(name)
	if !ok {
		return s, usageError{fmt.Sprintf("no script named %q ('redisonce scripts' lists them)", name)}
	}
	return s, nil
}
