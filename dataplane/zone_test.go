package dataplane

import (
	"fmt"
	"math"
	"net/http"
	"testing"

	"github.com/meshlet-dev/meshlet/config"
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
