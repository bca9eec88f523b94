package scripts_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// The operator commands (version, inspect, stats) as an operator runs them,
// on state seeded the way a non-Go caller writes it: redisonce load, then
// EVALSHA through redis-cli, exactly as the scripts' headers document.

func TestCLIOperator(t *testing.T) {
	bin := buildCLI(t, t.TempDir())
	srv := newServer(t, redisproc.Options{})
	url := srv.URL()
	if _, errs, exit := runCLI(t, bin, "load", "--url", url); exit != 0 {
		t.Fatalf("redisonce load: exit %d, %s", exit, errs)
	}
	evalsha := func(name string, args ...string) string {
		t.Helper()
		s, _ := redisonce.Get(name)
		out, failed := runRedisCLI(t, url, nil, append([]string{"EVALSHA", s.SHA1, "1"}, args...)...)
		if failed || strings.Contains(out, "ERR") {
			t.Fatalf("EVALSHA %s %v: %s", name, args, out)
		}
		return out
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		evalsha("claim", "bq:idemp:"+id, "86400000", "1")
	}
	evalsha("claim", "bq:idemp:m4", "60000", "~lease-token-4")
	evalsha("append", "gateway:outbox:conn-1", "msg-a", "first payload", "0", "0")
	evalsha("append", "gateway:outbox:conn-1", "msg-b", "second payload", "0", "0")
	evalsha("acquire", "idempotency:req-1", "86400000", "tok-1", "", "30000")
	evalsha("acquire", "idempotency:req-2", "86400000", "tok-2", "", "30000")
	evalsha("update", "idempotency:req-2", "tok-2", "status", "completed", "payload", "the result")

	run := func(wantExit int, args ...string) string {
		t.Helper()
		out, errs, exit := runCLI(t, bin, append(args, "--url", url)...)
		if exit != wantExit {
			t.Fatalf("redisonce %s: exit %d (want %d), stderr %q\n%s", strings.Join(args, " "), exit, wantExit, errs, out)
		}
		return out
	}
	contains := func(what, out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output does not contain %q:\n%s", what, w, out)
			}
		}
	}
	contains("version", run(0, "version"), redisonce.Version())
	contains("inspect claim m4", run(0, "inspect", "claim", "m4"), "in flight", "lease-token-4")
	contains("inspect claim m1", run(0, "inspect", "claim", "m1"), "processed")
	contains("inspect claim nope", run(3, "inspect", "claim", "nope"), "not found")
	tail := run(0, "inspect", "tail", "conn-1")
	contains("inspect tail", tail, "2 unacked messages", "msg-a", "msg-b", `"first payload"`, `"second payload"`)
	if strings.Index(tail, "msg-a") > strings.Index(tail, "msg-b") {
		t.Errorf("inspect tail: messages not in seq order:\n%s", tail)
	}
	contains("inspect record req-2", run(0, "inspect", "record", "req-2"), "completed", `"the result"`)
	contains("inspect record req-1", run(0, "inspect", "record", "req-1"), "pending", "s left")
	contains("stats", run(0, "stats"),
		"3 processed, 1 in flight",
		"1 connection, 2 unacked messages",
		"1 pending, 1 completed, 0 failed")

	// Keys that are not the stores' are reported, never a crash.
	for _, args := range [][]string{
		{"SET", "gateway:outbox:plain", "x"}, {"HSET", "bq:idemp:hash", "f", "v"}, {"LPUSH", "idempotency:list", "x"},
		{"HSET", "gateway:outbox:bad", "_epoch", "1", "_gen", "0", "m", "no-seq"},
	} {
		if out, failed := runRedisCLI(t, url, nil, args...); failed {
			t.Fatalf("%v: %s", args, out)
		}
	}
	contains("inspect tail plain", run(4, "inspect", "tail", "plain"), "not a key of the outbox store", "string")
	contains("inspect tail bad", run(4, "inspect", "tail", "bad"), "not a key of the outbox store", `field "m"`)
	contains("inspect record list", run(4, "inspect", "record", "list"), "list")
	// stats reads an outbox hash's reserved fields and length, never its
	// payloads: "bad" counts as a connection there; inspect tail finds it out.
	contains("stats with foreign keys", run(0, "stats"),
		"3 processed, 1 in flight, 1 foreign", "2 connections, 3 unacked messages, 0 drained, 1 foreign", "0 failed, 1 foreign")
}

// On a 3-master cluster, stats walks every primary.
func TestCLIStatsCluster(t *testing.T) {
	bin := buildCLI(t, t.TempDir())
	url := cluster3URL(t)
	c := newClient(t, url)
	prefix := fmt.Sprintf("cli-stats-%d:", time.Now().UnixNano())
	claims := must.Store(store.NewClaims(c, store.WithPrefix(prefix), store.WithTTL(time.Hour)))
	ctx := context.Background()
	const n = 300
	for i := range n {
		if ok, err := claims.Claim(ctx, fmt.Sprintf("id-%d", i)); err != nil || !ok {
			t.Fatalf("Claim: %v, %v", ok, err)
		}
	}
	nodes := primaries(t, c)
	if len(nodes) != 3 {
		t.Fatalf("%d primaries, want 3", len(nodes))
	}
	for addr, node := range nodes { // every primary holds some of the keys
		keys, err := node.Do(ctx, node.B().Scan().Cursor(0).Match(prefix+"*").Count(10000).Build()).AsScanEntry()
		if err != nil || len(keys.Elements) == 0 {
			t.Fatalf("%s holds none of the keys (%v): the test proves nothing", addr, err)
		}
	}
	out, errs, exit := runCLI(t, bin, "stats", "--store", "claims", "--prefix", prefix, "--url", url)
	if exit != 0 {
		t.Fatalf("stats: exit %d, %s", exit, errs)
	}
	if !strings.Contains(out, fmt.Sprintf("claims (%s*): %d processed, 0 in flight, 0 foreign (%d keys)", prefix, n, n)) {
		t.Errorf("stats on the cluster:\n%s", out)
	}
	for addr := range nodes {
		if !regexp.MustCompile(`(?m)^.*3 primaries: .*` + regexp.QuoteMeta(addr)).MatchString(out) {
			t.Errorf("stats does not name primary %s:\n%s", addr, out)
		}
	}
	// inspect routes a key to its slot's primary.
	out, _, exit = runCLI(t, bin, "inspect", "claim", "id-7", "--prefix", prefix, "--url", url)
	if exit != 0 || !strings.Contains(out, "processed") {
		t.Errorf("inspect on the cluster: exit %d\n%s", exit, out)
	}
}
