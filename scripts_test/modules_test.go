package scripts_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The release test: every published module of this repository can be fetched
// and built from outside it, with no replace and no workspace, the way a user
// gets it (docs/releasing.md).
//
// TestModulesFromLocalProxy tags this checkout's tree as a release would, in a
// throwaway git repository standing in for github.com/redisonce/redisonce;
// lets the go command build a file-based module proxy from those tags (the
// zips it makes are the ones proxy.golang.org would serve); then, in a fresh
// consumer module outside the repository with a fresh module cache, `go get`s
// every published module @latest through that proxy, builds a program that
// imports each of their packages, and `go install`s cmd/redisonce@latest.

// modulePrefix is the module path of the root module; every module of the
// repository has it as a prefix.
const modulePrefix = "github.com/redisonce/redisonce"

// unpublished are the workspace modules that are never tagged: scripts_test
// is this test harness, built only inside the workspace.
var unpublished = map[string]bool{modulePrefix + "/scripts_test": true}

// repoModule is one module of the workspace.
type repoModule struct {
	Path string // module path
	Dir  string // relative to the repository root, "." for the root
}

// goModJSON is what `go mod edit -json` prints (the fields used here).
type goModJSON struct {
	Module  struct{ Path string }
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
	Use []struct{ DiskPath string }
}

func goModEdit(t *testing.T, file string) goModJSON {
	t.Helper()
	verb := "mod"
	if filepath.Base(file) == "go.work" {
		verb = "work"
	}
	out, err := exec.Command("go", verb, "edit", "-json", file).Output()
	if err != nil {
		t.Fatalf("go %s edit -json %s: %v", verb, file, err)
	}
	var m goModJSON
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("go %s edit -json %s: %v", verb, file, err)
	}
	return m
}

// run runs a command in dir with env (nil: the test's own) and returns its
// combined output, failing the test when it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	return command(t, dir, env, true, name, args...)
}

// output is run for a command whose standard output is parsed: it returns
// that alone (go's "go: downloading ..." lines go to standard error, and
// are shown only when the command fails).
func output(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	return command(t, dir, env, false, name, args...)
}

// command runs name in dir with env and returns its standard output, with
// its standard error in it when combined.
func command(t *testing.T, dir string, env []string, combined bool, name string, args ...string) string {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("%5.1fs %s %s", time.Since(start).Seconds(), name, strings.Join(args, " ")) }()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if combined {
		cmd.Stderr = &out
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s%s", name, strings.Join(args, " "), dir, err, out.Bytes(), stderr.Bytes())
	}
	return out.String()
}

// releaseLayout reads the workspace and checks, without building anything,
// what a release needs: go.work uses every module of the tree; no published
// go.mod has a replace; every requirement of one module of the repository on
// another names the same version, the release being prepared; and go.work
// maps exactly that version of each published module to its directory. It
// returns the modules and that version.
func releaseLayout(t *testing.T, root string) ([]repoModule, string) {
	t.Helper()
	work := goModEdit(t, filepath.Join(root, "go.work"))
	var mods []repoModule
	used := map[string]bool{}
	for _, u := range work.Use {
		dir := filepath.Clean(u.DiskPath)
		used[dir] = true
		m := goModEdit(t, filepath.Join(root, dir, "go.mod"))
		if m.Module.Path != modulePrefix && !strings.HasPrefix(m.Module.Path, modulePrefix+"/") {
			t.Errorf("go.work uses %s, module %s: not under %s", dir, m.Module.Path, modulePrefix)
			continue
		}
		if want := strings.TrimPrefix(strings.TrimPrefix(m.Module.Path, modulePrefix), "/"); want != strings.TrimPrefix(filepath.ToSlash(dir), ".") {
			// A tag names the module's directory: a module path that is not
			// its directory cannot be released by "tag <dir>/vX".
			t.Errorf("module %s lives in %s; its path must be its directory (%s)", m.Module.Path, dir, modulePrefix+"/"+filepath.ToSlash(dir))
		}
		mods = append(mods, repoModule{Path: m.Module.Path, Dir: dir})
	}
	// Every go.mod of the tree (tracked or about to be) is in the workspace.
	files := strings.Fields(run(t, root, nil, "git", "ls-files", "--cached", "--others", "--exclude-standard", "--", ":(glob)**/go.mod"))
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			continue // deleted in the work tree
		}
		if dir := filepath.Dir(f); !used[dir] {
			t.Errorf("%s is not in go.work: add it (go work use ./%s)", f, dir)
		}
	}
	versions := map[string][]string{} // version -> "module requires path"
	for _, rm := range mods {
		m := goModEdit(t, filepath.Join(root, rm.Dir, "go.mod"))
		if !unpublished[rm.Path] && len(m.Replace) > 0 {
			t.Errorf("%s/go.mod has a replace (%s => %s): a user's build ignores it; require a released version (docs/releasing.md)",
				rm.Dir, m.Replace[0].Old.Path, m.Replace[0].New.Path)
		}
		for _, r := range m.Require {
			if r.Path == modulePrefix || strings.HasPrefix(r.Path, modulePrefix+"/") {
				versions[r.Version] = append(versions[r.Version], rm.Path+" requires "+r.Path)
			}
		}
	}
	if len(versions) != 1 {
		t.Fatalf("the modules of this repository must require each other at one version, the release being prepared; found %v", versions)
	}
	var release string
	for v := range versions {
		release = v
	}
	want := map[string]string{}
	for _, rm := range mods {
		if !unpublished[rm.Path] {
			want[rm.Path+"@"+release] = rm.Dir
		}
	}
	got := map[string]string{}
	for _, r := range work.Replace {
		got[r.Old.Path+"@"+r.Old.Version] = filepath.Clean(r.New.Path)
	}
	for k, dir := range want {
		if got[k] != dir {
			t.Errorf("go.work: want replace %s => ./%s (got %q)", strings.Replace(k, "@", " ", 1), dir, got[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("go.work replaces %s, not a published module at the release %s", k, release)
		}
	}
	return mods, release
}

// TestReleaseLayout is releaseLayout on its own (fast, nothing built), and
// checks that `make release-tags`, which docs/releasing.md has the release
// push, prints the tags this test tags, in the same order.
func TestReleaseLayout(t *testing.T) {
	root := strings.TrimSpace(run(t, ".", nil, "git", "rev-parse", "--show-toplevel"))
	mods, release := releaseLayout(t, root)
	t.Logf("release %s of %d modules", release, len(mods))
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("no make: %v", err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { // not the calling make's
		k, _, _ := strings.Cut(kv, "=")
		return k == "MAKEFLAGS" || k == "MFLAGS" || k == "MAKELEVEL"
	})
	got := strings.Fields(run(t, root, env, "make", "-s", "release-tags", "VERSION="+release))
	if want := releaseTags(mods, release); !slices.Equal(got, want) {
		t.Errorf("make release-tags VERSION=%s printed %v, want %v", release, got, want)
	}
}

// releaseTags returns the tags a release of version puts on its commit, in the
// order docs/releasing.md pushes them: the root module first (the others
// require it), then each published submodule "<dir>/<version>".
func releaseTags(mods []repoModule, version string) []string {
	var tags []string
	for _, m := range mods {
		switch {
		case unpublished[m.Path]:
		case m.Dir == ".":
			tags = slices.Insert(tags, 0, version)
		default:
			tags = append(tags, filepath.ToSlash(m.Dir)+"/"+version)
		}
	}
	return tags
}

func TestModulesFromLocalProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds every published module from a local proxy")
	}
	for _, tool := range []string{"git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH: %v", tool, err)
		}
	}
	root := strings.TrimSpace(run(t, ".", nil, "git", "rev-parse", "--show-toplevel"))
	mods, release := releaseLayout(t, root)
	if t.Failed() {
		t.FailNow()
	}
	tmp := t.TempDir()

	// 1. The release commit: this work tree's files (tracked and new, as
	// `git add -A` would take them), one commit, the release's tags.
	repo := filepath.Join(tmp, "repo")
	files := run(t, root, nil, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	for f := range strings.SplitSeq(strings.TrimSuffix(files, "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(repo, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	gitEnv := append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+filepath.Join(tmp, "gitconfig"),
		"GIT_AUTHOR_NAME=release", "GIT_AUTHOR_EMAIL=release@example.invalid",
		"GIT_COMMITTER_NAME=release", "GIT_COMMITTER_EMAIL=release@example.invalid")
	// github.com/redisonce/redisonce is this throwaway repository.
	gitconfig := fmt.Sprintf("[url %q]\n\tinsteadOf = https://%s\n[protocol \"file\"]\n\tallow = always\n[init]\n\tdefaultBranch = main\n",
		"file://"+repo, modulePrefix)
	if err := os.WriteFile(filepath.Join(tmp, "gitconfig"), []byte(gitconfig), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, repo, gitEnv, "git", "init", "-q")
	run(t, repo, gitEnv, "git", "add", "-A")
	run(t, repo, gitEnv, "git", "commit", "-q", "-m", "release "+release)
	tags := releaseTags(mods, release)
	for _, tag := range tags {
		run(t, repo, gitEnv, "git", "tag", "-a", "-m", tag, tag)
	}
	t.Logf("tagged %s", strings.Join(tags, " "))

	// 2. The proxy: the go command fetches each tagged module from the
	// repository (as proxy.golang.org does) into a module cache, whose
	// download directory is a GOPROXY=file:// tree.
	stageCache := filepath.Join(tmp, "stage-modcache")
	stageEnv := append(goEnv(gitEnv),
		"GOMODCACHE="+stageCache, "GOPROXY=direct", "GOPRIVATE="+modulePrefix,
		"GOFLAGS=-mod=mod", "GOWORK=off", "GOSUMDB=off")
	var published []string
	for _, m := range mods {
		if !unpublished[m.Path] {
			published = append(published, m.Path)
		}
	}
	args := []string{"mod", "download", "-json"}
	for _, p := range published {
		args = append(args, p+"@"+release)
	}
	run(t, tmp, stageEnv, "go", args...)
	proxy := filepath.Join(stageCache, "cache", "download")
	ziphash := map[string]string{} // module path -> h1: of the zip the proxy serves
	for _, p := range published {
		b, err := os.ReadFile(filepath.Join(proxy, p, "@v", release+".ziphash"))
		if err != nil {
			t.Fatalf("the proxy has no %s@%s: %v", p, release, err)
		}
		ziphash[p] = strings.TrimSpace(string(b))
	}

	// 3. Every published go.mod is tidy as the release resolves it (the
	// modules of this repository from the proxy, no replace): a user who runs
	// the module's own tests (go test <module>/...) needs every requirement
	// listed. go.sum is left out: before a release it cannot hold the sums of
	// this repository's modules at the release version.
	hostCache := strings.TrimSpace(output(t, root, nil, "go", "env", "GOMODCACHE"))
	hostProxy := strings.TrimSpace(output(t, root, nil, "go", "env", "GOPROXY"))
	goproxy := "GOPROXY=file://" + proxy + ",file://" + filepath.Join(hostCache, "cache", "download") + "," + hostProxy
	tidyEnv := append(goEnv(os.Environ()), goproxy, "GOMODCACHE="+filepath.Join(tmp, "tidy-modcache"),
		"GONOSUMDB="+modulePrefix, "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	for _, m := range mods {
		if unpublished[m.Path] {
			continue
		}
		cmd := exec.Command("go", "mod", "tidy", "-diff")
		cmd.Dir, cmd.Env = filepath.Join(repo, m.Dir), tidyEnv
		out, err := cmd.CombinedOutput()
		if err == nil {
			continue
		}
		if !strings.Contains(string(out), "go.sum") && !strings.Contains(string(out), "go.mod") {
			t.Fatalf("go mod tidy -diff in %s: %v\n%s", m.Dir, err, out)
		}
		// The diff, file by file: only go.mod's part counts.
		for part := range strings.SplitSeq(string(out), "diff ") {
			if strings.Contains(part, "go.mod\n") && strings.Contains(part, "\n@@") {
				t.Errorf("%s/go.mod is not tidy as a release resolves it (make tidy):\ndiff %s", m.Dir, part)
			}
		}
	}

	// 4. The consumer: a fresh module outside the repository and a fresh
	// module cache. Modules of this repository come from the proxy only;
	// third-party modules from this machine's module cache, then its own
	// GOPROXY. No workspace, no replace, no sum database (the release's
	// modules are in no sum database yet; GOSUMDB=off covers the third-party
	// ones, which the machine's own builds already checked).
	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		t.Fatal(err)
	}
	useEnv := append(goEnv(os.Environ()),
		"GOMODCACHE="+filepath.Join(tmp, "consumer-modcache"),
		"GOPATH="+filepath.Join(tmp, "gopath"), "GOBIN="+filepath.Join(tmp, "bin"),
		goproxy,
		"GONOSUMDB="+modulePrefix, "GOSUMDB=off",
		// -trimpath: the build cache is then shared across fresh module caches.
		"GOFLAGS=-mod=mod -trimpath", "GOWORK=off")
	gomod := "module example.com/consumer\n\ngo 1.26.0\n"
	if err := os.WriteFile(filepath.Join(consumer, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	// Import every importable package of every published module.
	var imports []string
	for _, m := range mods {
		if unpublished[m.Path] {
			continue
		}
		out := output(t, filepath.Join(root, m.Dir), nil, "go", "list", "-f", `{{if ne .Name "main"}}{{.ImportPath}}{{end}}`, "./...")
		for p := range strings.FieldsSeq(out) {
			if !strings.Contains(p+"/", "/internal/") {
				imports = append(imports, p)
			}
		}
	}
	var src bytes.Buffer
	src.WriteString("package main\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\n")
	for _, p := range imports {
		if p == modulePrefix+"/store" {
			fmt.Fprintf(&src, "\t%q\n", p)
		} else {
			fmt.Fprintf(&src, "\t_ %q\n", p)
		}
	}
	src.WriteString(`)

func main() {
	s, err := store.NewMemoryClaims()
	if err != nil {
		panic(err)
	}
	ran, err := s.Do(context.Background(), "m1", 1e9, func(context.Context) error { return nil })
	fmt.Println("ran", ran, err)
}
`)
	if err := os.WriteFile(filepath.Join(consumer, "main.go"), src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	args = []string{"get"}
	for _, p := range published {
		args = append(args, p+"@latest") // the README's `go get <module>`
	}
	run(t, consumer, useEnv, "go", args...)
	run(t, consumer, useEnv, "go", "build", "-o", "consumer", ".")
	if out := run(t, consumer, nil, "./consumer"); out != "ran true <nil>\n" {
		t.Errorf("the consumer printed %q, want \"ran true <nil>\\n\"", out)
	}
	// What was resolved: every module of the repository at the release, from
	// the consumer's module cache, with the zip the proxy serves; no replace.
	cm := goModEdit(t, filepath.Join(consumer, "go.mod"))
	if len(cm.Replace) > 0 {
		t.Errorf("the consumer's go.mod has a replace: %v", cm.Replace)
	}
	for _, p := range published {
		out := output(t, consumer, useEnv, "go", "list", "-m", "-f", "{{.Version}} {{.Dir}} {{with .Replace}}REPLACED{{end}}", p)
		f := strings.Fields(out)
		if len(f) != 2 || f[0] != release || !strings.HasPrefix(f[1], filepath.Join(tmp, "consumer-modcache")) {
			t.Errorf("%s resolved to %q, want %s from the consumer's module cache", p, strings.TrimSpace(out), release)
		}
	}
	sums := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(readFile(t, filepath.Join(consumer, "go.sum"))))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[1] == release {
			sums[f[0]] = f[2]
		}
	}
	for _, p := range published {
		if sums[p] != ziphash[p] {
			t.Errorf("go.sum has %s %s %q; the proxy built from the tags serves %q", p, release, sums[p], ziphash[p])
		}
	}
	// The README's install line for the CLI.
	run(t, tmp, useEnv, "go", "install", modulePrefix+"/cmd/redisonce@latest")
	out := run(t, tmp, useEnv, filepath.Join(tmp, "bin", "redisonce"), "version")
	if first, _, _ := strings.Cut(out, "\n"); strings.Join(strings.Fields(first), " ") != "redisonce "+release {
		t.Errorf("redisonce version printed %q, want \"redisonce %s\" first", out, release)
	}
	t.Logf("%d modules, %d packages fetched and built from the local proxy", len(published), len(imports))
}

// goEnv is env without the go command's settings that would leak this
// machine's or this repository's configuration into a build that must stand
// alone (the caller sets what it needs).
func goEnv(env []string) []string {
	drop := []string{"GOFLAGS", "GOWORK", "GOPROXY", "GOPRIVATE", "GONOPROXY", "GONOSUMDB", "GOSUMDB",
		"GOMODCACHE", "GOPATH", "GOBIN", "GOINSECURE", "GOTOOLCHAIN", "GOENV"}
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(drop, k)
	})
	// GOENV=off: the user's go env file (GOFLAGS, GOPROXY...) is not read.
	return append(out, "GOTOOLCHAIN=local", "GOENV=off")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
