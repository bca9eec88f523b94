package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/recordlayout"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

func TestVersion(t *testing.T) {
	code, out, errs := cli(t, "version")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	lib, _ := redisonce.FunctionsLibrary()
	if !strings.Contains(out, "scripts   "+redisonce.Version()+" ") || !strings.Contains(out, lib) ||
		!regexp.MustCompile(`^redisonce (\(devel\)|v\S+)\n`).MatchString(out) {
		t.Errorf("version:\n%s", out)
	}
	code, out, _ = cli(t, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Scripts != redisonce.Version() || v.Library != lib {
		t.Errorf("version --json: exit %d, %v, %s", code, err, out)
	}
}

func TestModuleVersion(t *testing.T) {
	for v, want := range map[string]string{
		"v1.2.3":                               "v1.2.3",
		"v1.2.3-rc.1":                          "v1.2.3-rc.1",
		"(devel)":                              "(devel)",
		"":                                     "(devel)",
		"v0.0.0-20261130190000-0123456789ab":   "(devel)",
		"v1.2.4-0.20261130190000-0123456789ab": "(devel)",
		"v1.2.4-0.20261130190000-0123456789ab+dirty": "(devel)",
		"v1.2.3+dirty": "(devel)",
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/redisonce/redisonce", Version: v}}
		if got := moduleVersion(bi, true); got != want {
			t.Errorf("moduleVersion(%q) = %q, want %q", v, got, want)
		}
	}
	if got := moduleVersion(nil, false); got != "(devel)" {
		t.Errorf("without build info: %q", got)
	}
}

// seedStores writes, through the Go stores and the claim script, what the
// operator commands are then asked about: three processed claims and one in
// flight, a tail of two messages, a pending and a completed record, and a
// foreign key under each prefix.
func seedStores(t *testing.T, srv *redisproc.Server) {
	t.Helper()
	ctx := context.Background()
	claims, err := store.OpenClaims(srv.URL(), store.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer claims.Close()
	for _, id := range []string{"m1", "m2", "m3"} {
		if ok, err := claims.Claim(ctx, id); err != nil || !ok {
			t.Fatalf("Claim(%s) = %v, %v", id, ok, err)
		}
	}
	if code, _, errs := cli(t, "call", "claim", "bq:idemp:m4", "60000", "~tok-4", "--url", srv.URL()); code != 0 {
		t.Fatalf("call claim ~tok-4: exit %d, %s", code, errs)
	}
	ob, err := store.OpenOutbox(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	for _, m := range [][2]string{{"msg-a", "hello"}, {"msg-b", "bin\x00ary"}} {
		if _, err := ob.AppendWithID(ctx, "conn-1", m[0], []byte(m[1])); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := store.OpenRecords(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Close()
	if _, ok, err := recs.AcquireWith(ctx, "pay-1", store.AcquireOptions{TTL: time.Hour, Lease: time.Minute}); err != nil || !ok {
		t.Fatalf("Acquire pay-1: %v, %v", ok, err)
	}
	if _, _, err := recs.Do(ctx, "pay-2", store.AcquireOptions{TTL: time.Hour, Lease: time.Minute}, func(context.Context) ([]byte, error) {
		return []byte("receipt 2"), nil
	}); err != nil {
		t.Fatal(err)
	}
	mustDo(t, srv, "HSET", "bq:idemp:not-a-claim", "f", "v")
	mustDo(t, srv, "SET", "gateway:outbox:not-a-tail", "x")
	mustDo(t, srv, "HSET", "idempotency:not-a-record", "f", "v")
}

func TestInspect(t *testing.T) {
	srv := startServer(t, redisproc.Options{})
	seedStores(t, srv)
	mustDo(t, srv, "SET", "idempotency:json-record", `{"status":"completed"}`)
	before := mustDo(t, srv, "INFO", "persistence")
	url := srv.URL()
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"claim", "m1"}, 0, []string{"claim m1 (key bq:idemp:m1): processed\n", "expires  in 1h0m0s\n"}},
		{[]string{"claim", "m4"}, 0, []string{"claim m4 (key bq:idemp:m4): in flight\n", "lease  in ", "token  tok-4\n"}},
		{[]string{"claim", "nope"}, exitNotFound, []string{"claim nope (key bq:idemp:nope): not found"}},
		{[]string{"claim", "not-a-claim"}, exitForeign, []string{"not a key of the claims store: the key is a hash"}},
		{[]string{"tail", "conn-1"}, 0, []string{"2 unacked messages\n", "generation  0 ", "seq         2 ",
			"    1    msg-a  5     \"hello\"\n", "    2    msg-b  7     \"bin\\x00ary\"\n"}},
		{[]string{"tail", "not-a-tail"}, exitForeign, []string{"the key is a string"}},
		{[]string{"record", "pay-1"}, 0, []string{"record pay-1 (key idempotency:pay-1): pending\n", "lease        ", "s left\n", "fence        1\n"}},
		{[]string{"record", "pay-2"}, 0, []string{"record pay-2 (key idempotency:pay-2): completed\n", "ago)", "payload      9 bytes: \"receipt 2\"\n"}},
		{[]string{"record", "not-a-record"}, exitForeign, []string{"the key is a hash", "a record is a string"}},
		{[]string{"record", "json-record"}, exitForeign, []string{"a string that is not a record"}},
		{[]string{"claim", "m1", "--prefix", "other:"}, exitNotFound, []string{"(key other:m1): not found"}},
		{[]string{"claim", "bq:idemp:m4"}, 0, []string{"claim m4 (key bq:idemp:m4): in flight\n"}}, // the whole key
		{[]string{"record", "idempotency:gone"}, exitNotFound, []string{"(key idempotency:idempotency:gone): not found"}},
	} {
		code, out, errs := cli(t, append(append([]string{"inspect"}, tc.args...), "--url", url)...)
		if code != tc.code || errs != "" {
			t.Errorf("inspect %v: exit %d (want %d), stderr %q\n%s", tc.args, code, tc.code, errs, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("inspect %v: stdout does not contain %q:\n%s", tc.args, w, out)
			}
		}
	}
	// --url may come before the command.
	if code, out, errs := cli(t, "--url", url, "inspect", "claim", "m1"); code != 0 || !strings.Contains(out, "processed") {
		t.Errorf("redisonce --url U inspect claim m1: exit %d, stderr %q\n%s", code, errs, out)
	}
	if code, out, errs := cli(t, "--url="+url, "stats", "--store", "claims"); code != 0 || !strings.Contains(out, "3 processed") {
		t.Errorf("redisonce --url=U stats: exit %d, stderr %q\n%s", code, errs, out)
	}
	// version --url says what the server holds.
	code, out, errs := cli(t, "version", "--url", url)
	if code != 0 || !regexp.MustCompile(`\n  `+regexp.QuoteMeta(srv.Addr)+` \(Redis [0-9.]+\): \d+ of \d+ scripts in the script cache; no redisonce Functions library\n`).MatchString(out) {
		t.Errorf("version --url: exit %d, stderr %q\n%s", code, errs, out)
	}
	// --json: the same state for scripts.
	code, out, _ = cli(t, "inspect", "claim", "m4", "--json", "--url", url)
	var r inspectResult
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Claim == nil || r.Claim.State != "in flight" ||
		r.Claim.Token != "tok-4" || r.Claim.TTLms <= 0 || r.Claim.TTLms > 60000 {
		t.Errorf("inspect claim --json: exit %d, %v, %s", code, err, out)
	}
	code, out, _ = cli(t, "inspect", "record", "gone", "--json", "--url", url)
	if err := json.Unmarshal([]byte(out), &r); code != exitNotFound || err != nil || r.Found {
		t.Errorf("inspect record gone --json: exit %d, %v, %s", code, err, out)
	}
	// Plain reads only: no key was written.
	if a, b := infoInt(before, "rdb_changes_since_last_save"), infoInt(mustDo(t, srv, "INFO", "persistence"), "rdb_changes_since_last_save"); a == "" || a != b {
		t.Errorf("inspect wrote: changes %s -> %s", a, b)
	}
}

// infoInt reads a field of INFO output ("" when absent).
func infoInt(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func TestStats(t *testing.T) {
	srv := startServer(t, redisproc.Options{})
	seedStores(t, srv)
	changes := infoInt(mustDo(t, srv, "INFO", "persistence"), "rdb_changes_since_last_save")
	code, out, errs := cli(t, "stats", "--url", srv.URL())
	if code != 0 {
		t.Fatalf("stats: exit %d, stderr %q", code, errs)
	}
	for _, w := range []string{
		"claims (bq:idemp:*): 3 processed, 1 in flight, 1 foreign (5 keys)\n",
		"oldest lease: bq:idemp:m4, ",
		"outbox (gateway:outbox:*): 1 connection, 2 unacked messages, 0 drained, 1 foreign (2 keys)\n",
		"largest tail: gateway:outbox:conn-1, 2 unacked\n",
		"records (idempotency:*): 1 pending, 1 completed, 0 failed, 1 foreign (3 keys)\n",
		"pending with an expired lease: 0\n",
		"e.g.: bq:idemp:not-a-claim\n", "e.g.: gateway:outbox:not-a-tail\n", "e.g.: idempotency:not-a-record\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("stats output does not contain %q:\n%s", w, out)
		}
	}
	if got := infoInt(mustDo(t, srv, "INFO", "persistence"), "rdb_changes_since_last_save"); got != changes {
		t.Errorf("stats wrote: changes %s -> %s", changes, got)
	}
	code, out, _ = cli(t, "stats", "--store", "records", "--json", "--url", srv.URL())
	var got struct {
		Records struct {
			Prefix string
			Stats  struct {
				ByStatus map[string]int `json:"by_status"`
				Foreign  int
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Records.Prefix != "idempotency:" ||
		got.Records.Stats.ByStatus["pending"] != 1 || got.Records.Stats.ByStatus["completed"] != 1 || got.Records.Stats.Foreign != 1 {
		t.Errorf("stats --store records --json: exit %d, %v, %s", code, err, out)
	}
	// A pending record whose lease passed is counted as such: lease_ms (the
	// double at offset 28 of layout 1) set to 1 ms after the epoch.
	mustDo(t, srv, "SETRANGE", "idempotency:pay-1", strconv.Itoa(recordlayout.LeaseOffset), "\x3f\xf0\x00\x00\x00\x00\x00\x00")
	_, out, _ = cli(t, "stats", "--store", "records", "--url", srv.URL())
	if !strings.Contains(out, "pending with an expired lease: 1\n") || !strings.Contains(out, "oldest expired lease: idempotency:pay-1, passed ") {
		t.Errorf("stats after the lease passed:\n%s", out)
	}
	// A hash under the records' prefix, even one with a record's nine
	// fields, is not a record: stats counts it foreign, inspect says so.
	mustDo(t, srv, "HSET", "idempotency:hash-1", "status", "completed", "payload", "a receipt", "created_ms", "1000",
		"updated_ms", "2000", "expires_ms", "0", "lease_ms", "0", "fence", "4", "fp", "", "token", "t")
	var withHash struct {
		Records struct {
			Stats struct {
				ByStatus map[string]int `json:"by_status"`
				Foreign  int
			}
		}
	}
	code, out, _ = cli(t, "stats", "--store", "records", "--json", "--url", srv.URL())
	if err := json.Unmarshal([]byte(out), &withHash); code != 0 || err != nil ||
		withHash.Records.Stats.ByStatus["completed"] != 1 || withHash.Records.Stats.Foreign != 2 {
		t.Errorf("stats with a hash under the prefix: exit %d, %v, %s", code, err, out)
	}
	if code, out, _ = cli(t, "inspect", "record", "hash-1", "--url", srv.URL()); code != exitForeign {
		t.Errorf("inspect record hash-1: exit %d, want %d (foreign)\n%s", code, exitForeign, out)
	}
	for _, args := range [][]string{{"--store", "nope"}, {"--prefix", "x:"}} {
		code, _, errs := cli(t, append([]string{"stats"}, args...)...)
		if code != exitUsage {
			t.Errorf("stats %v: exit %d", args, code)
		}
		oneLineErr(t, errs, "redisonce stats: ")
	}
}

// TestStatsManyKeys walks more keys than one SCAN batch, with progress on
// stderr (every 1000 keys here).
func TestStatsManyKeys(t *testing.T) {
	srv := startServer(t, redisproc.Options{})
	saved := progressEvery
	progressEvery = 1000
	t.Cleanup(func() { progressEvery = saved })
	// 2500 processed claims in a few round trips (more than two SCAN batches).
	args := []string{"MSET"}
	for i := range 2500 {
		args = append(args, fmt.Sprintf("bq:idemp:k%04d", i), "1")
	}
	mustDo(t, srv, args...)
	code, out, errs := cli(t, "stats", "--store", "claims", "--url", srv.URL())
	if code != 0 || !strings.Contains(out, ": 2500 processed, 0 in flight, 0 foreign (2500 keys)\n") {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	progress := regexp.MustCompile(`(?m)^stats: claims: \d+ keys under "bq:idemp:" read so far \(on \S+, primary 1 of 1\)$`)
	if n := len(progress.FindAllString(errs, -1)); n != 2 || strings.Count(errs, "\n") != 2 {
		t.Errorf("%d progress lines for 2500 keys (want 2, one per 1000):\n%s", n, errs)
	}
}

func TestOperatorErrorsHidePassword(t *testing.T) {
	srv := startServer(t, redisproc.Options{Password: "sekret"})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, args := range [][]string{{"inspect", "claim", "m1"}, {"inspect", "tail", "c"}, {"inspect", "record", "r"}, {"stats"}, {"version"}} {
		for url, want := range map[string]string{
			"redis://:wrong-pw@" + srv.Addr: "refused the user or password (WRONGPASS",
			"redis://:wrong-pw@" + closed:   "cannot connect to redis://:xxxxx@" + closed,
		} {
			code, out, errs := cli(t, append(args, "--url", url)...)
			if code != exitFail || (out != "") != (args[0] == "version") || strings.Contains(out+errs, "wrong-pw") {
				t.Errorf("%v on %s: exit %d, stdout %q, stderr %q (must not show the password)", args, url, code, out, errs)
			}
			oneLineErr(t, errs, want)
		}
	}
}
