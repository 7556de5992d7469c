// Package linktest checks which packages a binary links, so that the
// control plane (cmd/injector) and the sidecar (cmd/sidecar) each leave the
// other's side out: the injector serves xDS but has no xDS client, the
// sidecar receives xDS but has no server. Each binary calls Check from a
// test of its own.
package linktest

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// Check lists the packages pkg (an import path) links, with go list -deps
// for the host platform and default build tags, and fails t for each
// package of forbidden among them, naming the import chain that pulls it
// in. It skips t when the go command is not on PATH, since then the build
// graph cannot be listed.
func Check(t testing.TB, pkg string, forbidden ...string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is not on PATH, so what %s links cannot be listed: %v", pkg, err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	check(t, pkg, parseGraph(string(out)), forbidden)
}

// parseGraph reads go list lines of an import path followed by its
// imports.
func parseGraph(out string) map[string][]string {
	g := map[string][]string{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 0 {
			g[f[0]] = f[1:]
		}
	}
	return g
}

func check(t testing.TB, pkg string, graph map[string][]string, forbidden []string) {
	t.Helper()
	if _, ok := graph[pkg]; !ok {
		t.Fatalf("go list -deps %s did not list %s itself (%d packages listed)", pkg, pkg, len(graph))
	}
	for _, f := range forbidden {
		if chain := importChain(graph, pkg, f); chain != nil {
			t.Errorf("%s links %s, which belongs to the other side: %s", pkg, f, strings.Join(chain, " -> "))
		}
	}
}

// importChain returns a shortest import chain from from to to in graph, or
// nil when from does not link to.
func importChain(graph map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append(chain, p)
			}
			for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
				chain[i], chain[j] = chain[j], chain[i]
			}
			return chain
		}
		for _, q := range graph[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}
