package puritytest

import (
	"slices"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/internal/testtool"
)

func TestCheckReportsEachViolation(t *testing.T) {
	r := &testtool.Recorder{TB: t}
	check(r, "testdata/impure", 1, []string{"time"})
	want := []string{`imports "os"`, "go statement", "time.Now", "time.Sleep"}
	for _, w := range want {
		if !slices.ContainsFunc(r.Errs, func(e string) bool { return strings.Contains(e, w) }) {
			t.Errorf("no failure mentions %q; got %q", w, r.Errs)
		}
	}
	if len(r.Errs) != len(want) {
		t.Errorf("got %d failures, want %d: %q", len(r.Errs), len(want), r.Errs)
	}
}

func TestCheckPassesPureCode(t *testing.T) {
	r := &testtool.Recorder{TB: t}
	check(r, "testdata/pure", 1, []string{"time"})
	if len(r.Errs) != 0 {
		t.Errorf("pure package failed: %q", r.Errs)
	}
	r = &testtool.Recorder{TB: t}
	check(r, "testdata/pure", 2, []string{"time"})
	if !r.Stopped {
		t.Error("too few files: want a fatal failure")
	}
}
