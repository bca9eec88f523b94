package redisonce

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A check that several scripts need is written once and copied byte for byte
// between markers (there are no includes):
//
//	-- <snippet:NAME>
//	...
//	-- </snippet>
//
// TestSnippets finds every copy of every snippet and fails when one differs
// from the others, and fails when a script writes one of these checks outside
// its snippet (each snippet has tell-tales: code that only it may contain).
// An auditor reads each check once.
var snippets = []struct {
	name string
	// tells match code (comments stripped) that belongs to this check; outside
	// a snippet of this name it means the check was written another way.
	tells []*regexp.Regexp
}{
	{"int_arg", []*regexp.Regexp{regexp.MustCompile(`\^-\?%d|\^%d\+\$|\^\[1-9\]%d\*\$|'%d', tonumber\(ARGV`)}},
	{"now_ms", []*regexp.Regexp{regexp.MustCompile(`redis\.call\('TIME'\)|\* 1000 \+`)}},
	{"now_us", []*regexp.Regexp{regexp.MustCompile(`'%06d'`)}},
	{"replid", []*regexp.Regexp{regexp.MustCompile(`master_replid`)}},
	{"next_epoch", []*regexp.Regexp{regexp.MustCompile(`tonumber\(epoch\) \+ 1`)}},
	{"clock_fence", []*regexp.Regexp{regexp.MustCompile(`\.\. '000'`)}},
	{"u64", []*regexp.Regexp{regexp.MustCompile(`string\.byte\(a, i\)|#a ~= #b|'18446744073709551615'`)}},
	{"outbox_hash", []*regexp.Regexp{regexp.MustCompile(`9007199254740991`)}},
	{"claim_value", []*regexp.Regexp{regexp.MustCompile(`redis\.p?call\('GET'`)}},
	{"record_string", []*regexp.Regexp{regexp.MustCompile(`struct\.unpack\('>c4|'\^\[1-9\]%d\*\$'`)}},
	{"record_value", []*regexp.Regexp{regexp.MustCompile(`struct\.pack\('>c4`)}},
	{"load_record", []*regexp.Regexp{regexp.MustCompile(`redis\.pcall\('GET', k\)`)}},
	{"coalesce_state", []*regexp.Regexp{regexp.MustCompile(`'HMGET', \w+, 'tok'`)}},
	{"next_fence", []*regexp.Regexp{regexp.MustCompile(`'%s%06d000'`)}},
	{"one_key", []*regexp.Regexp{regexp.MustCompile(`#KEYS ~= 1`)}},
	{"batch_keys", []*regexp.Regexp{regexp.MustCompile(`#KEYS > \d|#KEYS == 0|#KEYS\[i\] [=<>]`)}},
	// Not a snippet: the wrong-type check is always a pcall whose .err (or
	// table) answers CORRUPT, never a TYPE read.
	{"", []*regexp.Regexp{regexp.MustCompile(`redis\.p?call\('TYPE'`)}},
}

var (
	snippetOpen  = regexp.MustCompile(`(?m)^-- <snippet:([a-z0-9_]+)>\n`)
	snippetClose = "-- </snippet>\n"
	luaComment   = regexp.MustCompile(`--[^\n]*`)
)

// snippetCopy is one snippet in one script.
type snippetCopy struct {
	script, name, text string
}

// findSnippets returns the snippets of src, src with every snippet cut out, and
// what is wrong with the markers.
func findSnippets(script, src string) (out []snippetCopy, _ string, errs []string) {
	var rest strings.Builder
	for {
		loc := snippetOpen.FindStringSubmatchIndex(src)
		if loc == nil {
			rest.WriteString(src)
			break
		}
		name := src[loc[2]:loc[3]]
		body := src[loc[1]:]
		end := strings.Index(body, snippetClose)
		if end < 0 {
			errs = append(errs, fmt.Sprintf("%s: snippet %s is not closed by %q", script, name, snippetClose))
			rest.WriteString(src)
			break
		}
		if strings.Contains(body[:end], "-- <snippet:") {
			errs = append(errs, fmt.Sprintf("%s: snippet %s holds another snippet", script, name))
		}
		rest.WriteString(src[:loc[0]])
		out = append(out, snippetCopy{script: script, name: name, text: body[:end]})
		src = body[end+len(snippetClose):]
	}
	if strings.Contains(rest.String(), "</snippet>") {
		errs = append(errs, fmt.Sprintf("%s: a %q without its opening marker", script, snippetClose))
	}
	return out, rest.String(), errs
}

func TestSnippets(t *testing.T) {
	known := map[string]bool{}
	for _, s := range snippets {
		if s.name != "" {
			known[s.name] = true
		}
	}
	copies := map[string][]snippetCopy{}
	for _, s := range All() {
		_, code, _ := strings.Cut(s.Source, "]]")
		found, rest, errs := findSnippets(s.Name, code)
		for _, e := range errs {
			t.Error(e)
		}
		for _, c := range found {
			if !known[c.name] {
				t.Errorf("%s: unknown snippet %q (add it to the snippets table)", s.Name, c.name)
			}
			copies[c.name] = append(copies[c.name], c)
		}
		// Outside its snippets, a script may not write a snippet's check another way.
		bare := luaComment.ReplaceAllString(rest, "")
		for _, sn := range snippets {
			for _, re := range sn.tells {
				m := re.FindString(bare)
				switch {
				case m == "":
				case sn.name == "":
					t.Errorf("%s: %q: test a key's type with redis.pcall and .err (CORRUPT), as the snippets do", s.Name, m)
				default:
					t.Errorf("%s: %q outside a snippet: write the %s check as the <snippet:%s> copy", s.Name, m, sn.name, sn.name)
				}
			}
		}
	}
	for _, sn := range snippets {
		if sn.name == "" {
			continue
		}
		cs := copies[sn.name]
		if len(cs) < 2 {
			t.Errorf("snippet %s has %d copies; a snippet is a check two scripts share", sn.name, len(cs))
			continue
		}
		// The canonical text is the one most copies agree on; every other copy drifts.
		count := map[string]int{}
		for _, c := range cs {
			count[c.text]++
		}
		canon := cs[0].text
		for text, n := range count {
			if n > count[canon] || (n == count[canon] && text < canon) {
				canon = text
			}
		}
		var in []string
		for _, c := range cs {
			in = append(in, c.script)
			if c.text != canon {
				t.Errorf("%s: snippet %s drifted from the other copies (-canonical +%s):\n%s", c.script, sn.name, c.script, cmp.Diff(canon, c.text))
			}
		}
		slices.Sort(in)
		t.Logf("snippet %s: %d copies (%s)", sn.name, len(cs), strings.Join(in, ", "))
	}
}

// TestSnippetsFindDrift: the finder sees a drifted copy, a check written
// outside its snippet, and an unclosed snippet (a test that could not fail
// would prove nothing).
func TestSnippetsFindDrift(t *testing.T) {
	src := "-- <snippet:now_ms>\nlocal t = redis.call('TIME')\n-- </snippet>\nlocal x = 1\n"
	found, rest, errs := findSnippets("a", src)
	if len(found) != 1 || found[0].name != "now_ms" || found[0].text != "local t = redis.call('TIME')\n" || rest != "local x = 1\n" || errs != nil {
		t.Fatalf("findSnippets = %+v, %q, %v", found, rest, errs)
	}
	if _, _, errs := findSnippets("b", "-- <snippet:now_ms>\nlocal t = 1\n"); len(errs) != 1 {
		t.Errorf("an unclosed snippet: errors %v, want one", errs)
	}
	if _, _, errs := findSnippets("c", "local t = 1\n-- </snippet>\n"); len(errs) != 1 {
		t.Errorf("a closing marker alone: errors %v, want one", errs)
	}
	// A check written outside its snippet is seen by its tell-tale.
	bare := luaComment.ReplaceAllString("local t = redis.call('TIME') -- now\n", "")
	if !snippets[1].tells[0].MatchString(bare) {
		t.Error("the now_ms tell-tale misses a bare TIME call")
	}
}
