package linktest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// recorder is a testing.TB that collects failures instead of failing.
type recorder struct {
	testing.TB
	errs  []string
	fatal bool
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = true
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// graph is what go list prints for a binary that links its client by way
// of a shared package.
const graph = `fmt
example/shared fmt example/client
example/client fmt
example/server example/shared
example/cmd fmt example/server
`

func TestCheckNamesTheChain(t *testing.T) {
	r := &recorder{TB: t}
	check(r, "example/cmd", parseGraph(graph), []string{"example/client", "example/other"})
	want := "example/cmd links example/client, which belongs to the other side: example/cmd -> example/server -> example/shared -> example/client"
	if !slices.Equal(r.errs, []string{want}) {
		t.Errorf("failures %q, want only %q", r.errs, want)
	}
}

func TestCheckPassesAndChecksTheListing(t *testing.T) {
	r := &recorder{TB: t}
	check(r, "example/server", parseGraph(graph), []string{"example/cmd"})
	if len(r.errs) != 0 {
		t.Errorf("failures %q, want none", r.errs)
	}
	r = &recorder{TB: t}
	check(r, "example/missing", parseGraph(graph), nil)
	if !r.fatal || !strings.Contains(r.errs[0], "did not list example/missing") {
		t.Errorf("a package missing from the listing: failures %q, want a fatal one", r.errs)
	}
}

// TestCheckRunsGoList lists this package itself, which links no package of
// the module.
func TestCheckRunsGoList(t *testing.T) {
	r := &recorder{TB: t}
	Check(r, "github.com/meshlet-dev/meshlet/internal/linktest", "github.com/meshlet-dev/meshlet/discovery")
	if len(r.errs) != 0 {
		t.Errorf("failures %q, want none", r.errs)
	}
}
