// Package demo is the redisonce command's main job: a small fleet of
// simulated processes runs against real Redis through the Go stores and
// shows that every effect happens exactly once although messages are
// duplicated, redelivered, and a process crashes or stalls mid-effect.
//
// Each store has its section in its own file (claims.go, outbox.go,
// records.go); this file runs them in order and prints the final table.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/server"
	"github.com/redisonce/redisonce/internal/redisproc"
)

// Section is one store's part of the demo. Run drives a small fleet against
// the store and returns its tally; it must check its own invariants and
// return an error when one breaks.
type Section struct {
	Name string // the store: "claims"
	Run  func(ctx context.Context, d *Env) (Tally, error)
}

// Sections lists the sections in the order they run. A new store adds its
// section here.
func Sections() []Section {
	return []Section{
		{Name: "claims", Run: runClaims},
		{Name: "outbox", Run: runOutbox},
		{Name: "records", Run: runRecords},
	}
}

// sectionTimeout bounds one section; the whole demo takes a few seconds.
const sectionTimeout = 30 * time.Second

// NA marks a tally column that does not apply to a store.
const NA = -1

// Tally is a section's line in the final table.
type Tally struct {
	Delivered  int // messages or requests handed to the fleet, redeliveries included
	Duplicates int // deliveries recognised as done and acked without running the effect
	Unique     int // distinct messages or requests
	Effects    int // effects applied; must equal Unique
	Replays    int // deliveries answered from stored state instead of the effect (NA: none)
	Stale      int // operations of an owner that was superseded, rejected (NA: none)
	Notes      []string
}

// Options configures Run.
type Options struct {
	// URL is the server; "" starts a throwaway redis-server for the run.
	URL string
	// Out receives the demo's report; Log one-line warnings (cleanup failures).
	Out io.Writer
	Log func(format string, args ...any)
	// Sections to run; nil means Sections().
	Sections []Section
}

// Env is what a section gets: where the server is and how to talk to it.
type Env struct {
	url    string
	prefix string // every key the demo writes starts with it
	out    io.Writer
	mu     sync.Mutex
}

// say prints one progress line of a section.
func (d *Env) say(section, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "  %-8s %s\n", section, fmt.Sprintf(format, args...))
}

// Run runs the demo: the sections in order, then the table. It returns an
// error when a section fails or some store's effects differ from its unique
// messages.
func Run(ctx context.Context, o Options) error {
	start := time.Now()
	if o.Sections == nil {
		o.Sections = Sections()
	}
	fmt.Fprintln(o.Out, "redisonce demo: exactly-once effects on top of at-least-once delivery")
	url, stop, err := serverFor(o)
	if err != nil {
		return err
	}
	defer stop()
	srv, nodes, err := prepare(ctx, o.Out, url)
	if err != nil {
		return err
	}
	defer srv.Close()

	d := &Env{url: url, prefix: "redisonce-demo:" + randomHex(4) + ":", out: o.Out}
	cleanup := sync.OnceFunc(func() { removeKeys(ctx, o, nodes, d.prefix) })
	defer cleanup()
	tallies, err := runSections(ctx, d, o.Sections)
	if err != nil {
		return err
	}
	cleanup()
	return report(o.Out, o.Sections, tallies, start)
}

// serverFor returns the URL to run against: o.URL, or a throwaway
// redis-server's, with the function that stops it.
func serverFor(o Options) (url string, stop func(), err error) {
	if o.URL != "" {
		return o.URL, func() {}, nil
	}
	bin, err := redisproc.LookPath()
	if err != nil {
		return "", nil, fmt.Errorf("no --url or REDIS_URL given and no redis-server to start: %v; "+
			"or run against a server of yours with --url redis://host:port", err)
	}
	srv, err := redisproc.Start(redisproc.Options{Binary: bin})
	if err != nil {
		return "", nil, fmt.Errorf("starting a throwaway redis-server (%s): %s", bin, strings.Join(strings.Fields(err.Error()), " "))
	}
	fmt.Fprintf(o.Out, "server: started a throwaway redis-server from %s on %s (no --url or REDIS_URL given); it is stopped at the end\n", bin, srv.Addr)
	return srv.URL(), func() { srv.Stop() }, nil
}

// prepare connects, names the server, and loads the scripts on every
// primary, as a non-Go caller does first (the Go stores would also fall back
// to EVAL).
func prepare(ctx context.Context, out io.Writer, url string) (*server.Server, []server.Node, error) {
	srv, err := server.Connect(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	nodes, err := srv.ScriptPrimaries(ctx)
	if err == nil {
		err = server.LoadScripts(ctx, nodes, redisonce.All())
	}
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	mode := "standalone"
	if srv.Cluster() {
		mode = fmt.Sprintf("cluster, %d primaries", len(nodes))
	}
	fmt.Fprintf(out, "server: %s (%s, %s)\n", srv.Where, nodes[0].Software(ctx), mode)
	fmt.Fprintf(out, "scripts: SCRIPT LOAD of %d scripts on %s, every SHA1 as listed in scripts/SHA1SUMS\n\n",
		len(redisonce.All()), server.Addrs(nodes))
	return srv, nodes, nil
}

// runSections runs each section under its own timeout.
func runSections(ctx context.Context, d *Env, sections []Section) ([]Tally, error) {
	tallies := make([]Tally, len(sections))
	for i, s := range sections {
		fmt.Fprintf(d.out, "== %s ==\n", s.Name)
		sctx, cancel := context.WithTimeout(ctx, sectionTimeout)
		t, err := s.Run(sctx, d)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s section: %w", s.Name, err)
		}
		tallies[i] = t
		fmt.Fprintln(d.out)
	}
	return tallies, nil
}

// removeKeys deletes every key the demo wrote, even after ctx was cancelled.
func removeKeys(ctx context.Context, o Options, nodes []server.Node, prefix string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), server.CmdTimeout)
	defer cancel()
	if n, err := server.DeleteKeys(cctx, nodes, prefix); err != nil {
		if o.Log != nil {
			o.Log("demo: cleaning up keys %s*: %v", prefix, err)
		}
	} else if n > 0 {
		fmt.Fprintf(o.Out, "cleanup: deleted the %d keys the demo wrote (%s*)\n\n", n, prefix)
	}
}

// report prints the table and the notes, and fails when a check failed.
func report(out io.Writer, sections []Section, tallies []Tally, start time.Time) error {
	fmt.Fprintln(out, "== result ==")
	bad := printTallies(out, sections, tallies)
	for i, t := range tallies {
		for _, n := range t.Notes {
			fmt.Fprintf(out, "  %-8s %s\n", sections[i].Name, n)
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
func printTallies(w io.Writer, sections []Section, tallies []Tally) string {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tdelivered\tduplicates suppressed\tunique\teffects applied\treplays\tstale rejected\tcheck\t")
	var bad []string
	for i, t := range tallies {
		check := "ok"
		if t.Effects != t.Unique {
			check = "FAIL"
			bad = append(bad, fmt.Sprintf("%s: %d effects applied for %d unique messages", sections[i].Name, t.Effects, t.Unique))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", sections[i].Name,
			cell(t.Delivered), cell(t.Duplicates), cell(t.Unique), cell(t.Effects), cell(t.Replays), cell(t.Stale), check)
	}
	tw.Flush()
	if bad == nil {
		return ""
	}
	return "exactly-once broken: " + strings.Join(bad, "; ")
}

func cell(n int) string {
	if n == NA {
		return "-"
	}
	return strconv.Itoa(n)
}

// plural renders "1 delivery", "3 deliveries".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// randomHex returns 2n lower-case hex characters from crypto/rand.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (Go >= 1.24)
	return hex.EncodeToString(b)
}
