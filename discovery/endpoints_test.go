package discovery

import (
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshlet-dev/meshlet/lb"
)

func TestTranslateClusterLoadAssignment(t *testing.T) {
	var cla endpointv3.ClusterLoadAssignment
	fromYAML(t, `cluster_name: echo
policy: {overprovisioning_factor: 100, weighted_priority_health: true}
endpoints:
  - locality: {region: r1, zone: a, sub_zone: s1}
    load_balancing_weight: 3
    lb_endpoints:
      - endpoint:
          address: {socket_address: {address: 10.0.0.1, port_value: 8080}}
          hostname: echo-0
        load_balancing_weight: 5
        health_status: HEALTHY
        metadata: {filter_metadata: {envoy.lb: {hash_key: pod-0, other: x}, istio: {a: b}}}
      - endpoint: {address: {socket_address: {address: 10.0.0.2, port_value: 8080}}}
        health_status: UNHEALTHY
      - endpoint: {address: {socket_address: {address: 10.0.0.3, port_value: 8080}}}
        health_status: DRAINING
      - endpoint: {address: {socket_address: {address: 10.0.0.4, port_value: 8080}}}
        health_status: TIMEOUT
      - endpoint: {address: {socket_address: {address: 10.0.0.5, port_value: 8080}}}
        health_status: DEGRADED
  - locality: {region: r1, zone: b}
    priority: 2
    lb_endpoints:
      - endpoint: {address: {socket_address: {address: "fd00::1", port_value: 9090}}, observability_name: v6}
        health_status: UNKNOWN
`, &cla)
	eps, prios, opf, wph, err := TranslateClusterLoadAssignment(&cla)
	if err != nil {
		t.Fatal(err)
	}
	a := lb.Locality{Region: "r1", Zone: "a", SubZone: "s1"}
	b := lb.Locality{Region: "r1", Zone: "b"}
	want := []lb.Endpoint{
		{Address: "10.0.0.1:8080", Hostname: "echo-0", Weight: 5, Locality: a, LocalityWeight: 3,
			Health: lb.EDSHealthy, Metadata: map[string]string{"hash_key": "pod-0"}},
		{Address: "10.0.0.2:8080", Weight: 1, Locality: a, LocalityWeight: 3, Health: lb.EDSUnhealthy},
		{Address: "10.0.0.3:8080", Weight: 1, Locality: a, LocalityWeight: 3, Health: lb.EDSDraining},
		{Address: "10.0.0.4:8080", Weight: 1, Locality: a, LocalityWeight: 3, Health: lb.EDSTimeout},
		{Address: "10.0.0.5:8080", Weight: 1, Locality: a, LocalityWeight: 3, Health: lb.EDSDegraded},
		{Address: "[fd00::1]:9090", Weight: 1, Locality: b, Priority: 2, Health: lb.EDSUnknown},
	}
	eq(t, eps, want)
	eq(t, prios, 3) // levels 0..2 are declared, 1 is empty
	eq(t, opf, uint32(100))
	eq(t, wph, true)
}

func TestTranslateClusterLoadAssignmentDefaults(t *testing.T) {
	var cla endpointv3.ClusterLoadAssignment
	fromYAML(t, "cluster_name: echo\n", &cla)
	eps, prios, opf, wph, err := TranslateClusterLoadAssignment(&cla)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, len(eps), 0)
	eq(t, prios, 0)
	eq(t, opf, uint32(lb.DefaultOverprovisioningFactor))
	eq(t, wph, false)
}

func TestTranslateClusterLoadAssignmentErrors(t *testing.T) {
	tests := []struct {
		name, y string
		parts   []string
	}{
		// EDS names the assignment's cluster, so Envoy's rule applies here.
		{"cluster_name required", "endpoints: []\n", []string{`load assignment "": cluster_name: value length must be at least 1`}},
		{"port out of range", "cluster_name: echo\nendpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 65536}}}}]}]\n",
			[]string{`discovery: load assignment "echo": endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value: 65536 out of range`}},
		{"named_endpoints", "cluster_name: echo\nnamed_endpoints: {a: {address: {socket_address: {address: 10.0.0.1, port_value: 1}}}}\n",
			[]string{"named_endpoints: not supported"}},
		{"endpoint_name", "cluster_name: echo\nendpoints: [{lb_endpoints: [{endpoint_name: a}]}]\n",
			[]string{"endpoints[0].lb_endpoints[0].endpoint_name: not supported"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cla endpointv3.ClusterLoadAssignment
			fromYAML(t, tt.y, &cla)
			_, _, _, _, err := TranslateClusterLoadAssignment(&cla)
			wantErr(t, err, tt.parts...)
		})
	}
	_, _, _, _, err := TranslateClusterLoadAssignment(nil)
	wantErr(t, err, "no load assignment")
}
