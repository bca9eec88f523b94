package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/server"
)

func loadCommand() *command {
	return &command{
		name:    "load",
		summary: "SCRIPT LOAD every script on every primary; prints name sha1",
		help: `
Runs SCRIPT LOAD of every script on every primary (a standalone server, or
each master of a cluster), checks that each SHA1 the server returns equals the
bundle's, and prints one "name sha1" line per script. Then any client can run
EVALSHA <sha1> 1 <key> <args...>. Safe to re-run.

The script cache is emptied by a restart, a failover to a replica that never
loaded the scripts, and SCRIPT FLUSH: load again then (the Go stores fall back
to EVAL by themselves), or install the Functions library instead
('redisonce functions --load'), which is persisted and replicated.

  redisonce load --url redis://127.0.0.1:6379
  REDIS_URL=redis://:secret@10.0.0.5:6379 redisonce load`,
		nargs: exactly(0),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			u := urlFlag(fs, defaultURL)
			return func(ctx context.Context, e *env, _ []string) error {
				srv, err := server.Connect(ctx, *u)
				if err != nil {
					return err
				}
				defer srv.Close()
				nodes, err := srv.ScriptPrimaries(ctx)
				if err != nil {
					return err
				}
				if err := server.LoadScripts(ctx, nodes, redisonce.All()); err != nil {
					return err
				}
				for _, s := range redisonce.All() {
					fmt.Fprintf(e.stdout, "%s %s\n", s.Name, s.SHA1)
				}
				e.logf("loaded %d scripts on %s: %s", len(redisonce.All()), plural(len(nodes), "primary", "primaries"), server.Addrs(nodes))
				return nil
			}
		},
	}
}

// defaultURL is the server when neither --url nor REDIS_URL says otherwise.
const defaultURL = "redis://127.0.0.1:6379"

// plural renders "1 primary", "3 primaries".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
