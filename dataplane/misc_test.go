package dataplane

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

func TestWebSocketUpgradePassthrough(t *testing.T) {
	ws := wsEchoUpstream(t, nil)

	// With a per-try timeout the upgraded stream outlives its attempt's
	// context.
	for _, retry := range []retry.Policy{noRetry, {PerTryTimeout: 200 * time.Millisecond}} {
		t.Run(fmt.Sprintf("per-try=%v", retry.PerTryTimeout), func(t *testing.T) {
			s, logs := startServer(t, testConfig(retry, testCluster("echo", endpoint(ws, "a"))))
			c := dialProxy(t, s)
			fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: echo\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 101 {
				t.Fatalf("upgrade response %v %v", resp, err)
			}
			time.Sleep(2 * retry.PerTryTimeout) // past the attempt's deadline
			fmt.Fprint(c, "hello\n")
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if line, _ := br.ReadString('\n'); line != "echo:hello\n" {
				t.Errorf("over the upgraded connection: %q", line)
			}
			c.Close()
			logs.waitLine(t, `"GET /ws HTTP/1.1" 101 - `)
		})
	}
}

func TestHopByHopHeadersAndRequestID(t *testing.T) {
	got := make(chan http.Header, 2)
	up := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Upstream", "1")
	}))
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(up, "a"))))
	req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/", nil)
	req.Host = "echo"
	req.Header.Set("Connection", "X-Secret")
	req.Header.Set("X-Secret", "s")
	req.Header.Set("Proxy-Connection", "keep-alive")
	req.Header.Set("Keep-Alive", "timeout=1")
	req.Header.Set("X-Kept", "k")
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("Te", "trailers, deflate")
	req.Header.Set("User-Agent", "") // none sent
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := <-got
	for _, hop := range []string{"X-Secret", "Proxy-Connection", "Keep-Alive"} {
		if h.Get(hop) != "" {
			t.Errorf("hop-by-hop header %s reached the upstream", hop)
		}
	}
	if h.Get("X-Kept") != "k" {
		t.Error("end-to-end header dropped")
	}
	// As through an Envoy sidecar (use_remote_address false): the
	// client's X-Forwarded-For passes unchanged; TE keeps "trailers"
	// only; no User-Agent is made up.
	if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "203.0.113.7" {
		t.Errorf("X-Forwarded-For at the upstream %q, want the client's", got)
	}
	if got := h.Get("Te"); got != "trailers" {
		t.Errorf("TE at the upstream %q, want trailers", got)
	}
	if got, ok := h["User-Agent"]; ok {
		t.Errorf("User-Agent %q added", got)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(h.Get("X-Request-Id")) {
		t.Errorf("x-request-id %q is not a UUID v4", h.Get("X-Request-Id"))
	}
	if resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Upstream") != "1" {
		t.Errorf("response headers %v", resp.Header)
	}
	// A request id the client sends is kept.
	req2, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/", nil)
	req2.Host = "echo"
	req2.Header.Set("X-Request-Id", "abc")
	resp2, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if id := (<-got).Get("X-Request-Id"); id != "abc" {
		t.Errorf("x-request-id %q, want the client's", id)
	}
}

// A server-first protocol (the upstream speaks first) works: the client
// sends nothing, detection gives up after its timeout, or at once for a
// listed server-first port.
func TestServerFirstProtocol(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.11:0")
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "220 banner\r\n")
			c.Close()
		}
	}()
	for _, tc := range []struct {
		name        string
		serverFirst []uint16
		detect      time.Duration
	}{{"detection timeout", nil, 150 * time.Millisecond}, {"server_first_ports", []uint16{80}, time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(noRetry, testCluster("echo", endpoint(l.Addr().String(), "a")))
			cfg.Listeners[0].Routes[0].Hosts = nil
			cfg.Listeners[0].ServerFirstPorts = tc.serverFirst
			cfg.Listeners[0].DetectionTimeout = tc.detect
			s, _ := startServer(t, cfg)
			c := dialProxy(t, s)
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if line != "220 banner\r\n" {
				t.Errorf("banner %q (%v)", line, err)
			}
		})
	}
}

// The inbound listener takes the original destination from the accepted
// socket's local address and reports as "destination".
func TestInboundListener(t *testing.T) {
	app := upstream(t, "127.0.0.1", named("app"))
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := testConfig(noRetry, testCluster("echo", endpoint(app, "a")), testCluster("inbound|app", endpoint(app, "a")))
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "inbound", Address: fmt.Sprintf("127.0.0.1:%d", port), Direction: config.Inbound,
		Protocol: config.ProtocolAuto, Routes: []config.Route{{Name: "app", Destination: fmt.Sprintf(":%d", port), Cluster: "inbound|app"}}})
	s, logs := startServer(t, cfg)
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/in", port))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "app" {
		t.Errorf("inbound got %q", b)
	}
	logs.waitLine(t, `"GET /in HTTP/1.1" 200 - `, "inbound|app")
	found := false
	for _, w := range s.workers {
		w.mu.Lock()
		for k := range w.requests {
			found = found || (k.Reporter == "destination" && k.Cluster == "inbound|app")
		}
		w.mu.Unlock()
	}
	if !found {
		t.Error("no request metric with reporter=destination")
	}
}

// The JSON access-log format through the proxy (the logger's buffering
// and drops are tested in internal/logsink).
func TestAccessLogJSON(t *testing.T) {
	up := upstream(t, "127.0.0.11", named("a"))
	cfg := testConfig(noRetry, testCluster("echo", endpoint(up, "a")))
	cfg.AccessLog.Format = config.AccessLogJSON
	s, logs := startServer(t, cfg)
	get(t, http.DefaultClient, s, "/json")
	line := logs.waitLine(t, `"/json"`)
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not JSON: %q: %v", line, err)
	}
	if m["response_code"] != float64(200) || m["response_flags"] != "-" || m["upstream_cluster"] != "echo" || m["method"] != "GET" {
		t.Errorf("JSON line %v", m)
	}
}

// Drain: readiness fails, listeners close, in-flight requests finish. The
// upstream holds the request until the draining proxy was seen refusing
// connections.
func TestDrainFinishesInFlight(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	slow := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.Write([]byte("done"))
	}))
	cfg := testConfig(noRetry, testCluster("echo", endpoint(slow, "a")))
	cfg.DrainTimeout = time.Minute // Drain ends with the request, not the timeout
	s, _ := startServer(t, cfg)
	url := proxyURL(s)
	var wg sync.WaitGroup
	var body string
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, body, _ = get(t, http.DefaultClient, s, "/inflight")
	}()
	<-entered
	drained := make(chan struct{})
	go func() { s.Drain(); close(drained) }()
	waitFor(t, "/ready to say DRAINING", func() bool { return strings.Contains(adminGet(t, s, "/ready"), "DRAINING") })
	waitFor(t, "the listener to refuse new connections", func() bool {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case <-drained:
		t.Fatal("Drain returned with a request in flight")
	default:
	}
	close(release)
	wg.Wait()
	if body != "done" {
		t.Errorf("in-flight request got %q", body)
	}
	<-drained
}

// Pooled upstream connections close after the cluster's idle timeout, well
// before the upstream's own keep-alive timeout.
func TestUpstreamIdleTimeout(t *testing.T) {
	up := upstream(t, "127.0.0.11", named("a"))
	cl := testCluster("echo", endpoint(up, "a"))
	cl.IdleTimeout = 100 * time.Millisecond
	s, _ := startServer(t, testConfig(noRetry, cl))
	get(t, http.DefaultClient, s, "/")
	if stat(t, s, "cluster.echo.upstream_cx_active") != 1 {
		t.Fatalf("upstream_cx_active = %d after a request", stat(t, s, "cluster.echo.upstream_cx_active"))
	}
	waitFor(t, "the idle connection to close", func() bool { return stat(t, s, "cluster.echo.upstream_cx_active") == 0 })
	if stat(t, s, "cluster.echo.upstream_cx_destroy") != 1 {
		t.Errorf("upstream_cx_destroy = %d", stat(t, s, "cluster.echo.upstream_cx_destroy"))
	}
}

func TestQuitQuitQuit(t *testing.T) {
	up := upstream(t, "127.0.0.11", named("a"))
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(up, "a"))))
	if r := adminGet(t, s, "/quitquitquit"); !strings.Contains(r, "method not allowed") {
		t.Errorf("GET /quitquitquit: %q", r)
	}
	resp, err := http.Post("http://"+s.AdminAddrs()["admin"]+"/quitquitquit", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server did not stop after /quitquitquit")
	}
}

func TestAdminConfigDumpAndLogging(t *testing.T) {
	up := upstream(t, "127.0.0.11", named("a"))
	lv := &slog.LevelVar{}
	logs := &logBuffer{}
	cfg := testConfig(noRetry, testCluster("echo", endpoint(up, "a")))
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: logs, Workers: 1, LogLevel: lv})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	var dump map[string]any
	if err := json.Unmarshal([]byte(adminGet(t, s, "/config_dump")), &dump); err != nil {
		t.Fatalf("/config_dump is not JSON: %v", err)
	}
	if cl := dump["Clusters"].([]any); len(cl) != 1 || cl[0].(map[string]any)["Name"] != "echo" {
		t.Errorf("/config_dump clusters: %v", dump["Clusters"])
	}
	resp, err := http.Post("http://"+s.AdminAddrs()["admin"]+"/logging?level=debug", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if lv.Level() != slog.LevelDebug {
		t.Errorf("log level %v after POST /logging?level=debug", lv.Level())
	}
	resp, _ = http.Post("http://"+s.AdminAddrs()["admin"]+"/logging?level=loud", "", nil)
	if resp.StatusCode != 400 {
		t.Errorf("bad level: %d", resp.StatusCode)
	}
	resp.Body.Close()
	if !strings.Contains(adminGet(t, s, "/stats?filter=upstream_rq_total"), "cluster.echo.upstream_rq_total: 0") {
		t.Error("/stats filter")
	}
}

// destination_service_name names a Service only when the host is a name.
func TestServiceShortName(t *testing.T) {
	for in, want := range map[string]string{"echo": "echo", "echo.shop.svc.cluster.local": "echo", "echo.shop:8080": "echo",
		"10.0.0.249": "unknown", "10.0.0.249:80": "unknown", "[fd00::1]:80": "unknown", "": "unknown"} {
		if got := serviceShortName(in); got != want {
			t.Errorf("serviceShortName(%q) = %q, want %q", in, got, want)
		}
	}
}

// inFlight starts a server whose upstream takes 300 ms and one request
// through it; it returns once the upstream has the request, with the
// channel that gets the client's body (or error).
func inFlight(t *testing.T) (*Server, <-chan string) {
	t.Helper()
	entered := make(chan struct{}, 1)
	slow := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		w.Write([]byte("done"))
	}))
	cfg := testConfig(noRetry, testCluster("echo", endpoint(slow, "a")))
	cfg.DrainTimeout = 5 * time.Second
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: io.Discard, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/inflight", nil)
		req.Host = "echo"
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	<-entered
	return s, done
}

// Shutdown (SIGTERM, /quitquitquit) drains first: an HTTP/1.1 request in
// flight when it starts still gets its whole answer.
func TestShutdownFinishesInFlightHTTP1(t *testing.T) {
	s, done := inFlight(t)
	start := time.Now()
	s.Shutdown()
	if got := <-done; got != "done" {
		t.Errorf("in-flight request across Shutdown got %q", got)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown took %v: it waited for the drain timeout instead of the request", d)
	}
}

// The preStop hook's /drain, then SIGTERM: Shutdown still waits for the
// request in flight instead of returning because a drain had begun.
func TestShutdownAfterDrainWaitsForInFlight(t *testing.T) {
	s, done := inFlight(t)
	resp, err := http.Post("http://"+s.AdminAddrs()["admin"]+"/drain", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// /drain starts the drain in the background: Shutdown must come after.
	waitFor(t, "/ready to say DRAINING", func() bool { return strings.Contains(adminGet(t, s, "/ready"), "DRAINING") })
	s.Shutdown()
	if got := <-done; got != "done" {
		t.Errorf("in-flight request across /drain then Shutdown got %q", got)
	}
}

// TestHopByHopHeaderAlone: each hop-by-hop header, alone in a request or a
// response that the fast head readers take (on a keep-alive connection,
// between heads that have none, so the reused header maps see both), is
// removed in both directions, as is a header that Connection names.
func TestHopByHopHeaderAlone(t *testing.T) {
	names := []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Upgrade"}
	up := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var saw []string
		for _, n := range append(names, "X-Named") {
			if _, ok := r.Header[n]; ok {
				saw = append(saw, n)
			}
		}
		w.Header().Set("X-Saw", strings.Join(saw, ","))
		if hop := r.URL.Query().Get("hop"); hop != "" {
			if hop == "Connection" {
				w.Header().Set("Connection", "X-Named")
				w.Header().Set("X-Named", "v")
			} else {
				w.Header().Set(hop, "v")
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(up, "a"))))
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)
	for _, name := range names {
		for i, withHop := range []bool{true, false, true} {
			u := proxyURL(s) + "/"
			if withHop {
				u += "?hop=" + name
			}
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			req.Host = "echo"
			if withHop {
				if name == "Connection" {
					req.Header.Set("Connection", "X-Named")
					req.Header.Set("X-Named", "v")
				} else {
					req.Header.Set(name, "v")
				}
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s, request %d: %v", name, i, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got := resp.Header.Get("X-Saw"); got != "" {
				t.Errorf("%s, request %d: the upstream got %s", name, i, got)
			}
			for _, n := range []string{name, "X-Named"} {
				if _, ok := resp.Header[n]; ok {
					t.Errorf("%s, request %d: the client got %s in the response", name, i, n)
				}
			}
		}
	}
}

// TestHeaderGetKeysCanonical: h1.Get skips Header.Get's canonicalisation
// of its key, so every key the request path passes it (this package's
// and the HTTP/1 server's) must already be canonical.
func TestHeaderGetKeysCanonical(t *testing.T) {
	var files []string
	for _, pat := range []string{"*.go", "internal/h1server/*.go"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	re := regexp.MustCompile(`h1\.Get\([^,]+, "([^"]*)"\)`)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			n++
			if k := m[1]; http.CanonicalHeaderKey(k) != k {
				t.Errorf("%s: h1.Get key %q is not canonical (%q)", f, k, http.CanonicalHeaderKey(k))
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d h1.Get calls with a constant key, want the request path's (>= 10)", n)
	}
}

// TestHostOnly: an authority's host is net.SplitHostPort's where it
// splits, and the authority itself where it does not.
func TestHostOnly(t *testing.T) {
	for _, a := range []string{
		"", "x", "x:80", "X.Example:8080", "10.96.0.10:80", "[::1]:80", "::1", "[::1]", "x:", "x:8a", "a:b:c",
		":80", "[fe80::1%eth0]:443", "x:80:90", "a[b:80", "a]b:80", "[a]b:80",
	} {
		want := a
		if h, _, err := net.SplitHostPort(a); err == nil {
			want = h
		}
		if got := hostOnly(a); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", a, got, want)
		}
	}
	// Every string of up to six bytes over the bytes that matter.
	var walk func(a string)
	walk = func(a string) {
		want := a
		if h, _, err := net.SplitHostPort(a); err == nil {
			want = h
		}
		if got := hostOnly(a); got != want {
			t.Fatalf("hostOnly(%q) = %q, want %q", a, got, want)
		}
		if len(a) < 6 {
			for _, c := range "a1:[]%" {
				walk(a + string(c))
			}
		}
	}
	walk("")
}

// TestContainsFold: an ASCII-case-insensitive strings.Contains.
func TestContainsFold(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"text/event-stream", true}, {"Text/Event-Stream; charset=utf-8", true}, {"event-strea", false},
		{"", false}, {"text/plain", false}, {"xEVENT-STREAMx", true}, {"event_stream", false},
	} {
		if got := containsFold(c.s, "event-stream"); got != c.want || got != strings.Contains(strings.ToLower(c.s), "event-stream") {
			t.Errorf("containsFold(%q) = %v, want %v", c.s, got, c.want)
		}
	}
}
