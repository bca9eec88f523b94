package scripts_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/redisproc"
)

// The redisonce command as a user runs it: built once, run as a process
// against real servers, its output piped into redis-cli.

// buildCLI builds cmd/redisonce into dir.
func buildCLI(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(dir, "redisonce")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/redisonce/redisonce/cmd/redisonce")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/redisonce: %v\n%s", err, out)
	}
	return bin
}

// runCLI runs the binary and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "REDIS_URL=") // tests always pass --url
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("redisonce %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), 0
}

// primaries returns a client per master of the deployment behind c.
func primaries(t *testing.T, c rueidis.Client) map[string]rueidis.Client {
	t.Helper()
	out := map[string]rueidis.Client{}
	for addr, n := range c.Nodes() {
		role, err := n.Do(context.Background(), n.B().Role().Build()).ToArray()
		if err != nil || len(role) == 0 {
			t.Fatalf("ROLE on %s: %v", addr, err)
		}
		if r, _ := role[0].ToString(); r == "master" {
			out[addr] = n
		}
	}
	return out
}

func TestCLI(t *testing.T) {
	bin := buildCLI(t, t.TempDir())

	t.Run("functions output loads with redis-cli", func(t *testing.T) {
		srv := newServer(t, redisproc.Options{})
		code, errs, exit := runCLI(t, bin, "functions")
		if exit != 0 {
			t.Fatalf("redisonce functions: exit %d, %s", exit, errs)
		}
		name, _ := redisonce.FunctionsLibrary()
		if out, failed := runRedisCLI(t, srv.URL(), []byte(code), "-x", "FUNCTION", "LOAD"); failed || out != name {
			t.Fatalf("redisonce functions | redis-cli -x FUNCTION LOAD: %q (failed %v), want %s", out, failed, name)
		}
		list, err := srv.Do("FUNCTION", "LIST", "LIBRARYNAME", name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range redisonce.All() {
			if !strings.Contains(list, "\n"+redisonce.FunctionName(s.Name)+"\n") {
				t.Errorf("FUNCTION LIST has no %s:\n%s", redisonce.FunctionName(s.Name), list)
			}
		}
		if got, err := srv.Do("FCALL", "redisonce_claim", "1", "k", "0", "1"); err != nil || got != "1" {
			t.Errorf("FCALL redisonce_claim = %q, %v; want 1", got, err)
		}
		// show is byte for byte: its SHA1 is the registry's.
		for _, s := range redisonce.All() {
			src, _, _ := runCLI(t, bin, "show", s.Name)
			if out, failed := runRedisCLI(t, srv.URL(), []byte(src), "-x", "SCRIPT", "LOAD"); failed || out != s.SHA1 {
				t.Errorf("redisonce show %s | redis-cli -x SCRIPT LOAD: %q, want %s", s.Name, out, s.SHA1)
			}
		}
	})

	for _, tc := range []struct {
		name    string
		url     func(*testing.T) string
		masters int
	}{
		{"1-node cluster", clusterURL, 1},
		{"3-master cluster", cluster3URL, 3},
	} {
		t.Run("load on the "+tc.name, func(t *testing.T) {
			url := tc.url(t)
			c := newClient(t, url)
			nodes := primaries(t, c)
			if len(nodes) != tc.masters {
				t.Fatalf("%d primaries, want %d", len(nodes), tc.masters)
			}
			ctx := context.Background()
			shas := make([]string, 0)
			for _, s := range redisonce.All() {
				shas = append(shas, s.SHA1)
			}
			exists := func(n rueidis.Client) []int64 {
				v, err := n.Do(ctx, n.B().ScriptExists().Sha1(shas...).Build()).AsIntSlice()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			// Start from an empty script cache (the stores fall back to EVAL
			// meanwhile, so sharing the cluster with other tests is fine).
			for addr, n := range nodes {
				if err := n.Do(ctx, n.B().ScriptFlush().Build()).Error(); err != nil {
					t.Fatalf("SCRIPT FLUSH on %s: %v", addr, err)
				}
			}
			out, errs, exit := runCLI(t, bin, "load", "--url", url)
			if exit != 0 {
				t.Fatalf("redisonce load: exit %d, %s", exit, errs)
			}
			var want strings.Builder
			for _, s := range redisonce.All() {
				want.WriteString(s.Name + " " + s.SHA1 + "\n")
			}
			if out != want.String() {
				t.Errorf("stdout %q, want %q", out, want.String())
			}
			for addr, n := range nodes {
				for i, e := range exists(n) {
					if e != 1 {
						t.Errorf("%s: script %s not loaded after redisonce load", addr, redisonce.All()[i].Name)
					}
				}
				if !strings.Contains(errs, addr) {
					t.Errorf("stderr %q does not name primary %s", errs, addr)
				}
			}
			// EVALSHA now works on every slot, with no EVAL fallback.
			seen, _ := redisonce.Get("seen")
			for i := range 20 {
				key := "cli-load:" + tc.name + ":" + string(rune('a'+i))
				if err := c.Do(ctx, c.B().EvalshaRo().Sha1(seen.SHA1).Numkeys(1).Key(key).Build()).Error(); err != nil {
					t.Fatalf("EVALSHA_RO seen on %q after load: %v", key, err)
				}
			}
		})
	}

	t.Run("functions --load on the 3-master cluster", func(t *testing.T) {
		url := cluster3URL(t)
		c := newClient(t, url)
		out, errs, exit := runCLI(t, bin, "functions", "--load", "--url", url)
		if exit != 0 {
			t.Fatalf("redisonce functions --load: exit %d, %s", exit, errs)
		}
		name, _ := redisonce.FunctionsLibrary()
		for addr := range primaries(t, c) {
			if !strings.Contains(out, addr+": loaded library "+name) {
				t.Errorf("stdout does not report %s:\n%s", addr, out)
			}
		}
		ctx := context.Background()
		for i := range 20 {
			key := "cli-fcall:" + string(rune('a'+i))
			got, err := c.Do(ctx, c.B().Fcall().Function("redisonce_claim").Numkeys(1).Key(key).Arg("60000", "1").Build()).AsInt64()
			if err != nil || got != 1 {
				t.Fatalf("FCALL redisonce_claim %q = %d, %v; want 1", key, got, err)
			}
			got, err = c.Do(ctx, c.B().FcallRo().Function("redisonce_forget").Numkeys(1).Key(key).Build()).AsInt64()
			if err == nil {
				t.Fatalf("FCALL_RO of a write function %q = %d; want it refused", key, got)
			}
			if got, err = c.Do(ctx, c.B().Fcall().Function("redisonce_forget").Numkeys(1).Key(key).Build()).AsInt64(); err != nil || got != 1 {
				t.Fatalf("FCALL redisonce_forget %q = %d, %v; want 1", key, got, err)
			}
		}
	})

	t.Run("demo on the 3-master cluster", func(t *testing.T) {
		url := cluster3URL(t)
		out, errs, exit := runCLI(t, bin, "demo", "--url", url)
		if exit != 0 {
			t.Fatalf("redisonce demo: exit %d, %s\n%s", exit, errs, out)
		}
		if !strings.Contains(out, "cluster, 3 primaries") || !strings.Contains(out, "\nok: every effect applied exactly once") {
			t.Errorf("demo output:\n%s", out)
		}
		c := newClient(t, url)
		for addr, n := range primaries(t, c) {
			keys, err := n.Do(context.Background(), n.B().Keys().Pattern("redisonce-demo:*").Build()).AsStrSlice()
			if err != nil || len(keys) != 0 {
				t.Errorf("%s: demo keys left behind: %v, %v", addr, keys, err)
			}
		}
	})

	t.Run("errors are one line", func(t *testing.T) {
		srv := newServer(t, redisproc.Options{Password: "sekret"})
		_, errs, exit := runCLI(t, bin, "load", "--url", "redis://:wrong@"+srv.Addr)
		if exit != 1 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "WRONGPASS") || strings.Contains(errs, "wrong@") {
			t.Errorf("wrong password: exit %d, stderr %q", exit, errs)
		}
	})
}
