package dataplane

import (
	"context"
	"io"
	"runtime"
	"strings"
	"testing"
)

// The worker count is Options.Workers whatever the runtime's processor
// count: a sidecar whose processor scaler has lowered GOMAXPROCS to 1
// still runs, and reports, the workers it was started with.
func TestWorkersFromOptionsNotGOMAXPROCS(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	cfg := testConfig(noRetry, testCluster("echo", endpoint("127.0.0.1:1", "a")))
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: io.Discard, Workers: 2})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	if n := s.Workers(); n != 2 {
		t.Errorf("Workers() = %d with Options.Workers 2 and GOMAXPROCS 1, want 2", n)
	}
	socks := s.ListenerSockets("127.0.0.1:0")
	if len(socks) != 2 {
		t.Fatalf("%d listener sockets, want one per worker, 2", len(socks))
	}
	if a, b := socks[0].Addr().String(), socks[1].Addr().String(); a != b {
		t.Errorf("the workers' sockets are on %s and %s, want one SO_REUSEPORT group", a, b)
	}
	if n := s.Stats()["server.concurrency"]; n != 2 {
		t.Errorf("server.concurrency %d, want 2", n)
	}
}

// Options.Workers 0 runs one worker; a negative count is refused, named.
func TestWorkersDefaultAndInvalid(t *testing.T) {
	cfg := testConfig(noRetry, testCluster("echo", endpoint("127.0.0.1:1", "a")))
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: io.Discard})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if n := s.Workers(); n != 1 {
		t.Errorf("Options.Workers 0: %d workers, want 1", n)
	}
	if _, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: io.Discard, Workers: -1}); err == nil || !strings.Contains(err.Error(), "Workers -1") {
		t.Errorf("Options.Workers -1: %v, want an error naming it", err)
	}
}
