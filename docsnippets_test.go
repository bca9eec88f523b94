package redisonce

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every Go snippet in the user docs (README.md, CONTRIBUTING.md, docs/*.md,
// the modules' README.md) is
// code that compiles: the ```go block is preceded by a marker naming where its
// code lives,
//
//	<!-- snippet: store/example_claims_test.go#ExampleClaims_Do -->
//
// and TestDocSnippets fails unless the block is, line for line, that code:
// the body of the function of that name (without its "// Output:" comment),
// or the lines between "// snippet:NAME" and "// snippet:end" in that file
// (a region may sit at file level, for an import block, or inside a function,
// to show part of it). The file is an Example test or other compiled Go of
// the module it belongs to, so `make test` compiles every snippet; a block
// with no marker, a marker naming nothing, or a block that drifted from its
// code fails here.
func TestDocSnippets(t *testing.T) {
	docs := []string{"README.md", "CONTRIBUTING.md"}
	for _, g := range []string{"docs/*.md", "*/*/README.md"} { // the modules' own READMEs too
		more, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, more...)
	}
	blocks := 0
	for _, doc := range docs {
		src, err := os.ReadFile(doc)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range goBlocks(string(src)) {
			blocks++
			if b.marker == "" {
				t.Errorf("%s:%d: a ```go block without a <!-- snippet: file#name --> marker on the line before it", doc, b.line)
				continue
			}
			file, name, ok := strings.Cut(b.marker, "#")
			if !ok {
				t.Errorf("%s:%d: snippet marker %q: want file#name", doc, b.line, b.marker)
				continue
			}
			want, err := snippetCode(file, name)
			if err != nil {
				t.Errorf("%s:%d: %v", doc, b.line, err)
				continue
			}
			if got := normalize(b.code); got != want {
				t.Errorf("%s:%d: the block differs from %s#%s; it should read:\n%s\n--- but reads:\n%s", doc, b.line, file, name, want, got)
			}
		}
	}
	t.Logf("%d Go snippets checked in %d documents", blocks, len(docs))
}

type goBlock struct {
	line   int // of the opening fence
	marker string
	code   string
}

var snippetMarker = regexp.MustCompile(`^<!--\s*snippet:\s*(\S+)\s*-->\s*$`)

// goBlocks returns the ```go fenced blocks of a Markdown document, with the
// snippet marker of the line before each.
func goBlocks(md string) []goBlock {
	var out []goBlock
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	prev, n := "", 0
	var cur *goBlock
	var code strings.Builder
	fence := ""
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur != nil && strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`~") == "":
			cur.code = code.String()
			out = append(out, *cur)
			cur, fence = nil, ""
		case cur != nil:
			code.WriteString(line)
			code.WriteByte('\n')
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = "" // the end of a block of another language
		case fence != "":
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			if lang := strings.TrimSpace(strings.TrimLeft(trimmed, "`~")); lang == "go" || strings.HasPrefix(lang, "go ") {
				cur = &goBlock{line: n}
				code.Reset()
				if m := snippetMarker.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
					cur.marker = m[1]
				}
			}
		}
		prev = line
	}
	return out
}

var (
	regionStart = regexp.MustCompile(`^\s*// snippet:([A-Za-z0-9_]+)\s*$`)
	regionEnd   = regexp.MustCompile(`^\s*// snippet:end\s*$`)
	outputLine  = regexp.MustCompile(`^\s*// (Unordered output|Output):`)
)

// snippetCode returns the code a marker names: the region "// snippet:name"
// of file, or else the body of its function name.
func snippetCode(file, name string) (string, error) {
	src, err := os.ReadFile(filepath.FromSlash(file))
	if err != nil {
		return "", fmt.Errorf("snippet %s#%s: %v", file, name, err)
	}
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		if m := regionStart.FindStringSubmatch(l); m != nil && m[1] == name && name != "end" {
			for j := i + 1; j < len(lines); j++ {
				if regionEnd.MatchString(lines[j]) {
					return normalize(strings.Join(lines[i+1:j], "\n")), nil
				}
			}
			return "", fmt.Errorf("snippet %s#%s: no // snippet:end after the region", file, name)
		}
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return "", fmt.Errorf("snippet %s#%s: %v", file, name, err)
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != name || fd.Body == nil {
			continue
		}
		body := string(src[fset.Position(fd.Body.Lbrace).Offset+1 : fset.Position(fd.Body.Rbrace).Offset])
		bl := strings.Split(body, "\n")
		for i, l := range bl {
			if outputLine.MatchString(l) {
				bl = bl[:i]
				break
			}
		}
		return normalize(strings.Join(bl, "\n")), nil
	}
	return "", fmt.Errorf("snippet %s#%s: no region // snippet:%s and no func %s in %s", file, name, name, name, file)
}

// normalize drops leading and trailing blank lines and trailing spaces, and
// the indentation every line shares, so a region inside a function reads as
// the block does.
func normalize(s string) string {
	lines := strings.Split(s, "\n")
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	indent := -1
	for i, l := range lines {
		l = strings.TrimRight(l, " \t")
		lines[i] = l
		if l == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// The checker itself, on a document of its own: a block that matches, one
// that drifted, one without a marker, and a region.
func TestDocSnippetsChecker(t *testing.T) {
	dir := t.TempDir()
	code := "package x\n\n// snippet:imports\nimport \"fmt\"\n// snippet:end\n\nfunc ExampleX() {\n\tfor i := 0; i < 2; i++ {\n\t\tfmt.Println(i)\n\t}\n\t// Output:\n\t// 0\n\t// 1\n}\n\nfunc part() {\n\tx := 1\n\t// snippet:part\n\tfmt.Println(x)\n\t// snippet:end\n}\n"
	file := filepath.Join(dir, "x_test.go")
	if err := os.WriteFile(file, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	md := "<!-- snippet: " + file + "#ExampleX -->\n```go\nfor i := 0; i < 2; i++ {\n\tfmt.Println(i)\n}\n```\n\n" +
		"```sh\nmake test\n```\n" +
		"<!-- snippet: " + file + "#ExampleX -->\n```go\nfor i := 0; i < 3; i++ {\n```\n" +
		"```go\nx := 1\n```\n" +
		"<!-- snippet: " + file + "#imports -->\n```go\nimport \"fmt\"\n```\n" +
		"<!-- snippet: " + file + "#part -->\n```go\nfmt.Println(x)\n```\n"
	blocks := goBlocks(md)
	if len(blocks) != 5 {
		t.Fatalf("found %d go blocks, want 5: %+v", len(blocks), blocks)
	}
	var verdicts []bool
	for _, b := range blocks {
		if b.marker == "" {
			verdicts = append(verdicts, false)
			continue
		}
		f, name, _ := strings.Cut(b.marker, "#")
		want, err := snippetCode(f, name)
		if err != nil {
			t.Fatal(err)
		}
		verdicts = append(verdicts, normalize(b.code) == want)
	}
	if fmt.Sprint(verdicts) != "[true false false true true]" {
		t.Errorf("verdicts %v, want [true false false true true] (match, drifted, no marker, region, region)", verdicts)
	}
}
