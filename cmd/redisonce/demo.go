package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/redisproc"
)

// demoSection is one store's part of the demo, each in its own file
// (demo_claims.go...). run drives a small fleet against the store and returns
// its tally; it must check its own invariants and return an error when one
// breaks.
type demoSection struct {
	name string // the store: "claims"
	run  func(ctx context.Context, d *demo) (tally, error)
}

// demoSections lists the sections in the order they run. A new store adds its
// section here.
var demoSections = []demoSection{
	{name: "claims", run: demoClaims},
	{name: "outbox", run: demoOutbox},
	{name: "records", run: demoRecords},
}

// sectionTimeout bounds one section; the whole demo takes a few seconds.
const sectionTimeout = 30 * time.Second

// na marks a tally column that does not apply to a store.
const na = -1

// tally is a section's line in the final table.
type tally struct {
	delivered  int // messages or requests handed to the fleet, redeliveries included
	duplicates int // deliveries recognised as done and acked without running the effect
	unique     int // distinct messages or requests
	effects    int // effects applied; must equal unique
	replays    int // deliveries answered from stored state instead of the effect (na: none)
	stale      int // operations of an owner that was superseded, rejected (na: none)
	notes      []string
}

// demo is what a section gets: where the server is and how to talk to it.
type demo struct {
	url    string
	prefix string // every key the demo writes starts with it
	out    io.Writer
	mu     sync.Mutex
}

// process is one simulated process of the fleet: its own client, whose
// connections kill cuts at once, as when the process dies.
type process struct {
	client rueidis.Client
	mu     sync.Mutex
	dead   bool
	conns  []net.Conn
}

// newProcess opens a client on the demo's server for one simulated process.
func (d *demo) newProcess() (*process, error) {
	opt, err := rueidis.ParseURL(d.url)
	if err != nil {
		return nil, err
	}
	p := &process{}
	dial := opt.DialCtxFn // set for unix:// URLs
	opt.DialCtxFn = func(ctx context.Context, addr string, nd *net.Dialer, tc *tls.Config) (net.Conn, error) {
		p.mu.Lock()
		dead := p.dead
		p.mu.Unlock()
		if dead {
			return nil, errProcessDead
		}
		var c net.Conn
		var err error
		switch {
		case dial != nil:
			c, err = dial(ctx, addr, nd, tc)
		case tc != nil:
			c, err = (&tls.Dialer{NetDialer: nd, Config: tc}).DialContext(ctx, "tcp", addr)
		default:
			c, err = nd.DialContext(ctx, "tcp", addr)
		}
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.dead {
			c.Close()
			return nil, errProcessDead
		}
		p.conns = append(p.conns, c)
		return c, nil
	}
	opt.DisableRetry = true
	if p.client, err = rueidis.NewClient(opt); err != nil {
		return nil, explain(err, redact(d.url))
	}
	return p, nil
}

var errProcessDead = errors.New("the process is dead")

// kill cuts every connection of the process and refuses new ones: nothing it
// still tries to send reaches Redis.
func (p *process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dead = true
	for _, c := range p.conns {
		c.Close()
	}
}

// say prints one progress line of a section.
func (d *demo) say(section, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "  %-8s %s\n", section, fmt.Sprintf(format, args...))
}

func demoCommand() *command {
	return &command{
		name:    "demo",
		summary: "the main job: a small fleet shows exactly-once effects (start here)",
		help: `
Runs a small fleet against real Redis and shows that every effect happens
exactly once although messages are duplicated, redelivered, and a consumer
crashes mid-message:

  claims   several consumers drain a stream with duplicates and redeliveries
           through Claims.Do; one consumer crashes holding a message: its lease
           expires and another consumer processes the message.
  outbox   gateways push messages to clients over connections whose unacked
           tails live in Outbox; one gateway stops answering, the next owner
           replays its connections' tails (clients drop what they had by
           (epoch, seq)), and the old owner's late acks are rejected as stale.
  records  clients send payments with an Idempotency-Key through Records.Do and
           retry (lost responses, slow first tries, provider errors); a
           server's provider call hangs past its lease, Do keeps the lease
           alive so retries wait (409), and the failed call's record is dropped
           so a retry charges.

It ends with a table per store: messages delivered, duplicates suppressed,
unique messages, effects applied (must equal unique messages, or the demo
exits 1), replays, stale operations rejected. It takes a few seconds.

With no --url and no REDIS_URL it starts a throwaway redis-server (found on
PATH, /usr/sbin or /usr/local/bin) and stops it at the end. Against your own
server it writes only keys under redisonce-demo:<random>: and deletes them at
the end.

  redisonce demo
  redisonce demo --url redis://127.0.0.1:6379
  make demo`,
		nargs: exactly(0),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			u := urlFlag(fs, "")
			return func(ctx context.Context, e *env, _ []string) error {
				return runDemo(ctx, e, *u)
			}
		},
	}
}

func runDemo(ctx context.Context, e *env, url string) error {
	out := e.stdout
	start := time.Now()
	fmt.Fprintln(out, "redisonce demo: exactly-once effects on top of at-least-once delivery")
	if url == "" {
		bin, err := redisproc.LookPath()
		if err != nil {
			return fmt.Errorf("no --url or REDIS_URL given and no redis-server to start: %v; "+
				"or run against a server of yours with --url redis://host:port", err)
		}
		srv, err := redisproc.Start(redisproc.Options{Binary: bin})
		if err != nil {
			return fmt.Errorf("starting a throwaway redis-server (%s): %s", bin, oneLine(err.Error()))
		}
		defer srv.Stop()
		url = srv.URL()
		fmt.Fprintf(out, "server: started a throwaway redis-server from %s on %s (no --url or REDIS_URL given); it is stopped at the end\n", bin, srv.Addr)
	}

	srv, err := connect(ctx, url)
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
	version := serverVersion(ctx, nodes[0])
	mode := "standalone"
	if srv.client.Mode() == rueidis.ClientModeCluster {
		mode = fmt.Sprintf("cluster, %d primaries", len(nodes))
	}
	fmt.Fprintf(out, "server: %s (%s, %s)\n", srv.where, version, mode)

	// What a non-Go caller does first; the Go stores would also fall back to EVAL.
	if err := loadScripts(ctx, nodes, redisonce.All()); err != nil {
		return err
	}
	fmt.Fprintf(out, "scripts: SCRIPT LOAD of %d scripts on %s, every SHA1 as listed in scripts/SHA1SUMS\n\n", len(redisonce.All()), addrs(nodes))

	d := &demo{url: url, prefix: "redisonce-demo:" + randomHex(4) + ":", out: out}
	cleaned := false
	cleanup := func() {
		if cleaned {
			return
		}
		cleaned = true
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmdTimeout)
		defer cancel()
		if n, err := deleteKeys(cctx, nodes, d.prefix); err != nil {
			e.logf("demo: cleaning up keys %s*: %v", d.prefix, explain(err, srv.where))
		} else if n > 0 {
			fmt.Fprintf(out, "cleanup: deleted the %d keys the demo wrote (%s*)\n\n", n, d.prefix)
		}
	}
	defer cleanup()

	tallies := make([]tally, len(demoSections))
	for i, s := range demoSections {
		fmt.Fprintf(out, "== %s ==\n", s.name)
		sctx, cancel := context.WithTimeout(ctx, sectionTimeout)
		t, err := s.run(sctx, d)
		cancel()
		if err != nil {
			return fmt.Errorf("%s section: %w", s.name, err)
		}
		tallies[i] = t
		fmt.Fprintln(out)
	}

	cleanup()
	fmt.Fprintln(out, "== result ==")
	bad := printTallies(out, demoSections, tallies)
	for i, t := range tallies {
		for _, n := range t.notes {
			fmt.Fprintf(out, "  %-8s %s\n", demoSections[i].name, n)
		}
	}
	if bad != "" {
		return errors.New(bad)
	}
	fmt.Fprintf(out, "\nok: every effect applied exactly once (%.1fs)\n", time.Since(start).Seconds())
	return nil
}

// printTallies writes the final table and returns a one-line reason when some
// section's effects differ from its unique messages.
func printTallies(w io.Writer, sections []demoSection, tallies []tally) string {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tdelivered\tduplicates suppressed\tunique\teffects applied\treplays\tstale rejected\tcheck\t")
	var bad []string
	for i, t := range tallies {
		check := "ok"
		if t.effects != t.unique {
			check = "FAIL"
			bad = append(bad, fmt.Sprintf("%s: %d effects applied for %d unique messages", sections[i].name, t.effects, t.unique))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", sections[i].name,
			cell(t.delivered), cell(t.duplicates), cell(t.unique), cell(t.effects), cell(t.replays), cell(t.stale), check)
	}
	tw.Flush()
	if bad == nil {
		return ""
	}
	return "exactly-once broken: " + strings.Join(bad, "; ")
}

func cell(n int) string {
	if n == na {
		return "-"
	}
	return strconv.Itoa(n)
}

// serverVersion names the server software and version from INFO server.
func serverVersion(ctx context.Context, n node) string {
	info, err := n.c.Do(ctx, n.c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "version unknown"
	}
	if v := infoField(info, "valkey_version"); v != "" {
		return "Valkey " + v
	}
	return "Redis " + infoField(info, "redis_version")
}

// deleteKeys removes every key starting with prefix from every primary: SCAN
// MATCH, then one UNLINK per key (keys of a cluster node may sit in different
// slots). It returns how many it deleted.
func deleteKeys(ctx context.Context, nodes []node, prefix string) (int, error) {
	deleted := 0
	for _, n := range nodes {
		cursor := uint64(0)
		for {
			e, err := n.c.Do(ctx, n.c.B().Scan().Cursor(cursor).Match(globEscape(prefix)+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				return deleted, err
			}
			if len(e.Elements) > 0 {
				cmds := make(rueidis.Commands, len(e.Elements))
				for i, k := range e.Elements {
					cmds[i] = n.c.B().Unlink().Key(k).Build()
				}
				for _, r := range n.c.DoMulti(ctx, cmds...) {
					k, err := r.AsInt64()
					if err != nil {
						return deleted, err
					}
					deleted += int(k)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return deleted, nil
}

// globEscape quotes the glob metacharacters of a SCAN MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// randomHex returns 2n lower-case hex characters from crypto/rand.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (Go >= 1.24)
	return hex.EncodeToString(b)
}
