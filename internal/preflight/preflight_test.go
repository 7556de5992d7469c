package preflight

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Version
	}{
		{"6.1.0-28-cloud-amd64", Version{6, 1}},
		{"5.15.0", Version{5, 15}},
		{"6.18.44-fc-v1272", Version{6, 18}},
		{"v1.37.2", Version{1, 37}},
		{"1.29+", Version{1, 29}},
		{" 4.19\n", Version{4, 19}},
	} {
		got, err := ParseVersion(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "6", "six.1", "6.x", "-1.2", "+6.1", "unknown"} {
		if v, err := ParseVersion(bad); err == nil || !strings.Contains(err.Error(), "want major.minor") {
			t.Errorf("ParseVersion(%q) = %v, %v; want an error naming the input", bad, v, err)
		}
	}
}

func TestAtLeast(t *testing.T) {
	min := MustVersion("5.15")
	for v, want := range map[Version]bool{{5, 14}: false, {5, 15}: true, {5, 16}: true, {4, 20}: false, {6, 0}: true} {
		if got := v.AtLeast(min); got != want {
			t.Errorf("%v.AtLeast(5.15) = %v, want %v", v, got, want)
		}
	}
}

func TestKernel(t *testing.T) {
	for release, want := range map[string]Status{
		"5.10.0-23-amd64": Fail,
		"5.15.0-91":       Warn, // loads, but the sidecar keeps root
		"6.4.16":          Warn,
		"6.5.0":           OK,
		"6.18.44":         OK,
		"garbage":         Fail,
	} {
		r := Kernel("node x", release)
		if r.Status != want {
			t.Errorf("Kernel(%q) = %v (%s), want %v", release, r.Status, r.Detail, want)
		}
		if !strings.HasPrefix(r.Check, "node x: Linux >= 5.15") {
			t.Errorf("Kernel(%q).Check = %q: want it to name the node and the requirement", release, r.Check)
		}
	}
}

func TestReport(t *testing.T) {
	var out bytes.Buffer
	err := Report(&out, []Result{
		{Check: "a", Status: OK, Detail: "fine"},
		{Check: "b", Status: Warn, Detail: "meh"},
		{Check: "c", Status: Skip, Detail: "not here"},
	})
	if err != nil {
		t.Fatalf("warnings and skips failed the report: %v", err)
	}
	want := "ok    a: fine\nwarn  b: meh\nskip  c: not here\n1 ok, 1 warn, 1 skipped, 0 failed\n"
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	err = Report(&out, []Result{{Check: "a", Status: OK}, {Check: "kernel", Status: Fail, Detail: "too old"}})
	if err == nil || !strings.Contains(err.Error(), "1 of 2 checks failed: kernel") {
		t.Errorf("a failed check: err %v, want it named", err)
	}
	if !strings.Contains(out.String(), "FAIL  kernel: too old") || !strings.HasSuffix(out.String(), "1 ok, 0 warn, 0 skipped, 1 failed\n") {
		t.Errorf("report:\n%s", out.String())
	}
}
