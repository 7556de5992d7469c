package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/sim"
)

// Zone-aware routing through the proxy sends traffic where `lb simulate`
// says it goes for the same cluster: clients 40/40/20 % in zones a/b/c,
// upstream hosts 25/50/25 %, the sidecar in zone a.
func TestZoneDistributionMatchesSimulation(t *testing.T) {
	zones := map[string]int{"a": 2, "b": 4, "c": 2}
	clients := map[string]int{"a": 4, "b": 4, "c": 2}
	var eps, locals []lb.Endpoint
	zoneOf := map[string]string{}
	for zi, z := range []string{"a", "b", "c"} {
		for i := range zones[z] {
			addr := upstream(t, fmt.Sprintf("127.0.%d.%d", 10+zi, 1+i), named(z))
			eps = append(eps, endpoint(addr, z))
			zoneOf[addr] = z
		}
		for i := range clients[z] {
			locals = append(locals, endpoint(fmt.Sprintf("127.0.%d.%d:1", 20+zi, 1+i), z))
		}
	}
	cfg := testConfig(noRetry, testCluster("echo", eps...), testCluster("clients", locals...))
	cfg.LocalCluster = "clients"
	s, _ := startServer(t, cfg)

	const n = 4000
	got := map[string]float64{}
	client := &http.Client{}
	for range n {
		code, body, _ := get(t, client, s, "/")
		if code != 200 {
			t.Fatalf("status %d", code)
		}
		got[body]++
	}

	sc := &sim.Scenario{Requests: 200000, Client: lb.Locality{Region: "r1", Zone: "a"}}
	for _, z := range []string{"a", "b", "c"} {
		sc.LocalCluster = append(sc.LocalCluster, sim.LocalZone{Locality: lb.Locality{Region: "r1", Zone: z}, Hosts: clients[z]})
	}
	p := sim.Priority{}
	for _, z := range []string{"a", "b", "c"} {
		p.Localities = append(p.Localities, sim.Group{Locality: lb.Locality{Region: "r1", Zone: z}, Healthy: zones[z]})
	}
	sc.Priorities = []sim.Priority{p}
	res, err := sim.Run(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, zr := range res.Zones {
		z := zr.Locality[len("r1/"):]
		if share := got[z] / n; math.Abs(share-zr.Share) > 0.03 {
			t.Errorf("zone %s: %.3f of requests through the proxy, lb simulate says %.3f", z, share, zr.Share)
		}
	}
	if st := s.state.Load().clusters["echo"].snap.Load().ZoneRouting().State; st != lb.LocalityResidual {
		t.Errorf("routing state %v, want LocalityResidual", st)
	}
	if sampled := stat(t, s, "cluster.echo.lb_zone_routing_sampled"); sampled == 0 {
		t.Error("lb_zone_routing_sampled did not move")
	}
	_ = config.Outbound
}

// The zone-pair counters: every outbound request and TCP connection is
// counted by the sidecar's zone and the endpoint's, with the bytes each
// way, and they agree with what the upstreams answered.
func TestZoneTrafficCounters(t *testing.T) {
	a := upstream(t, "127.0.0.2", named("zone-a-host"))
	b := upstream(t, "127.0.0.3", named("zone-b-host-longer"))
	echo := tcpEcho(t, "127.0.0.4")
	cfg := testConfig(noRetry, testCluster("echo", endpoint(a, "a"), endpoint(b, "b")), testCluster("echo-tcp", endpoint(echo, "c")))
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "outbound-tcp", Address: "127.0.0.5:0", Direction: config.Outbound,
		OriginalDestination: "10.96.0.11:7000", Protocol: config.ProtocolTCP, Routes: []config.Route{{Name: "echo-tcp", Cluster: "echo-tcp"}}})
	s, _ := startServer(t, cfg)
	proxyURLs.Store(s, "http://"+s.ListenerAddrs()["127.0.0.1:0"])

	const body = "0123456789" // 10 bytes up
	answered := map[string]int{}
	recv := map[string]int{}
	client := &http.Client{}
	for range 30 {
		req, _ := http.NewRequest(http.MethodPost, proxyURL(s)+"/", strings.NewReader(body))
		req.Host = "echo"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		zone := map[string]string{"zone-a-host": "a", "zone-b-host-longer": "b"}[string(got)]
		answered[zone]++
		recv[zone] += len(got)
	}
	c, err := net.Dial("tcp", s.ListenerAddrs()["127.0.0.5:0"])
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, "hello\n") // 6 up, "echo: hello\n" 12 down
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "echo: hello\n" {
		t.Fatalf("TCP: %q %v", line, err)
	}
	c.Close()

	want := []string{
		fmt.Sprintf(`meshlet_zone_requests_total{cross_zone="false",destination_zone="a",source_zone="a",upstream_cluster="echo"} %d`, answered["a"]),
		fmt.Sprintf(`meshlet_zone_requests_total{cross_zone="true",destination_zone="b",source_zone="a",upstream_cluster="echo"} %d`, answered["b"]),
		fmt.Sprintf(`meshlet_zone_sent_bytes_total{cross_zone="true",destination_zone="b",source_zone="a",upstream_cluster="echo"} %d`, answered["b"]*len(body)),
		fmt.Sprintf(`meshlet_zone_received_bytes_total{cross_zone="true",destination_zone="b",source_zone="a",upstream_cluster="echo"} %d`, recv["b"]),
		fmt.Sprintf(`meshlet_zone_received_bytes_total{cross_zone="false",destination_zone="a",source_zone="a",upstream_cluster="echo"} %d`, recv["a"]),
		`meshlet_zone_connections_total{cross_zone="true",destination_zone="c",source_zone="a",upstream_cluster="echo-tcp"} 1`,
		`meshlet_zone_sent_bytes_total{cross_zone="true",destination_zone="c",source_zone="a",upstream_cluster="echo-tcp"} 6`,
		`meshlet_zone_received_bytes_total{cross_zone="true",destination_zone="c",source_zone="a",upstream_cluster="echo-tcp"} 12`,
	}
	if answered["a"] == 0 || answered["b"] == 0 {
		t.Fatalf("round robin over zones a and b answered %v", answered)
	}
	var m string
	testtool.WaitFor(t, "the zone counters to count the TCP connection", func() bool {
		m = metricsText(t, s)
		return strings.Contains(m, want[len(want)-1])
	})
	for _, w := range want {
		if !strings.Contains(m, w) {
			t.Errorf("missing %s in:\n%s", w, grepLines(m, "meshlet_zone"))
		}
	}
}
