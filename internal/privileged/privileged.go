// Package privileged decides what a test that needs root or a kernel
// feature does where it cannot run: on a developer's machine it skips with
// its reason; where MESHLET_REQUIRE_PRIVILEGED=1 (set by hack/test.sh, so
// in CI) it fails, so that a machine lacking what the suite needs cannot
// pass by skipping.
package privileged

import (
	"os"
	"testing"
)

// EnvRequire is the variable that turns skips into failures.
const EnvRequire = "MESHLET_REQUIRE_PRIVILEGED"

// Required says whether privileged tests must run (EnvRequire is 1).
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Need skips t (or, when Required, fails it) with why unless ok.
func Need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if Required() {
		t.Fatalf("%s (%s=1: privileged tests must run here)", why, EnvRequire)
	}
	t.Skipf("skipped: %s (%s=1 makes this a failure)", why, EnvRequire)
}

// Root is Need for a test that must run as root.
func Root(t testing.TB, why string) {
	t.Helper()
	Need(t, os.Geteuid() == 0, why+": needs root")
}
