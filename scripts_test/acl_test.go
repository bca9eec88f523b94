package scripts_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/redisproc"
)

// aclSetUser is the least-privilege user docs/security.md documents: it may run
// exactly the stores' scripts on the stores' default prefixes and nothing
// else. Scripts run with their caller's permissions (Redis >= 7), so the
// commands the scripts call are granted too — on these key patterns only.
//
//   - connect (rueidis): HELLO needs no grant; CLIENT TRACKING ON OPTIN (its
//     client-side cache, on unless ClientOption.DisableCache), PING (its
//     keep-alive), CLUSTER SLOTS (topology; rueidis asks on standalone servers
//     too), CLUSTER SHARDS (what rueidis asks Redis >= 8 instead), ASKING
//     (cluster slot migrations). CLIENT SETINFO is left out: Redis 7.0 rejects
//     it in an ACL, and rueidis ignores its refusal on 7.2+.
//   - the scripts: EVALSHA, EVALSHA_RO, EVAL and EVAL_RO (the fallback when a
//     restart, failover or SCRIPT FLUSH emptied the script cache), SCRIPT LOAD
//     (batches reload their scripts).
//   - Records.Do's waiters (AcquireOptions.Wait): SSUBSCRIBE and SUNSUBSCRIBE
//     on the record's own key as a shard channel (&idempotency:*), which the
//     final scripts SPUBLISH to.
//   - Coalescer.Sweep: SCAN (MATCH its prefix) on every node.
//   - inside the scripts: every command a script calls (checked against the
//     scripts by TestACLLineMatchesScripts).
const aclSetUser = "ACL SETUSER app on >app-secret resetchannels &idempotency:* " +
	"~bq:idemp:* ~gateway:outbox:* ~idempotency:* ~redisonce:coalesce:* -@all " +
	"+client|tracking +ping +cluster|slots +cluster|shards +asking " +
	"+evalsha +evalsha_ro +eval +eval_ro +script|load +ssubscribe +sunsubscribe +scan " +
	"+del +exists +get +hdel +hget +hgetall +hlen +hmget +hset +info " +
	"+persist +pexpire +pexpireat +pttl +set +setrange +spublish +time"

// aclUserURL is the URL the tests connect with as the app user.
func aclUserURL(addr string) string { return "redis://app:app-secret@" + addr }

// aclConnectCommands are the grants for rueidis and the script commands, as
// opposed to the commands the scripts call.
var aclConnectCommands = []string{
	"client|tracking", "ping", "cluster|slots", "cluster|shards", "asking",
	"evalsha", "evalsha_ro", "eval", "eval_ro", "script|load", "ssubscribe", "sunsubscribe", "scan",
}

// createACLUser runs docs/security.md's ACL SETUSER line, as a user would, on n.
func createACLUser(t *testing.T, n *redisproc.Server) {
	t.Helper()
	if _, err := n.Do(strings.Fields(aclSetUser)...); err != nil {
		t.Fatalf("%s: %v", aclSetUser, err)
	}
}

// TestACLLineMatchesScripts: the ACL line grants exactly the connect and
// script commands plus every command some script calls, and every store's
// default prefix; docs/security.md, which shows the line, shows this one.
func TestACLLineMatchesScripts(t *testing.T) {
	called := map[string]bool{}
	call := regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)
	for _, s := range redisonce.All() {
		for _, m := range call.FindAllStringSubmatch(s.Source, -1) {
			called[strings.ToLower(m[1])] = true
		}
	}
	want := slices.Clone(aclConnectCommands)
	for c := range called {
		want = append(want, c)
	}
	var got []string
	for _, f := range strings.Fields(aclSetUser) {
		if c, ok := strings.CutPrefix(f, "+"); ok {
			got = append(got, c)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Errorf("ACL line grants %v\nthe stores need        %v", got, want)
	}
	for _, k := range reliabilityStores {
		if !strings.Contains(aclSetUser, " ~"+k.prefix+"* ") {
			t.Errorf("ACL line does not grant the %s prefix ~%s*", k.name, k.prefix)
		}
	}
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := 0
	for line := range strings.Lines(string(doc)) {
		if !strings.HasPrefix(strings.TrimSpace(line), "ACL SETUSER app ") {
			continue
		}
		shown++
		if strings.Join(strings.Fields(line), " ") != aclSetUser {
			t.Errorf("docs/security.md's ACL line differs from the tested one:\ndoc:    %s\ntested: %s", strings.TrimSpace(line), aclSetUser)
		}
	}
	if shown == 0 {
		t.Error("docs/security.md shows no ACL SETUSER app line")
	}
}

// TestACLLeastPrivilege: every store's conformance suite passes as the app
// user (on the default prefixes), the server logs not one denied command for
// it, and the user is denied everything outside: other prefixes, through the
// stores and raw; other commands; scripts that reach past their key.
func TestACLLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t, redisproc.Options{})
	createACLUser(t, srv)
	c := newClient(t, aclUserURL(srv.Addr))
	if _, err := srv.Do("ACL", "LOG", "RESET"); err != nil {
		t.Fatal(err)
	}
	for _, k := range reliabilityStores {
		t.Run(k.name, func(t *testing.T) { k.conformance(t, c, k.prefix) })
	}
	// Idle past rueidis's keep-alive gap (1 s by default): it PINGs.
	time.Sleep(2500 * time.Millisecond)
	if denied := aclDenials(t, srv); len(denied) > 0 {
		t.Errorf("the suites ran commands the ACL line does not grant: %v", denied)
	}

	t.Run("denied", func(t *testing.T) {
		for _, k := range reliabilityStores {
			for _, p := range k.probes(c, "other:") {
				if _, err := p.run(ctx, "x"); !isNoPerm(err) {
					t.Errorf("%s %s outside the granted prefixes: %v, want NOPERM", k.name, p.name, err)
				}
			}
		}
		for _, cmd := range [][]string{
			{"FLUSHALL"}, {"KEYS", "*"}, {"CONFIG", "GET", "maxmemory"}, {"SCRIPT", "FLUSH"},
			{"GET", "other:x"}, {"SET", "other:x", "1"}, {"HGETALL", "other:x"}, {"HSET", "gateway:x", "f", "v"},
			{"EVAL", "return redis.call('FLUSHALL')", "0"},
			{"EVAL", "return redis.call('GET', KEYS[1])", "1", "other:x"},
			{"EVAL", "return redis.call('GET', 'other:x')", "1", "bq:idemp:x"},
			{"EVAL", "return redis.call('INCR', KEYS[1])", "1", "bq:idemp:x"},
		} {
			if err := c.Do(ctx, c.B().Arbitrary(cmd...).Build()).Error(); !isNoPerm(err) {
				t.Errorf("%s as the app user: %v, want NOPERM", strings.Join(cmd, " "), err)
			}
		}
		if _, err := srv.Do("ACL", "LOG", "RESET"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("wrong password", func(t *testing.T) {
		opt, err := rueidis.ParseURL("redis://app:wrong@" + srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := rueidis.NewClient(opt); err == nil {
			c.Close()
			t.Error("a wrong password connected")
		}
	})
}

// isNoPerm reports whether err is Redis's refusal for lack of permission:
// NOPERM for a command, or the script error for a command a script called.
func isNoPerm(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "NOPERM") ||
		strings.Contains(err.Error(), "The user executing the script can't"))
}

// aclDenials returns the server's ACL LOG entries for the app user, as
// "reason object" pairs.
func aclDenials(t *testing.T, n *redisproc.Server) []string {
	t.Helper()
	out, err := n.Do("ACL", "LOG")
	if err != nil {
		t.Fatal(err)
	}
	// Do flattens the entries into key, value lines.
	f := strings.Split(out, "\n")
	var denied []string
	var reason, object, user string
	flush := func() {
		if user == "app" && object != "client|setinfo" {
			denied = append(denied, reason+" "+object)
		}
		reason, object, user = "", "", ""
	}
	for i := 0; i+1 < len(f); i += 2 {
		switch f[i] {
		case "count":
			flush()
		case "reason":
			reason = f[i+1]
		case "object":
			object = f[i+1]
		case "username":
			user = f[i+1]
		}
	}
	flush()
	return denied
}
