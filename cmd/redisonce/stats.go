package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/redisonce/redisonce/cmd/redisonce/internal/inspect"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/server"
)

// progressEvery is how many keys a store's scan reads between two progress
// lines on stderr (a variable for tests).
var progressEvery = 100_000

func statsCommand() *command {
	return &command{
		name:    "stats",
		summary: "count a store's keys by state on every primary (SCAN, read-only)",
		help: `
Walks the keys of each store on every primary (each master of a cluster) with
SCAN MATCH <prefix>* COUNT 1000 — never KEYS, which blocks the server — reads
them in pipelines with plain read commands, and counts them by state:

  claims    processed / in flight, and the in-flight claim whose lease ends
            first (the oldest lease)
  outbox    connections, drained connections, total unacked messages, and
            the 5 largest tails
  records   by status (pending, completed, failed, ...), pending records whose
            lease has passed (their owner died or stalled), and the oldest of
            them

Keys under the prefix that are not the store's (another type, or a value the
scripts never write) are counted as foreign, with a few of them named. Of an
outbox hash, stats reads the reserved fields and the length, never the
payloads: 'redisonce inspect tail' checks every message.
Progress goes to stderr every 100000 keys. Without --store it reports all
three stores with their default prefixes.

  redisonce stats
  redisonce stats --store claims --prefix 'orders:{eu}:'
  redisonce stats --store records --json`,
		nargs: exactly(0),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			which := fs.String("store", "", "claims, outbox or records (default: all three)")
			prefix := fs.String("prefix", "", `the store's key prefix (needs --store; default: the store's own, e.g. "bq:idemp:")`)
			asJSON := fs.Bool("json", false, "print one JSON object")
			u := urlFlag(fs, defaultURL)
			return func(ctx context.Context, e *env, _ []string) error {
				scans, err := statsScans(*which, *prefix)
				if err != nil {
					return err
				}
				return runStats(ctx, e, *u, scans, *asJSON)
			}
		},
	}
}

// storeScan is one store's walk: its prefix and counters.
type storeScan struct {
	name, prefix string
	claims       *inspect.ClaimsStats
	outbox       *inspect.OutboxStats
	records      *inspect.RecordsStats
}

// add counts one SCAN batch of a node.
func (s *storeScan) add(ctx context.Context, n server.Node, keys []string) error {
	switch {
	case s.claims != nil:
		return s.claims.Add(ctx, n.Client, keys)
	case s.outbox != nil:
		return s.outbox.Add(ctx, n.Client, keys)
	}
	return s.records.Add(ctx, n.Client, keys)
}

// statsScans builds the walks the flags ask for.
func statsScans(which, prefix string) ([]*storeScan, error) {
	names := []string{"claims", "outbox", "records"}
	if which != "" {
		if _, ok := storePrefixes[which]; !ok {
			return nil, usageError{fmt.Sprintf("--store %q: want claims, outbox or records", which)}
		}
		names = []string{which}
	} else if prefix != "" {
		return nil, usageError{"--prefix needs --store: say which store the prefix is for"}
	}
	var scans []*storeScan
	for _, name := range names {
		s := &storeScan{name: name, prefix: prefix}
		if prefix == "" {
			s.prefix = storePrefixes[name]
		}
		switch name {
		case "claims":
			s.claims = &inspect.ClaimsStats{}
		case "outbox":
			s.outbox = &inspect.OutboxStats{}
		default:
			s.records = &inspect.RecordsStats{}
		}
		scans = append(scans, s)
	}
	return scans, nil
}

func runStats(ctx context.Context, e *env, rawURL string, scans []*storeScan, asJSON bool) error {
	srv, err := server.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer srv.Close()
	nodes, err := srv.Primaries(ctx)
	if err != nil {
		return err
	}
	for _, s := range scans {
		if err := scanStore(ctx, e, s, nodes); err != nil {
			return fmt.Errorf("stats %s: %w", s.name, err)
		}
	}
	if asJSON {
		return printStatsJSON(e.stdout, scans, nodes)
	}
	fmt.Fprintf(e.stdout, "%s, %s: %s\n", srv.Where, plural(len(nodes), "primary", "primaries"), server.Addrs(nodes))
	for _, s := range scans {
		printStats(e.stdout, s)
	}
	return nil
}

// scanStore walks the store's prefix on every node, with progress on stderr.
func scanStore(ctx context.Context, e *env, s *storeScan, nodes []server.Node) error {
	scanned, next := 0, progressEvery
	for i, n := range nodes {
		err := server.Scan(ctx, n, s.prefix, func(keys []string) error {
			bctx, cancel := context.WithTimeout(ctx, server.CmdTimeout)
			defer cancel()
			if err := s.add(bctx, n, keys); err != nil {
				return server.Explain(err, n.Addr)
			}
			if scanned += len(keys); scanned >= next {
				e.logf("stats: %s: %d keys under %q read so far (on %s, primary %d of %d)", s.name, scanned, s.prefix, n.Addr, i+1, len(nodes))
				next += progressEvery
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// printStats writes one store's counts: a headline in words, then details.
func printStats(w io.Writer, s *storeScan) {
	switch {
	case s.claims != nil:
		c := s.claims
		fmt.Fprintf(w, "claims (%s*): %d processed, %d in flight, %d foreign (%s)\n", s.prefix, c.Processed, c.InFlight, c.Foreign, plural(c.Keys, "key", "keys"))
		if c.ShortestLease != nil {
			fmt.Fprintf(w, "  oldest lease: %s, %s left\n", inspect.Show(c.ShortestLease.Key), span(c.ShortestLease.Ms))
		}
		if c.NoExpiry > 0 {
			fmt.Fprintf(w, "  in flight without expiry: %d (never ends by itself)\n", c.NoExpiry)
		}
		printForeign(w, c.Counts)
	case s.outbox != nil:
		o := s.outbox
		fmt.Fprintf(w, "outbox (%s*): %s, %s, %d drained, %d foreign (%s)\n", s.prefix, plural(o.Connections, "connection", "connections"),
			plural(o.Unacked, "unacked message", "unacked messages"), o.Drained, o.Foreign, plural(o.Keys, "key", "keys"))
		for _, t := range o.Tails {
			fmt.Fprintf(w, "  largest tail: %s, %d unacked\n", inspect.Show(t.Key), t.Unacked)
		}
		printForeign(w, o.Counts)
	default:
		r := s.records
		fmt.Fprintf(w, "records (%s*): %s, %d foreign (%s)\n", s.prefix, byStatus(r.ByStatus), r.Foreign, plural(r.Keys, "key", "keys"))
		fmt.Fprintf(w, "  pending with an expired lease: %d\n", r.LeaseExpired)
		if r.OldestExpired != nil {
			fmt.Fprintf(w, "  oldest expired lease: %s, passed %s ago\n", inspect.Show(r.OldestExpired.Key), span(r.OldestExpired.Ms))
		}
		printForeign(w, r.Counts)
	}
}

// byStatus renders "1 pending, 2 completed, 0 failed": the stores' three
// statuses always, then any other in name order.
func byStatus(m map[string]int) string {
	parts := []string{}
	for _, st := range []string{inspect.Pending, inspect.Completed, inspect.Failed} {
		parts = append(parts, fmt.Sprintf("%d %s", m[st], st))
	}
	var others []string
	for st := range m {
		if st != inspect.Pending && st != inspect.Completed && st != inspect.Failed {
			others = append(others, st)
		}
	}
	sort.Strings(others)
	for _, st := range others {
		parts = append(parts, fmt.Sprintf("%d %s", m[st], inspect.Show(st)))
	}
	return strings.Join(parts, ", ")
}

// showAll is every s shown (inspect.Show), comma-separated.
func showAll(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = inspect.Show(s)
	}
	return strings.Join(out, ", ")
}

func printForeign(w io.Writer, c inspect.Counts) {
	if c.Foreign > 0 {
		fmt.Fprintf(w, "  foreign keys (not the store's type or format), e.g.: %s\n", showAll(c.ForeignSamples))
	}
	if c.Moved > 0 {
		fmt.Fprintf(w, "  not counted: %s whose slot moved to another node during the scan (resharding)\n", plural(c.Moved, "key", "keys"))
	}
}

// printStatsJSON writes {"primaries": [...], "claims": {...}, ...}.
func printStatsJSON(w io.Writer, scans []*storeScan, nodes []server.Node) error {
	out := map[string]any{}
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	out["primaries"] = addrs
	for _, s := range scans {
		var v any
		switch {
		case s.claims != nil:
			v = s.claims
		case s.outbox != nil:
			v = s.outbox
		default:
			if s.records.ByStatus == nil {
				s.records.ByStatus = map[string]int{}
			}
			v = s.records
		}
		out[s.name] = struct {
			Prefix string `json:"prefix"`
			Stats  any    `json:"stats"`
		}{s.prefix, v}
	}
	return writeJSON(w, out)
}
