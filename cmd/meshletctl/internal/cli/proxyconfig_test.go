package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/lb"
)

// sidecar runs a real data plane with an SDS-style identity and a
// cluster over two zones at two priorities, and returns a fetch of its
// admin port (what the port-forward gives in a cluster).
func sidecar(t *testing.T) (func(method, path string) ([]byte, error), *slog.LevelVar) {
	t.Helper()
	ca := testtool.MeshCA(t, spiffeid.RequireTrustDomainFromString("cluster.local"), nil)
	store := testtool.IdentityStore(t, ca, spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/client"), 24*time.Hour)
	zone := func(z string) lb.Locality { return lb.Locality{Region: "r1", Zone: z} }
	cfg := &config.Config{
		Node:  config.Node{ID: "client-0.shop", Locality: zone("zone-a")},
		Admin: "127.0.0.1:0", DrainTimeout: time.Second,
		Listeners: []config.Listener{{Name: "outbound", Address: "127.0.0.1:0", Direction: config.Outbound, Protocol: config.ProtocolHTTP,
			Routes: []config.Route{{Name: "echo", Hosts: []string{"echo.shop.svc.cluster.local"}, Cluster: "outbound|80||echo.shop.svc.cluster.local"}}}},
		Clusters: []config.Cluster{{Name: "outbound|80||echo.shop.svc.cluster.local", LB: lb.DefaultClusterConfig(), Priorities: 2,
			Endpoints: []lb.Endpoint{
				{Address: "127.0.0.1:1", Weight: 1, Locality: zone("zone-a"), Priority: 0},
				{Address: "127.0.0.1:2", Weight: 1, Locality: zone("zone-b"), Priority: 1},
				{Address: "127.0.0.1:3", Weight: 1, Locality: zone("zone-c"), Priority: 1},
			}}},
	}
	lv := &slog.LevelVar{}
	s, err := dataplane.New(cfg, dataplane.Options{Workers: 1, Identity: store, LogLevel: lv, AccessLog: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return httpFetch(t.Context(), "http://"+s.AdminAddrs()["admin"]), lv
}

func view(t *testing.T, fetch func(string, string) ([]byte, error), what string, o proxyConfigOptions) string {
	t.Helper()
	if o.output == "" {
		o.output = "table"
	}
	var out bytes.Buffer
	if err := proxyConfig(&out, what, &o, fetch); err != nil {
		t.Fatalf("proxy-config %s: %v", what, err)
	}
	return out.String()
}

// row finds the table row that starts with first and returns its cells.
func row(t *testing.T, table, first string) []string {
	t.Helper()
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no row %q in\n%s", first, table)
	return nil
}

// Every proxy-config view against a real sidecar's admin endpoints.
func TestProxyConfigViews(t *testing.T) {
	fetch, lv := sidecar(t)
	const cluster = "outbound|80||echo.shop.svc.cluster.local"

	eps := view(t, fetch, "endpoints", proxyConfigOptions{})
	t.Logf("proxy-config endpoints:\n%s", eps)
	for addr, want := range map[string][]string{
		"127.0.0.1:1": {"127.0.0.1:1", "HEALTHY", cluster, "r1", "zone-a", "0", "1"},
		"127.0.0.1:2": {"127.0.0.1:2", "HEALTHY", cluster, "r1", "zone-b", "1", "1"},
		"127.0.0.1:3": {"127.0.0.1:3", "HEALTHY", cluster, "r1", "zone-c", "1", "1"},
	} {
		if got := row(t, eps, addr); strings.Join(got[:7], " ") != strings.Join(want, " ") {
			t.Errorf("endpoint %s: %q, want %q", addr, got[:7], want)
		}
	}
	if !strings.Contains(eps, "P0=100% P1=0%") {
		t.Errorf("endpoints: no priority load P0=100%% P1=0%%:\n%s", eps)
	}
	var js struct {
		Clusters []clusterStatus `json:"cluster_statuses"`
	}
	if err := json.Unmarshal([]byte(view(t, fetch, "endpoints", proxyConfigOptions{output: "json", cluster: cluster})), &js); err != nil || len(js.Clusters) != 1 || len(js.Clusters[0].Hosts) != 3 {
		t.Errorf("endpoints -o json -cluster: %v %+v", err, js)
	}
	var out bytes.Buffer
	if err := proxyConfig(&out, "endpoints", &proxyConfigOptions{cluster: "nope"}, fetch); err == nil || !strings.Contains(err.Error(), `no cluster "nope"`) {
		t.Errorf("endpoints -cluster nope: %v", err)
	}

	if got := row(t, view(t, fetch, "clusters", proxyConfigOptions{}), cluster); got[3] != "3" || got[4] != "2" {
		t.Errorf("clusters row %q: want 3 endpoints at 2 priorities", got)
	}
	if got := row(t, view(t, fetch, "routes", proxyConfigOptions{}), "outbound"); got[1] != "echo" || got[2] != "echo.shop.svc.cluster.local" || got[4] != cluster {
		t.Errorf("routes row %q", got)
	}
	if got := row(t, view(t, fetch, "listeners", proxyConfigOptions{}), "outbound"); got[2] != "outbound" || got[3] != "http" {
		t.Errorf("listeners row %q", got)
	}
	sec := view(t, fetch, "secrets", proxyConfigOptions{})
	if got := row(t, sec, "sds:default"); !strings.Contains(strings.Join(got, " "), "spiffe://cluster.local/ns/shop/sa/client") {
		t.Errorf("secrets: the workload certificate's row %q has no SPIFFE ID", got)
	}
	row(t, sec, "sds:ROOTCA:cluster.local")

	if got := view(t, fetch, "log", proxyConfigOptions{level: "debug"}); !strings.Contains(got, "DEBUG") || lv.Level() != slog.LevelDebug {
		t.Errorf("log -level debug: %q, level %v", got, lv.Level())
	}
	if err := proxyConfig(&out, "log", &proxyConfigOptions{level: "loud"}, fetch); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("log -level loud: %v, want the sidecar's 400", err)
	}
}
