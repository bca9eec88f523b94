package redisonce

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestFunctionsLibraryName(t *testing.T) {
	name, _ := FunctionsLibrary()
	if !regexp.MustCompile(`^redisonce_[0-9a-f]{12}$`).MatchString(name) {
		t.Fatalf("library name %q, want redisonce_<12 hex>", name)
	}
	sums, err := os.ReadFile("scripts/SHA1SUMS")
	if err != nil {
		t.Fatal(err)
	}
	h := sha1.Sum(sums)
	if want := hex.EncodeToString(h[:])[:12]; Version() != want || name != "redisonce_"+want {
		t.Errorf("Version() = %q, library %q; want %q from SHA1(scripts/SHA1SUMS)", Version(), name, want)
	}
}

// blockRE matches one generated function; the body is everything between the
// callback line and the closing "end,\n}".
var blockRE = regexp.MustCompile(`(?s)\n-- (\w+)\.lua sha1 ([0-9a-f]{40})\n` +
	`redis\.register_function\{\n` +
	`  function_name = '(\w+)',\n` +
	`  description = ('(?:[^'\\\n]|\\.)*'),\n` +
	`((?:  flags = \{ '(?:no-writes|allow-oom)' \},\n)?)` +
	`  callback = function\(KEYS, ARGV\)\n` +
	`(.*?)end,\n\}\n`)

func TestFunctionsLibraryHoldsEveryScript(t *testing.T) {
	name, code := FunctionsLibrary()
	if first, _, _ := strings.Cut(code, "\n"); first != "#!lua name="+name {
		t.Fatalf("line 1 is %q, want %q", first, "#!lua name="+name)
	}
	blocks := blockRE.FindAllStringSubmatch(code, -1)
	if got := strings.Count(code, "redis.register_function"); got != len(blocks) {
		t.Fatalf("%d register_function calls, %d parse as generated blocks:\n%s", got, len(blocks), code)
	}
	byName := map[string][]string{}
	for _, b := range blocks {
		if _, dup := byName[b[1]]; dup {
			t.Errorf("%s registered twice", b[1])
		}
		byName[b[1]] = b
	}
	all := All()
	if len(blocks) != len(all) {
		t.Errorf("%d functions for %d scripts", len(blocks), len(all))
	}
	for _, s := range all {
		b, ok := byName[s.Name]
		if !ok {
			t.Errorf("script %s has no function in the library", s.Name)
			continue
		}
		if b[2] != s.SHA1 {
			t.Errorf("%s: comment says sha1 %s, script is %s", s.Name, b[2], s.SHA1)
		}
		if b[3] != FunctionName(s.Name) || b[3] != "redisonce_"+s.Name {
			t.Errorf("%s: function_name %q, want %q", s.Name, b[3], "redisonce_"+s.Name)
		}
		if want := luaQuote(s.Summary()); b[4] != want {
			t.Errorf("%s: description %s, want the summary %s", s.Name, b[4], want)
		}
		want := ""
		switch {
		case s.ReadOnly:
			want = "  flags = { 'no-writes' },\n"
		case s.AllowOOM:
			want = "  flags = { 'allow-oom' },\n"
		}
		if b[5] != want {
			t.Errorf("%s: flags line %q, want %q (ReadOnly %v, AllowOOM %v)", s.Name, b[5], want, s.ReadOnly, s.AllowOOM)
		}
		_, body, _ := strings.Cut(s.Source, "\n")
		if b[6] != body {
			t.Errorf("%s: function body is not the script minus its shebang line:\n got %q\nwant %q", s.Name, b[6], body)
		}
	}
	if strings.Contains(code, "\n#!lua") {
		t.Error("a shebang line was copied into the library")
	}
	if _, again := FunctionsLibrary(); again != code {
		t.Error("FunctionsLibrary is not deterministic")
	}
	if generateLibrary(name, All()) != code {
		t.Error("generateLibrary differs from the cached library")
	}
}

func TestLuaQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":         `'plain'`,
		"it's":          `'it\'s'`,
		`back\slash`:    `'back\\slash'`,
		"new\nline":     `'new\010line'`,
		"nul\x00":       `'nul\000'`,
		"utf-8 — dash":  `'utf-8 — dash'`,
		"":              `''`,
		"tab\tand\x7f.": `'tab\009and\127.'`,
	} {
		if got := luaQuote(in); got != want {
			t.Errorf("luaQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
