package xds

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
)

// gather returns the collector's metrics by name and label value ("" for
// a metric without labels).
func gather(t *testing.T, c prometheus.Collector) map[string]map[string]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]*dto.Metric{}
	for _, mf := range mfs {
		out[mf.GetName()] = map[string]*dto.Metric{}
		for _, m := range mf.GetMetric() {
			v := ""
			if len(m.GetLabel()) > 0 {
				v = m.GetLabel()[0].GetValue()
			}
			out[mf.GetName()][v] = m
		}
	}
	return out
}

// TestMetrics: the control plane's Istio-named metrics follow a real
// delta ADS stream: the stream is counted as connected, each response by
// type, a NACK by type, and a route change reaching the sidecar observes
// its convergence time.
func TestMetrics(t *testing.T) {
	route := echoRoute()
	cp := startShop(t, route)
	c := startDeltaClient(t, cp.addr, "client-0.web")
	cds := c.next(t, resource.ClusterType)
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResourceNamesSubscribe: []string{echo80}})
	c.next(t, resource.RouteType)
	// The sidecar rejects the clusters once.
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: cds.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: "clusters[0]: refused by the test"}})
	changed := route.DeepCopy()
	changed.Spec.Rules[0].BackendRefs = []gatewayv1.HTTPBackendRef{to("", "v2", 80, nil)}
	cp.srv.UpsertHTTPRoute(changed)
	c.next(t, resource.RouteType)

	var m map[string]map[string]*dto.Metric
	waitFor(t, "the convergence of the route change observed", func() bool {
		m = gather(t, cp.srv.Collector())
		h := m["pilot_proxy_convergence_time"][""]
		return h != nil && h.GetHistogram().GetSampleCount() >= 1
	})
	if g := m["pilot_xds"]["meshlet"].GetGauge().GetValue(); g != 1 {
		t.Errorf("pilot_xds = %v, want the one stream", g)
	}
	if n := m["pilot_xds_pushes"]["cds"].GetCounter().GetValue(); n < 1 {
		t.Errorf("pilot_xds_pushes{type=cds} = %v", n)
	}
	if n := m["pilot_xds_pushes"]["rds"].GetCounter().GetValue(); n < 2 {
		t.Errorf("pilot_xds_pushes{type=rds} = %v, want the route and its change", n)
	}
	if n := m["pilot_total_xds_rejects"]["cds"].GetCounter().GetValue(); n != 1 {
		t.Errorf("pilot_total_xds_rejects{type=cds} = %v, want 1", n)
	}
	if n := m["meshlet_xds_proxies"][""].GetGauge().GetValue(); n != 1 {
		t.Errorf("meshlet_xds_proxies = %v", n)
	}
	h := m["pilot_proxy_convergence_time"][""].GetHistogram()
	if s := h.GetSampleSum() / float64(h.GetSampleCount()); s <= 0 || s > 5 {
		t.Errorf("convergence %v s on average, want a real delay (debounce 10 ms)", s)
	}
}
