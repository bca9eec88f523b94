package store_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"
)

// maxExported bounds package store's exported surface: each idea once, one
// public type per store. A new name has to push an old one out. (The
// Coalescer holds 7: its type, CoalesceOptions, NewCoalescer,
// NewMemoryCoalescer, Trigger, Sweep, Close.)
const maxExported = 100

// TestExportedSurface counts the package's exported identifiers as go/doc
// reads them — constants, variables, functions, types and their methods —
// and fails above maxExported.
func TestExportedSurface(t *testing.T) {
	names := exportedNames(t, ".")
	if len(names) > maxExported {
		t.Errorf("package store exports %d identifiers, the limit is %d:\n%s", len(names), maxExported, strings.Join(names, "\n"))
	}
	if len(names) < 20 {
		t.Errorf("counted %d exported identifiers; the count is broken", len(names))
	}
}

func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	add := func(n string) {
		if ast.IsExported(n[strings.LastIndex(n, ".")+1:]) {
			names = append(names, n)
		}
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				add(n)
			}
		}
	}
	for _, p := range pkgs {
		d := doc.New(p, "store", 0)
		values(d.Consts)
		values(d.Vars)
		for _, f := range d.Funcs {
			add(f.Name)
		}
		for _, ty := range d.Types {
			add(ty.Name)
			values(ty.Consts)
			values(ty.Vars)
			for _, f := range ty.Funcs {
				add(f.Name)
			}
			for _, m := range ty.Methods {
				add(ty.Name + "." + m.Name)
			}
		}
	}
	sort.Strings(names)
	return names
}
