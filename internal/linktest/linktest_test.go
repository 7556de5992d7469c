package linktest

import (
	"slices"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/internal/testtool"
)

// graph is what go list prints for a binary that links its client by way
// of a shared package.
const graph = `fmt
example/shared fmt example/client
example/client fmt
example/server example/shared
example/cmd fmt example/server
`

func TestCheckNamesTheChain(t *testing.T) {
	r := &testtool.Recorder{TB: t}
	check(r, "example/cmd", parseGraph(graph), []string{"example/client", "example/other"})
	want := "example/cmd links example/client, which belongs to the other side: example/cmd -> example/server -> example/shared -> example/client"
	if !slices.Equal(r.Errs, []string{want}) {
		t.Errorf("failures %q, want only %q", r.Errs, want)
	}
}

func TestCheckPassesAndChecksTheListing(t *testing.T) {
	r := &testtool.Recorder{TB: t}
	check(r, "example/server", parseGraph(graph), []string{"example/cmd"})
	if len(r.Errs) != 0 {
		t.Errorf("failures %q, want none", r.Errs)
	}
	r = &testtool.Recorder{TB: t}
	check(r, "example/missing", parseGraph(graph), nil)
	if !r.Stopped || !strings.Contains(r.Errs[0], "did not list example/missing") {
		t.Errorf("a package missing from the listing: failures %q, want a fatal one", r.Errs)
	}
}

// TestCheckRunsGoList lists this package itself, which links no package of
// the module.
func TestCheckRunsGoList(t *testing.T) {
	r := &testtool.Recorder{TB: t}
	Check(r, "github.com/meshlet-dev/meshlet/internal/linktest", "github.com/meshlet-dev/meshlet/discovery")
	if len(r.Errs) != 0 {
		t.Errorf("failures %q, want none", r.Errs)
	}
}
