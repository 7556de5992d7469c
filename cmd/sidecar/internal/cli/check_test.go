package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/internal/preflight"
	"github.com/meshlet-dev/meshlet/internal/privileged"
)

// sidecar check on this machine, as root: the kernel passes, the unified
// hierarchy is found, and the real programs load through the verifier.
func TestCheckThisNode(t *testing.T) {
	privileged.Root(t, "sidecar check loads the eBPF programs (run: sudo go test ./cmd/sidecar/internal/cli/)")
	var out bytes.Buffer
	if err := command("check", nil, &out); err != nil {
		t.Fatalf("sidecar check on this node: %v\n%s", err, out.String())
	}
	t.Logf("sidecar check:\n%s", out.String())
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	for _, want := range []string{
		"this node: Linux >= " + preflight.MinKernel + ": Linux " + strings.TrimSpace(string(release)),
		"cgroup v2 (the unified hierarchy): ",
		"ok    eBPF programs load ",
		" 0 failed\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sidecar check's report lacks %q", want)
		}
	}
}

// Each check says which of the sidecar's requirements it tests; one that
// cannot run is a skip, never a silent pass.
func TestNodeChecksNamed(t *testing.T) {
	for _, r := range nodeChecks() {
		if r.Check == "" || r.Detail == "" {
			t.Errorf("a check without its name or detail: %+v", r)
		}
		if os.Geteuid() != 0 && strings.HasPrefix(r.Check, "eBPF") && r.Status != preflight.Skip {
			t.Errorf("not root, the load check is %v, want skip: %+v", r.Status, r)
		}
	}
}
