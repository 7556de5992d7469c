package dataplane

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkProxyH1StreamIdle is BenchmarkProxyH1 with the listener's
// stream idle timeout at its production default (5m): testConfig leaves
// it 0, so BenchmarkProxyH1 does not measure the per-request arm/stop.
func BenchmarkProxyH1StreamIdle(b *testing.B) {
	up := upstream(b, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	cfg := testConfig(noRetry, testCluster("echo", endpoint(up, "a")))
	cfg.Listeners[0].StreamIdleTimeout = 5 * time.Minute
	s, err := New(cfg, Options{Workers: 2, AccessLog: io.Discard})
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
			for range 20 {
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

// BenchmarkStreamIdleArmStop is what the stream idle timeout adds to each
// HTTP/1 request on the request's goroutine: one arm and one stop on the
// worker's clock.
func BenchmarkStreamIdleArmStop(b *testing.B) {
	w := &worker{}
	si := &streamIdle{w: w, s: &httpScratch{}}
	b.ReportAllocs()
	for b.Loop() {
		si.arm(5 * time.Minute)
		si.stop()
	}
}
