package xds

import (
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet-dev/meshlet/lb"
)

// AssignFailover returns a copy of cla whose locality groups have the
// priorities lb.FailoverPriorities gives them for a client in
// clientLocality, comparing the topology labels in the order of labels
// (typically a ServiceCluster's FailoverLabels): endpoints matching the
// client on every label are P0, and each earlier mismatch moves them one
// level down, with empty levels closed up. Priorities are per client,
// which is why the control plane computes them for each sidecar locality.
// With no labels the copy keeps cla's priorities.
func AssignFailover(cla *endpointv3.ClusterLoadAssignment, clientLocality lb.Locality, labels []string) *endpointv3.ClusterLoadAssignment {
	out := proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	if len(labels) == 0 {
		return out
	}
	groups := make([]map[string]string, len(out.GetEndpoints()))
	for i, g := range out.GetEndpoints() {
		l := g.GetLocality()
		groups[i] = lb.LocalityLabels(lb.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()})
	}
	prios := lb.FailoverPriorities(lb.LocalityLabels(clientLocality), groups, labels)
	for i, g := range out.GetEndpoints() {
		g.Priority = prios[i]
	}
	return out
}
