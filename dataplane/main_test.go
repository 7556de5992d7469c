package dataplane

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
)

// testHTTP1Server is the HTTP/1 server the tests' data planes run
// (Options.HTTP1Server), from MESHLET_TEST_HTTP1_SERVER: unset or
// "meshlet", the hand-written one; "net/http", the fallback, which CI
// runs the package's tests against as well (hack/test.sh).
var testHTTP1Server = os.Getenv("MESHLET_TEST_HTTP1_SERVER")

// fastHTTP1Only skips a test of what only the hand-written HTTP/1 server
// does, when the tests run the net/http fallback; why names it.
func fastHTTP1Only(t testing.TB, why string) {
	t.Helper()
	if testHTTP1Server == HTTP1ServerNetHTTP {
		t.Skip("fast HTTP/1 server only, the net/http fallback has its own HTTP/1 codec: " + why)
	}
}

// TestMain keeps the data plane's own logs (drains, health and outlier
// transitions, reloads) out of test output unless MESHLET_TEST_LOG is set:
// servers built without Options.Logger log to slog.Default().
func TestMain(m *testing.M) {
	if err := checkHTTP1Server(testHTTP1Server); err != nil {
		fmt.Fprintf(os.Stderr, "MESHLET_TEST_HTTP1_SERVER: %v\n", err)
		os.Exit(2)
	}
	if os.Getenv("MESHLET_TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	os.Exit(m.Run())
}
