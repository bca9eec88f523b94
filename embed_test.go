package redisonce

import (
	"crypto/sha1"
	"encoding/hex"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The closed list of error codes a script may return (the package doc, embed.go).
var errorCodes = map[string]bool{
	"BADARG": true, "STALE_OWNER": true, "NOT_FOUND": true,
	"FULL": true, "MISMATCH": true, "CORRUPT": true,
}

// Redis commands that write. A read-only script must call none of them.
var writeCommands = map[string]bool{
	"SET": true, "DEL": true, "UNLINK": true, "HSET": true, "HDEL": true,
	"HINCRBY": true, "HSETNX": true, "HMSET": true, "INCR": true, "INCRBY": true,
	"EXPIRE": true, "PEXPIRE": true, "PEXPIREAT": true, "EXPIREAT": true,
	"PERSIST": true, "GETDEL": true, "GETSET": true, "RENAME": true,
	"SETRANGE": true,
}

// Redis commands that only remove data.
var removeCommands = map[string]bool{"DEL": true, "UNLINK": true, "HDEL": true}

func TestSHA1SUMSMatchesScripts(t *testing.T) {
	all := All()
	if len(all) == 0 {
		t.Fatal("no scripts embedded")
	}
	onDisk, err := filepath.Glob("scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(onDisk) != len(all) {
		t.Errorf("%d scripts on disk, %d embedded", len(onDisk), len(all))
	}
	for _, s := range all {
		sum := sha1.Sum([]byte(s.Source))
		if got := hex.EncodeToString(sum[:]); got != s.SHA1 {
			t.Errorf("%s: SHA1SUMS says %s, source hashes to %s (run: make sums)", s.Name, s.SHA1, got)
		}
		raw, err := os.ReadFile(filepath.Join("scripts", s.Name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != s.Source {
			t.Errorf("%s: embedded source differs from the file", s.Name)
		}
		if strings.Contains(s.Source, "\r") {
			t.Errorf("%s: has CR characters; scripts are LF only", s.Name)
		}
	}
}

func TestGet(t *testing.T) {
	s, ok := Get("claim")
	if !ok || s.Name != "claim" || s.NumKeys != 1 || s.ReadOnly {
		t.Fatalf("Get(claim) = %+v, %v", s, ok)
	}
	if s, ok := Get("seen"); !ok || !s.ReadOnly {
		t.Fatalf("Get(seen) = %+v, %v; want a read-only script", s, ok)
	}
	if s, ok := Get("forget"); !ok || !s.AllowOOM || s.ReadOnly {
		t.Fatalf("Get(forget) = %+v, %v; want an allow-oom write script", s, ok)
	}
	if _, ok := Get("claim.lua"); ok {
		t.Error("Get(claim.lua) found a script; names have no extension")
	}
	if _, ok := Get("nope"); ok {
		t.Error("Get(nope) found a script")
	}
	a := All()
	a[0].Name = "changed"
	if All()[0].Name == "changed" {
		t.Error("All returns a shared slice")
	}
}

var (
	keysUse   = regexp.MustCompile(`KEYS\[(\d+)\]`)
	argvUse   = regexp.MustCompile(`ARGV\[(\d+)\]`)
	argvDoc   = regexp.MustCompile(`^\s*\[(\d+)(\.\.)?\]\s+\S`)
	errUse    = regexp.MustCompile(`error_reply\(\s*['"]([A-Z_]+)`)
	errDoc    = regexp.MustCompile(`^\s*(?:Errors\s+)?([A-Z][A-Z_]+)\b`)
	callUse   = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'`)
	argsCount = regexp.MustCompile(`ARGV \(n(>=|=)(\d+)\)`)
	// failedWrite is the error reply answering a failed first write
	// (redis.pcall returned an error table).
	failedWrite = regexp.MustCompile(`if type\((\w+)\) == 'table' then\s+return redis\.error_reply\(`)
	// errElement is an error element of a batch script's array reply.
	errElement = regexp.MustCompile(`out\[i\] = redis\.error_reply\(`)
	// writeCall is a call and the rest of its line: redis.call('SET', k, v, 'NX'...
	writeCall  = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'([^\n]*)`)
	optionWord = regexp.MustCompile(`'[A-Z]{2,}'`)
)

// section returns the header lines from the line starting with title up to the
// next top-level entry.
func section(doc, title string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimSpace(line)
		top := strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ")
		if top {
			in = strings.HasPrefix(trimmed, title)
		}
		if in {
			out = append(out, line)
		}
	}
	return out
}

// TestHeadersMatchCode parses every header and checks it against the code below it.
func TestHeadersMatchCode(t *testing.T) {
	for _, s := range All() {
		t.Run(s.Name, func(t *testing.T) {
			_, code, _ := strings.Cut(s.Source, "]]")
			for _, word := range []string{"KEYS (n", "ARGV (n", "Returns", "Errors", "Writes", "Atomicity", "Complexity"} {
				if !strings.Contains(s.Doc, word) {
					t.Errorf("header has no %q entry", word)
				}
			}
			if !strings.HasPrefix(s.Doc, s.Name+".lua — ") || s.Summary() == "" {
				t.Errorf("header line 1 should read %q", s.Name+".lua — <summary>")
			}

			// Keys: the declared count equals the highest KEYS[i] used, and it is 1.
			maxKey := 0
			for _, m := range keysUse.FindAllStringSubmatch(code, -1) {
				i, _ := strconv.Atoi(m[1])
				maxKey = max(maxKey, i)
			}
			switch {
			case s.Batch:
				// A batch script: KEYS (n>=1), read through #KEYS, never by a
				// fixed index, and its header says the keys share one slot and
				// what a CROSSSLOT does.
				if s.NumKeys != 1 || maxKey != 0 || !regexp.MustCompile(`#KEYS\b`).MatchString(code) {
					t.Errorf("batch script: want KEYS (n=1..%d) read through #KEYS, got n=%d.. and KEYS[%d]", MaxBatchKeys, s.NumKeys, maxKey)
				}
				for _, word := range []string{"ONE hash slot", "CROSSSLOT", "[1..]"} {
					if !strings.Contains(section(s.Doc, "KEYS")[0]+strings.Join(section(s.Doc, "KEYS"), "\n"), word) {
						t.Errorf("batch script's KEYS entry does not say %q", word)
					}
				}
				if !strings.Contains(strings.Join(section(s.Doc, "Atomicity"), "\n"), "one script call") {
					t.Errorf("batch script's Atomicity entry does not say the group is one script call")
				}
			case maxKey != s.NumKeys || s.NumKeys != 1:
				t.Errorf("header KEYS n=%d, code uses up to KEYS[%d]; every single-item script takes exactly one key", s.NumKeys, maxKey)
			}
			// The KEYS rule, like ARGV's: the header states the count
			// (n=1, or n=1..MaxBatchKeys for a batch) and the code checks it,
			// and every key's length, first, with the shared snippet; the
			// Errors entry says so.
			wantKeys, snippet := 1, "one_key"
			if s.Batch {
				wantKeys, snippet = MaxBatchKeys, "batch_keys"
			}
			if s.NumKeys != 1 || s.MaxKeys != wantKeys {
				t.Errorf("header KEYS (n=%d..%d), want n=1..%d", s.NumKeys, s.MaxKeys, wantKeys)
			}
			if !strings.HasPrefix(strings.TrimLeft(code, "\n"), "-- <snippet:"+snippet+">\n") {
				t.Errorf("the code does not start with the <snippet:%s> check of KEYS", snippet)
			}
			badarg := strings.Join(section(s.Doc, "Errors"), "\n")
			for _, word := range []string{"KEYS", strconv.Itoa(MaxKeyLen) + " bytes", strconv.Itoa(wantKeys)} {
				if !strings.Contains(badarg, word) {
					t.Errorf("the Errors entry does not state the KEYS rule (%q)", word)
				}
			}

			// ARGV: every used index is documented and every documented one is used.
			used := map[int]bool{}
			for _, m := range argvUse.FindAllStringSubmatch(code, -1) {
				i, _ := strconv.Atoi(m[1])
				used[i] = true
			}
			documented := map[int]bool{}
			variadic := 0
			for _, line := range section(s.Doc, "ARGV")[1:] {
				if m := argvDoc.FindStringSubmatch(line); m != nil {
					i, _ := strconv.Atoi(m[1])
					if m[2] != "" {
						variadic = i
					} else {
						documented[i] = true
					}
				}
			}
			if variadic > 0 {
				if !strings.Contains(code, "#ARGV") {
					t.Errorf("ARGV [%d..] documented, but the code never reads #ARGV", variadic)
				}
				for i := range used {
					if i >= variadic {
						delete(used, i) // read through the variadic tail
					}
				}
			}
			if diff := cmp.Diff(keysOf(documented), keysOf(used)); diff != "" {
				t.Errorf("ARGV documented (-) vs used (+):\n%s", diff)
			}
			m := argsCount.FindStringSubmatch(s.Doc)
			if m == nil {
				t.Fatalf("header has no ARGV (n=N) or (n>=N)")
			}
			n, _ := strconv.Atoi(m[2])
			// (n>=N): at least the fixed arguments before the variadic tail
			// (more when the tail needs several, as update.lua's pairs do).
			if want := len(documented); (m[1] == "=" && n != want) || (m[1] == ">=" && (variadic == 0 || n < variadic)) {
				t.Errorf("header says ARGV (n%s%d), documents %d fixed and variadic from %d", m[1], n, want, variadic)
			}

			// Errors: every code returned is in the closed list and listed; every listed one is returned.
			returned := map[string]bool{}
			for _, m := range errUse.FindAllStringSubmatch(code, -1) {
				returned[m[1]] = true
				if !errorCodes[m[1]] {
					t.Errorf("error code %s is not in the closed list", m[1])
				}
			}
			listed := map[string]bool{}
			for _, line := range section(s.Doc, "Errors") {
				if m := errDoc.FindStringSubmatch(line); m != nil && errorCodes[m[1]] {
					listed[m[1]] = true
				}
			}
			if diff := cmp.Diff(keysOf(listed), keysOf(returned)); diff != "" {
				t.Errorf("error codes listed (-) vs returned (+):\n%s", diff)
			}

			// Shebang: read-only scripts write nothing, write scripts write something.
			// Atomicity: no error reply after the first write in the file.
			firstWrite, writes := -1, 0
			for _, loc := range callUse.FindAllStringSubmatchIndex(code, -1) {
				cmd := strings.ToUpper(code[loc[2]:loc[3]])
				if writeCommands[cmd] {
					writes++
					if firstWrite < 0 {
						firstWrite = loc[0]
					}
				}
			}
			// allow-oom: Redis runs the script when memory is full, so it may only
			// remove data, or make a write its header's Memory entry names and
			// explains (a write that cannot grow memory by more than a few
			// bytes, or one that completes an effect and must never be refused).
			if s.AllowOOM {
				memory := strings.Join(section(s.Doc, "Memory"), "\n")
				if !strings.Contains(memory, "allow-oom") {
					t.Errorf("flags=allow-oom script's header does not say why (a Memory entry)")
				}
				for _, m := range callUse.FindAllStringSubmatch(code, -1) {
					cmd := strings.ToUpper(m[1])
					if writeCommands[cmd] && !removeCommands[cmd] && !regexp.MustCompile(`\b`+cmd+`\b`).MatchString(memory) {
						t.Errorf("flags=allow-oom script calls %s, which can grow memory, and its Memory entry does not name it", cmd)
					}
				}
			}
			// Writes: every write command, with every option word it is called
			// with ('NX', 'GET', 'PX'...), is in the Writes entry.
			writesDoc := strings.Join(section(s.Doc, "Writes"), "\n")
			for _, m := range writeCall.FindAllStringSubmatch(code, -1) {
				cmd := strings.ToUpper(m[1])
				if !writeCommands[cmd] {
					continue
				}
				for _, w := range append([]string{cmd}, optionWord.FindAllString(m[2], -1)...) {
					w = strings.Trim(w, "'")
					if !regexp.MustCompile(`\b` + w + `\b`).MatchString(writesDoc) {
						t.Errorf("the code calls %s with %s; the Writes entry does not say %s", cmd, w, w)
					}
				}
			}
			// Length: a write script reads in a minute: about 60 lines of code
			// besides its snippets (each read once for the whole bundle), or its
			// header's Length entry says why not.
			_, own, _ := findSnippets(s.Name, code)
			lines := 0
			for _, l := range strings.Split(luaComment.ReplaceAllString(own, ""), "\n") {
				if strings.TrimSpace(l) != "" {
					lines++
				}
			}
			if !s.ReadOnly && lines > 65 && len(section(s.Doc, "Length")) == 0 {
				t.Errorf("%d lines of code besides its snippets; cut it to about 60 or say why in a Length entry", lines)
			}
			if ls := section(s.Doc, "Length"); len(ls) > 0 && !strings.Contains(ls[0], strconv.Itoa(lines)+" lines") {
				t.Errorf("the Length entry does not say %q: %q", strconv.Itoa(lines)+" lines", ls[0])
			}
			// ARGV count: the header's (n=N) is the code's `#ARGV ~= N`, and
			// (n>=N) its `#ARGV < N`.
			wantCheck := "#ARGV ~= " + m[2]
			if m[1] == ">=" {
				wantCheck = "#ARGV < " + m[2]
			}
			if !strings.Contains(code, wantCheck) {
				t.Errorf("header says ARGV (n%s%s), the code has no %q check", m[1], m[2], wantCheck)
			}
			if s.ReadOnly && writes > 0 {
				t.Errorf("flags=no-writes script calls %d write commands", writes)
			}
			if !s.ReadOnly && writes == 0 {
				t.Errorf("write script (#!lua) calls no write command; use #!lua flags=no-writes")
			}
			if firstWrite >= 0 {
				after := code[firstWrite:]
				if strings.HasPrefix(after, "redis.pcall(") {
					// The first write is run with pcall: when it fails it has
					// written nothing (claim.lua's SET NX GET on a key of
					// another type), so the error that answers that failure,
					// right behind its check, follows no write.
					after = failedWrite.ReplaceAllString(after, "")
				}
				if s.Batch {
					// A batch script may answer one key with an error
					// ELEMENT of its array reply (out[i] = error_reply),
					// never with an error reply for the whole call.
					after = errElement.ReplaceAllString(after, "")
				}
				if loc := errUse.FindAllStringIndex(after, -1); len(loc) > 0 {
					t.Errorf("an error reply follows the first write: Redis does not roll back")
				}
			}
			if strings.Contains(code, "KEYS[2]") || regexp.MustCompile(`\.\.\s*KEYS|KEYS\[1\]\s*\.\.`).MatchString(code) {
				t.Errorf("script builds key names; keys come from the caller")
			}
		})
	}
}

func keysOf[K cmpOrdered](m map[K]bool) []K {
	return slices.Sorted(maps.Keys(m))
}

type cmpOrdered interface{ ~int | ~string }

// The caller's flags come from each script's own header (its Caller line),
// never from a list of names in Go: the heartbeats are sent as EVAL and wait
// for no replica, the waiter's mark waits for none, every other script has
// neither; an unknown flag or a Caller line without flags= is a bad header.
func TestCallerFlagsFromHeader(t *testing.T) {
	want := map[string][2]bool{"extend": {true, true}, "renew": {true, true}, "watch": {true, false}, "coalesce_extend": {true, true}, "extend_many": {true, true}}
	for _, s := range All() {
		w := want[s.Name]
		if s.NoWait != w[0] || s.Eval != w[1] {
			t.Errorf("%s: NoWait %v, Eval %v; want %v, %v", s.Name, s.NoWait, s.Eval, w[0], w[1])
		}
	}
	head := "#!lua\n--[[ x.lua — x.\n  KEYS (n=1)\n    [1] k\n"
	for _, bad := range []string{"  Caller    flags=no-wait,retry: why\n", "  Caller    no-wait: why\n"} {
		if _, err := parseScript("x", head+bad+"]]\n"); err == nil {
			t.Errorf("header line %q parsed; want an error", bad)
		}
	}
}
