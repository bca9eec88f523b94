package redisonce

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io/fs"
	"strings"
	"sync"
)

// FunctionPrefix starts the name of the Functions library and of every function
// in it: script "claim" becomes function "redisonce_claim".
const FunctionPrefix = "redisonce_"

// FunctionName returns the name of the Redis function that runs script name in
// the library FunctionsLibrary generates, e.g. "redisonce_claim".
func FunctionName(name string) string { return FunctionPrefix + name }

// Version is the bundle's version hash: the first 12 hex characters of the
// SHA1 of scripts/SHA1SUMS. It changes whenever any script changes, is added
// or is removed.
func Version() string {
	v, _ := functionsLibrary()
	return v
}

// FunctionsLibrary returns a Redis Functions library (Redis >= 7.0) generated
// from the very same embedded scripts, ready for FUNCTION LOAD [REPLACE]:
//
//   - the library is named "redisonce_" + Version(), so two bundles never
//     mistake each other's library for their own;
//   - every script becomes function "redisonce_<name>", its file's bytes minus
//     the shebang line wrapped as `function(KEYS, ARGV) ... end`, so a caller
//     runs `FCALL redisonce_claim 1 key ttl_ms value` with exactly the KEYS and
//     ARGV the script's header documents;
//   - read-only scripts (#!lua flags=no-writes) are registered with the
//     no-writes flag, so FCALL_RO and replicas accept them; scripts that only
//     remove data (#!lua flags=allow-oom) with the allow-oom flag, so they run
//     when the server is out of memory; the others carry no flag, so, like a
//     #!lua script, they are refused up front when the server is out of memory;
//   - each function's description is the script's one-line Summary.
//
// Function names do not carry the version: a newer library cannot be loaded
// while an older redisonce_* library still holds the names, so an installer
// deletes older redisonce_* libraries first (`redisonce functions --load` does,
// in one MULTI/EXEC with the load). The output is deterministic.
func FunctionsLibrary() (name, code string) {
	v, code := functionsLibrary()
	return FunctionPrefix + v, code
}

// functionsLibrary computes the version and the library code once.
var functionsLibrary = sync.OnceValues(func() (version, code string) {
	sums, err := fs.ReadFile(FS, "scripts/SHA1SUMS")
	if err != nil {
		// Embedded at build time; parseAll already refuses a bundle without it.
		panic("redisonce: " + err.Error())
	}
	h := sha1.Sum(sums)
	version = hex.EncodeToString(h[:])[:12]
	return version, generateLibrary(FunctionPrefix+version, All())
})

// generateLibrary renders the library code for the given scripts.
func generateLibrary(lib string, scripts []Script) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!lua name=%s\n", lib)
	b.WriteString("-- Generated from scripts/*.lua by `redisonce functions` (redisonce.FunctionsLibrary);\n")
	b.WriteString("-- do not edit. Each function is one script file, shebang line dropped, wrapped in\n")
	b.WriteString("-- function(KEYS, ARGV) ... end: FCALL " + FunctionPrefix + "<name> 1 key arg...\n")
	for _, s := range scripts {
		_, body, _ := strings.Cut(s.Source, "\n") // drop the shebang line
		if !strings.HasSuffix(body, "\n") {
			body += "\n"
		}
		fmt.Fprintf(&b, "\n-- %s.lua sha1 %s\n", s.Name, s.SHA1)
		b.WriteString("redis.register_function{\n")
		fmt.Fprintf(&b, "  function_name = %s,\n", luaQuote(FunctionName(s.Name)))
		fmt.Fprintf(&b, "  description = %s,\n", luaQuote(s.Summary()))
		switch {
		case s.ReadOnly:
			b.WriteString("  flags = { 'no-writes' },\n")
		case s.AllowOOM:
			b.WriteString("  flags = { 'allow-oom' },\n")
		}
		b.WriteString("  callback = function(KEYS, ARGV)\n")
		b.WriteString(body)
		b.WriteString("end,\n}\n")
	}
	return b.String()
}

// luaQuote renders s as a Lua string literal in single quotes.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}
