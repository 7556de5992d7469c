package dataplane

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/lb"
)

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testtool.WaitFor(t, what, cond)
}

func hostFlags(s *Server, cluster, addr string) string {
	for _, c := range s.Clusters() {
		if c.Name != cluster {
			continue
		}
		for _, h := range c.Hosts {
			if h.Address == addr {
				return h.HealthFlags
			}
		}
	}
	return "missing"
}

// A host answering 500 is ejected after consecutive_5xx failures, gets no
// traffic while ejected, and returns after the ejection time.
func TestOutlierEjectionAndReturn(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	flaky := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(500)
			return
		}
		w.Write([]byte("flaky"))
	}))
	good := upstream(t, "127.0.0.12", named("good"))
	cl := testCluster("echo", endpoint(flaky, "a"), endpoint(good, "a"))
	od := lb.DefaultOutlierConfig()
	od.Interval = 50 * time.Millisecond
	od.BaseEjectionTime = 300 * time.Millisecond
	od.MaxEjectionPercent = 100
	od.Consecutive5xx = 3
	cl.Outlier = &od
	s, _ := startServer(t, testConfig(noRetry, cl))
	for range 20 {
		get(t, http.DefaultClient, s, "/")
		if strings.Contains(hostFlags(s, "echo", flaky), "failed_outlier_check") {
			break
		}
	}
	waitFor(t, "ejection", func() bool { return strings.Contains(hostFlags(s, "echo", flaky), "failed_outlier_check") })
	failing.Store(false)
	for range 10 {
		if _, body, _ := get(t, http.DefaultClient, s, "/"); body != "good" {
			t.Fatalf("ejected host served %q", body)
		}
	}
	if got := stat(t, s, "cluster.echo.outlier_detection.ejections_enforced_consecutive_5xx"); got != 1 {
		t.Errorf("ejections_enforced_consecutive_5xx = %d, want 1", got)
	}
	waitFor(t, "return after the ejection time", func() bool { return hostFlags(s, "echo", flaky) == "healthy" })
	seen := map[string]bool{}
	for range 10 {
		_, body, _ := get(t, http.DefaultClient, s, "/")
		seen[body] = true
	}
	if !seen["flaky"] {
		t.Errorf("returned host got no traffic: %v", seen)
	}
}

// A success between failures resets the consecutive-5xx count through the
// proxy, though workers only count successes and the main loop delivers
// them before the next failure (worker.reportCode): 2 failures, a success
// and 2 failures eject nobody; a third failure in a row ejects.
//
// The "nobody" is checked once a marker has been handled: one worker
// queues its results in order and the main loop takes them in that order,
// so when a later request to a second cluster (ejected by one 500) shows
// its ejection, the five results before it have been applied.
func TestOutlierSuccessResetsConsecutive(t *testing.T) {
	var fail atomic.Bool
	up := upstream(t, "127.0.0.13", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(500)
			return
		}
		w.Write([]byte("ok"))
	}))
	mark := upstream(t, "127.0.0.14", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	cl := testCluster("echo", endpoint(up, "a"))
	od := lb.DefaultOutlierConfig()
	od.Interval = time.Hour // no tick: the successes must come with the failures
	od.MaxEjectionPercent = 100
	od.Consecutive5xx = 3
	cl.Outlier = &od
	markCl := testCluster("mark", endpoint(mark, "a"))
	markOD := od
	markOD.Consecutive5xx = 1
	markCl.Outlier = &markOD
	cfg := testConfig(noRetry, cl, markCl)
	route := cfg.Listeners[0].Routes[0]
	route.Name, route.Hosts, route.Cluster = "mark", []string{"mark"}, "mark"
	cfg.Listeners[0].Routes = append(cfg.Listeners[0].Routes, route)
	// One worker: every result goes through one queue, in request order.
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: io.Discard, Workers: 1})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	send := func(failing bool, n int) {
		fail.Store(failing)
		for range n {
			get(t, http.DefaultClient, s, "/")
		}
	}
	ejected := func(cluster, addr string) func() bool {
		return func() bool { return strings.Contains(hostFlags(s, cluster, addr), "failed_outlier_check") }
	}
	send(true, 2)
	send(false, 1)
	send(true, 2)
	req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/", nil)
	req.Host = "mark"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("marker request: %v", err)
	}
	resp.Body.Close()
	waitFor(t, "the marker cluster's ejection", ejected("mark", mark))
	if ejected("echo", up)() {
		t.Fatal("ejected after 2 failures, a success and 2 failures (consecutive_5xx 3)")
	}
	send(true, 1)
	waitFor(t, "ejection after a third failure in a row", ejected("echo", up))
}

// Active HTTP health checks: a host starts failed until its first check,
// a failing /healthz takes it out after unhealthy_threshold checks, and
// healthy_threshold passes bring it back.
func TestActiveHealthCheck(t *testing.T) {
	var sick atomic.Bool
	hcHandler := func(name string, sickOne bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				if sickOne && sick.Load() {
					w.WriteHeader(503)
				}
				return
			}
			w.Write([]byte(name))
		})
	}
	a := upstream(t, "127.0.0.11", hcHandler("a", true))
	b := upstream(t, "127.0.0.12", hcHandler("b", false))
	cl := testCluster("echo", endpoint(a, "a"), endpoint(b, "a"))
	cl.HealthChecks = []config.HealthCheck{{Kind: config.HealthCheckHTTP, Path: "/healthz", HealthCheckConfig: lb.HealthCheckConfig{
		Timeout: time.Second, Interval: 30 * time.Millisecond, NoTrafficInterval: 30 * time.Millisecond,
		UnhealthyThreshold: 2, HealthyThreshold: 2}}}
	cl.LB.PanicThreshold = 0
	s, _ := startServer(t, testConfig(noRetry, cl))
	waitFor(t, "first checks pass", func() bool { return hostFlags(s, "echo", a) == "healthy" && hostFlags(s, "echo", b) == "healthy" })
	sick.Store(true)
	// A 503 is a non-retriable active failure: unhealthy at once.
	waitFor(t, "a fails its check", func() bool { return hostFlags(s, "echo", a) == "/failed_active_hc" })
	for range 10 {
		if _, body, _ := get(t, http.DefaultClient, s, "/"); body != "b" {
			t.Fatalf("failed host served %q", body)
		}
	}
	sick.Store(false)
	waitFor(t, "a recovers", func() bool { return hostFlags(s, "echo", a) == "healthy" })
	if !strings.Contains(adminGet(t, s, "/clusters"), "echo::"+a+"::health_flags::healthy") {
		t.Errorf("/clusters does not show %s healthy", a)
	}
}

// TCP (connect, send, expect) and gRPC (grpc.health.v1) active checks.
func TestTCPAndGRPCHealthChecks(t *testing.T) {
	// A TCP server that answers "PONG" to "PING", and one that accepts but
	// answers nothing useful.
	tcpServer := func(ip, reply string) string {
		return serveTCP(t, ip, func(c net.Conn) { buf := make([]byte, 16); c.Read(buf); c.Write([]byte(reply)) })
	}
	good := tcpServer("127.0.0.11", "PONG")
	bad := tcpServer("127.0.0.12", "NOPE")
	gl, _ := net.Listen("tcp", "127.0.0.13:0")
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(gl)
	t.Cleanup(gs.Stop)

	timing := lb.HealthCheckConfig{Timeout: time.Second, Interval: 30 * time.Millisecond, NoTrafficInterval: 30 * time.Millisecond,
		UnhealthyThreshold: 1, HealthyThreshold: 1}
	tcp := testCluster("tcp", endpoint(good, "a"), endpoint(bad, "a"))
	tcp.HealthChecks = []config.HealthCheck{{Kind: config.HealthCheckTCP, Send: []byte("PING"), Receive: []byte("PONG"), HealthCheckConfig: timing}}
	g := testCluster("grpc", endpoint(gl.Addr().String(), "a"))
	g.HealthChecks = []config.HealthCheck{{Kind: config.HealthCheckGRPC, GRPCService: "svc", HealthCheckConfig: timing}}
	cfg := testConfig(noRetry, testCluster("echo", endpoint(good, "a")), tcp, g)
	s, _ := startServer(t, cfg)
	waitFor(t, "tcp checks", func() bool {
		return hostFlags(s, "tcp", good) == "healthy" && hostFlags(s, "tcp", bad) == "/failed_active_hc"
	})
	waitFor(t, "grpc check passes", func() bool { return hostFlags(s, "grpc", gl.Addr().String()) == "healthy" })
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
	waitFor(t, "grpc NOT_SERVING fails the host", func() bool { return hostFlags(s, "grpc", gl.Addr().String()) == "/failed_active_hc" })
}
