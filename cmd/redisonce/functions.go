package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/inspect"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/server"
)

func functionsCommand() *command {
	return &command{
		name:    "functions",
		summary: "print the Redis Functions library of the scripts; --load installs it",
		help: `
Prints a Redis Functions library (Redis >= 7.0) generated from the very same
script files: library redisonce_<version> (12 hex of a hash over SHA1SUMS),
one function redisonce_<name> per script, read-only ones flagged no-writes so
FCALL_RO and replicas accept them. Unlike SCRIPT LOAD, a function library is
persisted (RDB/AOF) and replicated, so it survives restarts and failovers.

  redisonce functions > redisonce.lua
  redis-cli -x FUNCTION LOAD REPLACE < redisonce.lua
  redis-cli FCALL redisonce_claim 1 bq:idemp:m1 86400000 1
  redis-cli FCALL_RO redisonce_seen 1 bq:idemp:m1

With --load it installs the library on every primary itself: in one MULTI/EXEC
per primary it deletes older redisonce_* libraries (they hold the same function
names) and runs FUNCTION LOAD REPLACE. Safe to re-run.

  redisonce functions --load --url redis://127.0.0.1:6379`,
		nargs: exactly(0),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			load := fs.Bool("load", false, "install the library on every primary instead of printing it")
			u := urlFlag(fs, defaultURL)
			return func(ctx context.Context, e *env, _ []string) error {
				name, code := redisonce.FunctionsLibrary()
				if !*load {
					_, err := io.WriteString(e.stdout, code)
					return err
				}
				srv, err := server.Connect(ctx, *u)
				if err != nil {
					return err
				}
				defer srv.Close()
				nodes, err := srv.ScriptPrimaries(ctx)
				if err != nil {
					return err
				}
				for _, n := range nodes {
					deleted, err := installFunctions(ctx, n, name, code)
					if err != nil {
						return err
					}
					for _, d := range deleted {
						fmt.Fprintf(e.stdout, "%s: deleted older library %s\n", n.Addr, inspect.Show(d))
					}
					fmt.Fprintf(e.stdout, "%s: loaded library %s (%d functions)\n", n.Addr, name, len(redisonce.All()))
				}
				return nil
			}
		},
	}
}

// library is one entry of FUNCTION LIST.
type library struct {
	name, code string
	functions  int
}

// listLibraries runs FUNCTION LIST LIBRARYNAME pattern WITHCODE on n.
func listLibraries(ctx context.Context, n server.Node, pattern string) ([]library, error) {
	vals, err := n.Client.Do(ctx, n.Client.B().FunctionList().Libraryname(pattern).Withcode().Build()).ToArray()
	if err != nil {
		return nil, server.Explain(err, n.Addr)
	}
	var out []library
	for _, v := range vals {
		m, err := v.AsMap()
		if err != nil {
			return nil, fmt.Errorf("%s: unexpected FUNCTION LIST reply: %v", n.Addr, err)
		}
		var l library
		name, code, fns := m["library_name"], m["library_code"], m["functions"]
		l.name, _ = name.ToString()
		l.code, _ = code.ToString()
		if fns, err := fns.ToArray(); err == nil {
			l.functions = len(fns)
		}
		out = append(out, l)
	}
	return out, nil
}

// installFunctions loads the library on n and deletes every other redisonce_*
// library, atomically: MULTI, FUNCTION DELETE <older>..., FUNCTION LOAD
// REPLACE, EXEC. Callers of FCALL never see the functions missing. If the load
// fails inside EXEC (the deletes have then happened), the older libraries are
// put back. Re-running is safe: REPLACE overwrites the same library, and a
// library another run deleted meanwhile ("Library not found") is ignored.
// It returns the names of the libraries it deleted.
func installFunctions(ctx context.Context, n server.Node, name, code string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, server.CmdTimeout)
	defer cancel()
	libs, err := listLibraries(ctx, n, redisonce.FunctionPrefix+"*")
	if err != nil {
		return nil, err
	}
	var older []library
	for _, l := range libs {
		if l.name != name {
			older = append(older, l)
		}
	}
	results, err := execInstall(ctx, n, older, code)
	if err != nil {
		return nil, fmt.Errorf("install library %s: %w", name, explainFunction(err, n.Addr))
	}
	if len(results) != len(older)+1 {
		return nil, fmt.Errorf("install library %s on %s: EXEC returned %d replies, want %d", name, n.Addr, len(results), len(older)+1)
	}
	var deleted []string
	for i, l := range older {
		err := results[i].Error()
		switch {
		case err == nil:
			deleted = append(deleted, l.name)
		case strings.Contains(err.Error(), "Library not found"): // deleted by a concurrent run
		default:
			return nil, fmt.Errorf("install library %s: delete %s: %w", name, l.name, server.Explain(err, n.Addr))
		}
	}
	if err := results[len(older)].Error(); err != nil {
		return nil, restoreLibraries(ctx, n, name, older, err)
	}
	// Check what the server now holds.
	after, err := listLibraries(ctx, n, name)
	if err != nil {
		return nil, err
	}
	if len(after) != 1 || after[0].functions != len(redisonce.All()) {
		return nil, fmt.Errorf("install library %s on %s: FUNCTION LIST shows %d libraries by that name (want 1, with %d functions)",
			name, n.Addr, len(after), len(redisonce.All()))
	}
	return deleted, nil
}

// execInstall runs MULTI, FUNCTION DELETE <older>..., FUNCTION LOAD REPLACE,
// EXEC on one connection and returns EXEC's replies.
func execInstall(ctx context.Context, n server.Node, older []library, code string) ([]rueidis.RedisMessage, error) {
	var results []rueidis.RedisMessage
	err := n.Client.Dedicated(func(d rueidis.DedicatedClient) error {
		cmds := rueidis.Commands{d.B().Multi().Build()}
		for _, l := range older {
			cmds = append(cmds, d.B().FunctionDelete().LibraryName(l.name).Build())
		}
		cmds = append(cmds, d.B().FunctionLoad().Replace().FunctionCode(code).Build(), d.B().Exec().Build())
		res := d.DoMulti(ctx, cmds...)
		for _, r := range res[:len(res)-1] { // MULTI and QUEUED replies
			if err := r.Error(); err != nil {
				return err
			}
		}
		var err error
		results, err = res[len(res)-1].ToArray()
		return err
	})
	return results, err
}

// restoreLibraries puts the older libraries back after the load failed
// inside EXEC (the deletes have then happened), and returns the error to
// report.
func restoreLibraries(ctx context.Context, n server.Node, name string, older []library, loadErr error) error {
	var restore []error
	for _, l := range older {
		if l.code != "" {
			restore = append(restore, n.Client.Do(ctx, n.Client.B().FunctionLoad().Replace().FunctionCode(l.code).Build()).Error())
		}
	}
	if rerr := errors.Join(restore...); rerr != nil {
		return fmt.Errorf("install library %s: %w; restoring the older libraries failed too: %v", name, explainFunction(loadErr, n.Addr), rerr)
	}
	return fmt.Errorf("install library %s: %w (the older libraries were left in place)", name, explainFunction(loadErr, n.Addr))
}

// explainFunction is explain plus the errors FUNCTION LOAD adds.
func explainFunction(err error, addr string) error {
	if re, ok := rueidis.IsRedisErr(err); ok && strings.Contains(re.Error(), "already exists") {
		return fmt.Errorf("another library on %s already defines a redisonce_ function (%s): "+
			"find it with FUNCTION LIST and remove it with FUNCTION DELETE <library>", addr, re.Error())
	}
	return server.Explain(err, addr)
}
