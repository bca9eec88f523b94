package redisonce

import (
	"os"
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
