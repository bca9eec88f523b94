// Package server is how every redisonce command reaches Redis: one client for
// the deployment behind a URL (a standalone server, a cluster, or a Sentinel
// group with ?master_set=NAME — rueidis tells them apart), its primaries, and
// errors as one line that says what to do and never shows a password.
//
// load, functions and demo run scripts on every primary (ScriptPrimaries);
// stats scans every primary (Primaries); inspect reads single keys through
// the client, which routes them to the slot's primary.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/cmd/redisonce/internal/inspect"
	"github.com/redisonce/redisonce/internal/redact"
	"github.com/redisonce/redisonce/store"
)

// DialTimeout bounds connecting to one node; CmdTimeout one command or batch.
const (
	DialTimeout = 5 * time.Second
	CmdTimeout  = 10 * time.Second
)

// Server is a connection to the deployment at a URL.
type Server struct {
	Where  string // the URL without its password, for messages
	Client rueidis.Client
}

// Node is one primary of the deployment.
type Node struct {
	Addr   string
	Client rueidis.Client
}

// Connect dials rawURL. Every error is one line saying what to do, without
// the URL's password.
func Connect(ctx context.Context, rawURL string) (*Server, error) {
	where := Redacted(rawURL)
	if _, err := url.Parse(rawURL); err != nil {
		// url.Parse quotes the whole URL, and its reason may quote part of
		// the password: show neither.
		return nil, errors.New("bad --url: it does not parse as a URL (not shown: it may hold a password); " +
			"%-escape @ : / % in the user and password; want redis://[user:password@]host:port[/db], rediss://... (TLS) or unix:///path")
	}
	// The stores' own options (no client-side caching, so RESP2 servers and
	// proxies are fine too; a Sentinel URL's credentials and TLS for the
	// sentinels as well), with the CLI's dial timeouts.
	opt, err := store.ClientOptions(rawURL)
	if err != nil {
		// err is `redisonce: open "<URL without its password>": <why>`.
		return nil, fmt.Errorf("bad --url: %s; want redis://[user:password@]host:port[/db], rediss://... (TLS) or unix:///path",
			strings.TrimPrefix(err.Error(), "redisonce: "))
	}
	opt.Dialer.Timeout = DialTimeout
	opt.Sentinel.Dialer.Timeout = DialTimeout
	opt.ClientName = "redisonce-cli"
	type result struct {
		c   rueidis.Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := rueidis.NewClient(opt)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, Explain(r.err, where)
		}
		return &Server{Where: where, Client: r.c}, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("connecting to %s: %w", where, ctx.Err())
	}
}

// Close closes the client.
func (s *Server) Close() { s.Client.Close() }

// Cluster reports whether the deployment is a cluster.
func (s *Server) Cluster() bool { return s.Client.Mode() == rueidis.ClientModeCluster }

// Primaries returns the deployment's primaries, sorted by address: every node
// rueidis knows (on a cluster, from CLUSTER SLOTS; with Sentinel, the master
// it named) whose ROLE is master.
func (s *Server) Primaries(ctx context.Context) ([]Node, error) {
	ctx, cancel := context.WithTimeout(ctx, CmdTimeout)
	defer cancel()
	var out []Node
	var replicaOf string
	for addr, c := range s.Client.Nodes() {
		vals, err := c.Do(ctx, c.B().Role().Build()).ToArray()
		if err != nil {
			return nil, Explain(err, addr)
		}
		if len(vals) == 0 {
			return nil, fmt.Errorf("%s answered ROLE with an empty reply", addr)
		}
		role, _ := vals[0].ToString()
		switch role {
		case "master":
			// The address comes from the server (CLUSTER SLOTS, Sentinel):
			// shown escaped wherever a command prints it.
			out = append(out, Node{Addr: inspect.Show(addr), Client: c})
		case "slave", "replica":
			if len(vals) > 2 {
				h, _ := vals[1].ToString()
				p, _ := vals[2].AsInt64()
				replicaOf = inspect.Show(net.JoinHostPort(h, strconv.FormatInt(p, 10)))
			}
		}
	}
	if len(out) == 0 {
		if replicaOf != "" {
			return nil, fmt.Errorf("%s is a replica (of %s): point --url at the primary", s.Where, replicaOf)
		}
		return nil, fmt.Errorf("no primary found at %s", s.Where)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// ScriptPrimaries is Primaries for a command that runs the scripts there: it
// refuses a primary older than Redis 7.0.
func (s *Server) ScriptPrimaries(ctx context.Context) ([]Node, error) {
	nodes, err := s.Primaries(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkVersions(ctx, nodes); err != nil {
		return nil, err
	}
	return nodes, nil
}

// minVersion is the oldest Redis the scripts run on: #!lua shebang flags,
// FUNCTION LOAD and SET NX GET (claim.lua, claim_many.lua) all arrived in 7.0.
const minVersion = 7

// checkVersions refuses a primary older than Redis 7.0 (INFO server
// redis_version; Valkey reports a Redis-compatible version there too).
func checkVersions(ctx context.Context, nodes []Node) error {
	ctx, cancel := context.WithTimeout(ctx, CmdTimeout)
	defer cancel()
	for _, n := range nodes {
		info, err := n.Client.Do(ctx, n.Client.B().Info().Section("server").Build()).ToString()
		if err != nil {
			return Explain(err, n.Addr)
		}
		if err := versionError(n.Addr, infoField(info, "redis_version")); err != nil {
			return err
		}
	}
	return nil
}

// versionError says what to do about a server older than 7.0, or returns nil.
// An unparsable version is let through: the scripts themselves will tell.
func versionError(addr, version string) error {
	major, _, _ := strings.Cut(version, ".")
	if n, err := strconv.Atoi(major); err == nil && n < minVersion {
		return fmt.Errorf("the server at %s runs Redis %s, and redisonce needs Redis >= 7.0 (or Valkey >= 7.2) "+
			"for #!lua script flags and Functions: upgrade the server", addr, version)
	}
	return nil
}

// Software names the node's server software and version from INFO server.
func (n Node) Software(ctx context.Context) string {
	info, err := n.Client.Do(ctx, n.Client.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "version unknown"
	}
	if v := infoField(info, "valkey_version"); v != "" {
		return "Valkey " + v
	}
	return "Redis " + infoField(info, "redis_version")
}

// infoField reads "field:value" from INFO output.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

// Addrs lists the nodes' addresses, comma-separated.
func Addrs(nodes []Node) string {
	a := make([]string, len(nodes))
	for i, n := range nodes {
		a[i] = n.Addr
	}
	return strings.Join(a, ", ")
}

// Redacted is rawURL for messages, without its password: redact.URL,
// which finds the password without parsing the URL (a password may hold
// "/", "?", "#", "@" or a bad "%" escape).
func Redacted(rawURL string) string {
	return redact.URL(rawURL)
}
