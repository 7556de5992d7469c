//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain gives the run one temporary directory, named as bpf/sweep.sh
// expects (meshlet-test-<pid>-tmp), as TMPDIR for the tests and every
// process they start (the built binaries, the tests' own directories), and
// removes it at the end; a killed run's is removed by the sweep.
func TestMain(m *testing.M) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("meshlet-test-%d-tmp", os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: temporary directory: %v\n", err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", dir)
	// client-go's own logs (watch restarts while the tests stop
	// components) stay out of the output unless MESHLET_TEST_LOG is set;
	// the tests log what they check.
	if os.Getenv("MESHLET_TEST_LOG") == "" {
		klog.SetOutput(io.Discard)
		klog.LogToStderr(false)
		slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	code := m.Run()
	// Mounts the nodes made are undone by their tests; one still there
	// means a test's teardown failed, and removing through it would reach
	// into what it mounts.
	if left := mountPoints(func(point, _ string) bool { return strings.HasPrefix(point, dir+"/") }); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: e2e: mounts left under %s: %v\n", dir, left)
		os.Exit(1)
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: e2e: remove %s: %v\n", dir, err)
		code = 1
	}
	os.Exit(code)
}
