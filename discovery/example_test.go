package discovery

import (
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	sidecarexample "github.com/meshlet-dev/meshlet/examples/sidecar"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// TestExampleSidecarConfig parses examples/sidecar/sidecar.yaml and checks
// what the data plane will run.
func TestExampleSidecarConfig(t *testing.T) {
	cfg, err := ParseStatic(sidecarexample.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	zone := func(z string) lb.Locality { return lb.Locality{Region: "r1", Zone: z} }

	eq(t, cfg.Node, config.Node{ID: "sidecar-a", Cluster: "web", Locality: zone("a")})
	eq(t, cfg.LocalCluster, "clients")
	eq(t, [3]string{cfg.Admin, cfg.Health, cfg.Prometheus}, [3]string{"127.0.0.1:15000", "127.0.0.1:15021", "127.0.0.1:15090"})
	eq(t, cfg.AccessLog, config.AccessLog{Path: "-", Format: config.AccessLogText})
	eq(t, cfg.DrainTimeout, 5*time.Second)

	// Listeners: HTTP to echo with a retry policy, TCP to echo-tcp.
	if len(cfg.Listeners) != 2 {
		t.Fatalf("%d listeners, want 2", len(cfg.Listeners))
	}
	h := cfg.Listeners[0]
	eq(t, [4]string{h.Name, h.Address, h.OriginalDestination, string(h.Protocol)},
		[4]string{"outbound-http", "127.0.0.1:15001", "10.96.0.10:80", "auto"})
	eq(t, h.Direction, config.Outbound)
	eq(t, h.DetectionTimeout, 100*time.Millisecond)
	eq(t, h.ServerFirstPorts, []uint16{3306, 25})
	eq(t, h.Routes, []config.Route{{
		Name: "echo", Destination: "10.96.0.10:80", Cluster: "echo", Timeout: 15 * time.Second,
		Retry: retry.Policy{
			RetryOn:       retry.On5xx | retry.OnConnectFailure | retry.OnRefusedStream,
			NumRetries:    2,
			PerTryTimeout: time.Second,
			BaseInterval:  25 * time.Millisecond, MaxInterval: 250 * time.Millisecond,
			HostSelectionRetryMaxAttempts: 3,
		},
	}})
	tcp := cfg.Listeners[1]
	eq(t, [4]string{tcp.Name, tcp.Address, tcp.OriginalDestination, string(tcp.Protocol)},
		[4]string{"outbound-tcp", "127.0.0.1:15002", "10.96.0.20:9000", "tcp"})
	eq(t, tcp.Routes[0].Cluster, "echo-tcp")
	eq(t, tcp.Routes[0].Destination, "10.96.0.20:9000")

	// echo: four hosts in three zones, all priority 0.
	echo := cfg.ClusterByName("echo")
	if echo == nil {
		t.Fatal("no cluster echo")
	}
	ep := func(addr, z string) lb.Endpoint { return lb.Endpoint{Address: addr, Weight: 1, Locality: zone(z)} }
	eq(t, echo.Endpoints, []lb.Endpoint{
		ep("127.0.0.11:8080", "a"), ep("127.0.0.12:8080", "a"), ep("127.0.0.21:8080", "b"), ep("127.0.0.31:8080", "c"),
	})
	eq(t, echo.Priorities, 1)
	eq(t, echo.OverprovisioningFactor, uint32(140))
	eq(t, echo.LB.Policy, lb.PolicyRoundRobin)
	eq(t, echo.LB.PanicThreshold, 50.0)
	eq(t, echo.LB.ZoneAware, lb.ZoneAwareConfig{RoutingEnabledPercent: 100, MinClusterSize: 4})
	eq(t, echo.ConnectTimeout, time.Second)
	eq(t, echo.IdleTimeout, 4*time.Second)
	eq(t, echo.Protocol, config.UpstreamHTTP1)
	outlier := lb.DefaultOutlierConfig()
	outlier.Consecutive5xx, outlier.Interval, outlier.BaseEjectionTime, outlier.MaxEjectionPercent = 5, 5*time.Second, 30*time.Second, 50
	if echo.Outlier == nil || *echo.Outlier != outlier {
		t.Fatalf("echo outlier %+v, want %+v", echo.Outlier, outlier)
	}
	hc := lb.HealthCheckConfig{Timeout: time.Second, Interval: 5 * time.Second, UnhealthyThreshold: 3, HealthyThreshold: 2}.WithDefaults()
	eq(t, echo.HealthChecks, []config.HealthCheck{{Kind: config.HealthCheckHTTP, HealthCheckConfig: hc,
		Path: "/healthz", Host: "echo", ExpectedStatuses: [][2]uint32{{200, 201}}}})
	eq(t, echo.CircuitBreakers, circuitbreaker.Thresholds{MaxConnections: 1024, MaxPendingRequests: 256, MaxRequests: 1024, MaxRetries: 3})

	// echo-tcp: one host per zone, least request, a TCP connect check.
	et := cfg.ClusterByName("echo-tcp")
	if et == nil {
		t.Fatal("no cluster echo-tcp")
	}
	eq(t, len(et.Endpoints), 3)
	eq(t, et.LB.Policy, lb.PolicyLeastRequest)
	eq(t, et.HealthChecks[0].Kind, config.HealthCheckTCP)
	eq(t, len(et.HealthChecks[0].Send)+len(et.HealthChecks[0].Receive), 0)
	eq(t, et.Outlier == nil, true)

	// clients: the local cluster, 3/1/1 in zones a/b/c.
	clients := cfg.ClusterByName("clients")
	if clients == nil {
		t.Fatal("no cluster clients")
	}
	perZone := map[string]int{}
	for _, e := range clients.Endpoints {
		perZone[e.Locality.Zone]++
		eq(t, e.Priority, uint32(0))
	}
	eq(t, perZone, map[string]int{"a": 3, "b": 1, "c": 1})
}

// TestExampleZoneRouting builds the lb snapshot the example describes and
// checks the residual split its comment promises: the own zone keeps
// 50/60 of the traffic.
func TestExampleZoneRouting(t *testing.T) {
	cfg, err := ParseStatic(sidecarexample.Config)
	if err != nil {
		t.Fatal(err)
	}
	hosts := func(c *config.Cluster) []*lb.Host {
		var hs []*lb.Host
		for i, e := range c.Endpoints {
			hs = append(hs, &lb.Host{ID: lb.HostID(i), Address: e.Address, Weight: e.Weight, Locality: e.Locality, Priority: e.Priority})
		}
		return hs
	}
	echo, clients := cfg.ClusterByName("echo"), cfg.ClusterByName("clients")
	snap, err := lb.NewSnapshot(echo.LB, lb.BuildInput{Hosts: hosts(echo), Local: cfg.Node.Locality,
		LocalCluster: hosts(clients), Priorities: echo.Priorities, OverprovisioningFactor: echo.OverprovisioningFactor}, nil)
	if err != nil {
		t.Fatal(err)
	}
	zr := snap.ZoneRouting()
	eq(t, zr.State, lb.LocalityResidual)
	eq(t, zr.LocalPercentToRoute, uint64(8333))
}
