package scripts_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// The records' expiry rule, on the raw keys: expires_ms is the retention a
// record was given; the key expires then, except while the record is
// pending with a lease that runs past it, when the key lives until lease_ms
// (acquire.lua, renew.lua and update.lua move it), so a live owner never
// loses its record to expiry. A write that leaves no live lease past a
// retention that has run out gives the record its retention again, from now:
// expires_ms = now + (expires_ms - created_ms). recRunCase checks the rule on
// every records case (PEXPIRETIME against expires_ms and lease_ms).

// recAt is a deadline d from the machine's clock (the servers run on it), in
// ms, for seeds: the cases' {now} placeholders are the script's own TIME.
func recAt(d time.Duration) string {
	return strconv.FormatInt(time.Now().Add(d).UnixMilli(), 10)
}

// recSeedKeyAt writes the record h (a RECORD seed) with the key expiring at
// at (ms), whatever expires_ms says: a record whose key a lease kept alive.
func recSeedKeyAt(h map[string]string, at string) [][]string {
	cmd := []string{"RECORD", "$K"}
	for _, f := range slices.Sorted(maps.Keys(h)) {
		cmd = append(cmd, f, h[f])
	}
	return [][]string{cmd, {"PEXPIREAT", "$K", at}}
}

func recWith(h map[string]string, kv ...string) map[string]string {
	h = maps.Clone(h)
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return h
}

func TestScriptRenewKeepsTheKey(t *testing.T) {
	// The seeds' deadlines are minutes away: the cases run after a cluster
	// has started, which may take seconds on a busy machine.
	// Retention 1 min from now, lease 30 s: a renewal of 2 min must carry
	// the key past its retention.
	short := recHash("created_ms", recAt(-time.Minute), "expires_ms", recAt(time.Minute), "lease_ms", recAt(30*time.Second))
	long := recHash("created_ms", recAt(-time.Minute), "expires_ms", recAt(time.Hour), "lease_ms", recAt(30*time.Second))
	never := recHash("expires_ms", "0", "lease_ms", recAt(30*time.Second))
	// Retention passed a minute ago; the key lives on the lease (+1 min).
	over := recHash("created_ms", recAt(-2*time.Minute), "expires_ms", recAt(-time.Minute), "lease_ms", recAt(time.Minute))
	runRecCases(t, "renew", []recCase{
		{name: "lease past the retention", seed: recSeed(short), args: []string{"tokA", "120000"}, want: []string{"1"},
			after: recWith(short, "lease_ms", "{now+120000}"), expireAt: "{now+120000}"},
		{name: "lease within the retention", seed: recSeed(long), args: []string{"tokA", "3000"}, want: []string{"1"},
			after: recWith(long, "lease_ms", "{now+3000}"), expireAt: long["expires_ms"]},
		{name: "no expiry", seed: recSeed(never), args: []string{"tokA", "3000"}, want: []string{"1"},
			after: recWith(never, "lease_ms", "{now+3000}")},
		{name: "retention already run out", seed: recSeedKeyAt(over, over["lease_ms"]), args: []string{"tokA", "120000"}, want: []string{"1"},
			after: recWith(over, "lease_ms", "{now+120000}"), expireAt: "{now+120000}"},
		{name: "retention run out, a shorter lease", seed: recSeedKeyAt(over, over["lease_ms"]), args: []string{"tokA", "3000"}, want: []string{"1"},
			after: recWith(over, "lease_ms", "{now+3000}"), expireAt: "{now+3000}"},
		{name: "another owner changes nothing", seed: recSeedKeyAt(over, over["lease_ms"]), args: []string{"tokB", "3000"}, want: []string{"-1"},
			after: over, expireAt: over["lease_ms"]},
	})
}

func TestScriptAcquireLeasePastTTL(t *testing.T) {
	retention := recAt(time.Hour)
	passed := recHash("created_ms", recAt(-time.Minute), "expires_ms", recAt(time.Minute), "lease_ms", "1", "fence", "3")
	runRecCases(t, "acquire", []recCase{
		{name: "new, ttl shorter than the lease", args: []string{"1000", "tokA", "", "3000"},
			want:     []string{"1", "pending", "", "{now}", "{now}", "{now+1000}", "{now+3000}", "1", "", "tokA"},
			after:    recHash("created_ms", "{now}", "updated_ms", "{now}", "expires_ms", "{now+1000}", "lease_ms", "{now+3000}"),
			expireAt: "{now+3000}"},
		{name: "new, ttl longer than the lease", args: []string{"60000", "tokA", "", "3000"},
			want:     []string{"1", "pending", "", "{now}", "{now}", "{now+60000}", "{now+3000}", "1", "", "tokA"},
			after:    recHash("created_ms", "{now}", "updated_ms", "{now}", "expires_ms", "{now+60000}", "lease_ms", "{now+3000}"),
			expireAt: "{now+60000}"},
		{name: "takeover, lease past the retention", seed: recSeed(passed), args: []string{"0", "tokB", "", "120000"},
			want:     append([]string{"1"}, recAsReply(recWith(passed, "token", "tokB", "lease_ms", "{now+120000}", "updated_ms", "{now}", "fence", "4"), "tokB")...),
			after:    recWith(passed, "token", "tokB", "lease_ms", "{now+120000}", "updated_ms", "{now}", "fence", "4"),
			expireAt: "{now+120000}"},
		{name: "takeover, lease within the retention", seed: recSeed(recWith(passed, "expires_ms", retention)), args: []string{"0", "tokB", "", "5000"},
			want:     append([]string{"1"}, recAsReply(recWith(passed, "expires_ms", retention, "token", "tokB", "lease_ms", "{now+5000}", "updated_ms", "{now}", "fence", "4"), "tokB")...),
			after:    recWith(passed, "expires_ms", retention, "token", "tokB", "lease_ms", "{now+5000}", "updated_ms", "{now}", "fence", "4"),
			expireAt: retention},
	})
}

func TestScriptUpdateRestoresRetention(t *testing.T) {
	// (Deadlines minutes away, as in TestScriptRenewKeepsTheKey.) A record
	// created 2 min ago with a 1 min retention (passed a minute ago), its
	// key kept until +2 min by its lease.
	over := recHash("created_ms", recAt(-2*time.Minute), "expires_ms", recAt(-time.Minute), "lease_ms", recAt(2*time.Minute))
	// Retention 5 min ahead, key kept until +8 min by the lease.
	ahead := recHash("created_ms", recAt(-time.Minute), "expires_ms", recAt(5*time.Minute), "lease_ms", recAt(8*time.Minute))
	ttl := func(h map[string]string) int64 {
		e, _ := strconv.ParseInt(h["expires_ms"], 10, 64)
		c, _ := strconv.ParseInt(h["created_ms"], 10, 64)
		return e - c
	}
	again := "{now+" + strconv.FormatInt(ttl(over), 10) + "}"
	runRecCases(t, "update", []recCase{
		{name: "final write after the retention ran out: the retention again, from now", seed: recSeedKeyAt(over, over["lease_ms"]),
			args: []string{"tokA", "status", "completed", "payload", "res"}, want: []string{"1"},
			after:    recWith(over, "status", "completed", "payload", "res", "lease_ms", "0", "updated_ms", "{now}", "expires_ms", again),
			expireAt: again},
		{name: "final write within the retention: back to it", seed: recSeedKeyAt(ahead, ahead["lease_ms"]),
			args: []string{"tokA", "status", "completed", "payload", "res"}, want: []string{"1"},
			after:    recWith(ahead, "status", "completed", "payload", "res", "lease_ms", "0", "updated_ms", "{now}"),
			expireAt: ahead["expires_ms"]},
		{name: "a payload while pending keeps the lease's expiry", seed: recSeedKeyAt(over, over["lease_ms"]),
			args: []string{"tokA", "payload", "progress"}, want: []string{"1"},
			after:    recWith(over, "payload", "progress", "updated_ms", "{now}"),
			expireAt: over["lease_ms"]},
		{name: "a lease moved further past the retention", seed: recSeedKeyAt(ahead, ahead["lease_ms"]),
			args: []string{"tokA", "lease_in_ms", "600000"}, want: []string{"1"},
			after:    recWith(ahead, "lease_ms", "{now+600000}", "updated_ms", "{now}"),
			expireAt: "{now+600000}"},
		{name: "a lease moved back within the retention", seed: recSeedKeyAt(ahead, ahead["lease_ms"]),
			args: []string{"tokA", "lease_in_ms", "30000"}, want: []string{"1"},
			after:    recWith(ahead, "lease_ms", "{now+30000}", "updated_ms", "{now}"),
			expireAt: ahead["expires_ms"]},
		{name: "the lease removed after the retention ran out", seed: recSeedKeyAt(over, over["lease_ms"]),
			args: []string{"tokA", "lease_in_ms", "0"}, want: []string{"1"},
			after:    recWith(over, "lease_ms", "0", "updated_ms", "{now}", "expires_ms", again),
			expireAt: again},
		{name: "an explicit expiry within the lease", seed: recSeedKeyAt(ahead, ahead["lease_ms"]),
			args: []string{"tokA", "expires_in_ms", "120000"}, want: []string{"1"},
			after:    recWith(ahead, "expires_ms", "{now+120000}", "updated_ms", "{now}"),
			expireAt: ahead["lease_ms"]},
		{name: "a stale owner changes nothing", seed: recSeedKeyAt(over, over["lease_ms"]),
			args: []string{"tokB", "status", "completed"}, errc: "STALE_OWNER"},
	})
}

// TestScriptRenewUnderFullMemory: renew.lua's PEXPIREAT (the expiry rule)
// runs with memory full under noeviction, as its allow-oom flag promises: a
// live owner keeps its record then too.
func TestScriptRenewUnderFullMemory(t *testing.T) {
	t.Parallel()
	srv := newServer(t, redisproc.Options{MaxMemory: "8mb", MaxMemoryPolicy: "noeviction"})
	c := newClient(t, srv.URL())
	loadScripts(t, c)
	key := keyFor(t, "rec:")
	h := recHash("created_ms", recAt(-time.Minute), "expires_ms", recAt(time.Minute), "lease_ms", recAt(30*time.Second))
	for _, cmd := range recSeed(h) {
		for i := range cmd {
			cmd[i] = strings.ReplaceAll(cmd[i], "$K", key)
		}
		do(t, c, recSeedArgs(t, cmd)...)
	}
	fillMemory(t, c)
	full := usedMemory(t, c)
	do(t, c, "CONFIG", "SET", "maxmemory", fmt.Sprint(full/2))
	defer do(t, c, "CONFIG", "SET", "maxmemory", "0")
	// A write that can grow memory is refused: memory really is full.
	if _, err := evalsha(t, c, "acquire", keyFor(t, "rec:"), "60000", "tokA", "", "1000"); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("acquire of a fresh key under full memory: %v; want OOM (the test checks nothing)", err)
	}
	t0 := recServerMS(t, c, key)
	got, err := evalsha(t, c, "renew", key, "tokA", "120000")
	if err != nil || got != "1" {
		t.Fatalf("renew under full memory = %q, %v; want 1", got, err)
	}
	after := recReadRaw(t, c, key)
	if after.ExpireAt < t0+120000 || after.Hash["expires_ms"] != h["expires_ms"] {
		t.Errorf("after the renewal: PEXPIRETIME %d (want >= %d: the new lease), expires_ms %q (want %q, unchanged)",
			after.ExpireAt, t0+120000, after.Hash["expires_ms"], h["expires_ms"])
	}
}
