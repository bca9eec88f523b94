package server

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
)

// ScanCount is the COUNT hint of every SCAN: keys examined per round trip.
const ScanCount = 1000

// Scan walks every key of n that starts with prefix with SCAN MATCH
// prefix* COUNT ScanCount (never KEYS, which blocks the server), calling fn
// with each batch. A key may come twice when the keyspace is rehashed
// during the walk (SCAN's guarantee); callers that count can live with that.
func Scan(ctx context.Context, n Node, prefix string, fn func(keys []string) error) error {
	cursor := uint64(0)
	for {
		cctx, cancel := context.WithTimeout(ctx, CmdTimeout)
		e, err := n.Client.Do(cctx, n.Client.B().Scan().Cursor(cursor).Match(GlobEscape(prefix)+"*").Count(ScanCount).Build()).AsScanEntry()
		cancel()
		if err != nil {
			return Explain(err, n.Addr)
		}
		if len(e.Elements) > 0 {
			if err := fn(e.Elements); err != nil {
				return err
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			return nil
		}
	}
}

// GlobEscape quotes the glob metacharacters of a SCAN MATCH pattern.
func GlobEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// DeleteKeys removes every key starting with prefix from every primary: SCAN
// MATCH, then one UNLINK per key (keys of a cluster node may sit in different
// slots). It returns how many it deleted.
func DeleteKeys(ctx context.Context, nodes []Node, prefix string) (int, error) {
	deleted := 0
	for _, n := range nodes {
		err := Scan(ctx, n, prefix, func(keys []string) error {
			cmds := make(rueidis.Commands, len(keys))
			for i, k := range keys {
				cmds[i] = n.Client.B().Unlink().Key(k).Build()
			}
			for _, r := range n.Client.DoMulti(ctx, cmds...) {
				k, err := r.AsInt64()
				if err != nil {
					return Explain(err, n.Addr)
				}
				deleted += int(k)
			}
			return nil
		})
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// LoadScripts runs SCRIPT LOAD of every script on every node in one pipeline
// per node and checks each returned SHA1 against the bundle's.
func LoadScripts(ctx context.Context, nodes []Node, scripts []redisonce.Script) error {
	ctx, cancel := context.WithTimeout(ctx, CmdTimeout)
	defer cancel()
	for _, n := range nodes {
		cmds := make(rueidis.Commands, len(scripts))
		for i, s := range scripts {
			cmds[i] = n.Client.B().ScriptLoad().Script(s.Source).Build()
		}
		for i, r := range n.Client.DoMulti(ctx, cmds...) {
			sha, err := r.ToString()
			if err != nil {
				return fmt.Errorf("load %s: %w", scripts[i].Name, Explain(err, n.Addr))
			}
			if sha != scripts[i].SHA1 {
				return fmt.Errorf("load %s on %s: the server returned SHA1 %s, the bundle says %s "+
					"(a proxy that rewrites scripts? or a build whose scripts/SHA1SUMS is stale: run make sums)",
					scripts[i].Name, n.Addr, sha, scripts[i].SHA1)
			}
		}
	}
	return nil
}
