package testtool

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/internal/privileged"
)

// JaegerVersion is the Jaeger the tracing tests export spans to
// (github.com/jaegertracing/jaeger, its v2 binary cmd/jaeger: an
// OpenTelemetry Collector build with an OTLP receiver, memory storage and
// Jaeger's query API).
const JaegerVersion = "v1.75.0"

var jaegerBuild sync.Mutex

// Jaeger returns the path of the jaeger binary at JaegerVersion, built
// from the module internal/testtool/jaeger (its go.mod and go.sum are
// committed: Jaeger's own go.mod has replace directives, so `go install
// pkg@version` refuses it) on first use into a folder of Dir named by
// that module's go.sum, so a version change rebuilds it. The cold build
// downloads about 800 modules and takes 3-4 minutes on 2 cores.
func Jaeger(t testing.TB) string {
	t.Helper()
	mod, err := jaegerModule()
	if err != nil {
		t.Fatalf("jaeger tool module: %v", err)
	}
	sum, err := os.ReadFile(filepath.Join(mod, "go.sum"))
	if err != nil {
		t.Fatalf("jaeger tool module: %v", err)
	}
	dir := filepath.Join(Dir(), "jaeger-"+JaegerVersion+"-"+shortHash(sum))
	bin := filepath.Join(dir, "jaeger")
	jaegerBuild.Lock()
	defer jaegerBuild.Unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tmp := dir + ".tmp" + strconv.Itoa(os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(tmp, "jaeger"), "github.com/jaegertracing/jaeger/cmd/jaeger")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		privileged.Need(t, !proxyUnreachable(string(out)), "building jaeger: the module proxy is unreachable:\n"+tail(string(out), 1500))
		t.Fatalf("go build jaeger %s (in %s): %v\n%s", JaegerVersion, mod, err, tail(string(out), 3000))
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return bin
}

// jaegerModule finds internal/testtool/jaeger under meshlet's module root,
// walking up from the working directory (go test runs in the package's
// directory): under -trimpath, runtime.Caller names no file on disk.
func jaegerModule() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(gomod), "module github.com/meshlet-dev/meshlet\n") {
			return filepath.Join(dir, "internal", "testtool", "jaeger"), nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod of github.com/meshlet-dev/meshlet above %s", wd)
		}
	}
}

// JaegerServer is a running Jaeger: OTLP/gRPC on OTLP, the query API at
// Query (http://host:port).
type JaegerServer struct {
	OTLP, Query string
	log         *Buffer
}

// StartJaeger runs Jaeger with in-memory storage, its OTLP/gRPC receiver
// and query API bound to host (loopback, or an address the test's pods
// reach), until the test ends; it returns once Jaeger reports itself
// healthy.
func StartJaeger(t testing.TB, host string) *JaegerServer {
	t.Helper()
	bin := Jaeger(t)
	dir := t.TempDir()
	ports := portStrings(FreePorts(t, host, 4))
	j := &JaegerServer{OTLP: net.JoinHostPort(host, ports[0]), Query: "http://" + net.JoinHostPort(host, ports[1]), log: &Buffer{}}
	health := "http://" + net.JoinHostPort(host, ports[3]) + "/status"
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
extensions:
  jaeger_query:
    storage: {traces: mem}
    http: {endpoint: "%s"}
    grpc: {endpoint: "%s"}
  jaeger_storage:
    backends:
      mem: {memory: {max_traces: 10000}}
  healthcheckv2:
    use_v2: true
    http: {endpoint: "%s"}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "%s"}
processors:
  batch: {timeout: 50ms}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
`, net.JoinHostPort(host, ports[1]), net.JoinHostPort(host, ports[2]), net.JoinHostPort(host, ports[3]), j.OTLP)
	path := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config=file:"+path)
	cmd.Stdout, cmd.Stderr = j.log, j.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting jaeger: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("jaeger exited at start:\n%s", tail(j.log.String(), 3000))
		default:
		}
		if resp, err := http.Get(health); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return j
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger not healthy at %s after 60 s:\n%s", health, tail(j.log.String(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log is what Jaeger wrote.
func (j *JaegerServer) Log() string { return j.log.String() }

// JaegerSpan is a span as Jaeger's query API returns it.
type JaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
	// Service is the span's process's service name (filled in by Trace).
	Service string `json:"-"`
}

// Tag returns the span's tag key as a string ("" when absent).
func (s *JaegerSpan) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Parent is the span id the span is a CHILD_OF ("" for a root).
func (s *JaegerSpan) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Trace returns the spans Jaeger holds for the trace id (hex), none when
// it has none yet.
func (j *JaegerServer) Trace(id string) ([]JaegerSpan, error) {
	resp, err := http.Get(j.Query + "/api/traces/" + id)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("jaeger query %s: %d %s", id, resp.StatusCode, body)
	}
	var out struct {
		Data []struct {
			Spans     []JaegerSpan `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("jaeger query %s: %v: %s", id, err, body)
	}
	var spans []JaegerSpan
	for _, d := range out.Data {
		for _, s := range d.Spans {
			s.Service = d.Processes[s.ProcessID].ServiceName
			spans = append(spans, s)
		}
	}
	return spans, nil
}

// WaitTrace waits up to a minute until Jaeger holds at least n spans of
// the trace id and returns them.
func (j *JaegerServer) WaitTrace(t testing.TB, id string, n int) []JaegerSpan {
	t.Helper()
	var spans []JaegerSpan
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if spans, err = j.Trace(id); err == nil && len(spans) >= n {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger holds %d spans of trace %s after a minute, want %d (%v): %+v\njaeger log:\n%s", len(spans), id, n, err, spans, tail(j.Log(), 2000))
		}
	}
}

// portStrings is ports as strings, for net.JoinHostPort.
func portStrings(ports []int) []string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return s
}

func shortHash(b []byte) string {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return strings.ToLower(strconv.FormatUint(h, 36))
}
