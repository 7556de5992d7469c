package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/config"
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
	a, err := New(cfg, Options{Workers: 2, Identity: client, AccessLog: io.Discard})
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
