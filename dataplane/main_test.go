package dataplane

import (
	"io"
	"log/slog"
	"os"
	"testing"
)

// TestMain keeps the data plane's own logs (drains, health and outlier
// transitions, reloads) out of test output unless MESHLET_TEST_LOG is set:
// servers built without Options.Logger log to slog.Default().
func TestMain(m *testing.M) {
	if os.Getenv("MESHLET_TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	os.Exit(m.Run())
}
