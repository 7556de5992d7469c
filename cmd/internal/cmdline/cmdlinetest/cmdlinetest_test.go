package cmdlinetest

import "testing"

func TestDiff(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\ng\nh\ni\n"
	b := "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\n"
	want := "  ...\n  b\n  c\n  d\n- e\n+ E\n  f\n  g\n  h\n  i\n+ j\n  \n"
	if got := Diff(a, b); got != want {
		t.Errorf("Diff:\n%s\nwant:\n%s", got, want)
	}
	if got := Diff("x\n", "x\n"); got != "  ...\n" {
		t.Errorf("equal: %q", got)
	}
}
