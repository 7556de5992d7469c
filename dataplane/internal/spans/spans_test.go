package spans

import (
	"context"
	"net"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/meshlet-dev/meshlet/internal/testtool"
)

// A collector that accepts the connection and never answers (a silent
// peer, real TCP under the real OTLP/gRPC client): the upload in flight
// blocks, the queue fills, and what does not fit is dropped and counted
// while Enqueue returns at once.
func TestSilentCollectorDropsAndCounts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held := make(chan net.Conn, 16)
	defer func() {
		l.Close()
		for len(held) > 0 {
			(<-held).Close()
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held <- c // read nothing, answer nothing
		}
	}()
	e := New(Options{Endpoint: l.Addr().String(), QueueSize: 4, BatchSize: 1, Interval: time.Hour})
	if !e.Enqueue(&Record{Method: "GET"}) {
		t.Fatal("the first span was refused")
	}
	// The loop takes it and blocks uploading it.
	testtool.WaitFor(t, "the exporter to take the first span", func() bool { return len(e.queue) == 0 })
	accepted := 0
	for range 7 {
		if e.Enqueue(&Record{Method: "GET"}) {
			accepted++
		}
	}
	if accepted != 4 || e.Dropped() != 3 {
		t.Fatalf("accepted %d (want the queue's 4), dropped %d (want 3)", accepted, e.Dropped())
	}
	e.Close()
	if e.Exported() != 0 {
		t.Errorf("%d exported to a silent collector", e.Exported())
	}
	if e.Failed() == 0 {
		t.Errorf("the upload in flight at Close was not counted as failed")
	}
}

func TestSpanAttributes(t *testing.T) {
	r := &Record{Server: false, Method: "POST", Path: "/a", Authority: "echo.shop:8080", Protocol: "HTTP/1.1", Code: 503, Flags: "UF",
		Cluster: "outbound|8080||echo.shop", Peer: "[fd00::1]:15006", DestinationZone: "b", SourceZone: "a", Start: time.Unix(1, 0), End: time.Unix(2, 0)}
	r.TraceID[15], r.SpanID[7], r.ParentID[7] = 1, 2, 3
	s := span(r)
	got := map[string]string{}
	for _, kv := range s.Attributes {
		got[kv.Key] = kv.Value.String()
	}
	for _, k := range []string{"http.request.method", "url.path", "server.address", "server.port", "network.peer.address", "network.peer.port",
		"http.response.status_code", "upstream_cluster", "response_flags", "source.zone", "destination.zone", "error.type"} {
		if got[k] == "" {
			t.Errorf("attribute %s missing: %v", k, got)
		}
	}
	if s.Kind != tracepb.Span_SPAN_KIND_CLIENT || s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || s.Name != "POST" {
		t.Errorf("span %v %v %q", s.Kind, s.Status, s.Name)
	}
	if h, p := splitHostPort("[fd00::1]:15006"); h != "fd00::1" || p != 15006 {
		t.Errorf("splitHostPort: %q %d", h, p)
	}
	if h, p := splitHostPort("echo"); h != "echo" || p != 0 {
		t.Errorf("splitHostPort(echo): %q %d", h, p)
	}
	r.Server, r.Code = true, 404
	if s := span(r); s.Status != nil {
		t.Errorf("a server span's 404 is no error (OpenTelemetry's HTTP conventions): %v", s.Status)
	}
}

// A span handed over after Close is refused and counted as dropped, not
// left in a queue nobody reads.
func TestEnqueueAfterClose(t *testing.T) {
	n := &Counters{}
	e := New(Options{Endpoint: "127.0.0.1:1", Interval: time.Hour, Counters: n})
	e.Close()
	if e.Enqueue(&Record{Method: "GET"}) {
		t.Fatal("a closed exporter took a span")
	}
	if n.Dropped.Load() != 1 {
		t.Errorf("dropped %d, want 1", n.Dropped.Load())
	}
}

// collector is a real OTLP/gRPC trace service on loopback that records
// what each export carried.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	got chan metadata.MD
}

func (c *collector) Export(ctx context.Context, _ *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	c.got <- md
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// The app container's OTEL_EXPORTER_OTLP_* variables (the sidecar's
// environment may carry them) change nothing: not the collector, not
// TLS, not the headers a span upload sends (the gRPC server hides
// grpc-encoding, so compression is set but not checked here).
func TestOTLPEnvironmentIgnored(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	c := &collector{got: make(chan metadata.MD, 4)}
	coltracepb.RegisterTraceServiceServer(srv, c)
	go srv.Serve(l)
	defer srv.Stop()
	for k, v := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "https://192.0.2.1:4317",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://192.0.2.1:4317",
		"OTEL_EXPORTER_OTLP_INSECURE":        "false",
		"OTEL_EXPORTER_OTLP_CERTIFICATE":     "/nonexistent/ca.pem",
		"OTEL_EXPORTER_OTLP_HEADERS":         "authorization=app-secret",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":  "authorization=app-secret",
		"OTEL_EXPORTER_OTLP_COMPRESSION":     "gzip",
	} {
		t.Setenv(k, v)
	}
	n := &Counters{}
	e := New(Options{Endpoint: l.Addr().String(), Interval: time.Hour, Counters: n})
	defer e.Close()
	e.Enqueue(&Record{Method: "GET", Start: time.Unix(1, 0), End: time.Unix(2, 0)})
	e.Flush()
	if n.Exported.Load() != 1 {
		t.Fatalf("exported %d, failed %d: the upload did not reach the configured plaintext collector", n.Exported.Load(), n.Failed.Load())
	}
	md := <-c.got
	if v := md.Get("authorization"); len(v) != 0 {
		t.Errorf("the upload carried the environment's header: %v", v)
	}
}
