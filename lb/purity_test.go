package lb

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPackageIsPure keeps lb free of I/O, goroutines, wall clocks and other
// packages of this module: it reads every non-test source file's imports and
// statements.
func TestPackageIsPure(t *testing.T) {
	allowed := map[string]bool{
		"cmp": true, "encoding/binary": true, "fmt": true, "math": true, "math/bits": true, "slices": true,
		"sort": true, "strconv": true, "strings": true, "sync/atomic": true, "time": true, "errors": true,
		"github.com/cespare/xxhash/v2": true,
	}
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[p] {
				t.Errorf("%s imports %q: lb must stay pure (no I/O, nothing of this module)", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement at %v: lb starts no goroutines", name, fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" && (n.Sel.Name == "Now" || n.Sel.Name == "Since" || n.Sel.Name == "Sleep") {
					t.Errorf("%s: time.%s at %v: lb takes its clock from the caller", name, n.Sel.Name, fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("only %d source files found", checked)
	}
}
