package scripts_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/redisproc"
)

// commandCalls returns how often the server ran each command (lower case:
// "time", "info") since the last CONFIG RESETSTAT, calls from scripts
// included, from one INFO commandstats (which counts itself only afterwards).
func commandCalls(t *testing.T, c rueidis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]int64{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		calls[name] = n
	}
	return calls
}

// TestOutboxScriptsReadTheClockOnlyForAnEpoch: append.lua and append_many.lua
// read the server's clock (TIME) only to mint an epoch (a new hash, or another
// replication ID); the common call, on a hash of this server's history, does
// not. Each reads the replication ID (INFO) once per call. On a private server,
// so no other test's calls are counted.
func TestOutboxScriptsReadTheClockOnlyForAnEpoch(t *testing.T) {
	srv := newServer(t, redisproc.Options{})
	c := newClient(t, srv.URL())
	ctx := context.Background()
	for _, name := range []string{"append", "append_many"} {
		s, ok := redisonce.Get(name)
		if !ok {
			t.Fatalf("no script %q", name)
		}
		outboxLoadScript(t, c, s)
	}
	appendS, _ := redisonce.Get("append")
	manyS, _ := redisonce.Get("append_many")
	rid := outboxRid(t, c)
	ours := outboxWith(outboxHash("7", "3", "a", "6:x"), "_rid", rid)

	cases := []struct {
		name  string
		seed  map[string]string // nil: no key
		s     redisonce.Script
		args  []string
		clock int64 // TIME calls wanted
	}{
		{"append, new id", ours, appendS, []string{"m", "p", "0", "0"}, 0},
		{"append, new id, ttl and max", ours, appendS, []string{"m", "p", "60000", "5"}, 0},
		{"append, retry", ours, appendS, []string{"a", "p", "60000", "0"}, 0},
		{"append_many, new and retry", ours, manyS, []string{"60000", "5", "m", "p", "a", "p"}, 0},
		{"append_many, retries only", ours, manyS, []string{"0", "0", "a", "p"}, 0},
		// The clock is read where an epoch is minted.
		{"append, new hash", nil, appendS, []string{"m", "p", "0", "0"}, 1},
		{"append, another replication id", outboxWith(ours, "_rid", outboxOtherRid), appendS, []string{"a", "p", "0", "0"}, 1},
		{"append_many, new hash", nil, manyS, []string{"0", "0", "m", "p"}, 1},
		{"append_many, another replication id", outboxWith(ours, "_rid", outboxOtherRid), manyS, []string{"0", "0", "a", "p"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "outbox-calls:" + t.Name()
			outboxSeed(t, c, key, tc.seed, 0)
			if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
				t.Fatalf("CONFIG RESETSTAT: %v", err)
			}
			if err := outboxEval(c, tc.s, key, tc.args...).Error(); err != nil {
				t.Fatalf("%s: %v", tc.s.Name, err)
			}
			calls := commandCalls(t, c)
			if calls["time"] != tc.clock {
				t.Errorf("TIME ran %d times, want %d", calls["time"], tc.clock)
			}
			if calls["info"] != 1 {
				t.Errorf("INFO ran %d times, want 1 (the replication ID)", calls["info"])
			}
		})
	}
}

// TestOutboxScriptsOneWritePerAppend: on a hash of this server's history,
// append.lua and append_many.lua write the new messages and the next _seq in
// one HSET (no HINCRBY: _seq was read and checked already), plus the PEXPIRE
// a ttl asks for; a retry writes nothing but that PEXPIRE.
func TestOutboxScriptsOneWritePerAppend(t *testing.T) {
	srv := newServer(t, redisproc.Options{})
	c := newClient(t, srv.URL())
	ctx := context.Background()
	for _, name := range []string{"append", "append_many"} {
		s, _ := redisonce.Get(name)
		outboxLoadScript(t, c, s)
	}
	appendS, _ := redisonce.Get("append")
	manyS, _ := redisonce.Get("append_many")
	ours := outboxWith(outboxHash("7", "3", "a", "6:x"), "_rid", outboxRid(t, c))

	cases := []struct {
		name  string
		s     redisonce.Script
		args  []string
		after map[string]string
		calls map[string]int64 // hset, hincrby, pexpire wanted
	}{
		{"append", appendS, []string{"m", "p", "0", "0"}, outboxWith(ours, "_seq", "8", "m", "8:p"),
			map[string]int64{"hset": 1}},
		{"append with ttl and max", appendS, []string{"m", "p", "60000", "5"}, outboxWith(ours, "_seq", "8", "m", "8:p"),
			map[string]int64{"hset": 1, "pexpire": 1}},
		{"append, retry", appendS, []string{"a", "p", "60000", "0"}, ours,
			map[string]int64{"pexpire": 1}},
		{"append_many", manyS, []string{"0", "0", "m", "p", "a", "q", "n", "r", "m", "s"},
			outboxWith(ours, "_seq", "9", "m", "8:p", "n", "9:r"), map[string]int64{"hset": 1}},
		{"append_many with ttl", manyS, []string{"60000", "5", "m", "p"}, outboxWith(ours, "_seq", "8", "m", "8:p"),
			map[string]int64{"hset": 1, "pexpire": 1}},
		{"append_many, retries only", manyS, []string{"0", "0", "a", "p"}, ours, map[string]int64{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "outbox-writes:" + t.Name()
			outboxSeed(t, c, key, ours, 0)
			if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
				t.Fatalf("CONFIG RESETSTAT: %v", err)
			}
			if err := outboxEval(c, tc.s, key, tc.args...).Error(); err != nil {
				t.Fatalf("%s: %v", tc.s.Name, err)
			}
			calls := commandCalls(t, c)
			for _, cmd := range []string{"hset", "hincrby", "pexpire"} {
				if calls[cmd] != tc.calls[cmd] {
					t.Errorf("%s ran %d times, want %d", strings.ToUpper(cmd), calls[cmd], tc.calls[cmd])
				}
			}
			if h, _ := outboxRaw(t, c, key); !cmp.Equal(h, tc.after) {
				t.Errorf("hash afterwards (-want +got):\n%s", cmp.Diff(tc.after, h))
			}
		})
	}
}
