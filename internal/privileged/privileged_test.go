package privileged

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNeed runs a test that needs something absent in a child process,
// with and without EnvRequire, and checks it skips, then fails, with its
// reason.
func TestNeed(t *testing.T) {
	if os.Getenv("PRIVILEGED_CHILD") == "1" {
		Need(t, false, "the widget is absent")
		t.Fatal("Need returned for an absent requirement")
	}
	for _, c := range []struct {
		env, want string
		fails     bool
	}{
		{"", "skipped: the widget is absent", false},
		{"1", "the widget is absent (MESHLET_REQUIRE_PRIVILEGED=1", true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNeed$", "-test.v")
		cmd.Env = append(os.Environ(), "PRIVILEGED_CHILD=1", EnvRequire+"="+c.env)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.fails || !strings.Contains(string(out), c.want) {
			t.Errorf("%s=%q: err %v, output:\n%s\nwant failure=%v and %q", EnvRequire, c.env, err, out, c.fails, c.want)
		}
	}
	Need(t, true, "present") // returns
}
