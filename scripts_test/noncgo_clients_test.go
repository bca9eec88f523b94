package scripts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Non-Go callers, from their own clients: noncgo/flows.py (redis-py) and
// noncgo/flows.mjs (ioredis, node-redis v5 and v4) run every flow of every
// store — SCRIPT LOAD + EVALSHA, then FUNCTION LOAD REPLACE + FCALL — with only
// what docs/non-go.md and the script headers say, asserting reply types, error
// replies, binary payloads and generations near 2^64. Around them, the Go
// stores seed keys the programs read (go:*), and read back the keys they
// leave (handoff:*).
//
// The clients: redis-py from python3-redis (`make noncgo-deps` installs it),
// ioredis and node-redis from noncgo/package-lock.json (`npm ci` in
// scripts_test/noncgo; the test runs it when node_modules is missing, stale
// or broken). Without them — no python3-redis or Node.js >= 18, or `npm ci`
// failed (offline) — the tests are skipped with a message saying what is
// missing and how to get it, also under CI=true: they are optional extras on
// top of the Go and redis-cli checks (noncgo_callers_test.go), and a fresh
// machine without them must still pass `make test`. REDISONCE_REQUIRE_NONGO=1
// makes a missing client a failure instead.

const noncgoDir = "noncgo"

// noncgoBin is a byte-for-byte twin of BIN in flows.py and flows.mjs.
var noncgoBin = func() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// noncgoMissing skips the test, or fails it under REDISONCE_REQUIRE_NONGO=1.
func noncgoMissing(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := "non-Go clients: " + fmt.Sprintf(format, args...) +
		"\nrun `make noncgo-deps` (apt-get install python3-redis nodejs npm; npm ci in scripts_test/noncgo)"
	if os.Getenv("REDISONCE_REQUIRE_NONGO") == "1" {
		t.Fatal("REDISONCE_REQUIRE_NONGO=1: " + msg)
	}
	t.Skip("skipped: " + msg)
}

// redisPython returns a python3 that imports redis-py with the calls the
// docs/non-go.md uses (evalsha_ro, fcall_ro, function_load): $REDISONCE_PYTHON, else
// Debian's /usr/bin/python3 (python3-redis), else python3 on PATH.
func redisPython(t *testing.T) string {
	t.Helper()
	var cands []string
	if p := os.Getenv("REDISONCE_PYTHON"); p != "" {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	probe := "import redis; r = redis.Redis; [getattr(r, m) for m in ('evalsha_ro', 'fcall', 'fcall_ro', 'function_load')]"
	var tried []string
	for _, p := range cands {
		out, err := exec.Command(p, "-c", probe).CombinedOutput()
		if err == nil {
			return p
		}
		tried = append(tried, p+": "+lastLine(string(out), err))
	}
	noncgoMissing(t, "no python3 with redis-py >= 4.1 (tried %s)", strings.Join(tried, "; "))
	return ""
}

// errorLine is the first line of out that names an error (node prints the
// stack's source line first and its version last), else its last line.
func errorLine(out string, err error) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "Error") {
			return strings.TrimSpace(l)
		}
	}
	return lastLine(out, err)
}

func lastLine(out string, err error) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if l := lines[len(lines)-1]; l != "" {
		return l
	}
	return err.Error()
}

var (
	nodeOnce sync.Once
	nodeBin  string
	nodeErr  error
)

// nodeClients returns the node binary with noncgo/node_modules in place:
// when a package pinned in noncgo/package.json is missing, at another
// version or fails to import, it runs `npm ci` there first (once per test
// binary, for at most npmCITimeout).
func nodeClients(t *testing.T) string {
	t.Helper()
	nodeOnce.Do(func() { nodeBin, nodeErr = setUpNodeClients() })
	if nodeErr != nil {
		noncgoMissing(t, "%v", nodeErr)
	}
	return nodeBin
}

func setUpNodeClients() (string, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", errors.New("no node binary (Node.js >= 18: `apt-get install nodejs npm`)")
	}
	out, err := exec.Command(node, "-e", "process.exit(+process.versions.node.split('.')[0] >= 18 ? 0 : 1)").CombinedOutput()
	if err != nil {
		return "", errors.New("node is older than 18: " + lastLine(string(out), err))
	}
	if stale := staleNodeModules(node); stale != "" {
		npm, err := exec.LookPath("npm")
		if err != nil {
			return "", errors.New(stale + ", and there is no npm to run `npm ci` in scripts_test/noncgo")
		}
		ctx, cancel := context.WithTimeout(context.Background(), npmCITimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, npmCIArgs...)
		cmd.Dir = noncgoDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", errors.New(stale + "; `npm ci` in scripts_test/noncgo failed (offline? the npm registry is needed once): " +
				err.Error() + "\n" + headLines(string(out), 4))
		}
		if stale := staleNodeModules(node); stale != "" {
			return "", errors.New("after `npm ci` in scripts_test/noncgo: " + stale)
		}
	}
	return node, nil
}

// npmCIArgs is the Makefile's `npm ci` (noncgo-deps): two retries a few
// seconds apart, so that an offline machine gives up in seconds rather than
// the minute npm's default backoff takes. npmCITimeout bounds it.
var npmCIArgs = []string{"ci", "--no-audit", "--no-fund", "--loglevel=error",
	"--fetch-retries=2", "--fetch-retry-mintimeout=1000", "--fetch-retry-maxtimeout=5000"}

const npmCITimeout = 3 * time.Minute

// headLines is out's first n lines (npm's error, before its stack).
func headLines(out string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(out), "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}

// staleNodeModules says which pinned package of noncgo/package.json is
// missing, at another version, or fails to import (a dependency of its
// missing: an interrupted install) in noncgo/node_modules ("" when none is).
func staleNodeModules(node string) string {
	var pkg struct{ Dependencies map[string]string }
	b, err := os.ReadFile(filepath.Join(noncgoDir, "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &pkg)
	}
	if err != nil {
		return "scripts_test/noncgo/package.json: " + err.Error()
	}
	for name, want := range pkg.Dependencies {
		if i := strings.LastIndex(want, "@"); strings.HasPrefix(want, "npm:") && i > 0 {
			want = want[i+1:] // an alias: "npm:redis@4.7.1"
		}
		var got struct{ Version string }
		b, err := os.ReadFile(filepath.Join(noncgoDir, "node_modules", name, "package.json"))
		if err == nil {
			err = json.Unmarshal(b, &got)
		}
		if err != nil || got.Version != want {
			return "scripts_test/noncgo/node_modules lacks " + name + "@" + want
		}
		probe := exec.Command(node, "--input-type=module", "-e", "await import("+strconv.Quote(name)+")")
		probe.Dir = noncgoDir
		if out, err := probe.CombinedOutput(); err != nil {
			return "scripts_test/noncgo/node_modules: " + name + " does not import: " + errorLine(string(out), err)
		}
	}
	return ""
}

// runNonGoFlows seeds the Go stores' keys, runs prog (a flows program) against
// a standalone Redis, then checks the keys it left through the Go stores.
func runNonGoFlows(t *testing.T, client string, prog ...string) {
	t.Helper()
	url := standaloneURL(t)
	c := newClient(t, url)
	ctx := context.Background()
	run := "noncgo:" + client + ":" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	goPrefix, prefix := run+"go:", run+"flows:"

	// The Go stores' keys, which the program reads.
	claims := must.Store(store.NewClaims(c, store.WithPrefix(goPrefix)))
	if ok, err := claims.Claim(ctx, "claim"); !ok || err != nil {
		t.Fatalf("Claims.Claim: %v, %v", ok, err)
	}
	if got, err := claims.ClaimMany(ctx, []string{"{batch}:1", "{batch}:2"}); err != nil || !cmp.Equal(got, []bool{true, true}) {
		t.Fatalf("Claims.ClaimMany: %v, %v", got, err)
	}
	outbox := must.Store(store.NewOutbox(c, store.WithPrefix(goPrefix)))
	if _, err := outbox.AppendWithID(ctx, "conn", "m1", noncgoBin); err != nil {
		t.Fatalf("Outbox.AppendWithID: %v", err)
	}
	if _, err := outbox.AppendMany(ctx, "burst", []store.Outgoing{{ID: "b1", Payload: noncgoBin}, {ID: "b2", Payload: []byte("two")}}); err != nil {
		t.Fatalf("Outbox.AppendMany: %v", err)
	}
	if _, _, err := must.Store(store.NewRecords(c, store.WithPrefix(goPrefix))).Do(ctx, "rec", store.AcquireOptions{Lease: time.Minute},
		func(context.Context) ([]byte, error) { return noncgoBin, nil }); err != nil {
		t.Fatalf("Records.Do: %v", err)
	}

	// `redisonce functions`'s output, for FUNCTION LOAD REPLACE; a library of
	// another version would hold the function names.
	name, code := redisonce.FunctionsLibrary()
	dropOlderLibraries(t, c, name)
	lib := filepath.Join(t.TempDir(), "redisonce.lua")
	if err := os.WriteFile(lib, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	scripts, err := filepath.Abs(filepath.Join("..", "scripts"))
	if err != nil {
		t.Fatal(err)
	}

	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, prog[0], prog[1:]...)
	cmd.Dir = noncgoDir
	cmd.Env = append(os.Environ(),
		"REDIS_URL="+url,
		"REDISONCE_SCRIPTS="+scripts,
		"REDISONCE_FUNCTIONS="+lib,
		"REDISONCE_PREFIX="+prefix,
		"REDISONCE_GO_PREFIX="+goPrefix,
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("%s:\n%s", strings.Join(prog, " "), out.String())
	if err != nil {
		t.Fatalf("%s: %v (its failures are above)", strings.Join(prog, " "), err)
	}
	if !regexp.MustCompile(`(?m): [1-9][0-9]* passed, 0 failed$`).Match(out.Bytes()) {
		t.Fatalf("%s exited 0 without reporting \"N passed, 0 failed\"", strings.Join(prog, " "))
	}

	// What the program left, read by the Go stores, for each way it ran.
	for _, mode := range []string{"evalsha", "fcall"} {
		p := store.WithPrefix(prefix + mode + ":")
		claims := must.Store(store.NewClaims(c, p))
		if ran, err := claims.Do(ctx, "handoff:claim", time.Minute, func(context.Context) error { return nil }); ran || err != nil {
			t.Errorf("%s: Claims.Do(handoff:claim) = %v, %v; want a duplicate", mode, ran, err)
		}
		if ran, err := claims.Do(ctx, "handoff:lease", time.Minute, func(context.Context) error { return nil }); ran || !errors.Is(err, store.ErrInFlight) {
			t.Errorf("%s: Claims.Do(handoff:lease) = %v, %v; want ErrInFlight", mode, ran, err)
		}
		batch := []string{"handoff:{batch}:1", "handoff:{batch}:2"}
		if seen, err := claims.SeenMany(ctx, batch); err != nil || !cmp.Equal(seen, []bool{true, true}) {
			t.Errorf("%s: Claims.SeenMany(%q) = %v, %v; want both true", mode, batch, seen, err)
		}
		if won, err := claims.ClaimMany(ctx, batch); err != nil || !cmp.Equal(won, []bool{false, false}) {
			t.Errorf("%s: Claims.ClaimMany(%q) = %v, %v; want duplicates", mode, batch, won, err)
		}
		outbox := must.Store(store.NewOutbox(c, p))
		tail, err := outbox.Tail(ctx, "handoff:conn")
		if err != nil {
			t.Fatalf("%s: Outbox.Tail(handoff:conn): %v", mode, err)
		}
		if diff := cmp.Diff([]store.Message{{ID: "m1", Seq: 1, Payload: noncgoBin}}, tail.Messages); diff != "" || tail.Generation != 9 {
			t.Errorf("%s: Outbox.Tail(handoff:conn): generation %d (want 9), messages (-want +got):\n%s", mode, tail.Generation, diff)
		}
		tail, err = outbox.Tail(ctx, "handoff:burst")
		if err != nil {
			t.Fatalf("%s: Outbox.Tail(handoff:burst): %v", mode, err)
		}
		if diff := cmp.Diff([]store.Message{{ID: "m1", Seq: 1, Payload: noncgoBin}, {ID: "m2", Seq: 2, Payload: []byte("two")}}, tail.Messages); diff != "" {
			t.Errorf("%s: Outbox.Tail(handoff:burst): messages (-want +got):\n%s", mode, diff)
		}
		r, ok, err := must.Store(store.NewRecords(c, p)).Get(ctx, "handoff:rec")
		if !ok || err != nil {
			t.Fatalf("%s: Records.Get(handoff:rec) = %v, %v", mode, ok, err)
		}
		// The fence: the server's clock (ns) when the non-Go caller created it.
		if r.Status != store.StatusCompleted || !bytes.Equal(r.Payload, noncgoBin) || r.Fence < 1e18 {
			t.Errorf("%s: Records.Get(handoff:rec) = status %q, payload %q, fence %d; want completed, the 256 bytes, a clock fence", mode, r.Status, r.Payload, r.Fence)
		}
	}
}

func TestNonGoClientsPython(t *testing.T) {
	py := redisPython(t)
	runNonGoFlows(t, "redis-py", py, "flows.py")
}

func TestNonGoClientsIORedis(t *testing.T) {
	runNonGoFlows(t, "ioredis", nodeClients(t), "ioredis.mjs")
}

func TestNonGoClientsNodeRedis(t *testing.T) {
	node := nodeClients(t)
	t.Run("v5", func(t *testing.T) { runNonGoFlows(t, "node-redis5", node, "node-redis.mjs") })
	t.Run("v4", func(t *testing.T) { runNonGoFlows(t, "node-redis4", node, "node-redis-v4.mjs") })
}
