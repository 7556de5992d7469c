package xds

import (
	"errors"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// translateOne translates a Service that must give exactly one cluster.
func translateOne(t *testing.T, in ServiceInput) ServiceCluster {
	t.Helper()
	scs, err := TranslateService(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(scs) != 1 {
		t.Fatalf("%d clusters, want 1", len(scs))
	}
	return scs[0]
}

// resolve runs a ServiceCluster through the sidecar's translation.
func resolve(t *testing.T, sc ServiceCluster) config.Cluster {
	t.Helper()
	c, err := discovery.TranslateEDSCluster(sc.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	la, err := discovery.TranslateEDSLoadAssignment(sc.LoadAssignment)
	if err != nil {
		t.Fatal(err)
	}
	la.ApplyTo(&c)
	return c
}

var v4 = discoveryv1.AddressTypeIPv4

func TestTranslateServiceLocalities(t *testing.T) {
	nodes := map[string]*corev1.Node{
		"n-a":  node("n-a", "r1", "a", "rack1"),
		"n-b":  node("n-b", "r1", "b", ""),
		"bare": node("bare", "", "", ""),
	}
	in := ServiceInput{
		Service: service("default", "echo", nil, "http:80"),
		Slices: []*discoveryv1.EndpointSlice{slice("default", "echo-1", "echo", v4, []string{"http:8080"},
			ep{addr: "10.0.0.1", node: "n-a"},             // all from the node
			ep{addr: "10.0.0.2", node: "n-b", zone: "b2"}, // the endpoint's zone wins
			ep{addr: "10.0.0.3", zone: "c"},               // zone only, no node
			ep{addr: "10.0.0.4", node: "unknown"},         // node not known
			ep{addr: "10.0.0.5", node: "bare"},            // node without labels
		)},
		Nodes: nodes,
	}
	c := resolve(t, translateOne(t, in))
	got := map[string]lb.Locality{}
	for _, e := range c.Endpoints {
		got[e.Address] = e.Locality
	}
	eq(t, got, map[string]lb.Locality{
		"10.0.0.1:8080": {Region: "r1", Zone: "a", SubZone: "rack1"},
		"10.0.0.2:8080": {Region: "r1", Zone: "b2"},
		"10.0.0.3:8080": {Zone: "c"},
		"10.0.0.4:8080": {},
		"10.0.0.5:8080": {},
	})
	// Each locality is weighted by its endpoint count (two have none).
	for _, e := range c.Endpoints {
		want := uint32(1)
		if e.Locality == (lb.Locality{}) {
			want = 2
		}
		eq(t, e.LocalityWeight, want)
		eq(t, e.Weight, uint32(1))
		eq(t, e.Priority, uint32(0))
	}
	eq(t, c.Priorities, 1)
}

func TestTranslateServiceLocalityWeights(t *testing.T) {
	in := ServiceInput{
		Service: service("default", "echo", nil, "http:80"),
		Slices: []*discoveryv1.EndpointSlice{slice("default", "echo-1", "echo", v4, []string{"http:8080"},
			ep{addr: "10.0.0.1", node: "n-a"}, ep{addr: "10.0.0.2", node: "n-a"}, ep{addr: "10.0.0.3", node: "n-b"})},
		Nodes: threeZones(),
	}
	sc := translateOne(t, in)
	groups := sc.LoadAssignment.GetEndpoints()
	eq(t, len(groups), 2)
	eq(t, groups[0].GetLocality().GetZone(), "a")
	eq(t, groups[0].GetLoadBalancingWeight().GetValue(), uint32(2))
	eq(t, groups[1].GetLocality().GetZone(), "b")
	eq(t, groups[1].GetLoadBalancingWeight().GetValue(), uint32(1))
}

func TestEndpointHealth(t *testing.T) {
	tr, fa := ptr(true), ptr(false)
	tests := []struct {
		name string
		c    discoveryv1.EndpointConditions
		want corev3.HealthStatus
	}{
		{"ready", discoveryv1.EndpointConditions{Ready: tr, Serving: tr, Terminating: fa}, corev3.HealthStatus_HEALTHY},
		{"all unset counts as ready", discoveryv1.EndpointConditions{}, corev3.HealthStatus_HEALTHY},
		{"not ready", discoveryv1.EndpointConditions{Ready: fa, Serving: fa, Terminating: fa}, corev3.HealthStatus_UNHEALTHY},
		{"not ready but serving, not terminating", discoveryv1.EndpointConditions{Ready: fa, Serving: tr}, corev3.HealthStatus_UNHEALTHY},
		{"terminating and serving", discoveryv1.EndpointConditions{Ready: fa, Serving: tr, Terminating: tr}, corev3.HealthStatus_DRAINING},
		{"terminating, serving unset", discoveryv1.EndpointConditions{Ready: fa, Terminating: tr}, corev3.HealthStatus_DRAINING},
		{"terminating, not serving", discoveryv1.EndpointConditions{Ready: fa, Serving: fa, Terminating: tr}, corev3.HealthStatus_UNHEALTHY},
		// publishNotReadyAddresses: the controller marks terminating pods ready.
		{"ready and terminating", discoveryv1.EndpointConditions{Ready: tr, Serving: tr, Terminating: tr}, corev3.HealthStatus_HEALTHY},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eq(t, endpointHealth(tt.c), tt.want)
		})
	}
	// And through the sidecar's translation.
	in := ServiceInput{
		Service: service("default", "echo", nil, "http:80"),
		Slices: []*discoveryv1.EndpointSlice{slice("default", "echo-1", "echo", v4, []string{"http:8080"},
			ep{addr: "10.0.0.1"}, ep{addr: "10.0.0.2", cond: "notready"},
			ep{addr: "10.0.0.3", cond: "terminating-serving"}, ep{addr: "10.0.0.4", cond: "terminating"})},
	}
	got := map[string]lb.EDSHealth{}
	for _, e := range resolve(t, translateOne(t, in)).Endpoints {
		got[e.Address] = e.Health
	}
	eq(t, got, map[string]lb.EDSHealth{"10.0.0.1:8080": lb.EDSHealthy, "10.0.0.2:8080": lb.EDSUnhealthy,
		"10.0.0.3:8080": lb.EDSDraining, "10.0.0.4:8080": lb.EDSUnhealthy})
}

func TestTranslateServiceMeshed(t *testing.T) {
	es := slice("default", "echo-1", "echo", v4, []string{"http:8080"},
		ep{addr: "10.0.0.1", pod: "echo-a"}, ep{addr: "10.0.0.2", pod: "echo-b"}, ep{addr: "10.0.0.3"},
		ep{addr: "10.0.0.4", pod: "not-a-pod"})
	es.Endpoints[3].TargetRef.Kind = "VirtualMachine"
	in := ServiceInput{
		Service: service("default", "echo", nil, "http:80"),
		Slices:  []*discoveryv1.EndpointSlice{es},
		MeshedPods: map[types.NamespacedName]string{nn("default", "echo-a"): "spiffe://cluster.local/ns/default/sa/echo",
			nn("default", "not-a-pod"): "spiffe://cluster.local/ns/default/sa/vm", nn("other", "echo-b"): ""},
	}
	got := map[string]string{}
	for _, e := range resolve(t, translateOne(t, in)).Endpoints {
		got[e.Address] = e.Metadata[discovery.MeshedMetadataKey] + " " + e.Metadata[discovery.IdentityMetadataKey]
	}
	eq(t, got, map[string]string{"10.0.0.1:8080": "true spiffe://cluster.local/ns/default/sa/echo", "10.0.0.2:8080": " ",
		"10.0.0.3:8080": " ", "10.0.0.4:8080": " "})
}

func TestTranslateServicePortsAndSlices(t *testing.T) {
	svc := service("shop", "cart", nil, "http:80", "grpc-api:9090", "dns:53")
	svc.Spec.Ports[2].Protocol = corev1.ProtocolUDP
	mine := slice("shop", "cart-1", "cart", v4, []string{"http:8080", "grpc-api:9091"},
		ep{addr: "10.0.0.1", cond: "notready"}, ep{addr: "10.0.0.2"})
	// The same address in a second slice (the controller moving it) keeps
	// its healthiest entry.
	moved := slice("shop", "cart-2", "cart", v4, []string{"http:8080", "grpc-api:9091"}, ep{addr: "10.0.0.1"})
	other := slice("shop", "other-1", "other", v4, []string{"http:8080"}, ep{addr: "10.0.9.9"})
	otherNS := slice("elsewhere", "cart-1", "cart", v4, []string{"http:8080"}, ep{addr: "10.0.9.8"})
	fqdn := slice("shop", "cart-fqdn", "cart", discoveryv1.AddressTypeFQDN, []string{"http:8080"}, ep{addr: "cart.example.com"})
	scs, err := TranslateService(ServiceInput{Service: svc, Slices: []*discoveryv1.EndpointSlice{other, moved, mine, otherNS, fqdn}})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, len(scs), 2) // UDP skipped
	eq(t, scs[0].Cluster.GetName(), "outbound|80||cart.shop.svc.cluster.local")
	eq(t, scs[1].Cluster.GetName(), "outbound|9090||cart.shop.svc.cluster.local")
	eq(t, scs[0].LoadAssignment.GetClusterName(), scs[0].Cluster.GetName())
	eq(t, discovery.EDSServiceName(scs[1].Cluster), scs[1].Cluster.GetName())
	eq(t, [2]int32{scs[0].Port, scs[1].Port}, [2]int32{80, 9090})
	eq(t, scs[1].PortName, "grpc-api")

	http, grpc := resolve(t, scs[0]), resolve(t, scs[1])
	addrs := func(c config.Cluster) map[string]lb.EDSHealth {
		m := map[string]lb.EDSHealth{}
		for _, e := range c.Endpoints {
			m[e.Address] = e.Health
		}
		return m
	}
	eq(t, addrs(http), map[string]lb.EDSHealth{"10.0.0.1:8080": lb.EDSHealthy, "10.0.0.2:8080": lb.EDSHealthy})
	eq(t, addrs(grpc), map[string]lb.EDSHealth{"10.0.0.1:9091": lb.EDSHealthy, "10.0.0.2:9091": lb.EDSHealthy})
	// A grpc- port is reached over HTTP/2.
	eq(t, http.Protocol, config.UpstreamHTTP1)
	eq(t, grpc.Protocol, config.UpstreamHTTP2)

	// Routes: the cluster IP and the service port.
	routes, err := discovery.ServiceRoutes(scs[1].Cluster)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, len(routes), 1)
	eq(t, routes[0].Destination, "10.96.0.10:9090")
	eq(t, routes[0].Cluster, scs[1].Cluster.GetName())
	eq(t, routes[0].Timeout, config.DefaultRouteTimeout)
	eq(t, routes[0].Retry, discovery.DefaultRetryPolicy())
}

func TestTranslateServiceAppProtocol(t *testing.T) {
	for _, tt := range []struct {
		name, app string
		want      config.UpstreamProtocol
	}{
		{"http", "", config.UpstreamHTTP1},
		{"web", "kubernetes.io/h2c", config.UpstreamHTTP2},
		{"grpc", "http", config.UpstreamHTTP1}, // appProtocol wins over the name
		{"http2-x", "", config.UpstreamHTTP2},
		{"grpc-web", "", config.UpstreamHTTP1},
	} {
		svc := service("default", "echo", nil, tt.name+":80")
		if tt.app != "" {
			svc.Spec.Ports[0].AppProtocol = ptr(tt.app)
		}
		eq(t, resolve(t, translateOne(t, ServiceInput{Service: svc})).Protocol, tt.want)
	}
}

func TestTranslateServiceIPv6(t *testing.T) {
	svc := service("default", "echo", nil, "http:80")
	svc.Spec.ClusterIPs = []string{"fd00:10:96::a", "10.96.0.10"}
	in := ServiceInput{
		Service: svc,
		Slices: []*discoveryv1.EndpointSlice{
			slice("default", "echo-v6", "echo", discoveryv1.AddressTypeIPv6, []string{"http:8080"}, ep{addr: "fd00::1", node: "n-a"}),
			slice("default", "echo-v4", "echo", v4, []string{"http:8080"}, ep{addr: "10.0.0.1", node: "n-a"}),
		},
		Nodes: threeZones(),
	}
	sc := translateOne(t, in)
	var v6 *corev3.SocketAddress
	for _, g := range sc.LoadAssignment.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			if a := e.GetEndpoint().GetAddress().GetSocketAddress(); a.GetAddress() == "fd00::1" {
				v6 = a
			}
		}
	}
	if v6 == nil || v6.GetPortValue() != 8080 {
		t.Fatalf("IPv6 endpoint missing or wrong: %v", v6)
	}
	c := resolve(t, sc)
	eq(t, c.Endpoints[0].Address, "10.0.0.1:8080")
	eq(t, c.Endpoints[1].Address, "[fd00::1]:8080")
	routes, err := discovery.ServiceRoutes(sc.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, []string{routes[0].Destination, routes[1].Destination}, []string{"[fd00:10:96::a]:80", "10.96.0.10:80"})
}

func TestTranslateServiceSpecialTypes(t *testing.T) {
	ext := service("default", "ext", nil, "http:80")
	ext.Spec.Type = corev1.ServiceTypeExternalName
	scs, err := TranslateService(ServiceInput{Service: ext})
	eq(t, err, nil)
	eq(t, len(scs), 0)

	headless := service("default", "db", nil, "pg:5432")
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	sc := translateOne(t, ServiceInput{Service: headless,
		Slices: []*discoveryv1.EndpointSlice{slice("default", "db-1", "db", v4, []string{"pg:5432"}, ep{addr: "10.0.0.7"})}})
	eq(t, len(resolve(t, sc).Endpoints), 1)
	routes, err := discovery.ServiceRoutes(sc.Cluster)
	eq(t, err, nil)
	eq(t, len(routes), 0) // no cluster IP to route by

	_, err = TranslateService(ServiceInput{})
	wantErr(t, err, "no service")
}

// TestTranslateServiceAnnotations checks each annotation where the sidecar
// sees it.
func TestTranslateServiceAnnotations(t *testing.T) {
	tests := []struct {
		name  string
		ann   map[string]string
		check func(t *testing.T, c config.Cluster, routes []config.Route)
	}{
		{"none", nil, func(t *testing.T, c config.Cluster, r []config.Route) {
			eq(t, c.LB, lb.DefaultClusterConfig())
			eq(t, c.OverprovisioningFactor, uint32(lb.DefaultOverprovisioningFactor))
			eq(t, c.Outlier, (*lb.OutlierConfig)(nil))
			eq(t, c.ConnectTimeout, config.DefaultConnectTimeout)
			eq(t, r[0].Timeout, config.DefaultRouteTimeout)
			eq(t, r[0].Retry, discovery.DefaultRetryPolicy())
		}},
		{"lb-policy", map[string]string{AnnotationLBPolicy: "least-request"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			eq(t, c.LB.Policy, lb.PolicyLeastRequest)
		}},
		{"lb-policy Envoy name", map[string]string{AnnotationLBPolicy: "MAGLEV"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			eq(t, c.LB.Policy, lb.PolicyMaglev)
		}},
		{"zone-aware off", map[string]string{AnnotationZoneAware: "off"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			eq(t, c.LB.ZoneAware.RoutingEnabledPercent, uint32(0))
		}},
		{"zone-aware min cluster size", map[string]string{AnnotationZoneAware: "3"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			eq(t, c.LB.ZoneAware.MinClusterSize, uint64(3))
			eq(t, c.LB.ZoneAware.RoutingEnabledPercent, uint32(100))
		}},
		{"zone-aware on", map[string]string{AnnotationZoneAware: "on"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			eq(t, c.LB.ZoneAware, lb.DefaultZoneAwareConfig())
		}},
		{"locality-weighted", map[string]string{AnnotationLocalityWeighted: "true", AnnotationZoneAware: "off"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			eq(t, c.LB.LocalityWeighted, true)
		}},
		{"overprovisioning-factor", map[string]string{AnnotationOverprovisioningFactor: "100"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			eq(t, c.OverprovisioningFactor, uint32(100))
		}},
		{"outlier", map[string]string{AnnotationOutlierConsecutive5xx: "3", AnnotationOutlierInterval: "2s",
			AnnotationOutlierBaseEjectionTime: "1m", AnnotationOutlierMaxEjectionPercent: "50"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			want := lb.DefaultOutlierConfig()
			want.Consecutive5xx, want.Interval, want.BaseEjectionTime, want.MaxEjectionPercent = 3, 2*time.Second, time.Minute, 50
			want.MaxEjectionTime = max(want.MaxEjectionTime, time.Minute)
			eq(t, *c.Outlier, want)
		}},
		{"one outlier knob turns it on", map[string]string{AnnotationOutlierConsecutive5xx: "7"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			want := lb.DefaultOutlierConfig()
			want.Consecutive5xx = 7
			eq(t, *c.Outlier, want)
		}},
		{"connect-timeout", map[string]string{AnnotationConnectTimeout: "250ms"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			eq(t, c.ConnectTimeout, 250*time.Millisecond)
		}},
		{"timeout", map[string]string{AnnotationTimeout: "3s"}, func(t *testing.T, _ config.Cluster, r []config.Route) {
			eq(t, r[0].Timeout, 3*time.Second)
			eq(t, r[0].Retry, discovery.DefaultRetryPolicy())
		}},
		{"timeout 0 disables", map[string]string{AnnotationTimeout: "0s"}, func(t *testing.T, _ config.Cluster, r []config.Route) {
			eq(t, r[0].Timeout, time.Duration(0))
		}},
		{"retries", map[string]string{AnnotationRetries: "3", AnnotationRetryOn: "5xx,reset", AnnotationPerTryTimeout: "500ms"}, func(t *testing.T, _ config.Cluster, r []config.Route) {
			on, _ := retry.ParseOn("5xx,reset")
			want := retry.Policy{RetryOn: on, NumRetries: 3, PerTryTimeout: 500 * time.Millisecond}.WithDefaults()
			eq(t, r[0].Retry, want)
		}},
		{"retries 0", map[string]string{AnnotationRetries: "0"}, func(t *testing.T, _ config.Cluster, r []config.Route) {
			eq(t, r[0].Retry.NumRetries, uint32(0))
			eq(t, r[0].Retry.RetryOn, retry.On(0))
		}},
		{"unrelated meshlet.io annotation", map[string]string{"meshlet.io/inject": "false"}, func(t *testing.T, c config.Cluster, _ []config.Route) {
			eq(t, c.LB, lb.DefaultClusterConfig())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := translateOne(t, ServiceInput{Service: service("default", "echo", tt.ann, "http:80"),
				Slices: []*discoveryv1.EndpointSlice{slice("default", "echo-1", "echo", v4, []string{"http:8080"}, ep{addr: "10.0.0.1"})}})
			routes, err := discovery.ServiceRoutes(sc.Cluster)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, resolve(t, sc), routes)
		})
	}
}

func TestTranslateServiceFailoverLabels(t *testing.T) {
	sc := translateOne(t, ServiceInput{Service: service("default", "echo",
		map[string]string{AnnotationFailoverLabels: "topology.kubernetes.io/region, topology.kubernetes.io/zone"}, "http:80")})
	eq(t, sc.FailoverLabels, []string{lb.LabelRegion, lb.LabelZone})
}

func TestTranslateServiceBadAnnotations(t *testing.T) {
	tests := []struct {
		ann  map[string]string
		name string // the annotation the error names
		msg  string
	}{
		{map[string]string{AnnotationLBPolicy: "fastest"}, AnnotationLBPolicy, "unknown policy"},
		{map[string]string{AnnotationZoneAware: "sometimes"}, AnnotationZoneAware, "want off, on or a minimum cluster size"},
		{map[string]string{AnnotationLocalityWeighted: "yes please"}, AnnotationLocalityWeighted, "want true or false"},
		{map[string]string{AnnotationLocalityWeighted: "true", AnnotationZoneAware: "5"}, AnnotationLocalityWeighted, "cannot be combined"},
		{map[string]string{AnnotationOverprovisioningFactor: "0"}, AnnotationOverprovisioningFactor, "want a percentage >= 1"},
		{map[string]string{AnnotationFailoverLabels: "topology.kubernetes.io/zone,rack"}, AnnotationFailoverLabels, `label "rack" not supported`},
		{map[string]string{AnnotationFailoverLabels: "topology.kubernetes.io/zone,topology.kubernetes.io/zone"}, AnnotationFailoverLabels, "listed twice"},
		{map[string]string{AnnotationOutlierConsecutive5xx: "-1"}, AnnotationOutlierConsecutive5xx, "want a whole number"},
		{map[string]string{AnnotationOutlierMaxEjectionPercent: "101"}, AnnotationOutlierMaxEjectionPercent, "0 to 100"},
		{map[string]string{AnnotationOutlierInterval: "0s"}, AnnotationOutlierInterval, "must be > 0"},
		{map[string]string{AnnotationOutlierBaseEjectionTime: "30"}, AnnotationOutlierBaseEjectionTime, "not a duration"},
		{map[string]string{AnnotationConnectTimeout: "-1s"}, AnnotationConnectTimeout, "must be > 0"},
		{map[string]string{AnnotationTimeout: "-1s"}, AnnotationTimeout, "must be >= 0"},
		{map[string]string{AnnotationRetries: "many"}, AnnotationRetries, "want a whole number of retries"},
		{map[string]string{AnnotationRetryOn: "5xx,sometimes"}, AnnotationRetryOn, "sometimes"},
		{map[string]string{AnnotationPerTryTimeout: "fast"}, AnnotationPerTryTimeout, "not a duration"},
		{map[string]string{"meshlet.io/lb-polcy": "random"}, "meshlet.io/lb-polcy", "did you mean meshlet.io/lb-policy?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scs, err := TranslateService(ServiceInput{Service: service("shop", "cart", tt.ann, "http:80")})
			wantErr(t, err, `xds: service shop/cart: annotation `+tt.name+`="`, tt.msg)
			var ae *AnnotationError
			if !errors.As(err, &ae) || ae.Annotation != tt.name || ae.Service != nn("shop", "cart") {
				t.Fatalf("error %v is not an *AnnotationError for %s", err, tt.name)
			}
			eq(t, len(scs), 0)
		})
	}
}

// TestTranslateServiceRoundTrip is the check that xDS and the static file
// share the translation: the resources TranslateService produces go
// through the existing TranslateCluster (as a STATIC cluster with the
// assignment inline) and TranslateClusterLoadAssignment, and give the same
// config.Cluster as the sidecar's EDS path.
func TestTranslateServiceRoundTrip(t *testing.T) {
	ann := map[string]string{
		AnnotationLBPolicy: "least-request", AnnotationZoneAware: "4", AnnotationOverprovisioningFactor: "120",
		AnnotationOutlierConsecutive5xx: "3", AnnotationConnectTimeout: "1s", AnnotationTimeout: "2s", AnnotationRetries: "2",
	}
	in := ServiceInput{
		Service: service("default", "echo", ann, "http:80", "grpc:9090"),
		Slices: []*discoveryv1.EndpointSlice{slice("default", "echo-1", "echo", v4, []string{"http:8080", "grpc:9091"},
			ep{addr: "10.0.0.1", node: "n-a", pod: "p1"}, ep{addr: "10.0.0.2", node: "n-b", cond: "terminating-serving"},
			ep{addr: "10.0.0.3", node: "n-c", cond: "notready"})},
		Nodes:      threeZones(),
		MeshedPods: map[types.NamespacedName]string{nn("default", "p1"): "spiffe://cluster.local/ns/default/sa/p1"},
	}
	scs, err := TranslateService(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scs {
		// The static path: an inline load assignment in a STATIC cluster.
		static := proto.Clone(sc.Cluster).(*clusterv3.Cluster)
		static.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
		static.EdsClusterConfig = nil
		static.LoadAssignment = sc.LoadAssignment
		viaStatic, err := discovery.TranslateCluster(static)
		if err != nil {
			t.Fatal(err)
		}
		eps, prios, opf, wph, err := discovery.TranslateClusterLoadAssignment(sc.LoadAssignment)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, viaStatic.Endpoints, eps)
		eq(t, [3]any{viaStatic.Priorities, viaStatic.OverprovisioningFactor, viaStatic.WeightedPriorityHealth}, [3]any{prios, opf, wph})

		// The EDS path gives the same cluster, meshed markers included.
		viaEDS := resolve(t, sc)
		eq(t, viaEDS, viaStatic)
		if viaStatic.Endpoints[0].Metadata[discovery.MeshedMetadataKey] != "true" {
			t.Errorf("static translation lost the meshed marker: %v", viaStatic.Endpoints[0].Metadata)
		}

		// And the values are the annotations'.
		want := lb.DefaultClusterConfig()
		want.Policy, want.ZoneAware.MinClusterSize = lb.PolicyLeastRequest, 4
		eq(t, viaEDS.LB, want)
		eq(t, viaEDS.OverprovisioningFactor, uint32(120))
		eq(t, viaEDS.ConnectTimeout, time.Second)
		eq(t, viaEDS.Outlier.Consecutive5xx, uint32(3))
		eq(t, len(viaEDS.Endpoints), 3)
	}
	eq(t, resolve(t, scs[0]).Protocol, config.UpstreamHTTP1)
	eq(t, resolve(t, scs[1]).Protocol, config.UpstreamHTTP2)
}

// An endpoint on a port its pod's PeerAuthentication sets to DISABLE
// (Plaintext) carries no meshed metadata, so clients reach it in
// plaintext; the pod's other ports stay meshed.
func TestTranslateServicePlaintextPorts(t *testing.T) {
	es := slice("default", "echo-1", "echo", v4, []string{"http:8080", "admin:9090"},
		ep{addr: "10.0.0.1", pod: "echo-a"}, ep{addr: "10.0.0.2", pod: "echo-b"})
	id := "spiffe://cluster.local/ns/default/sa/echo"
	in := ServiceInput{
		Service:    service("default", "echo", nil, "http:80", "admin:1090"),
		Slices:     []*discoveryv1.EndpointSlice{es},
		MeshedPods: map[types.NamespacedName]string{nn("default", "echo-a"): id, nn("default", "echo-b"): id},
		Plaintext: func(pod types.NamespacedName, port uint16) bool {
			return pod == nn("default", "echo-a") && port == 8080
		},
	}
	scs, err := TranslateService(in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, sc := range scs {
		for _, e := range resolve(t, sc).Endpoints {
			got[e.Address] = e.Metadata[discovery.MeshedMetadataKey] + " " + e.Metadata[discovery.IdentityMetadataKey]
		}
	}
	eq(t, got, map[string]string{"10.0.0.1:8080": " ", "10.0.0.2:8080": "true " + id, "10.0.0.1:9090": "true " + id, "10.0.0.2:9090": "true " + id})
}
