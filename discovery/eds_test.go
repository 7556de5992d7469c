package discovery

import (
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

const edsCluster = `name: "outbound|80||echo.default.svc.cluster.local"
type: EDS
eds_cluster_config:
  eds_config: {ads: {}, resource_api_version: V3}
  service_name: "outbound|80||echo.default.svc.cluster.local"
lb_policy: LEAST_REQUEST
metadata:
  filter_metadata:
    meshlet.io: {service: echo.default.svc.cluster.local, port: 80, addresses: ["10.96.0.10", "fd00::10"]}
`

func TestTranslateEDSCluster(t *testing.T) {
	var c clusterv3.Cluster
	fromYAML(t, edsCluster, &c)
	got, err := TranslateEDSCluster(&c)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, got.Name, c.GetName())
	eq(t, got.LB.Policy, lb.PolicyLeastRequest)
	eq(t, len(got.Endpoints), 0)
	eq(t, EDSServiceName(&c), c.GetName())

	// Without service_name the assignment has the cluster's name.
	c.EdsClusterConfig.ServiceName = ""
	eq(t, EDSServiceName(&c), c.GetName())

	// The cluster itself is left alone.
	eq(t, c.GetType(), clusterv3.Cluster_EDS)

	routes, err := ServiceRoutes(&c)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, routes, []config.Route{
		{Name: c.GetName(), Destination: "10.96.0.10:80", Cluster: c.GetName(), Timeout: config.DefaultRouteTimeout, Retry: DefaultRetryPolicy()},
		{Name: c.GetName(), Destination: "[fd00::10]:80", Cluster: c.GetName(), Timeout: config.DefaultRouteTimeout, Retry: DefaultRetryPolicy()},
	})
}

func TestTranslateEDSClusterErrors(t *testing.T) {
	tests := []struct {
		name, y string
		parts   []string
	}{
		{"static", "name: a\n", []string{`cluster "a": type: STATIC not supported over CDS (want EDS)`}},
		{"no eds_cluster_config", "name: a\ntype: EDS\n", []string{"eds_cluster_config: required"}},
		{"no ads", "name: a\ntype: EDS\neds_cluster_config: {eds_config: {path_config_source: {path: /x}}}\n",
			[]string{"eds_cluster_config.eds_config.path_config_source: not supported by meshlet"}},
		{"inline endpoints", "name: a\ntype: EDS\neds_cluster_config: {eds_config: {ads: {}}}\nload_assignment: {cluster_name: a}\n",
			[]string{"load_assignment: not supported on an EDS cluster"}},
		// The rest is TranslateCluster's.
		{"policy", "name: a\ntype: EDS\neds_cluster_config: {eds_config: {ads: {}}}\nlb_policy: CLUSTER_PROVIDED\n",
			[]string{`discovery: cluster "a": lb_policy: CLUSTER_PROVIDED not supported`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c clusterv3.Cluster
			fromYAML(t, tt.y, &c)
			_, err := TranslateEDSCluster(&c)
			wantErr(t, err, tt.parts...)
		})
	}
	_, err := TranslateEDSCluster(nil)
	wantErr(t, err, "no cluster")
}

func TestTranslateEDSLoadAssignmentMeshed(t *testing.T) {
	var cla endpointv3.ClusterLoadAssignment
	fromYAML(t, `cluster_name: echo
endpoints:
  - lb_endpoints:
      - endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}
        metadata: {filter_metadata: {meshlet.io: {meshed: true}, envoy.lb: {hash_key: k1}}}
      - endpoint: {address: {socket_address: {address: 10.0.0.2, port_value: 80}}}
        metadata: {filter_metadata: {meshlet.io: {meshed: false}}}
  - priority: 1
    lb_endpoints:
      - endpoint: {address: {socket_address: {address: 10.0.0.3, port_value: 80}}}
        metadata: {filter_metadata: {meshlet.io: {meshed: true}}}
`, &cla)
	la, err := TranslateEDSLoadAssignment(&cla)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, la.Endpoints[0].Metadata, map[string]string{"hash_key": "k1", MeshedMetadataKey: "true"})
	eq(t, la.Endpoints[1].Metadata, map[string]string(nil))
	eq(t, la.Endpoints[2].Metadata, map[string]string{MeshedMetadataKey: "true"})
	eq(t, la.Priorities, 2)

	for _, tt := range []struct{ md, part string }{
		{`{meshed: "true"}`, `load assignment "echo": endpoints[0].lb_endpoints[0].metadata.filter_metadata["meshlet.io"].meshed: want a bool`},
		{"{mtls: true}", `endpoints[0].lb_endpoints[0].metadata.filter_metadata["meshlet.io"].mtls: not supported by meshlet`},
	} {
		var bad endpointv3.ClusterLoadAssignment
		fromYAML(t, `cluster_name: echo
endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}, metadata: {filter_metadata: {meshlet.io: `+tt.md+`}}}]}]
`, &bad)
		_, err := TranslateEDSLoadAssignment(&bad)
		wantErr(t, err, tt.part)
	}
	// TranslateClusterLoadAssignment's own errors come through.
	_, err = TranslateEDSLoadAssignment(&endpointv3.ClusterLoadAssignment{})
	wantErr(t, err, "cluster_name")
}

func TestServiceRoutesRouteAction(t *testing.T) {
	var c clusterv3.Cluster
	fromYAML(t, edsCluster, &c)
	ra, err := anypb.New(&routev3.RouteAction{
		Timeout:     durationpb.New(2 * time.Second),
		RetryPolicy: &routev3.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Metadata.TypedFilterMetadata = map[string]*anypb.Any{meshmeta.RouteMetadataKey: ra}
	routes, err := ServiceRoutes(&c)
	if err != nil {
		t.Fatal(err)
	}
	on, _ := retry.ParseOn("5xx")
	eq(t, routes[0].Timeout, 2*time.Second)
	eq(t, routes[0].Retry, retry.Policy{RetryOn: on, NumRetries: 3}.WithDefaults())

	bad := func(mutate func(*clusterv3.Cluster), part string) {
		t.Helper()
		var c clusterv3.Cluster
		fromYAML(t, edsCluster, &c)
		mutate(&c)
		_, err := ServiceRoutes(&c)
		wantErr(t, err, part)
	}
	bad(func(c *clusterv3.Cluster) {
		ra, _ := anypb.New(&routev3.RouteAction{RetryPolicy: &routev3.RetryPolicy{RetryOn: "sometimes"}})
		c.Metadata.TypedFilterMetadata = map[string]*anypb.Any{meshmeta.RouteMetadataKey: ra}
	}, `metadata.typed_filter_metadata["meshlet.io/route"].retry_policy.retry_on`)
	bad(func(c *clusterv3.Cluster) {
		ra, _ := anypb.New(&routev3.RouteAction{PrefixRewrite: "/x"})
		c.Metadata.TypedFilterMetadata = map[string]*anypb.Any{meshmeta.RouteMetadataKey: ra}
	}, `typed_filter_metadata["meshlet.io/route"].prefix_rewrite: not supported by meshlet`)
	bad(func(c *clusterv3.Cluster) {
		a, _ := anypb.New(durationpb.New(time.Second))
		c.Metadata.TypedFilterMetadata = map[string]*anypb.Any{meshmeta.RouteMetadataKey: a}
	}, `typed_filter_metadata["meshlet.io/route"].@type: type.googleapis.com/google.protobuf.Duration not supported`)
	bad(func(c *clusterv3.Cluster) {
		c.Metadata.FilterMetadata["meshlet.io"].Fields["port"] = nil
		delete(c.Metadata.FilterMetadata["meshlet.io"].Fields, "port")
	}, `filter_metadata["meshlet.io"].port: required with addresses`)
	bad(func(c *clusterv3.Cluster) {
		c.Metadata.FilterMetadata["meshlet.io"].Fields["addresses"].GetListValue().Values[1] = nil
	}, `filter_metadata["meshlet.io"].addresses[1]: "" is not an IP address`)
}
