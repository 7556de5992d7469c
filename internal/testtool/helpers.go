package testtool

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// Buffer collects what is written to it (a log, say), safe for writers
// on other goroutines.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns what was written so far, split into lines.
func (l *Buffer) Lines() []string {
	return strings.Split(strings.TrimSpace(l.String()), "\n")
}

// WaitFor polls cond until it holds, failing t if 5 s pass first.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// FromYAML decodes a YAML snippet of an Envoy resource into m.
func FromYAML(t testing.TB, y string, m proto.Message) {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("yaml: %v\n%s", err, y)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		t.Fatalf("protojson: %v\n%s", err, y)
	}
}

// WantErr fails t unless err is non-nil and contains every part.
func WantErr(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

// Recorder is a testing.TB that collects failures instead of failing,
// for tests of checkers that report through a testing.TB. Its Fatal and
// Fatalf do not stop the caller.
type Recorder struct {
	testing.TB
	Errs    []string // every failure reported, in order
	Stopped bool     // Fatal or Fatalf was called
}

// Helper does nothing: the recorder reports no lines of its own.
func (r *Recorder) Helper() {}

// Errorf records a failure.
func (r *Recorder) Errorf(format string, args ...any) {
	r.Errs = append(r.Errs, fmt.Sprintf(format, args...))
}

// Fatal records a failure and that the check wanted to stop.
func (r *Recorder) Fatal(args ...any) { r.Stopped = true; r.Errs = append(r.Errs, fmt.Sprint(args...)) }

// Fatalf records a failure and that the check wanted to stop.
func (r *Recorder) Fatalf(format string, args ...any) {
	r.Stopped = true
	r.Errs = append(r.Errs, fmt.Sprintf(format, args...))
}
