package dataplane

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/lb"
)

// BenchmarkMeshPair measures what mutual TLS between sidecars costs: one
// request (or one new TCP connection and a line echoed) through sidecar A,
// across to sidecar B's inbound listener, to the app, sequentially. With
// "plain" B's endpoint is not meshed (PERMISSIVE inbound, HTTP/1.1
// between the sidecars); with "mtls" A speaks HTTP/2 over mutual TLS on
// a pooled connection, or does a TLS 1.3 handshake per TCP connection.
// cpu-us/op is the CPU of the whole process (client, both sidecars, app).
// bench/mesh.sh writes the table in bench/RESULTS.md.
func BenchmarkMeshPair(b *testing.B) {
	for _, mode := range []string{"plain", "mtls"} {
		b.Run("http/"+mode, func(b *testing.B) { benchMesh(b, mode, false) })
		b.Run("tcp-connect/"+mode, func(b *testing.B) { benchMesh(b, mode, true) })
	}
}

func benchMesh(b *testing.B, mode string, tcp bool) {
	ca := testCA(b, 0)
	web, client := identity(b, ca, webID, time.Hour), identity(b, ca, clientID, time.Hour)
	_, _, httpIn, tcpIn := serverSidecar(b, web, nil)
	ep := func(addr string) lb.Endpoint {
		if mode == "mtls" {
			return meshedEndpoint(addr, webID.String())
		}
		return endpoint(addr, "a")
	}
	cfg := testConfig(noRetry, testCluster("echo", ep(httpIn)), testCluster("echo-tcp", ep(tcpIn)))
	cfg.AccessLog.Path = "off"
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "outbound-tcp", Address: "127.0.0.4:0", Direction: config.Outbound,
		OriginalDestination: "10.96.0.11:7000", Protocol: config.ProtocolTCP, Routes: []config.Route{{Name: "echo-tcp", Cluster: "echo-tcp"}}})
	a, err := New(cfg, Options{HTTP1Server: testHTTP1Server, Workers: 2, Identity: client, AccessLog: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer a.Shutdown()
	addrs := a.ListenerAddrs()
	httpOut, tcpOut := "http://"+addrs["127.0.0.1:0"]+"/", addrs["127.0.0.4:0"]
	client2 := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	one := func() error {
		if tcp {
			c, err := net.Dial("tcp", tcpOut)
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintf(c, "ping\n")
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || line != "echo: ping\n" {
				return fmt.Errorf("echo %q, %v", line, err)
			}
			return nil
		}
		req, _ := http.NewRequest(http.MethodGet, httpOut, nil)
		req.Host = "echo"
		resp, err := client2.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	for range 20 { // warm the pools
		if err := one(); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := processCPUTime()
	b.ResetTimer()
	for b.Loop() {
		if err := one(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPUTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// BenchmarkProxyH1 measures one HTTP/1.1 request through the proxy on a
// keep-alive connection written as raw bytes, sequentially: a plain GET
// (the request reader's fast path) and a POST with a small sized body
// (net/http's reader). allocs/op counts the whole process: the client's
// response reader and the upstream's net/http server too, so compare
// runs, not absolute numbers.
func BenchmarkProxyH1(b *testing.B) { benchProxyH1(b, 0) }

// BenchmarkProxyH1StreamIdle is BenchmarkProxyH1 with the listener's
// stream idle timeout at its production default (testConfig leaves it
// off): what its per-request arm and stop add.
func BenchmarkProxyH1StreamIdle(b *testing.B) { benchProxyH1(b, config.DefaultStreamIdleTimeout) }

// benchProxyH1 runs BenchmarkProxyH1's requests with the listener's stream
// idle timeout streamIdle.
func benchProxyH1(b *testing.B, streamIdle time.Duration) {
	up := upstream(b, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	cfg := testConfig(noRetry, testCluster("echo", endpoint(up, "a")))
	cfg.Listeners[0].StreamIdleTimeout = streamIdle
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, Workers: 2, AccessLog: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	for _, bc := range []struct{ name, req string }{
		{"get", "GET /bench?x=1 HTTP/1.1\r\nHost: echo\r\nUser-Agent: bench/1.0\r\nAccept: */*\r\n\r\n"},
		{"post", "POST /bench HTTP/1.1\r\nHost: echo\r\nUser-Agent: bench/1.0\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := net.Dial("tcp", s.ListenerAddrs()["127.0.0.1:0"])
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			raw := []byte(bc.req)
			one := func() {
				if _, err := c.Write(raw); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			for range 20 { // warm the pools
				one()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				one()
			}
		})
	}
}

// BenchmarkH1ReadRequest measures the request reader alone on a plain
// GET head with a connection's storage (the fast path).
func BenchmarkH1ReadRequest(b *testing.B) {
	in := []byte("GET /path?q=1 HTTP/1.1\r\nHost: svc.ns.svc.cluster.local:8080\r\nUser-Agent: fortio.org/fortio-1.68.2\r\nAccept: */*\r\n\r\n")
	st := &h1.ReqStore{Hdr: new(h1.HeadScratch)}
	r := bytes.NewReader(in)
	br := bufio.NewReaderSize(r, 4096)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(in)
		br.Reset(r)
		_, _ = br.Peek(1)
		if _, ok := h1.ReadRequestFast(br, st); !ok {
			b.Fatal("declined")
		}
	}
}

// processCPUTime is the process's user and system CPU time so far.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTracing measures what tracing costs a request through a
// sidecar pair over mutual TLS (BenchmarkMeshPair's http/mtls) exporting
// to a real Jaeger: tracing off (headers untouched), on at 0 % (trace
// context started and propagated, nothing recorded), 1 % and 100 %.
// cpu-us/op is this process's CPU (client, both sidecars, app; Jaeger runs
// apart). bench/tracing.sh writes the table in bench/RESULTS.md.
func BenchmarkTracing(b *testing.B) {
	j := testtool.StartJaeger(b, "127.0.0.1")
	for _, c := range []struct {
		name     string
		sampling float64
		on       bool
	}{{"off", 0, false}, {"sampling-0", 0, true}, {"sampling-1", 1, true}, {"sampling-100", 100, true}} {
		b.Run(c.name, func(b *testing.B) {
			var tr *config.Tracing
			if c.on {
				tr = &config.Tracing{Endpoint: j.OTLP, Sampling: c.sampling}
			}
			benchTracing(b, tr)
		})
	}
}

func benchTracing(b *testing.B, tr *config.Tracing) {
	ca := testCA(b, 0)
	app := upstream(b, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	bCfg := &config.Config{Node: config.Node{ID: "web", Cluster: "web"}, DrainTimeout: time.Second, AccessLog: config.AccessLog{Path: "off"},
		Tracing: tr, Listeners: []config.Listener{{Name: "inbound", Address: "127.0.0.2:0", Direction: config.Inbound, Protocol: config.ProtocolAuto,
			Routes: []config.Route{{Name: "app", Cluster: "app", Timeout: 5 * time.Second}}}},
		Clusters: []config.Cluster{testCluster("app", endpoint(app, "a"))}}
	bs, err := New(bCfg, Options{HTTP1Server: testHTTP1Server, Workers: 2, Identity: identity(b, ca, webID, time.Hour), AccessLog: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	if err := bs.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer bs.Shutdown()
	cfg := testConfig(noRetry, testCluster("echo", meshedEndpoint(bs.ListenerAddrs()["127.0.0.2:0"], webID.String())))
	cfg.AccessLog.Path, cfg.Admin, cfg.Tracing = "off", "", tr
	a, err := New(cfg, Options{HTTP1Server: testHTTP1Server, Workers: 2, Identity: identity(b, ca, clientID, time.Hour), AccessLog: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer a.Shutdown()
	url := "http://" + a.ListenerAddrs()["127.0.0.1:0"] + "/"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	one := func() error {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Host = "echo"
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	for range 20 {
		if err := one(); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := processCPUTime()
	b.ResetTimer()
	for b.Loop() {
		if err := one(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPUTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	if tr != nil {
		for _, s := range []*Server{a, bs} {
			t := s.tracer.Load()
			t.Flush()
			if t.Dropped()+t.Failed() > 0 {
				b.Errorf("spans dropped %d, failed %d", t.Dropped(), t.Failed())
			}
		}
	}
}
