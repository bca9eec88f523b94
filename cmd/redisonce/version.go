package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/redisonce/redisonce"
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

  redisonce version
  redisonce version --json`,
		nargs: exactly(0),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			asJSON := fs.Bool("json", false, "print one JSON object: module, version, scripts, library, scripts_count, go")
			return func(_ context.Context, e *env, _ []string) error {
				bi, ok := debug.ReadBuildInfo()
				v := versionInfo{
					Module:  "github.com/redisonce/redisonce",
					Version: moduleVersion(bi, ok),
					Scripts: redisonce.Version(),
					Count:   len(redisonce.All()),
					Go:      runtime.Version(),
				}
				v.Library, _ = redisonce.FunctionsLibrary()
				if *asJSON {
					return json.NewEncoder(e.stdout).Encode(v)
				}
				fmt.Fprintf(e.stdout, "redisonce %s\n", v.Version)
				fmt.Fprintf(e.stdout, "scripts   %s (%d scripts; Functions library %s)\n", v.Scripts, v.Count, v.Library)
				fmt.Fprintf(e.stdout, "go        %s\n", v.Go)
				return nil
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
