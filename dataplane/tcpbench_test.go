package dataplane

import (
	"io"
	"net"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/config"
)

// plainCopy copies without splice(2) (the wrappers hide ReadFrom and
// WriteTo), so that test servers hold no pipes of their own.
func plainCopy(dst io.Writer, src io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, 64<<10))
}

// tcpEchoServer echoes every byte back, without splice.
func tcpEchoServer(t testing.TB, ip string) string {
	return serveTCP(t, ip, func(c net.Conn) { _, _ = plainCopy(c, c) })
}

// tcpProxyConfig is a plaintext outbound TCP listener on 127.0.0.4:0 to
// cluster echo-tcp at addr.
func tcpProxyConfig(addr string) *config.Config {
	cfg := testConfig(noRetry, testCluster("echo-tcp", endpoint(addr, "a")))
	cfg.Listeners = []config.Listener{{Name: "outbound-tcp", Address: "127.0.0.4:0", Direction: config.Outbound,
		OriginalDestination: "10.96.0.11:7000", Protocol: config.ProtocolTCP,
		Routes: []config.Route{{Name: "echo-tcp", Cluster: "echo-tcp"}}}}
	return cfg
}

// BenchmarkTCPProxyStream streams bytes through the L4 proxy to an echo
// server and back, on one connection: throughput (MB/s counts each byte
// once) and the CPU of the whole process (client, proxy and echo server)
// per MiB. The proxy splices, or copies with read and write as it does
// accelerated connections.
func BenchmarkTCPProxyStream(b *testing.B) {
	b.Run("splice", func(b *testing.B) { benchTCPStream(b, nil) })
	b.Run("readwrite", func(b *testing.B) { benchTCPStream(b, func(net.Conn) bool { return true }) })
}

func benchTCPStream(b *testing.B, accelerated func(net.Conn) bool) {
	echo := tcpEchoServer(b, "127.0.0.11")
	cfg := tcpProxyConfig(echo)
	cfg.AccessLog.Path = "off"
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, Workers: 2, AccessLog: io.Discard, Accelerated: accelerated})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	c, err := net.Dial("tcp", s.ListenerAddrs()["127.0.0.4:0"])
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const chunk = 1 << 20
	out := []byte(strings.Repeat("x", chunk))
	in := make([]byte, 64<<10)
	b.SetBytes(chunk)
	cpu0 := processCPUTime()
	b.ResetTimer()
	done := make(chan error, 1)
	n := b.N
	go func() {
		for range n {
			if _, err := c.Write(out); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for left := n * chunk; left > 0; {
		k, err := c.Read(in[:min(len(in), left)])
		if err != nil {
			b.Fatal(err)
		}
		left -= k
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPUTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/MiB")
}
