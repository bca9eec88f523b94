package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
)

// dialTimeout bounds connecting to one node; cmdTimeout one command or batch.
const (
	dialTimeout = 5 * time.Second
	cmdTimeout  = 10 * time.Second
)

// server is a connection to the deployment at a URL: a standalone server, the
// master of a Sentinel deployment (master_set), or a cluster (rueidis finds
// out which).
type server struct {
	where  string // the URL without credentials, for messages
	client rueidis.Client
}

// node is one primary of the deployment.
type node struct {
	addr string
	c    rueidis.Client
}

// connect dials rawURL. Every error is one line saying what to do.
func connect(ctx context.Context, rawURL string) (*server, error) {
	where := redact(rawURL)
	// store.ClientOptions: rueidis.ParseURL, and for a Sentinel URL
	// (...?addr=...&master_set=NAME) the same credentials for the sentinels.
	opt, err := store.ClientOptions(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bad --url %q: %v; want redis://[user:password@]host:port[/db], rediss://... (TLS), unix:///path "+
			"or, for Sentinel, redis://[:password@]sentinel:26379?addr=sentinel-2:26379&master_set=NAME", where, errors.Unwrap(err))
	}
	opt.DisableCache = true // no client-side caching: RESP2 servers and proxies are fine too
	opt.Dialer.Timeout = dialTimeout
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
			return nil, explain(r.err, where)
		}
		return &server{where: where, client: r.c}, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("connecting to %s: %w", where, ctx.Err())
	}
}

func (s *server) Close() { s.client.Close() }

// primaries returns the deployment's primaries, sorted by address: every node
// rueidis knows (on a cluster, from CLUSTER SLOTS) whose ROLE is master.
func (s *server) primaries(ctx context.Context) ([]node, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	var out []node
	var replicaOf string
	for addr, c := range s.client.Nodes() {
		vals, err := c.Do(ctx, c.B().Role().Build()).ToArray()
		if err != nil {
			return nil, explain(err, addr)
		}
		if len(vals) == 0 {
			return nil, fmt.Errorf("%s answered ROLE with an empty reply", addr)
		}
		role, _ := vals[0].ToString()
		switch role {
		case "master":
			out = append(out, node{addr: addr, c: c})
		case "slave", "replica":
			if len(vals) > 2 {
				h, _ := vals[1].ToString()
				p, _ := vals[2].AsInt64()
				replicaOf = net.JoinHostPort(h, strconv.FormatInt(p, 10))
			}
		}
	}
	if len(out) == 0 {
		if replicaOf != "" {
			return nil, fmt.Errorf("%s is a replica (of %s): point --url at the primary", s.where, replicaOf)
		}
		return nil, fmt.Errorf("no primary found at %s", s.where)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out, nil
}

// minVersion is the oldest Redis the scripts run on: #!lua shebang flags,
// FUNCTION LOAD and SET NX GET all arrived in 7.0.
const minVersion = 7

// checkVersions refuses a primary older than Redis 7.0 (INFO server
// redis_version; Valkey reports a Redis-compatible version there too).
func checkVersions(ctx context.Context, nodes []node) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	for _, n := range nodes {
		info, err := n.c.Do(ctx, n.c.B().Info().Section("server").Build()).ToString()
		if err != nil {
			return explain(err, n.addr)
		}
		if err := versionError(n.addr, infoField(info, "redis_version")); err != nil {
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

// infoField reads "field:value" from INFO output.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

// explain turns an error from the server at where into one line that says
// what to do. Errors it does not know pass through with the address added.
func explain(err error, where string) error {
	if err == nil {
		return nil
	}
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		return fmt.Errorf("cannot resolve the host of %s (%v): check the host in --url / REDIS_URL", where, dns)
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("cannot connect to %s (%v): is redis-server running there? "+
			"Start one, or point --url / REDIS_URL at one ('redisonce demo' starts its own)", where, op.Err)
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer from %s in time (%v): check the address, a firewall, or a server busy with a slow command", where, err)
	case errors.Is(err, rueidis.ErrClosing):
		return fmt.Errorf("the connection to %s was closed: %v", where, err)
	}
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return fmt.Errorf("%s: %w", where, err)
	}
	msg := re.Error()
	code, _, _ := strings.Cut(msg, " ")
	switch {
	case code == "WRONGPASS":
		return fmt.Errorf("the server at %s refused the user or password (%s): fix the credentials in --url / REDIS_URL "+
			"(redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port with ACL users)", where, msg)
	case code == "NOAUTH":
		return fmt.Errorf("the server at %s needs a password (NOAUTH): give it in --url / REDIS_URL as redis://:PASSWORD@host:port", where)
	case code == "NOPERM":
		return fmt.Errorf("the user in --url may not do this on %s (%s): grant it the scripting and function commands "+
			"(ACL SETUSER <user> +@scripting ...)", where, msg)
	case code == "NOSCRIPT":
		return fmt.Errorf("a script is not loaded on %s (NOSCRIPT): run 'redisonce load' with the same --url "+
			"(after a restart, failover or SCRIPT FLUSH the script cache is empty; Go stores reload by themselves)", where)
	case strings.Contains(msg, "Function not found"):
		return fmt.Errorf("the function is not loaded on %s (%s): run 'redisonce functions --load' with the same --url", where, msg)
	case isOldServerError(msg):
		return fmt.Errorf("the server at %s does not understand #!lua script flags (%s): redisonce needs Redis >= 7.0 "+
			"(or Valkey >= 7.2): upgrade the server", where, msg)
	case code == "READONLY":
		return fmt.Errorf("%s is a read-only replica (%s): point --url at the primary", where, msg)
	case code == "LOADING":
		return fmt.Errorf("%s is still loading its data set: retry in a moment", where)
	case code == "OOM":
		return fmt.Errorf("%s is out of memory (%s): nothing was written; free memory or raise maxmemory", where, msg)
	case strings.Contains(msg, "DB index is out of range"):
		return fmt.Errorf("%s has no such database (%s): fix the /db number at the end of --url", where, msg)
	}
	return fmt.Errorf("%s answered: %s", where, msg)
}

// isOldServerError recognises how a server without script flags (Redis < 7.0)
// rejects a script that starts with "#!lua": a Lua syntax error on line 1, or
// a shebang it does not know.
func isOldServerError(msg string) bool {
	return strings.Contains(msg, "shebang") ||
		(strings.Contains(msg, "Error compiling script") && strings.Contains(msg, ":1:") && strings.Contains(msg, "'#'"))
}

// redact drops the password from a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if scheme, rest, ok := strings.Cut(raw, "://"); ok && strings.Contains(rest, "@") {
			return scheme + "://xxx@" + rest[strings.LastIndex(rest, "@")+1:]
		}
		return raw
	}
	if u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}
