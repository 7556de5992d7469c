package puritytest

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
func (r *recorder) Fatal(args ...any) { r.fatal = true; r.errs = append(r.errs, fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = true
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestCheckReportsEachViolation(t *testing.T) {
	r := &recorder{TB: t}
	check(r, "testdata/impure", 1, []string{"time"})
	want := []string{`imports "os"`, "go statement", "time.Now", "time.Sleep"}
	for _, w := range want {
		if !slices.ContainsFunc(r.errs, func(e string) bool { return strings.Contains(e, w) }) {
			t.Errorf("no failure mentions %q; got %q", w, r.errs)
		}
	}
	if len(r.errs) != len(want) {
		t.Errorf("got %d failures, want %d: %q", len(r.errs), len(want), r.errs)
	}
}

func TestCheckPassesPureCode(t *testing.T) {
	r := &recorder{TB: t}
	check(r, "testdata/pure", 1, []string{"time"})
	if len(r.errs) != 0 {
		t.Errorf("pure package failed: %q", r.errs)
	}
	r = &recorder{TB: t}
	check(r, "testdata/pure", 2, []string{"time"})
	if !r.fatal {
		t.Error("too few files: want a fatal failure")
	}
}
