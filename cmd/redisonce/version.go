package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/server"
)

func versionCommand() *command {
	return &command{
		name:    "version",
		summary: "the module version and the scripts' version (the Functions library suffix)",
		help: `
Prints the redisonce module version — the tag this binary was built from
(go install github.com/redisonce/redisonce/cmd/redisonce@v1.2.3), or "(devel)"
for a build from a checkout — and the scripts' version: the first 12 hex of the
SHA1 of scripts/SHA1SUMS, which changes whenever any script does. It is the
suffix of the Functions library ('redisonce functions'): compare it with
FUNCTION LIST on a server to see whether the server runs these scripts.

With --url (or $REDIS_URL) it also reports, per primary, how many of these
scripts are in the script cache (SCRIPT EXISTS) and which redisonce_*
Functions libraries are loaded: whether the server runs this version. When
that server cannot be reached, the local versions are still printed, the
error follows on stderr, and the exit code is 1.

  redisonce version
  redisonce version --url redis://127.0.0.1:6379
  redisonce version --json`,
		nargs: exactly(0),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			asJSON := fs.Bool("json", false, "print one JSON object: module, version, scripts, library, scripts_count, go, servers")
			u := fs.String("url", os.Getenv("REDIS_URL"), "also check what a server holds: redis://[user:password@]host:port[/db], ... (default $REDIS_URL, else no server)")
			return func(ctx context.Context, e *env, _ []string) error {
				bi, ok := debug.ReadBuildInfo()
				v := versionInfo{
					Module:  "github.com/redisonce/redisonce",
					Version: moduleVersion(bi, ok),
					Scripts: redisonce.Version(),
					Count:   len(redisonce.All()),
					Go:      runtime.Version(),
				}
				v.Library, _ = redisonce.FunctionsLibrary()
				var err error
				if *u != "" {
					v.Server, err = serverVersions(ctx, *u, v.Library)
				}
				if *asJSON {
					if jerr := writeJSON(e.stdout, v); jerr != nil {
						return jerr
					}
					return err
				}
				fmt.Fprintf(e.stdout, "redisonce %s\n", v.Version)
				fmt.Fprintf(e.stdout, "scripts   %s (%d scripts; Functions library %s)\n", v.Scripts, v.Count, v.Library)
				fmt.Fprintf(e.stdout, "go        %s\n", v.Go)
				if v.Server != nil {
					printServerVersions(e.stdout, v.Server, v.Count, v.Library)
				}
				return err
			}
		},
	}
}

type versionInfo struct {
	Module  string `json:"module"`
	Version string `json:"version"`
	Scripts string `json:"scripts"`
	Library string `json:"library"`
	Count   int    `json:"scripts_count"`
	Go      string `json:"go"`
	// Server is what the server at --url holds, when one was given.
	Server *serverHolds `json:"server,omitempty"`
}

// serverHolds is what a deployment's primaries hold of the bundle.
type serverHolds struct {
	URL       string        `json:"url"`
	Primaries []primaryHold `json:"primaries"`
}

type primaryHold struct {
	Addr          string   `json:"addr"`
	Software      string   `json:"software"`
	ScriptsLoaded int      `json:"scripts_loaded"` // of this bundle's scripts, in the script cache
	Libraries     []string `json:"libraries"`      // redisonce_* Functions libraries loaded
}

// serverVersions asks every primary which of the bundle's scripts it has
// cached and which redisonce_* libraries it has loaded.
func serverVersions(ctx context.Context, rawURL, library string) (*serverHolds, error) {
	srv, err := server.Connect(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	nodes, err := srv.Primaries(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, server.CmdTimeout)
	defer cancel()
	shas := []string{}
	for _, s := range redisonce.All() {
		shas = append(shas, s.SHA1)
	}
	h := &serverHolds{URL: srv.Where}
	for _, n := range nodes {
		p := primaryHold{Addr: n.Addr, Software: n.Software(ctx), Libraries: []string{}}
		exists, err := n.Client.Do(ctx, n.Client.B().ScriptExists().Sha1(shas...).Build()).AsIntSlice()
		if err != nil {
			return h, server.Explain(err, n.Addr)
		}
		for _, x := range exists {
			p.ScriptsLoaded += int(x)
		}
		libs, err := listLibraries(ctx, n, redisonce.FunctionPrefix+"*")
		if err != nil {
			return h, err
		}
		for _, l := range libs {
			p.Libraries = append(p.Libraries, l.name)
		}
		h.Primaries = append(h.Primaries, p)
	}
	return h, nil
}

func printServerVersions(w io.Writer, h *serverHolds, count int, library string) {
	fmt.Fprintf(w, "server    %s, %s\n", h.URL, plural(len(h.Primaries), "primary", "primaries"))
	for _, p := range h.Primaries {
		libs := "no redisonce Functions library"
		if len(p.Libraries) > 0 {
			libs = "Functions library " + showAll(p.Libraries)
			if len(p.Libraries) == 1 && p.Libraries[0] == library {
				libs += " (this version)"
			} else {
				libs += " (not this version: 'redisonce functions --load' installs it)"
			}
		}
		fmt.Fprintf(w, "  %s (%s): %d of %d scripts in the script cache; %s\n", p.Addr, p.Software, p.ScriptsLoaded, count, libs)
	}
}

// pseudoVersion matches the timestamp-and-commit part of a Go
// pseudo-version (v0.0.0-20260101120000-abcdef123456): an untagged build.
var pseudoVersion = regexp.MustCompile(`(^|[-.])(0\.)?\d{14}-[0-9a-f]{12}(\+|$)`)

// moduleVersion is the main module's version when the binary was built from
// a tagged module version, else "(devel)": a build from a checkout (which
// Go >= 1.24 stamps with a pseudo-version or a +dirty suffix), or no build
// information.
func moduleVersion(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "(devel)"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" || pseudoVersion.MatchString(v) || strings.HasSuffix(v, "+dirty") {
		return "(devel)"
	}
	return v
}
