package dataplane

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
)

// waitStat waits until a flat stat has the value want.
func waitStat(t *testing.T, s *Server, name string, want int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s = %d (last %d)", name, want, s.Stats()[name]), func() bool { return s.Stats()[name] == want })
}

// readClosed reads c until the proxy closes it and returns the error
// that ended the read (io.EOF, or a reset); a read that times out after
// 10 s (the proxy never closed) fails the test.
func readClosed(t *testing.T, c net.Conn) error {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if err == nil {
		err = io.EOF
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection %s still open: %v", c.LocalAddr(), err)
	}
	return err
}

// steadyClient sends requests through the proxy's HTTP listener
// (127.0.0.1:0) on one keep-alive connection until the returned stop is
// called (at the latest when the test ends), counting successes and
// failures.
func steadyClient(t *testing.T, s *Server, ok, failed *atomic.Int64) (stop func()) {
	t.Helper()
	proxyURLs.Store(s, "http://"+s.ListenerAddrs()["127.0.0.1:0"])
	done := make(chan struct{})
	var once sync.Once
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	var wg sync.WaitGroup
	one := func() {
		req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/legit", nil)
		req.Host = "echo"
		resp, err := client.Do(req)
		if err != nil {
			failed.Add(1)
			t.Errorf("legitimate request: %v", err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			failed.Add(1)
			t.Errorf("legitimate request: %d %s", resp.StatusCode, body)
			return
		}
		ok.Add(1)
	}
	one() // the connection (and its pooled upstream one) exists from here
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			one()
		}
	}()
	stop = func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
	t.Cleanup(stop)
	return stop
}

// Silent clients that fill a cluster (the detection timeout makes them
// opaque TCP, each holding an upstream connection) are closed by the TCP
// idle timeout, counted and logged; a legitimate client's requests all
// succeed meanwhile, and new connections to the cluster work again after.
func TestTCPIdleTimeoutFreesSilentClients(t *testing.T) {
	app := upstream(t, "127.0.0.11", named("app")) // holds a silent connection open forever
	cl := testCluster("echo", endpoint(app, "a"))
	const maxConns = 8
	cl.CircuitBreakers.MaxConnections = maxConns
	cfg := testConfig(noRetry, cl)
	cfg.Listeners[0].Routes[0].Hosts = nil // the route takes TCP too
	cfg.Listeners[0].DetectionTimeout = 50 * time.Millisecond
	const idle = 500 * time.Millisecond
	cfg.Listeners[0].TCPIdleTimeout = idle
	s, logs := startServer(t, cfg)

	var ok, failed atomic.Int64
	stop := steadyClient(t, s, &ok, &failed)

	// The legitimate client holds one upstream connection; the silent
	// ones take all the others, as 1,023 did of 1,024.
	opened := time.Now()
	var silent []net.Conn
	for range maxConns - 1 {
		silent = append(silent, dialProxy(t, s))
	}
	waitStat(t, s, "cluster.echo.upstream_cx_active", maxConns)
	// The cluster is full: one more silent client overflows (UO).
	extra := dialProxy(t, s)
	readClosed(t, extra)
	logs.waitLine(t, `"- - -" 0 UO `, "overflow")
	// The circuit breaker refused before dialling: no connect failure
	// (the host's counters move before the access-log line is written).
	if out := adminGet(t, s, "/clusters"); !strings.Contains(out, "echo::"+app+"::cx_connect_fail::0\n") {
		t.Errorf("an overflow counted as a connect failure of %s:\n%s", app, out)
	}

	for _, c := range silent {
		readClosed(t, c)
	}
	if held := time.Since(opened); held < idle {
		t.Errorf("silent clients closed after %v, before the idle timeout %v", held, idle)
	}
	waitStat(t, s, "tcp.echo.idle_timeout", maxConns-1)
	waitStat(t, s, "cluster.echo.upstream_cx_active", 1)
	waitFor(t, "an access-log line with idle_timeout per silent client", func() bool {
		return strings.Count(logs.String(), " idle_timeout ") == maxConns-1
	})
	if got := s.Stats()["listener.127.0.0.1_0.downstream_pre_cx_timeout"]; got < maxConns {
		t.Errorf("downstream_pre_cx_timeout = %d, want >= %d", got, maxConns)
	}

	// The freed connections serve new clients.
	var burst sync.WaitGroup
	for range maxConns - 1 {
		burst.Add(1)
		go func() {
			defer burst.Done()
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
			if code, body, _ := get(t, client, s, "/after"); code != 200 {
				t.Errorf("request after the silent clients left: %d %s", code, body)
			}
		}()
	}
	burst.Wait()
	stop()
	if failed.Load() != 0 || ok.Load() < 2 {
		t.Errorf("legitimate client: %d ok, %d failed", ok.Load(), failed.Load())
	}
}

// The idle timeout counts bytes either way: a connection whose bytes keep
// moving outlives it many times over; once they stop, it is closed.
func TestTCPIdleTimeoutKeepsBusyConnections(t *testing.T) {
	for _, tc := range []struct {
		name        string
		accelerated bool
	}{{"splice", false}, {"read and write", true}} {
		t.Run(tc.name, func(t *testing.T) {
			echo := tcpEchoServer(t, "127.0.0.11")
			cfg := tcpProxyConfig(echo)
			const idle = 300 * time.Millisecond
			cfg.Listeners[0].TCPIdleTimeout = idle
			logs := &logBuffer{}
			opts := Options{HTTP1Server: testHTTP1Server, AccessLog: logs, Workers: 2}
			if tc.accelerated {
				opts.Accelerated = func(net.Conn) bool { return true }
			}
			s, err := New(cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Shutdown)
			c, err := net.Dial("tcp", s.ListenerAddrs()["127.0.0.4:0"])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A byte each third of the timeout, for four timeouts.
			start := time.Now()
			tick := time.NewTicker(idle / 3)
			defer tick.Stop()
			buf := make([]byte, 1)
			for time.Since(start) < 4*idle {
				<-tick.C
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatalf("write after %v: %v", time.Since(start), err)
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, buf); err != nil {
					t.Fatalf("echo after %v: %v", time.Since(start), err)
				}
			}
			quiet := time.Now()
			readClosed(t, c)
			if q := time.Since(quiet); q < idle {
				t.Errorf("closed %v after the last bytes, before the idle timeout %v", q, idle)
			}
			waitStat(t, s, "tcp.echo-tcp.idle_timeout", 1)
			logs.waitLine(t, `"- - -" 0 - `, " idle_timeout ", "echo-tcp")
		})
	}
}

// An inbound listener keeps Envoy's continue-on-timeout behaviour for a
// client that sends nothing (a server-first app protocol needs it), and
// the TCP idle timeout bounds such a connection.
func TestInboundSilentClientBoundedByIdleTimeout(t *testing.T) {
	app := upstream(t, "127.0.0.11", named("app"))
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := testConfig(noRetry, testCluster("echo", endpoint(app, "a")), testCluster("inbound|app", endpoint(app, "a")))
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "inbound", Address: fmt.Sprintf("127.0.0.1:%d", port), Direction: config.Inbound,
		Protocol: config.ProtocolAuto, DetectionTimeout: 50 * time.Millisecond, TCPIdleTimeout: 300 * time.Millisecond,
		Routes: []config.Route{{Name: "app", Destination: fmt.Sprintf(":%d", port), Cluster: "inbound|app"}}})
	s, logs := startServer(t, cfg)
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readClosed(t, c)
	logs.waitLine(t, " idle_timeout ", "inbound|app")
	if got := stat(t, s, fmt.Sprintf("listener.127.0.0.1_%d.downstream_pre_cx_timeout", port)); got != 1 {
		t.Errorf("downstream_pre_cx_timeout = %d, want 1", got)
	}
	waitStat(t, s, "tcp.inbound|app.idle_timeout", 1)
}

// An accept storm beyond global_downstream_max_connections: the excess
// connections are accepted and closed at once and counted per listener;
// a legitimate client's open connection keeps working throughout, and new
// connections are served again once the count is below the cap.
func TestGlobalDownstreamMaxConnections(t *testing.T) {
	app := upstream(t, "127.0.0.11", named("app"))
	echo := tcpEcho(t, "127.0.0.12")
	cfg := testConfig(noRetry, testCluster("echo", endpoint(app, "a")), testCluster("echo-tcp", endpoint(echo, "a")))
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "outbound-tcp", Address: "127.0.0.4:0", Direction: config.Outbound,
		OriginalDestination: "10.96.0.11:7000", Protocol: config.ProtocolTCP, TCPIdleTimeout: time.Hour,
		Routes: []config.Route{{Name: "echo-tcp", Cluster: "echo-tcp"}}})
	const limit = 6
	cfg.GlobalDownstreamMaxConnections = limit
	cfg.Prometheus = "127.0.0.1:0"
	s, _ := startServer(t, cfg)
	tcpAddr := s.ListenerAddrs()["127.0.0.4:0"]

	var ok, failed atomic.Int64
	stop := steadyClient(t, s, &ok, &failed) // 1 connection
	// Connections that hold the rest of the cap, each proven proxied.
	var holders []net.Conn
	for i := range limit - 1 {
		c, err := net.Dial("tcp", tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "hold %d\n", i)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); line != fmt.Sprintf("echo: hold %d\n", i) {
			t.Fatalf("holder %d: %q %v", i, line, err)
		}
		holders = append(holders, c)
	}
	waitStat(t, s, "server.downstream_cx_active", limit)

	// The storm: every connection over the cap is closed at once.
	const storm = 50
	for range storm {
		c, err := net.Dial("tcp", tcpAddr)
		if err != nil {
			t.Fatal(err) // the kernel's handshake: the proxy refuses after accepting
		}
		fmt.Fprintf(c, "let me in\n")
		readClosed(t, c)
		c.Close()
	}
	if got := stat(t, s, "listener.127.0.0.4_0.downstream_global_cx_overflow"); got != storm {
		t.Errorf("downstream_global_cx_overflow = %d, want %d", got, storm)
	}
	if got := stat(t, s, "listener.127.0.0.1_0.downstream_global_cx_overflow"); got != 0 {
		t.Errorf("the HTTP listener refused %d connections", got)
	}
	if got := stat(t, s, "overload.envoy.resource_monitors.global_downstream_max_connections.pressure"); got != 100 {
		t.Errorf("pressure %d%%, want 100", got)
	}
	text := scrape(t, s)
	for _, want := range []string{
		fmt.Sprintf(`envoy_listener_downstream_global_cx_overflow{envoy_listener_address="127.0.0.4_0"} %d`, storm),
		`envoy_listener_downstream_cx_active{envoy_listener_address="127.0.0.4_0"} 5`,
		fmt.Sprintf("meshlet_server_global_downstream_max_connections %d", limit),
		"envoy_overload_envoy_resource_monitors_global_downstream_max_connections_pressure 100",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %s", want)
		}
	}

	// Below the cap again, new connections are served.
	for _, c := range holders {
		c.Close()
	}
	waitStat(t, s, "server.downstream_cx_active", 1)
	for i := range 2 * limit {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
		if code, body, _ := get(t, client, s, fmt.Sprintf("/new-%d", i)); code != 200 {
			t.Errorf("new connection %d below the cap: %d %s", i, code, body)
		}
	}
	stop()
	if failed.Load() != 0 || ok.Load() < 2 {
		t.Errorf("legitimate client during the storm: %d ok, %d failed", ok.Load(), failed.Load())
	}
	if got := stat(t, s, "listener.127.0.0.4_0.downstream_cx_total"); got != limit-1 {
		t.Errorf("TCP listener downstream_cx_total = %d, want %d (refused connections are not counted)", got, limit-1)
	}
}

func TestDefaultMaxDownstreamConnections(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		want   int64
	}{{1024, 256}, {20000, 6325}, {1 << 20, 349184}, {16, 4}, {0, 1}, {^uint64(0), (1<<40 - 1024) / 3}} {
		if got := DefaultMaxDownstreamConnections(tc.nofile); got != tc.want {
			t.Errorf("DefaultMaxDownstreamConnections(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
	}
}

// pipeFDs counts the process's open pipes' descriptors.
func pipeFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// Pipes do not outlive the connections they carried: after many proxied
// TCP connections (spliced both ways) have closed, the only pipes open
// are those on the workers' bounded free lists, and none once the server
// has stopped.
func TestTCPProxyReleasesPipes(t *testing.T) {
	if pipePoolSize == 0 {
		t.Skip("no splice on this platform")
	}
	echo := tcpEchoServer(t, "127.0.0.11") // copies without pipes of its own
	s, _ := startServer(t, tcpProxyConfig(echo))
	addr := s.ListenerAddrs()["127.0.0.4:0"]
	before := pipeFDs(t)
	const conns, concurrent, size = 300, 60, 256 << 10
	payload := []byte(strings.Repeat("0123456789abcdef", size/16))
	sem := make(chan struct{}, concurrent)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			go c.Write(payload)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got := make([]byte, size)
			if _, err := io.ReadFull(c, got); err != nil || string(got) != string(payload) {
				t.Errorf("connection %d: echo of %d bytes wrong (%v)", i, size, err)
			}
		}()
	}
	wg.Wait()
	waitStat(t, s, "listener.127.0.0.4_0.downstream_cx_active", 0)
	pooled := 0
	for _, w := range s.workers {
		pooled += w.pipes.idle()
	}
	after := pipeFDs(t)
	t.Logf("%d connections of %d KiB each way, %d at a time: %d pipe descriptors before, %d after (%d pipes on the free lists)",
		conns, size>>10, concurrent, before, after, pooled)
	if pooled == 0 {
		t.Error("no pipe on the free lists: the copies did not splice")
	}
	if bound := len(s.workers) * pipePoolSize; pooled > bound {
		t.Errorf("%d pipes on the free lists, more than their bound %d", pooled, bound)
	}
	if after-before > 2*pooled {
		t.Errorf("%d pipe descriptors more than before the connections, %d of them off the free lists", after-before, after-before-2*pooled)
	}
	s.Shutdown()
	if now := pipeFDs(t); now > before {
		t.Errorf("%d pipe descriptors after Shutdown, %d before the connections: the free lists were not closed", now, before)
	}
}

// The new limits are validated on reload like everything else: a bad
// value is refused with its field's name and the running config stays;
// a good one applies to the next connections.
func TestReloadLimits(t *testing.T) {
	echo := tcpEcho(t, "127.0.0.11")
	cfg := tcpProxyConfig(echo)
	cfg.Listeners[0].TCPIdleTimeout = time.Hour
	s, logs := startServer(t, cfg)
	addr := s.ListenerAddrs()["127.0.0.4:0"]
	with := func(f func(*config.Config)) *config.Config {
		next := *s.Config()
		next.Listeners = append([]config.Listener(nil), next.Listeners...)
		f(&next)
		return &next
	}
	for _, tc := range []struct {
		name string
		cfg  *config.Config
		want string
	}{
		{"negative idle timeout", with(func(c *config.Config) { c.Listeners[0].TCPIdleTimeout = -time.Second }),
			"config: listeners[0].tcp_idle_timeout: -1s must be >= 0"},
		{"negative detection timeout", with(func(c *config.Config) { c.Listeners[0].DetectionTimeout = -time.Millisecond }),
			"config: listeners[0].detection_timeout: -1ms must be >= 0"},
		{"negative connection cap", with(func(c *config.Config) { c.GlobalDownstreamMaxConnections = -1 }),
			"config: global_downstream_max_connections: -1 must be >= 0"},
	} {
		if err := s.Reload(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Reload = %v, want an error with %q", tc.name, err, tc.want)
		}
		if s.Config() != cfg {
			t.Fatalf("%s: the refused config replaced the running one", tc.name)
		}
	}
	if got, want := stat(t, s, "server.global_downstream_max_connections"), DefaultMaxDownstreamConnections(fileLimit()); got != want {
		t.Errorf("default cap %d, want %d", got, want)
	}

	// A good reload: a cap of one connection and a short idle timeout.
	if err := s.Reload(with(func(c *config.Config) {
		c.GlobalDownstreamMaxConnections = 1
		c.Listeners[0].TCPIdleTimeout = 200 * time.Millisecond
	})); err != nil {
		t.Fatal(err)
	}
	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	fmt.Fprintf(held, "first\n")
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(held).ReadString('\n'); line != "echo: first\n" {
		t.Fatalf("first connection: %q %v", line, err)
	}
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	readClosed(t, second)
	if got := stat(t, s, "listener.127.0.0.4_0.downstream_global_cx_overflow"); got != 1 {
		t.Errorf("downstream_global_cx_overflow = %d, want 1", got)
	}
	readClosed(t, held)
	logs.waitLine(t, " idle_timeout ", "echo-tcp")
}
