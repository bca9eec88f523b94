// Package redisonce is the script bundle behind the redisonce stores: one atomic
// Redis Lua script per operation, embedded from scripts/*.lua, with the version
// hash (SHA1) of every script read from the checked-in scripts/SHA1SUMS.
//
// The package uses the standard library only, so any Go Redis client can load and
// run the scripts (SCRIPT LOAD + EVALSHA, or EVAL with Source). The Go stores in
// package store wrap these scripts with rueidis.
//
// Every script takes exactly one key, KEYS[1] = prefix + id, built by the caller
// (the batch scripts claim_many and seen_many: 1..MaxBatchKeys keys of one hash
// slot), and refuses any other count, or a key outside 1..MaxKeyLen bytes, with
// BADARG before anything else. Each documents its KEYS, ARGV, replies and errors in a header that a test keeps
// true. Errors are replies whose first word is one of BADARG, STALE_OWNER,
// NOT_FOUND, FULL, MISMATCH, CORRUPT.
package redisonce

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// MaxKeyLen is the longest key a script accepts, in bytes: a key is prefix +
// id, a prefix at most 1024 bytes and an id 1..1024 (store.MaxIDLen), so every
// key a Go store sends fits. Every script refuses an empty key or a longer one
// with BADARG before anything else.
const MaxKeyLen = 2048

// MaxBatchKeys is the most keys a batch script (claim_many, seen_many) takes
// in one call; it refuses 0 keys or more than MaxBatchKeys with BADARG before
// anything else. The Go stores cut a bigger group into calls of at most this
// many keys.
const MaxBatchKeys = 500

// FS holds scripts/*.lua and scripts/SHA1SUMS exactly as checked in.
//
//go:embed scripts/*.lua scripts/SHA1SUMS
var FS embed.FS

// Script is one embedded operation.
type Script struct {
	// Name is the file name without ".lua", e.g. "claim".
	Name string
	// Source is the file's bytes, shebang and header included: the code that runs.
	Source string
	// SHA1 is the lower-case hex SHA1 of Source, as listed in scripts/SHA1SUMS; it is
	// the name EVALSHA uses and the script's version.
	SHA1 string
	// NumKeys is the number of keys the script takes: 1, or for a batch
	// script (Batch) the fewest it takes.
	NumKeys int
	// MaxKeys is the most keys the script takes: 1, or for a batch script
	// MaxBatchKeys.
	MaxKeys int
	// Batch is true for a script that takes NumKeys to MaxKeys keys, all in
	// one hash slot (header "KEYS (n=1..500)"), such as claim_many: callers
	// group a batch by slot and send one call per group.
	Batch bool
	// ReadOnly is true for scripts whose shebang carries flags=no-writes; they may
	// be run with EVALSHA_RO / FCALL_RO and on replicas.
	ReadOnly bool
	// AllowOOM is true for scripts whose shebang carries flags=allow-oom:
	// Redis runs them even when maxmemory is reached under noeviction, where
	// it refuses every other write script up front. They are the scripts that
	// remove data (ack, delete, drop, forget, release) or that end or keep
	// alive work already under way without growing memory (commit turns a
	// lease into the processed mark, extend and renew move an expiry): each
	// header's "Memory" line says why it is safe.
	AllowOOM bool
	// NoWait is true for scripts whose header's Caller line carries
	// flags=no-wait: a caller that waits for replicas after its writes
	// (WAIT) does not after this one.
	NoWait bool
	// Eval is true for scripts whose header's Caller line carries
	// flags=eval: callers send it as EVAL with Source, never EVALSHA.
	Eval bool
	// Doc is the header block between "--[[" and "]]": KEYS, ARGV, Returns, Errors,
	// Writes, Atomicity, Complexity, and where they apply Memory and Caller.
	Doc string
}

// Summary is the first line of the header: what the script does, in one sentence.
func (s Script) Summary() string {
	line, _, _ := strings.Cut(s.Doc, "\n")
	if _, after, ok := strings.Cut(line, " — "); ok {
		return strings.TrimSpace(after)
	}
	return strings.TrimSpace(line)
}

var (
	loadOnce sync.Once
	scripts  []Script
	byName   map[string]int
)

// All returns every script, sorted by name. The slice is a copy.
func All() []Script {
	load()
	return append([]Script(nil), scripts...)
}

// Get returns the script with the given name ("claim", not "claim.lua").
func Get(name string) (Script, bool) {
	load()
	i, ok := byName[name]
	if !ok {
		return Script{}, false
	}
	return scripts[i], true
}

func load() {
	loadOnce.Do(func() {
		var err error
		scripts, err = parseAll(FS)
		if err != nil {
			// The files are embedded at build time: a bad bundle is a build defect
			// that the package's tests catch, never a runtime condition.
			panic("redisonce: " + err.Error())
		}
		byName = make(map[string]int, len(scripts))
		for i, s := range scripts {
			byName[s.Name] = i
		}
	})
}

func parseAll(fsys fs.FS) ([]Script, error) {
	sums, err := fs.ReadFile(fsys, "scripts/SHA1SUMS")
	if err != nil {
		return nil, err
	}
	shaOf, err := parseSums(sums)
	if err != nil {
		return nil, err
	}
	files, err := fs.Glob(fsys, "scripts/*.lua")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	out := make([]Script, 0, len(files))
	for _, f := range files {
		src, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		base := path.Base(f)
		sha, ok := shaOf[base]
		if !ok {
			return nil, fmt.Errorf("%s is not listed in scripts/SHA1SUMS (run: make sums)", base)
		}
		s, err := parseScript(strings.TrimSuffix(base, ".lua"), string(src))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", base, err)
		}
		s.SHA1 = sha
		out = append(out, s)
	}
	return out, nil
}

// parseSums reads `sha1sum` output: "<40 hex>  <file>" per line.
func parseSums(b []byte) (map[string]string, error) {
	m := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		sum, file, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 40 {
			return nil, fmt.Errorf("SHA1SUMS: bad line %q", line)
		}
		m[strings.TrimPrefix(file, "*")] = sum
	}
	return m, sc.Err()
}

func parseScript(name, src string) (Script, error) {
	s := Script{Name: name, Source: src}
	first, rest, _ := strings.Cut(src, "\n")
	switch first {
	case "#!lua":
	case "#!lua flags=no-writes":
		s.ReadOnly = true
	case "#!lua flags=allow-oom":
		s.AllowOOM = true
	default:
		return s, fmt.Errorf("line 1 is %q, want \"#!lua\", \"#!lua flags=no-writes\" or \"#!lua flags=allow-oom\"", first)
	}
	if !strings.HasPrefix(rest, "--[[") {
		return s, fmt.Errorf("line 2 does not open the --[[ header")
	}
	doc, _, ok := strings.Cut(rest[len("--[["):], "]]")
	if !ok {
		return s, fmt.Errorf("header is not closed with ]]")
	}
	s.Doc = strings.TrimSpace(doc)
	_, keys, ok := strings.Cut(s.Doc, "KEYS (n=")
	if !ok {
		return s, fmt.Errorf("header has no \"KEYS (n=\" line")
	}
	n, _, _ := strings.Cut(keys, ")")
	lo, hi, batch := strings.Cut(n, "..")
	nk, err := strconv.Atoi(lo)
	if err != nil {
		return s, fmt.Errorf("header KEYS (n=%s): %w", n, err)
	}
	mk := nk
	if batch {
		if mk, err = strconv.Atoi(hi); err != nil || mk < nk {
			return s, fmt.Errorf("header KEYS (n=%s): want n=LOW..HIGH", n)
		}
	}
	s.NumKeys, s.MaxKeys, s.Batch = nk, mk, batch
	if _, caller, ok := strings.Cut(s.Doc, "\n  Caller"); ok {
		flags, _, _ := strings.Cut(strings.TrimSpace(caller), ":")
		list, ok := strings.CutPrefix(flags, "flags=")
		if !ok {
			return s, fmt.Errorf("header Caller line: want \"Caller    flags=...: why\"")
		}
		for _, f := range strings.Split(list, ",") {
			switch f {
			case "no-wait":
				s.NoWait = true
			case "eval":
				s.Eval = true
			default:
				return s, fmt.Errorf("header Caller line: unknown flag %q (want no-wait, eval)", f)
			}
		}
	}
	return s, nil
}
