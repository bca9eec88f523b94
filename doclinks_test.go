package redisonce

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks: every relative link of the user docs (README.md,
// CONTRIBUTING.md, BENCHMARKS.md, docs/*.md, the modules' README.md) names a
// file or directory of the repository, and every #anchor a heading of the
// document it points into (GitHub's rule: lowercased, punctuation dropped,
// spaces to hyphens). A section that moves to another page and leaves a
// link behind fails here.
func TestDocLinks(t *testing.T) {
	docs := []string{"README.md", "CONTRIBUTING.md", "BENCHMARKS.md"}
	for _, g := range []string{"docs/*.md", "*/*/README.md", "*/README.md"} {
		more, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, more...)
	}
	links := 0
	for _, doc := range docs {
		src, err := os.ReadFile(doc)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range mdLinks(string(src)) {
			if regexp.MustCompile(`^[a-z]+:`).MatchString(l.target) {
				continue
			}
			links++
			path, anchor, _ := strings.Cut(l.target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link %q: %v", doc, l.line, l.target, err)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			target, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", doc, l.line, l.target, err)
				continue
			}
			if !mdAnchors(string(target))[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", doc, l.line, l.target, file, anchor)
			}
		}
	}
	t.Logf("%d relative links checked in %d documents", links, len(docs))
}

type mdLink struct {
	line   int
	target string
}

var mdLinkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// mdLinks returns the inline links of a Markdown document outside code
// blocks and code spans.
func mdLinks(md string) []mdLink {
	var out []mdLink
	fence := ""
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			continue // an indented code block
		}
		line = regexp.MustCompile("`[^`]*`").ReplaceAllStringFunc(line, func(s string) string {
			if strings.Contains(s, "](") {
				return ""
			}
			return s
		})
		for _, m := range mdLinkRE.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{i + 1, m[1]})
		}
	}
	return out
}

// mdAnchors returns the anchors GitHub gives the headings of a document.
func mdAnchors(md string) map[string]bool {
	out := map[string]bool{}
	fence := ""
	for _, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		for n := 1; out[a]; n++ {
			a = b.String() + "-" + string(rune('0'+n))
		}
		out[a] = true
	}
	return out
}

// The link checker on documents of its own: a good link and anchor, a
// missing file, a missing anchor.
func TestDocLinksChecker(t *testing.T) {
	md := "# Guarantees and `limits`: in full\n\nsee [x](#guarantees-and-limits-in-full), `[no](#code)`\n```\n[no](#fenced)\n```\n## Failover: Sentinel, replicas and `WithWaitReplicas`\n"
	a := mdAnchors(md)
	if !a["guarantees-and-limits-in-full"] || !a["failover-sentinel-replicas-and-withwaitreplicas"] || len(a) != 2 {
		t.Errorf("anchors %v", a)
	}
	if l := mdLinks(md); len(l) != 1 || l[0].target != "#guarantees-and-limits-in-full" || l[0].line != 3 {
		t.Errorf("links %v", l)
	}
}

// TestCommentRefs: every reference to a document in a Go comment or a Lua
// script's comments (its header included) resolves, like the docs' links: a
// path ending in .md (from the repository's root, or from the file's own
// directory) names a file, and a heading quoted right after it
// (`docs/non-go.md, "Key layout per store"`, `BENCHMARKS.md ("Memory")`) or
// an #anchor names a heading of that document (its anchor, or words of its
// title). README, BENCHMARKS or CONTRIBUTING followed by a quoted heading
// means that .md file. Code lines in Go doc comments (indented) are skipped.
func TestCommentRefs(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "*.go", "*.lua").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	refs := 0
	for _, file := range strings.Fields(string(out)) {
		if strings.Contains(file, "node_modules/") || strings.Contains(file, "/testdata/") {
			continue
		}
		src, err := os.ReadFile(file)
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range commentGroups(file, string(src)) {
			for _, r := range commentRefs(g.text) {
				refs++
				if msg := checkRef(file, r); msg != "" {
					t.Errorf("%s:%d: %s", file, g.line, msg)
				}
			}
		}
	}
	t.Logf("%d references checked in comments", refs)
}

type commentGroup struct {
	line int    // the first line of the group
	text string // its lines joined by spaces, comment markers removed
}

// commentGroups returns the runs of consecutive comment lines of a Go or
// Lua file (for Lua, the --[[ ]] header and -- lines).
func commentGroups(file, src string) []commentGroup {
	var out []commentGroup
	var cur *commentGroup
	inBlock := false
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	for i, line := range strings.Split(src, "\n") {
		text, ok := "", false
		if strings.HasSuffix(file, ".lua") {
			trimmed := strings.TrimSpace(line)
			switch {
			case inBlock:
				text, ok = line, true
				if strings.Contains(line, "]]") {
					text, inBlock = strings.Split(line, "]]")[0], false
				}
			case strings.HasPrefix(trimmed, "--[["):
				text, ok, inBlock = strings.TrimPrefix(trimmed, "--[["), true, !strings.Contains(trimmed, "]]")
			case strings.HasPrefix(trimmed, "--"):
				text, ok = strings.TrimPrefix(trimmed, "--"), true
			}
		} else if before, after, found := strings.Cut(line, "//"); found && !strings.Contains(line, `"//`) && !strings.Contains(line, "`//") {
			if strings.HasPrefix(after, "\t") {
				flush() // a code line of a doc comment
				continue
			}
			if strings.TrimSpace(before) != "" {
				// a comment after code: a group of its own
				flush()
				out = append(out, commentGroup{line: i + 1, text: strings.TrimSpace(after)})
				continue
			}
			text, ok = after, true
		}
		if !ok {
			flush()
			continue
		}
		if cur == nil {
			cur = &commentGroup{line: i + 1}
			cur.text = strings.TrimSpace(text)
		} else {
			cur.text += " " + strings.TrimSpace(text)
		}
	}
	flush()
	return out
}

type commentRef struct{ path, heading, anchor string }

var commentRefRE = regexp.MustCompile(`(?:^|[\s(\x60'])((?:\.\./|[A-Za-z0-9_-]+/)*[A-Za-z0-9_.-]+\.md|README|BENCHMARKS|CONTRIBUTING)(#[a-z0-9_-]+)?(?:'s)?(?:,? \(?"([^"]+)")?`)

// commentRefs returns the document references in a comment's text.
func commentRefs(text string) []commentRef {
	var out []commentRef
	for _, m := range commentRefRE.FindAllStringSubmatch(text, -1) {
		path := m[1]
		if !strings.HasSuffix(path, ".md") {
			if m[3] == "" {
				continue // a bare word README: not a reference
			}
			path += ".md"
		}
		out = append(out, commentRef{path: path, anchor: strings.TrimPrefix(m[2], "#"), heading: m[3]})
	}
	return out
}

// checkRef says what is wrong with a reference from file, or "".
func checkRef(file string, r commentRef) string {
	target := ""
	for _, p := range []string{filepath.FromSlash(r.path), filepath.Join(filepath.Dir(file), filepath.FromSlash(r.path))} {
		if _, err := os.Stat(p); err == nil {
			target = p
			break
		}
	}
	if target == "" {
		return fmt.Sprintf("%q names no file of the repository", r.path)
	}
	if r.anchor == "" && r.heading == "" {
		return ""
	}
	src, err := os.ReadFile(target)
	if err != nil {
		return err.Error()
	}
	anchors := mdAnchors(string(src))
	if r.anchor != "" && !anchors[r.anchor] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", target, r.anchor)
	}
	if r.heading != "" {
		want := strings.ToLower(r.heading)
		for _, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(line, "#") && strings.Contains(strings.ToLower(line), want) {
				return ""
			}
		}
		return fmt.Sprintf("%s has no heading %q", target, r.heading)
	}
	return ""
}

// The comment reference checker on comments of its own.
func TestCommentRefsChecker(t *testing.T) {
	g := commentGroups("x.go", "// see docs/non-go.md, \"Key layout\n// per store\" and README.md\n\tx := 1 // BENCHMARKS.md#client-options\n//\tcode.md\n")
	if len(g) != 2 || g[0].line != 1 || g[1].line != 3 || g[1].text != "BENCHMARKS.md#client-options" {
		t.Fatalf("groups %+v", g)
	}
	r := commentRefs(g[0].text)
	if len(r) != 2 || r[0] != (commentRef{path: "docs/non-go.md", heading: "Key layout per store"}) || r[1].path != "README.md" {
		t.Errorf("refs %+v", r)
	}
	if r := commentRefs(`the README "Key layout", the README itself`); len(r) != 1 || r[0].path != "README.md" {
		t.Errorf("refs %+v", r)
	}
	for ref, bad := range map[commentRef]bool{
		{path: "docs/non-go.md", heading: "Key layout per store"}: false,
		{path: "README.md", heading: "Key layout"}:                true,
		{path: "docs/nothere.md"}:                                 true,
		{path: "docs/non-go.md", anchor: "key-layout-per-store"}:  false,
		{path: "docs/non-go.md", anchor: "no-such-heading"}:       true,
	} {
		if msg := checkRef("x.go", ref); (msg != "") != bad {
			t.Errorf("checkRef(%+v) = %q", ref, msg)
		}
	}
	l := commentGroups("x.lua", "#!lua\n--[[ x.lua — x.\n  KEYS (n=1)\n    [1] k  STRING (docs/non-go.md,\n  \"Key layout per store\")\n]]\n-- BENCHMARKS.md\nlocal x = 1\n")
	if len(l) != 1 || len(commentRefs(l[0].text)) != 2 {
		t.Errorf("lua groups %+v", l)
	}
}
