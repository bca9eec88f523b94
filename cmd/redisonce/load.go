package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
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
				srv, err := connect(ctx, *u)
				if err != nil {
					return err
				}
				defer srv.Close()
				nodes, err := srv.primaries(ctx)
				if err != nil {
					return err
				}
				if err := checkVersions(ctx, nodes); err != nil {
					return err
				}
				if err := loadScripts(ctx, nodes, redisonce.All()); err != nil {
					return err
				}
				for _, s := range redisonce.All() {
					fmt.Fprintf(e.stdout, "%s %s\n", s.Name, s.SHA1)
				}
				e.logf("loaded %d scripts on %s: %s", len(redisonce.All()), plural(len(nodes), "primary", "primaries"), addrs(nodes))
				return nil
			}
		},
	}
}

// defaultURL is the server when neither --url nor REDIS_URL says otherwise.
const defaultURL = "redis://127.0.0.1:6379"

// loadScripts runs SCRIPT LOAD of every script on every node in one pipeline
// per node and checks each returned SHA1 against the bundle's.
func loadScripts(ctx context.Context, nodes []node, scripts []redisonce.Script) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	for _, n := range nodes {
		cmds := make(rueidis.Commands, len(scripts))
		for i, s := range scripts {
			cmds[i] = n.c.B().ScriptLoad().Script(s.Source).Build()
		}
		for i, r := range n.c.DoMulti(ctx, cmds...) {
			sha, err := r.ToString()
			if err != nil {
				return fmt.Errorf("load %s: %w", scripts[i].Name, explain(err, n.addr))
			}
			if sha != scripts[i].SHA1 {
				return fmt.Errorf("load %s on %s: the server returned SHA1 %s, the bundle says %s "+
					"(a proxy that rewrites scripts? or a build whose scripts/SHA1SUMS is stale: run make sums)",
					scripts[i].Name, n.addr, sha, scripts[i].SHA1)
			}
		}
	}
	return nil
}

func addrs(nodes []node) string {
	a := make([]string, len(nodes))
	for i, n := range nodes {
		a[i] = n.addr
	}
	return strings.Join(a, ", ")
}

// plural renders "1 primary", "3 primaries".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
