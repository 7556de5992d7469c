package cli

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
)

func TestPodConfigInboundPerAppPort(t *testing.T) {
	env := map[string]string{"POD_NAME": "web-0", "POD_NAMESPACE": "shop", "MESHLET_APP_PORTS": "8080, 9090"}
	cfg, err := podConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("podConfig: %v", err)
	}
	if cfg.Node.ID != "web-0.shop" {
		t.Errorf("node id = %q, want web-0.shop", cfg.Node.ID)
	}
	if cfg.Admin != "127.0.0.1:15000" || cfg.Health != "0.0.0.0:15021" || cfg.Prometheus != "0.0.0.0:15090" {
		t.Errorf("ports: admin %s health %s prometheus %s", cfg.Admin, cfg.Health, cfg.Prometheus)
	}
	if len(cfg.Clusters) != 4 || cfg.Clusters[1].Name != "inbound|9090" || cfg.Clusters[1].Endpoints[0].Address != "127.0.0.1:9090" {
		t.Fatalf("clusters = %+v", cfg.Clusters)
	}
	in := cfg.Listeners[1]
	if in.Address != "0.0.0.0:15006" || len(in.Routes) != 3 || in.Routes[0].Destination != ":8080" || in.Routes[0].Cluster != "inbound|8080" {
		t.Fatalf("inbound listener = %+v", in)
	}
	// Every other port: the passthrough, last, to the port dialled.
	if r := in.Routes[2]; r.Destination != "" || r.Cluster != InboundPassthroughCluster ||
		cfg.Clusters[2].Endpoints[0].Address != "127.0.0.1:0" {
		t.Fatalf("passthrough route %+v, cluster %+v", r, cfg.Clusters[2])
	}
	// Unknown outbound destinations: where they were dialled.
	if out := cfg.Listeners[0]; len(out.Routes) != 1 || out.Routes[0].Cluster != PassthroughCluster || cfg.Clusters[3].Endpoints[0].Address != "0.0.0.0:0" {
		t.Fatalf("outbound routes %+v, cluster %+v", out.Routes, cfg.Clusters[3])
	}
}

func TestPodConfigRejectsBadPort(t *testing.T) {
	for _, ports := range []string{"http", "0", "70000"} {
		_, err := podConfig(func(k string) string {
			if k == "MESHLET_APP_PORTS" {
				return ports
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), "MESHLET_APP_PORTS") {
			t.Errorf("ports %q: err = %v, want MESHLET_APP_PORTS error", ports, err)
		}
	}
}

func TestPodConfigMTLSModeAndIdentity(t *testing.T) {
	env := map[string]string{"POD_NAMESPACE": "shop", "SERVICE_ACCOUNT": "cart", "MESHLET_MTLS_MODE": "strict"}
	getenv := func(k string) string { return env[k] }
	cfg, err := podConfig(getenv)
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Listeners[1].MTLS; m == nil || m.Mode != "STRICT" {
		t.Errorf("inbound mtls = %+v", m)
	}
	id, err := podIdentity(getenv)
	if err != nil || id.String() != "spiffe://cluster.local/ns/shop/sa/cart" {
		t.Errorf("identity %v, %v", id, err)
	}
	env["MESHLET_TRUST_DOMAIN"] = "prod.example"
	if id, _ := podIdentity(getenv); id.String() != "spiffe://prod.example/ns/shop/sa/cart" {
		t.Errorf("identity with a trust domain: %v", id)
	}
	env["MESHLET_MTLS_MODE"] = "DISABLE"
	if _, err := podConfig(getenv); err == nil || !strings.Contains(err.Error(), "MESHLET_MTLS_MODE") {
		t.Errorf("bad mode: %v", err)
	}
	delete(env, "SERVICE_ACCOUNT")
	if _, err := podIdentity(getenv); err == nil || !strings.Contains(err.Error(), "SERVICE_ACCOUNT") {
		t.Errorf("no service account: %v", err)
	}
}

func TestPodConfigIPv6OutboundGetsXDSRoutes(t *testing.T) {
	old := hasIPv6Loopback
	defer func() { hasIPv6Loopback = old }()
	for _, v6 := range []bool{true, false} {
		hasIPv6Loopback = func() bool { return v6 }
		cfg, err := podConfig(func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		if got := len(cfg.Listeners); got != map[bool]int{true: 3, false: 2}[v6] {
			t.Fatalf("IPv6 loopback %v: %d listeners", v6, got)
		}
		merged, err := mergeXDS(cfg, cfg.Clusters[:0], []config.Route{{Name: "vip", Destination: "10.96.0.10:80", Cluster: "inbound|x"}}, nil)
		if err == nil {
			t.Fatal("a route to a missing cluster was accepted")
		}
		merged, err = mergeXDS(cfg, []config.Cluster{{Name: "c", LB: lb.DefaultClusterConfig(), CircuitBreakers: circuitbreaker.DefaultThresholds()}},
			[]config.Route{{Name: "vip", Destination: "10.96.0.10:80", Cluster: "c"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range merged.Listeners {
			// Each with its passthrough, last.
			if want := map[string]int{"outbound": 2, "outbound6": 2, "inbound": 1}[l.Name]; len(l.Routes) != want {
				t.Errorf("IPv6 loopback %v: listener %s has %d routes, want %d", v6, l.Name, len(l.Routes), want)
			} else if last := l.Routes[len(l.Routes)-1]; last.Destination != "" || !strings.Contains(last.Cluster, "PassthroughCluster") {
				t.Errorf("IPv6 loopback %v: listener %s ends with %+v, want its passthrough", v6, l.Name, last)
			}
		}
	}
}

func TestMemReleaserRunsOnceAfterABurst(t *testing.T) {
	ran := make(chan struct{}, 10)
	m := &memReleaser{delay: 50 * time.Millisecond, release: func() { ran <- struct{}{} }}
	for range 5 {
		m.kick()
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the releaser never ran")
	}
	// Once the release ran, nothing more may be scheduled: the burst's
	// kicks moved one timer, which has fired (Stop reports a pending one).
	m.mu.Lock()
	pending := m.t.Stop()
	m.mu.Unlock()
	if pending || len(ran) != 0 {
		t.Fatalf("a burst of kicks released more than once (another release pending %v, %d more ran)", pending, len(ran))
	}
	m.kick() // a later change releases again
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the releaser did not run after a later kick")
	}
	// Any stray release of the burst was due before this one.
	if n := len(ran); n != 0 {
		t.Fatalf("%d releases more than one per burst of kicks", n)
	}
}

// TestSelfPlain: the pod's own endpoints lose their meshed mark (the
// sidecar reaches its own app in plaintext, as sk_lookup leaves that
// connection to the app); other endpoints and the given clusters stay as
// they were.
func TestSelfPlain(t *testing.T) {
	meshed := map[string]string{config.MetadataMeshed: "true", config.MetadataIdentity: "spiffe://cluster.local/ns/a/sa/b"}
	in := []config.Cluster{
		{Name: "echo", Endpoints: []lb.Endpoint{{Address: "10.244.1.5:8080", Metadata: meshed}, {Address: "10.244.2.7:8080", Metadata: meshed}}},
		{Name: "other", Endpoints: []lb.Endpoint{{Address: "10.244.3.1:80", Metadata: meshed}}},
	}
	out := selfPlain(in, netip.MustParseAddr("10.244.1.5"))
	if got := out[0].Endpoints[0].Metadata; got[config.MetadataMeshed] != "" || got[config.MetadataIdentity] != "" {
		t.Errorf("own endpoint still meshed: %v", got)
	}
	if out[0].Endpoints[1].Metadata[config.MetadataMeshed] != "true" || out[1].Endpoints[0].Metadata[config.MetadataMeshed] != "true" {
		t.Errorf("another pod's endpoint lost its mark: %+v", out)
	}
	if in[0].Endpoints[0].Metadata[config.MetadataMeshed] != "true" {
		t.Errorf("the given clusters changed: %+v", in[0])
	}
	if got := selfPlain(in, netip.Addr{}); &got[0] != &in[0] {
		t.Errorf("no pod address: the clusters were copied")
	}
}
