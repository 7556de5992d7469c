package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/tracectx"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/mtls"
)

// Tracing through two real sidecars over mutual TLS into a real Jaeger
// (its OTLP receiver and query API): the client app's request leaves
// through sidecar A (a CLIENT span) and reaches the app behind sidecar B
// (a SERVER span, A's child), and the trace headers the app sees carry
// B's span.

// seenHeaders records the trace headers of each request the app got, by
// path.
type seenHeaders struct {
	mu sync.Mutex
	h  map[string]http.Header
}

func (s *seenHeaders) get(path string) http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h[path]
}

// tracedPair starts sidecar B (inbound to an app recording what it saw)
// and sidecar A (outbound to B as cluster echo), each exporting to
// collector with its sampling percentage.
func tracedPair(t *testing.T, collector string, samplingA, samplingB float64) (a, b *Server, aLogs, bLogs *logBuffer, seen *seenHeaders) {
	t.Helper()
	ca := testCA(t, 0)
	seen = &seenHeaders{h: map[string]http.Header{}}
	app := upstream(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.mu.Lock()
		seen.h[r.URL.Path] = r.Header.Clone()
		seen.mu.Unlock()
		fmt.Fprint(w, "traced")
	}))
	bCfg := &config.Config{
		Node: config.Node{ID: "web-0.prod", Cluster: "web", Locality: testLocality("b")}, Admin: "127.0.0.1:0", DrainTimeout: time.Second,
		AccessLog: config.AccessLog{Format: config.AccessLogText, FlushInterval: 10 * time.Millisecond},
		Tracing:   &config.Tracing{Endpoint: collector, Sampling: samplingB, ServiceName: "web.prod"},
		Listeners: []config.Listener{{Name: "inbound", Address: "127.0.0.2:0", Direction: config.Inbound, Protocol: config.ProtocolAuto,
			MTLS:   &config.InboundMTLS{PeerAuthorization: config.PeerAuthorization{Mode: config.MTLSStrict}},
			Routes: []config.Route{{Name: "app", Cluster: "app", Timeout: 5 * time.Second}}}},
		Clusters: []config.Cluster{testCluster("app", endpoint(app, "b"))},
	}
	b, bLogs = startTraced(t, bCfg, identity(t, ca, webID, time.Hour))
	aCfg := testConfig(noRetry, testCluster("echo", meshedEndpoint(b.ListenerAddrs()["127.0.0.2:0"], webID.String())))
	aCfg.Clusters[0].Endpoints[0].Locality = testLocality("b")
	aCfg.Tracing = &config.Tracing{Endpoint: collector, Sampling: samplingA, ServiceName: "client.prod"}
	a, aLogs = startTraced(t, aCfg, identity(t, ca, clientID, time.Hour))
	return a, b, aLogs, bLogs, seen
}

func startTraced(t *testing.T, cfg *config.Config, id *mtls.Store) (*Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: logs, Workers: 2, Identity: id, TraceFlushInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s, logs
}

// send is one GET through a with extra headers; it returns the status.
func send(t *testing.T, a *Server, path string, hdr ...string) int {
	t.Helper()
	code, err := sendErr(a, path, hdr...)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return code
}

func sendErr(a *Server, path string, hdr ...string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, proxyURL(a)+path, nil)
	req.Host = "echo"
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func testLocality(zone string) lb.Locality { return lb.Locality{Region: "r1", Zone: zone} }

// traceIDOf is the %TRACE_ID% (the last field) of the access-log line
// with the request's path.
func traceIDOf(t *testing.T, logs *logBuffer, path string) string {
	t.Helper()
	f := strings.Fields(logs.waitLine(t, `"GET `+path+` `))
	return f[len(f)-1]
}

func TestTracingTwoSidecarsIntoJaeger(t *testing.T) {
	j := testtool.StartJaeger(t, "127.0.0.1")
	a, b, aLogs, bLogs, seen := tracedPair(t, j.OTLP, 100, 0)

	// 1. No context: A starts a sampled trace; B (0 %) honours A's
	// decision; both log the trace id.
	if code := send(t, a, "/new"); code != 200 {
		t.Fatalf("GET /new: %d", code)
	}
	id := traceIDOf(t, aLogs, "/new")
	if len(id) != 32 || traceIDOf(t, bLogs, "/new") != id {
		t.Fatalf("trace ids in the access logs: A %q, B %q", id, traceIDOf(t, bLogs, "/new"))
	}
	spans := j.WaitTrace(t, id, 2)
	if len(spans) != 2 {
		t.Fatalf("trace %s: %d spans, want 2: %+v", id, len(spans), spans)
	}
	var client, server *testtool.JaegerSpan
	for i := range spans {
		switch spans[i].Tag("span.kind") {
		case "client":
			client = &spans[i]
		case "server":
			server = &spans[i]
		}
	}
	if client == nil || server == nil {
		t.Fatalf("want a client and a server span: %+v", spans)
	}
	if client.Parent() != "" || server.Parent() != client.SpanID {
		t.Errorf("parents: client's %q (want none), server's %q (want the client's %s)", client.Parent(), server.Parent(), client.SpanID)
	}
	if client.Service != "client.prod" || server.Service != "web.prod" {
		t.Errorf("services: %q, %q", client.Service, server.Service)
	}
	for _, c := range []struct {
		s          *testtool.JaegerSpan
		key, value string
	}{
		{client, "http.request.method", "GET"}, {client, "url.path", "/new"}, {client, "http.response.status_code", "200"},
		{client, "upstream_cluster", "echo"}, {client, "response_flags", "-"}, {client, "source.principal", clientID.String()},
		{client, "destination.principal", webID.String()}, {client, "source.zone", "a"}, {client, "destination.zone", "b"},
		{client, "server.address", "echo"},
		{server, "source.principal", clientID.String()}, {server, "destination.principal", webID.String()},
		{server, "destination.zone", "b"}, {server, "upstream_cluster", "app"}, {server, "network.protocol.version", "2"},
		{server, "http.response.status_code", "200"},
	} {
		if got := c.s.Tag(c.key); got != c.value {
			t.Errorf("%s span %s = %q, want %q", c.s.Tag("span.kind"), c.key, got, c.value)
		}
	}
	// The app sees B's span as its parent.
	p, ok := tracectx.Extract(seen.get("/new"))
	if !ok || fmt.Sprintf("%x", p.TraceID) != id || fmt.Sprintf("%x", p.SpanID) != server.SpanID || p.Sampling != tracectx.Sampled {
		t.Errorf("the app's traceparent %q: want trace %s, parent %s, sampled", seen.get("/new").Get("traceparent"), id, server.SpanID)
	}

	// 2. A caller that decided not to sample: nothing is exported, the
	// decision and the trace id go on.
	caller := "4bf92f3577b34da6a3ce929d0e0e4736"
	if code := send(t, a, "/unsampled", "traceparent", "00-"+caller+"-00f067aa0ba902b7-00", "tracestate", "vendor=x"); code != 200 {
		t.Fatal(code)
	}
	if got := traceIDOf(t, bLogs, "/unsampled"); got != caller {
		t.Errorf("B logged trace %q, want the caller's %s", got, caller)
	}
	h := seen.get("/unsampled")
	if tp := h.Get("traceparent"); !strings.HasPrefix(tp, "00-"+caller+"-") || !strings.HasSuffix(tp, "-00") || h.Get("tracestate") != "vendor=x" {
		t.Errorf("the app saw traceparent %q tracestate %q", tp, h.Get("tracestate"))
	}

	// 3. B3 (X-B3-*), 64-bit, sampled: joined, written back in B3 too.
	if code := send(t, a, "/b3", "X-B3-TraceId", "a3ce929d0e0e4736", "X-B3-SpanId", "00f067aa0ba902b7", "X-B3-Sampled", "1"); code != 200 {
		t.Fatal(code)
	}
	b3id := "0000000000000000a3ce929d0e0e4736"
	spans = j.WaitTrace(t, b3id, 2)
	h = seen.get("/b3")
	if h.Get("X-B3-TraceId") != "a3ce929d0e0e4736" || h.Get("X-B3-Sampled") != "1" || !strings.Contains(h.Get("traceparent"), b3id) {
		t.Errorf("the app's B3 headers: %v", h)
	}
	for _, s := range spans {
		if s.Tag("span.kind") == "client" && s.Parent() != "00f067aa0ba902b7" {
			t.Errorf("A's span parent %q, want the caller's 00f067aa0ba902b7", s.Parent())
		}
		if s.Tag("span.kind") == "server" && h.Get("X-B3-SpanId") != s.SpanID {
			t.Errorf("the app's X-B3-SpanId %q, want B's span %s", h.Get("X-B3-SpanId"), s.SpanID)
		}
	}

	// 4. Hostile trace headers start a trace of the sidecar's own: never
	// forwarded as they came, never a failed request; a legitimate
	// client's requests alongside all succeed.
	hostile := [][]string{
		{"traceparent", "00-" + strings.Repeat("0", 32) + "-00f067aa0ba902b7-01"},
		{"traceparent", "ff-" + caller + "-00f067aa0ba902b7-01"},
		{"traceparent", "00-" + strings.ToUpper(caller) + "-00f067aa0ba902b7-01", "tracestate", "evil=1"},
		{"traceparent", "00-" + caller + "-00f067aa0ba902b7-01", "traceparent", "00-" + caller + "-00f067aa0ba902b7-00"},
		{"b3", caller + "-00f067aa0ba902b7-9"},
		{"b3", strings.Repeat("a", 4000)},
		{"X-B3-TraceId", caller, "X-B3-SpanId", "zz"},
		{"X-B3-TraceId", caller, "X-B3-Sampled", "1"},
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	legit := make(chan int, 1000)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			code, _ := sendErr(a, fmt.Sprintf("/legit%d", i))
			legit <- code
		}
	}()
	for i, hdr := range hostile {
		path := fmt.Sprintf("/hostile%d", i)
		if code := send(t, a, path, hdr...); code != 200 {
			t.Errorf("%v: %d", hdr, code)
		}
		tp := seen.get(path).Get("traceparent")
		q, ok := tracectx.Extract(http.Header{"Traceparent": {tp}})
		if !ok || strings.Contains(tp, strings.Repeat("0", 32)) || seen.get(path).Get("tracestate") != "" {
			t.Errorf("%v: the app saw traceparent %q tracestate %q", hdr, tp, seen.get(path).Get("tracestate"))
		}
		if hdr[0] == "traceparent" && fmt.Sprintf("%x", q.TraceID) == caller {
			t.Errorf("%v: the invalid caller's trace id was kept", hdr)
		}
	}
	close(stop)
	wg.Wait()
	close(legit)
	n := 0
	for code := range legit {
		n++
		if code != 200 {
			t.Errorf("a legitimate request got %d", code)
		}
	}
	t.Logf("%d legitimate requests alongside the hostile ones, all 200", n)

	// 5. Three requests on one keep-alive connection, each without an
	// x-request-id, through a sidecar to a plain upstream (the HTTP/1.1
	// pool, where the connection's stream and its scratch are reused from
	// request to request): every span carries the id generated for its
	// own request, not a later one written over the scratch.
	plainApp := upstream(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.mu.Lock()
		seen.h[r.URL.Path] = r.Header.Clone()
		seen.mu.Unlock()
	}))
	cCfg := testConfig(noRetry, testCluster("echo", endpoint(plainApp, "a")))
	cCfg.Tracing = &config.Tracing{Endpoint: j.OTLP, Sampling: 100, ServiceName: "plain.prod"}
	c, cLogs := startTraced(t, cCfg, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(proxyURL(c), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Pipelined, so the three are answered well within one export interval.
	for i := range 3 {
		fmt.Fprintf(conn, "GET /keepalive%d HTTP/1.1\r\nHost: echo\r\n\r\n", i)
	}
	br := bufio.NewReader(conn)
	for i := range 3 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d on the kept-alive connection: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ids := map[string]string{}
	for i := range 3 {
		path := fmt.Sprintf("/keepalive%d", i)
		rid := seen.get(path).Get("X-Request-Id")
		if ids[rid] != "" || len(rid) != 36 {
			t.Errorf("%s: request id %q (also %s's)", path, rid, ids[rid])
		}
		ids[rid] = path
		for _, sp := range j.WaitTrace(t, traceIDOf(t, cLogs, path), 1) {
			if sp.Tag("guid:x-request-id") != rid || sp.Tag("url.path") != path {
				t.Errorf("%s: the span has request id %q and path %q, the request carried %q", path, sp.Tag("guid:x-request-id"), sp.Tag("url.path"), rid)
			}
		}
	}

	// The exporter's counters: every sampled span went out.
	a.tracer.Load().Flush()
	b.tracer.Load().Flush()
	m := metricsText(t, a)
	if !strings.Contains(m, `meshlet_tracing_spans_total{result="dropped"} 0`) || !strings.Contains(m, `meshlet_tracing_spans_total{result="failed"} 0`) {
		t.Errorf("A's tracing counters:\n%s", grepLines(m, "meshlet_tracing"))
	}
}

// A's 0 % sampling: a request without a context is not sampled, but its
// trace id and decision still go downstream so that B does not sample it
// either; a collector that is down costs no request.
func TestTracingUnsampledAndCollectorDown(t *testing.T) {
	dead := closedAddr(t, "127.0.0.1")
	a, b, aLogs, _, seen := tracedPair(t, dead, 0, 100)
	for i := range 20 {
		if code := send(t, a, fmt.Sprintf("/r%d", i)); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
		tp := seen.get(fmt.Sprintf("/r%d", i)).Get("traceparent")
		if !strings.HasSuffix(tp, "-00") || !strings.Contains(tp, traceIDOf(t, aLogs, fmt.Sprintf("/r%d", i))) {
			t.Fatalf("request %d: the app saw traceparent %q", i, tp)
		}
	}
	// Sampled by the caller, to a collector that is down: answered all
	// the same; the spans fail to upload and are counted.
	for i := range 5 {
		if code := send(t, a, fmt.Sprintf("/s%d", i), "traceparent", fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e47%02d-00f067aa0ba902b7-01", i)); code != 200 {
			t.Fatalf("sampled request %d: %d", i, code)
		}
	}
	if e := a.tracer.Load().Exported() + b.tracer.Load().Exported(); e != 0 {
		t.Errorf("%d spans exported to a closed port", e)
	}
}

func TestSamplingThreshold(t *testing.T) {
	for _, c := range []struct {
		pct  float64
		want float64
	}{{0, 0}, {1, 0.01}, {50, 0.5}, {100, 1}} {
		th := samplingThreshold(c.pct)
		got := float64(th) / (1 << 63) / 2
		if d := got - c.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("samplingThreshold(%v) = %v of the range, want %v", c.pct, got, c.want)
		}
	}
}
