package discovery

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet-dev/meshlet/internal/testtool"
)

// fromYAML decodes a YAML snippet of an Envoy resource into m.
func fromYAML(t *testing.T, y string, m proto.Message) { t.Helper(); testtool.FromYAML(t, y, m) }

// baseCluster is a valid static cluster; tests append fields to it.
const baseCluster = `name: echo
load_assignment:
  cluster_name: echo
  endpoints:
    - locality: {region: r1, zone: a}
      lb_endpoints:
        - endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 8080}}}
`

// clusterYAML returns baseCluster with extra top-level fields.
func clusterYAML(t *testing.T, extra string) *clusterv3.Cluster {
	t.Helper()
	return clusterFromYAMLString(t, baseCluster+extra)
}

// clusterFromYAMLString decodes a whole cluster.
func clusterFromYAMLString(t *testing.T, y string) *clusterv3.Cluster {
	t.Helper()
	var c clusterv3.Cluster
	fromYAML(t, y, &c)
	return &c
}

// wantErr fails unless err is non-nil and contains every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	testtool.WantErr(t, err, parts...)
}
