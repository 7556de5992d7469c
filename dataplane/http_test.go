package dataplane

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

func TestHTTPRoundRobinAndAccessLog(t *testing.T) {
	a := upstream(t, "127.0.0.11", named("a1"))
	b := upstream(t, "127.0.0.12", named("a2"))
	c := upstream(t, "127.0.0.21", named("b1"))
	s, logs := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(a, "a"), endpoint(b, "a"), endpoint(c, "b"))))
	client := &http.Client{}
	seen := map[string]int{}
	for range 30 {
		code, body, _ := get(t, client, s, "/hello")
		if code != 200 {
			t.Fatalf("status %d body %q", code, body)
		}
		seen[body]++
	}
	for _, n := range []string{"a1", "a2", "b1"} {
		if seen[n] != 10 {
			t.Errorf("round robin: %v, want 10 each", seen)
		}
	}
	line := logs.waitLine(t, `"GET /hello HTTP/1.1" 200 - `, `"echo"`)
	if !strings.HasPrefix(line, "[20") || !strings.Contains(line, " echo") {
		t.Errorf("access log line %q", line)
	}
	if got := stat(t, s, "cluster.echo.upstream_rq_2xx"); got != 30 {
		t.Errorf("upstream_rq_2xx = %d, want 30", got)
	}
}

func TestHTTPNoRoute(t *testing.T) {
	a := upstream(t, "127.0.0.11", named("a1"))
	s, logs := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(a, "a"))))
	req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/x", nil)
	req.Host = "unknown.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status %d, want 404", resp.StatusCode)
	}
	logs.waitLine(t, `"GET /x HTTP/1.1" 404 NR `, "route_not_found")
}

func TestHTTPNoHealthyUpstream(t *testing.T) {
	ep := endpoint(upstream(t, "127.0.0.11", named("a1")), "a")
	ep.Health = lb.EDSUnhealthy
	cfg := testConfig(noRetry, testCluster("echo", ep))
	cfg.Clusters[0].LB.PanicThreshold = 0 // no panic: unhealthy hosts stay out
	s, logs := startServer(t, cfg)
	code, body, _ := get(t, http.DefaultClient, s, "/")
	if code != 503 || body != "no healthy upstream" {
		t.Errorf("got %d %q, want 503 no healthy upstream", code, body)
	}
	logs.waitLine(t, " 503 UH ", "no_healthy_upstream")
	if got := stat(t, s, "cluster.echo.upstream_cx_none_healthy"); got != 1 {
		t.Errorf("upstream_cx_none_healthy = %d", got)
	}
}

func TestHTTPConnectFailureThenRetryLimit(t *testing.T) {
	dead := closedAddr(t, "127.0.0.11")
	// No retry: UF.
	s, logs := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(dead, "a"))))
	code, body, _ := get(t, http.DefaultClient, s, "/uf")
	if code != 503 || !strings.Contains(body, "connection failure") {
		t.Errorf("got %d %q", code, body)
	}
	logs.waitLine(t, `"GET /uf HTTP/1.1" 503 UF `, "delayed connect error: 111")

	// The default policy retries connect failures once: UF,URX.
	s2, logs2 := startServer(t, testConfig(retry.Policy{RetryOn: retry.DefaultOn, NumRetries: 1}, testCluster("echo", endpoint(dead, "a"))))
	get(t, http.DefaultClient, s2, "/urx")
	logs2.waitLine(t, `"GET /urx HTTP/1.1" 503 UF,URX `)
	if got := stat(t, s2, "cluster.echo.upstream_rq_retry"); got != 1 {
		t.Errorf("upstream_rq_retry = %d, want 1", got)
	}
	if got := stat(t, s2, "cluster.echo.upstream_cx_connect_fail"); got != 2 {
		t.Errorf("upstream_cx_connect_fail = %d, want 2", got)
	}
}

// A failed HTTP connect counts against the host in /clusters, once per
// attempt, as the TCP proxy's do: with one retry on connect-failure the
// closed port is dialled, and counted, twice.
func TestHTTPConnectFailCountedPerHost(t *testing.T) {
	dead := closedAddr(t, "127.0.0.11")
	for _, tt := range []struct {
		policy retry.Policy
		want   int
	}{
		{noRetry, 1},
		{retry.Policy{RetryOn: retry.OnConnectFailure, NumRetries: 1, BaseInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond}, 2},
	} {
		s, _ := startServer(t, testConfig(tt.policy, testCluster("echo", endpoint(dead, "a"))))
		line := "echo::" + dead + "::cx_connect_fail::"
		if out := adminGet(t, s, "/clusters"); !strings.Contains(out, line+"0\n") {
			t.Fatalf("before any request /clusters lacks %q0:\n%s", line, out)
		}
		if code, _, _ := get(t, http.DefaultClient, s, "/"); code != 503 {
			t.Fatalf("status %d, want 503 (UF)", code)
		}
		// The route counts before it answers, so the 503 orders the check.
		if out := adminGet(t, s, "/clusters"); !strings.Contains(out, fmt.Sprintf("%s%d\n", line, tt.want)) {
			t.Errorf("retries %d: /clusters lacks %q%d:\n%s", tt.policy.NumRetries, line, tt.want, out)
		}
	}
}

func TestHTTPRetry5xxToAnotherHost(t *testing.T) {
	var badHits atomic.Int64
	bad := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		badHits.Add(1)
		w.WriteHeader(503)
	}))
	good := upstream(t, "127.0.0.12", named("good"))
	policy := retry.Policy{RetryOn: retry.On5xx, NumRetries: 2, HostSelectionRetryMaxAttempts: 5, BaseInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond}
	s, logs := startServer(t, testConfig(policy, testCluster("echo", endpoint(bad, "a"), endpoint(good, "a"))))
	for range 10 {
		if code, body, _ := get(t, http.DefaultClient, s, "/r"); code != 200 || body != "good" {
			t.Fatalf("got %d %q, want 200 from good", code, body)
		}
	}
	if badHits.Load() == 0 || badHits.Load() > 10 {
		t.Errorf("bad host hit %d times, want once per request at most (previous-hosts)", badHits.Load())
	}
	if got, want := stat(t, s, "cluster.echo.upstream_rq_retry_success"), badHits.Load(); got != want {
		t.Errorf("upstream_rq_retry_success = %d, want %d", got, want)
	}
	logs.waitLine(t, `"GET /r HTTP/1.1" 200 - `)
}

func TestHTTPRetryLimitExceeded(t *testing.T) {
	var hits atomic.Int64
	bad := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(503)
	}))
	policy := retry.Policy{RetryOn: retry.On5xx, NumRetries: 2, BaseInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond}
	s, logs := startServer(t, testConfig(policy, testCluster("echo", endpoint(bad, "a"))))
	if code, _, _ := get(t, http.DefaultClient, s, "/x"); code != 503 {
		t.Errorf("status %d, want the upstream's 503", code)
	}
	logs.waitLine(t, `"GET /x HTTP/1.1" 503 URX `)
	if hits.Load() != 3 {
		t.Errorf("upstream hit %d times, want 3 (1 + 2 retries)", hits.Load())
	}
	if got := stat(t, s, "cluster.echo.upstream_rq_retry_limit_exceeded"); got != 1 {
		t.Errorf("upstream_rq_retry_limit_exceeded = %d", got)
	}
}

// TestHTTPRouteTimeout runs a route timeout on a runtime timer (under
// clock.PreciseBelow) and on the worker clock's alarm in the HTTP/1 writer.
func TestHTTPRouteTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{200 * time.Millisecond, clock.PreciseBelow + 100*time.Millisecond} {
		t.Run(timeout.String(), func(t *testing.T) {
			slow := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-time.After(5 * time.Second):
				case <-r.Context().Done():
				}
			}))
			cfg := testConfig(noRetry, testCluster("echo", endpoint(slow, "a")))
			cfg.Listeners[0].Routes[0].Timeout = timeout
			s, logs := startServer(t, cfg)
			start := time.Now()
			code, body, _ := get(t, http.DefaultClient, s, "/slow")
			if code != 504 || body != "upstream request timeout" {
				t.Errorf("got %d %q", code, body)
			}
			if d := time.Since(start); d < timeout || d > timeout+2*time.Second {
				t.Errorf("a %v timeout took %v", timeout, d)
			}
			logs.waitLine(t, `"GET /slow HTTP/1.1" 504 UT `)
			if got := stat(t, s, "cluster.echo.upstream_rq_timeout"); got != 1 {
				t.Errorf("upstream_rq_timeout = %d", got)
			}
		})
	}
}

func TestHTTPCircuitBreakerOverflow(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	slow := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	cl := testCluster("echo", endpoint(slow, "a"))
	cl.CircuitBreakers.MaxRequests = 1
	s, logs := startServer(t, testConfig(noRetry, cl))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); get(t, http.DefaultClient, s, "/first") }()
	<-entered
	code, body, _ := get(t, http.DefaultClient, s, "/second")
	close(release)
	wg.Wait()
	if code != 503 || !strings.Contains(body, "overflow") {
		t.Errorf("got %d %q, want 503 overflow", code, body)
	}
	logs.waitLine(t, `"GET /second HTTP/1.1" 503 UO `)
	if got := stat(t, s, "cluster.echo.upstream_rq_pending_overflow"); got != 1 {
		t.Errorf("upstream_rq_pending_overflow = %d", got)
	}
}

func TestHTTPUpstreamConnectionTermination(t *testing.T) {
	rude := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	s, logs := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(rude, "a"))))
	code, body, _ := get(t, http.DefaultClient, s, "/uc")
	if code != 503 || !strings.Contains(body, "connection termination") {
		t.Errorf("got %d %q", code, body)
	}
	logs.waitLine(t, `"GET /uc HTTP/1.1" 503 UC `)
}

func TestHTTPDownstreamDisconnect(t *testing.T) {
	entered := make(chan struct{}, 1)
	slow := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	}))
	s, logs := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(slow, "a"))))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL(s)+"/dc", nil)
	req.Host = "echo"
	go func() { <-entered; cancel() }()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("request succeeded")
	}
	logs.waitLine(t, `"GET /dc HTTP/1.1" 0 DC `)
}

func TestTCPProxy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.11:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				n, _ := c.Read(buf)
				c.Write([]byte(strings.ToUpper(string(buf[:n]))))
			}()
		}
	}()
	cfg := testConfig(noRetry, testCluster("echo", endpoint(l.Addr().String(), "a")))
	cfg.Listeners[0].Routes[0].Hosts = nil
	s, logs := startServer(t, cfg)
	c := dialProxy(t, s)
	c.Write([]byte("\x00\x01hello"))
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, _ := c.Read(buf)
	c.Close()
	if string(buf[:n]) != "\x00\x01HELLO" {
		t.Errorf("echo %q", buf[:n])
	}
	logs.waitLine(t, `"- - -" 0 - 7 7 `, l.Addr().String())
}

// max_connections and max_pending_requests: a request that needs a new
// connection beyond the limits overflows with UO instead of waiting.
func TestHTTPConnectionCircuitBreakers(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	slow := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	cl := testCluster("echo", endpoint(slow, "a"))
	cl.CircuitBreakers.MaxConnections = 1
	s, logs := startServer(t, testConfig(noRetry, cl))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); get(t, http.DefaultClient, s, "/holds-the-connection") }()
	<-entered
	code, body, _ := get(t, http.DefaultClient, s, "/needs-a-second")
	close(release)
	wg.Wait()
	if code != 503 || !strings.Contains(body, "overflow") {
		t.Errorf("got %d %q, want 503 overflow", code, body)
	}
	logs.waitLine(t, `"GET /needs-a-second HTTP/1.1" 503 UO `)
	if got := stat(t, s, "cluster.echo.upstream_cx_overflow"); got != 1 {
		t.Errorf("upstream_cx_overflow = %d", got)
	}
}

// A per-try timeout, on a runtime timer (under clock.PreciseBelow) and on the
// worker clock, through the pool (GET) and the fallback transport (a
// POST with a body): 504, UT, upstream_per_try_timeout.
func TestHTTPPerTryTimeout(t *testing.T) {
	slow := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	}))
	for _, tc := range []struct {
		method  string
		perTry  time.Duration
		timeout bool
	}{
		{http.MethodGet, 200 * time.Millisecond, false},
		{http.MethodGet, clock.PreciseBelow + 100*time.Millisecond, true},
		{http.MethodPost, clock.PreciseBelow + 100*time.Millisecond, true},
	} {
		t.Run(fmt.Sprintf("%s/%v", tc.method, tc.perTry), func(t *testing.T) {
			cfg := testConfig(retry.Policy{PerTryTimeout: tc.perTry}, testCluster("echo", endpoint(slow, "a")))
			s, logs := startServer(t, cfg)
			var body io.Reader
			if tc.method == http.MethodPost {
				body = strings.NewReader("upload")
			}
			req, _ := http.NewRequest(tc.method, proxyURL(s)+"/try", body)
			req.Host = "echo"
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if d := time.Since(start); d < tc.perTry || d > tc.perTry+2*time.Second {
				t.Errorf("answered after %v, per-try timeout %v", d, tc.perTry)
			}
			if resp.StatusCode != 504 || string(b) != "upstream request timeout" {
				t.Errorf("got %d %q", resp.StatusCode, b)
			}
			logs.waitLine(t, `"`+tc.method+` /try HTTP/1.1" 504 UT `, " upstream_per_try_timeout ")
			if got := stat(t, s, "cluster.echo.upstream_rq_per_try_timeout"); got != 1 {
				t.Errorf("upstream_rq_per_try_timeout = %d", got)
			}
		})
	}
}
