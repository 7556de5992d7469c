// Package puritytest checks that a package is pure: that its non-test
// source files import only an allowed list of packages, start no goroutines
// and read no wall clock. The pure packages (lb and the packages under it)
// call Check from a test of their own.
package puritytest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// clockFuncs are the time functions a pure package must not call: it takes
// its clock from the caller.
var clockFuncs = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true,
}

// Check parses every non-test Go file of the current directory (go test runs
// in the package's directory) and fails t for an import not in allowed, a go
// statement, or a call of time.Now, time.Since, time.Sleep or another
// wall-clock or timer function. It fails too when the directory holds fewer
// than minFiles source files, so that a wrong directory does not pass.
func Check(t testing.TB, minFiles int, allowed ...string) {
	t.Helper()
	check(t, ".", minFiles, allowed)
}

func check(t testing.TB, dir string, minFiles int, allowed []string) {
	t.Helper()
	ok := map[string]bool{}
	for _, p := range allowed {
		ok[p] = true
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		name = filepath.Base(name)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !ok[p] {
				t.Errorf("%s imports %q: the package must stay pure (no I/O, only the allowed packages of this module)", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement at %v: a pure package starts no goroutines", name, fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, isID := n.X.(*ast.Ident); isID && id.Name == "time" && clockFuncs[n.Sel.Name] {
					t.Errorf("%s: time.%s at %v: a pure package takes its clock from the caller", name, n.Sel.Name, fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
	if checked < minFiles {
		t.Fatalf("only %d source files found, want at least %d", checked, minFiles)
	}
}
