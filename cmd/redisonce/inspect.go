package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redisonce/redisonce/cmd/redisonce/internal/inspect"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/server"
	"github.com/redisonce/redisonce/store"
)

// Exit codes of inspect besides exitOK, exitFail and exitUsage.
const (
	exitNotFound = 3 // the key does not exist
	exitForeign  = 4 // the key is not the store's: another type, or a malformed value
)

// storePrefixes are the stores' default key prefixes, by the names inspect
// and stats use.
var storePrefixes = map[string]string{
	"claims":  store.DefaultClaimsPrefix,
	"outbox":  "gateway:outbox:",
	"records": "idempotency:",
}

// inspectKinds maps inspect's first argument to its store.
var inspectKinds = map[string]string{"claim": "claims", "tail": "outbox", "record": "records"}

func inspectCommand() *command {
	return &command{
		name:    "inspect",
		args:    "claim ID | tail CONN | record KEY",
		summary: "one claim, outbox tail or record in words (read-only)",
		help: `
Reads one key of a store with plain read commands (TYPE, GET, PTTL, HGETALL,
TIME; never a write) and says what state it is in:

  claim ID      processed (and when the mark expires), or in flight: the
                lease's time left and its token
  tail CONN     the connection's epoch, generation floor and last seq, and its
                unacked messages in seq order: id, seq, payload size, preview
  record KEY    status (pending, completed, failed), created / updated /
                expires relative to now, fence, lease left, payload preview

The key is --prefix + the argument; --prefix defaults to the store's default
prefix (claims "bq:idemp:", outbox "gateway:outbox:", records "idempotency:").
An argument that is the whole key (bq:idemp:order-17) is read as such when
prefix + argument does not exist.
Times are measured on the server's clock (TIME), the one that expires keys.

Exit codes: 0 shown; 3 not found (never written, deleted or expired);
4 the key is not the store's (another type, or a value the scripts never
write: shown with the reason); 1 an error (connecting, ...); 2 usage.

  redisonce inspect claim order-17
  redisonce inspect tail conn-42 --prefix 'gw:{eu}:'
  redisonce inspect record pay-001 --json`,
		nargs: exactly(2),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			prefix := fs.String("prefix", "", `the store's key prefix (default: the store's own, e.g. "bq:idemp:" for claims)`)
			asJSON := fs.Bool("json", false, "print one JSON object (with the exit codes above)")
			u := urlFlag(fs, defaultURL)
			return func(ctx context.Context, e *env, args []string) error {
				storeName, ok := inspectKinds[args[0]]
				if !ok {
					return usageError{fmt.Sprintf("inspect what? %q; want claim, tail or record", args[0])}
				}
				p := *prefix
				if p == "" {
					p = storePrefixes[storeName]
				}
				return runInspect(ctx, e, *u, args[0], args[1], p, *asJSON)
			}
		},
	}
}

// inspectResult is what inspect found; its JSON is --json's output.
type inspectResult struct {
	Store   string          `json:"store"`
	ID      string          `json:"id"`
	Key     string          `json:"key"`
	Found   bool            `json:"found"`
	Foreign string          `json:"foreign,omitempty"` // why the key is not the store's
	NowMs   int64           `json:"now_ms"`            // the server's clock
	Claim   *inspect.Claim  `json:"claim,omitempty"`
	Tail    *inspect.Tail   `json:"tail,omitempty"`
	Record  *inspect.Record `json:"record,omitempty"`
}

func runInspect(ctx context.Context, e *env, rawURL, kind, id, prefix string, asJSON bool) error {
	srv, err := server.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(ctx, server.CmdTimeout)
	defer cancel()
	r := inspectResult{Store: inspectKinds[kind], ID: id, Key: prefix + id, Found: true}
	if r.NowMs, err = inspect.ServerTime(ctx, srv.Client); err != nil {
		return server.Explain(err, srv.Where)
	}
	err = readInspected(ctx, srv, kind, &r)
	if errors.Is(err, inspect.ErrNotFound) && strings.HasPrefix(id, prefix) && prefix != "" {
		// The operator gave the whole key ("inspect claim bq:idemp:m1").
		full := inspectResult{Store: r.Store, ID: strings.TrimPrefix(id, prefix), Key: id, Found: true, NowMs: r.NowMs}
		if ferr := readInspected(ctx, srv, kind, &full); !errors.Is(ferr, inspect.ErrNotFound) {
			r, err = full, ferr
		}
	}
	var foreign *inspect.Foreign
	code := exitOK
	switch {
	case errors.Is(err, inspect.ErrNotFound):
		r = inspectResult{Store: r.Store, ID: r.ID, Key: r.Key, NowMs: r.NowMs}
		code = exitNotFound
	case errors.As(err, &foreign):
		r = inspectResult{Store: r.Store, ID: r.ID, Key: r.Key, Found: true, Foreign: foreign.Reason, NowMs: r.NowMs}
		code = exitForeign
	case err != nil:
		return server.Explain(err, srv.Where)
	}
	if asJSON {
		err = writeJSON(e.stdout, r)
	} else {
		err = printInspect(e.stdout, kind, r)
	}
	if err == nil && code != exitOK {
		return exitCode(code)
	}
	return err
}

// readInspected reads r.Key as a key of kind's store into r.
func readInspected(ctx context.Context, srv *server.Server, kind string, r *inspectResult) error {
	var err error
	switch kind {
	case "claim":
		c, rerr := inspect.ReadClaim(ctx, srv.Client, r.Key)
		r.Claim, err = &c, rerr
	case "tail":
		t, rerr := inspect.ReadTail(ctx, srv.Client, r.Key)
		r.Tail, err = &t, rerr
	case "record":
		rec, rerr := inspect.ReadRecord(ctx, srv.Client, r.Key)
		r.Record, err = &rec, rerr
	}
	return err
}

// printInspect writes the state in words.
func printInspect(w io.Writer, kind string, r inspectResult) error {
	head := fmt.Sprintf("%s %s (key %s): ", kind, inspect.Show(r.ID), inspect.Show(r.Key))
	switch {
	case !r.Found:
		_, err := fmt.Fprintf(w, "%snot found (never written, deleted, or expired)\n", head)
		return err
	case r.Foreign != "":
		_, err := fmt.Fprintf(w, "%snot a key of the %s store: %s\n", head, r.Store, r.Foreign) // its Redis bytes are quoted (Preview)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	switch {
	case r.Claim != nil:
		printClaim(tw, head, *r.Claim)
	case r.Tail != nil:
		printTail(tw, head, *r.Tail, r.NowMs)
	case r.Record != nil:
		printRecord(tw, head, *r.Record, r.NowMs)
	}
	return tw.Flush()
}

func printClaim(w io.Writer, head string, c inspect.Claim) {
	fmt.Fprintf(w, "%s%s\n", head, c.State)
	if c.State == inspect.InFlight {
		fmt.Fprintf(w, "  lease\t%s\n", left(c.TTLms, "never expires: only a commit, a release or a forget ends it"))
		fmt.Fprintf(w, "  token\t%s\n", inspect.Show(c.Token))
		return
	}
	fmt.Fprintf(w, "  expires\t%s\n", left(c.TTLms, "never"))
	if c.Value != "" {
		fmt.Fprintf(w, "  value\t%s (not \"1\": written by something else; the scripts count it as processed)\n", inspect.Preview(c.Value, 40))
	}
}

func printTail(w *tabwriter.Writer, head string, t inspect.Tail, now int64) {
	fmt.Fprintf(w, "%s%s\n", head, plural(len(t.Messages), "unacked message", "unacked messages"))
	fmt.Fprintf(w, "  epoch\t%d µs: created %s\n", t.EpochUs, at(int64(t.EpochUs/1000), now))
	fmt.Fprintf(w, "  generation\t%s (acks below it are refused as stale)\n", inspect.Show(t.Generation))
	fmt.Fprintf(w, "  seq\t%d (the last appended)\n", t.Seq)
	fmt.Fprintf(w, "  expires\t%s\n", left(t.TTLms, "never"))
	if len(t.Messages) == 0 {
		return
	}
	w.Flush() // the messages are a table of their own
	fmt.Fprintf(w, "  messages in seq order:\n")
	fmt.Fprintf(w, "    SEQ\tID\tSIZE\tPREVIEW\n")
	for _, m := range t.Messages {
		fmt.Fprintf(w, "    %d\t%s\t%d\t%s\n", m.Seq, inspect.Show(m.ID), m.Size, m.Preview)
	}
}

func printRecord(w io.Writer, head string, r inspect.Record, now int64) {
	fmt.Fprintf(w, "%s%s\n", head, inspect.Show(r.Status))
	fmt.Fprintf(w, "  created\t%s\n", at(r.CreatedMs, now))
	fmt.Fprintf(w, "  updated\t%s\n", at(r.UpdatedMs, now))
	fmt.Fprintf(w, "  expires\t%s\n", at(r.ExpiresMs, now))
	fmt.Fprintf(w, "  lease\t%s\n", lease(r, now))
	fmt.Fprintf(w, "  fence\t%s\n", orNone(r.Fence))
	fmt.Fprintf(w, "  fingerprint\t%s\n", orNone(r.Fingerprint))
	fmt.Fprintf(w, "  token\t%s\n", orNone(r.Token))
	fmt.Fprintf(w, "  payload\t%s: %s\n", plural(r.Size, "byte", "bytes"), r.Preview)
}

// lease says where a record's lease stands.
func lease(r inspect.Record, now int64) string {
	switch {
	case r.LeaseMs == 0 && r.Status == inspect.Pending:
		return "none (a pending record without a lease is never taken over)"
	case r.LeaseMs == 0:
		return "none"
	case r.LeaseMs > now:
		return fmt.Sprintf("%s left", span(r.LeaseMs-now))
	}
	return fmt.Sprintf("passed %s ago: the owner died or stalled, and the next acquire takes the record over", span(now-r.LeaseMs))
}

// left renders a PTTL: "in 1m30s", or never for -1.
func left(pttl int64, never string) string {
	if pttl < 0 {
		return never
	}
	return "in " + span(pttl)
}

// at renders a time in ms since the epoch relative to now: "2026-11-30
// 19:00:00.123 UTC (12.3s ago)"; 0 is "never".
func at(ms, now int64) string {
	if ms == 0 {
		return "never"
	}
	t := time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000 UTC")
	if ms <= now {
		return fmt.Sprintf("%s (%s ago)", t, span(now-ms))
	}
	return fmt.Sprintf("%s (in %s)", t, span(ms-now))
}

// span renders ms as a duration, rounded to what a person reads.
func span(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return inspect.Show(s)
}

// writeJSON writes v as one line of JSON, every character a terminal could
// act on escaped (inspect.SafeJSON).
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(inspect.SafeJSON(b), '\n'))
	return err
}

// exitCode ends the command with that code and no message: the command has
// said everything on stdout.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit %d", int(c)) }
