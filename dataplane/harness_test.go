package dataplane

import (
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
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// The tests run real upstream servers on loopback addresses (127.0.0.x
// stands for hosts in zones) and real clients through the real proxy.

// logBuffer collects access-log lines.
type logBuffer struct{ testtool.Buffer }

// waitLine waits until a line containing every part appears.
func (l *logBuffer) waitLine(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range l.Lines() {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return line
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no access-log line with %q in:\n%s", parts, strings.Join(l.Lines(), "\n"))
	return ""
}

// upstream serves h on ip:0 and returns its address.
func upstream(t testing.TB, ip string, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("upstream on %s: %v", ip, err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// serveTCP accepts connections on ip:0 and runs handle on each (closing
// it after); it returns the address.
func serveTCP(t testing.TB, ip string, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("TCP server on %s: %v", ip, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return l.Addr().String()
}

// named answers 200 with its name, for counting where requests went.
func named(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Upstream", name)
		fmt.Fprint(w, name)
	})
}

// closedAddr returns an address nothing listens on.
func closedAddr(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func endpoint(addr, zone string) lb.Endpoint {
	return lb.Endpoint{Address: addr, Locality: lb.Locality{Region: "r1", Zone: zone}}
}

// testCluster is a round-robin cluster with Envoy's defaults.
func testCluster(name string, eps ...lb.Endpoint) config.Cluster {
	return config.Cluster{Name: name, LB: lb.DefaultClusterConfig(), Endpoints: eps, ConnectTimeout: time.Second,
		CircuitBreakers: circuitbreaker.DefaultThresholds(), Protocol: config.UpstreamHTTP1}
}

// testConfig routes an outbound listener on 127.0.0.1:0 (original
// destination 10.96.0.10:80, host "echo") to cluster echo.
func testConfig(retry retry.Policy, clusters ...config.Cluster) *config.Config {
	return &config.Config{
		Node:         config.Node{ID: "test", Cluster: "client", Locality: lb.Locality{Region: "r1", Zone: "a"}},
		Admin:        "127.0.0.1:0",
		DrainTimeout: time.Second,
		AccessLog:    config.AccessLog{Format: config.AccessLogText, FlushInterval: 10 * time.Millisecond},
		Listeners: []config.Listener{{
			Name: "outbound", Address: "127.0.0.1:0", Direction: config.Outbound, OriginalDestination: "10.96.0.10:80",
			Protocol: config.ProtocolAuto,
			Routes: []config.Route{{Name: "echo", Destination: "10.96.0.10:80", Hosts: []string{"echo"}, Cluster: "echo",
				Timeout: 5 * time.Second, Retry: retry}},
		}},
		Clusters: clusters,
	}
}

// noRetry is a policy that never retries.
var noRetry = retry.Policy{}

func startServer(t *testing.T, cfg *config.Config) (*Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: logs, Workers: 2})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s, logs
}

// proxyURL is the outbound listener's URL.
// dialProxy opens a TCP connection to the proxy's outbound listener,
// closed at the end of the test.
func dialProxy(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(proxyURL(s), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func proxyURL(s *Server) string {
	if u, ok := proxyURLs.Load(s); ok {
		return u.(string)
	}
	for _, a := range s.ListenerAddrs() {
		proxyURLs.Store(s, "http://"+a)
		return "http://" + a
	}
	return ""
}

var proxyURLs sync.Map

// get sends one request through the proxy with Host echo.
func get(t *testing.T, client *http.Client, s *Server, path string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+path, nil)
	req.Host = "echo"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func adminGet(t testing.TB, s *Server, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + s.AdminAddrs()["admin"] + path)
	if err != nil {
		t.Fatalf("admin %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// stat reads one flat stat from the admin /stats.
func stat(t *testing.T, s *Server, name string) int64 {
	t.Helper()
	for _, sv := range s.flatStats() {
		if sv.name == name {
			return sv.value
		}
	}
	t.Fatalf("no stat %q", name)
	return 0
}
