package discovery

import (
	"fmt"
	"math"
	"net/netip"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet-dev/meshlet/lb"
)

// TranslateClusterLoadAssignment translates an Envoy v3 ClusterLoadAssignment
// (a STATIC cluster's load_assignment, or an EDS response) into lb
// endpoints, the number of declared priority levels (the highest priority
// of a locality group + 1, 0 without groups), the overprovisioning factor
// in percent (default 140) and the weighted_priority_health flag.
// Endpoints must be IP socket addresses with a numeric port; an unset
// load_balancing_weight is 1; hosts are keyed by "ip:port", which must be
// unique. Errors name the field by its path in the message.
func TranslateClusterLoadAssignment(cla *endpointv3.ClusterLoadAssignment) (eps []lb.Endpoint, priorities int, opf uint32, weightedPriorityHealth bool, err error) {
	eps, priorities, opf, weightedPriorityHealth, err = translateLoadAssignment("", cla)
	if err == nil {
		err = validateProto("", cla)
	}
	if err != nil {
		return nil, 0, 0, false, fmt.Errorf("discovery: load assignment %q: %w", cla.GetClusterName(), err)
	}
	return eps, priorities, opf, weightedPriorityHealth, nil
}

// translateLoadAssignment is TranslateClusterLoadAssignment with errors
// located below p and without the protoc-gen-validate pass.
func translateLoadAssignment(p path, cla *endpointv3.ClusterLoadAssignment) ([]lb.Endpoint, int, uint32, bool, error) {
	opf := uint32(lb.DefaultOverprovisioningFactor)
	if cla == nil {
		return nil, 0, opf, false, p.errorf("no load assignment")
	}
	if err := rejectUnsupported(p, cla, "cluster_name", "endpoints", "policy"); err != nil {
		return nil, 0, 0, false, err
	}
	var wph bool
	if pol := cla.GetPolicy(); pol != nil {
		pp := p.field("policy")
		if err := rejectUnsupported(pp, pol, "overprovisioning_factor", "weighted_priority_health"); err != nil {
			return nil, 0, 0, false, err
		}
		if f := pol.GetOverprovisioningFactor(); f != nil {
			if f.GetValue() == 0 {
				return nil, 0, 0, false, pp.field("overprovisioning_factor").errorf("0 must be > 0")
			}
			opf = f.GetValue()
		}
		wph = pol.GetWeightedPriorityHealth()
	}
	var eps []lb.Endpoint
	priorities := 0
	seen := map[string]path{}
	for i, group := range cla.GetEndpoints() {
		gp := p.field("endpoints").index(i)
		loc, prio, lw, err := translateLocality(gp, group)
		if err != nil {
			return nil, 0, 0, false, err
		}
		priorities = max(priorities, int(prio)+1)
		var weightSum uint64
		for j, lbe := range group.GetLbEndpoints() {
			ep, err := translateLbEndpoint(gp.field("lb_endpoints").index(j), lbe)
			if err != nil {
				return nil, 0, 0, false, err
			}
			ap := gp.field("lb_endpoints").index(j).field("endpoint").field("address")
			if first, dup := seen[ep.Address]; dup {
				return nil, 0, 0, false, ap.errorf("duplicate endpoint %s (also at %s)", ep.Address, first)
			}
			seen[ep.Address] = ap
			if weightSum += uint64(ep.Weight); weightSum > math.MaxUint32 {
				return nil, 0, 0, false, gp.field("lb_endpoints").errorf("sum of load_balancing_weight exceeds %d", uint32(math.MaxUint32))
			}
			ep.Locality, ep.LocalityWeight, ep.Priority = loc, lw, prio
			eps = append(eps, ep)
		}
	}
	return eps, priorities, opf, wph, nil
}

// translateLocality reads a LocalityLbEndpoints' locality, priority and
// locality weight (0 when unset: locality-weighted balancing skips it).
func translateLocality(p path, g *endpointv3.LocalityLbEndpoints) (lb.Locality, uint32, uint32, error) {
	// metadata is for filters and changes nothing here.
	if err := rejectUnsupported(p, g, "locality", "lb_endpoints", "load_balancing_weight", "priority", "metadata"); err != nil {
		return lb.Locality{}, 0, 0, err
	}
	l := g.GetLocality()
	loc := lb.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
	if l != nil {
		if err := rejectUnsupported(p.field("locality"), l, "region", "zone", "sub_zone"); err != nil {
			return lb.Locality{}, 0, 0, err
		}
	}
	prio := g.GetPriority()
	if prio > lb.MaxPriority {
		return lb.Locality{}, 0, 0, p.field("priority").errorf("%d > %d", prio, lb.MaxPriority)
	}
	var lw uint32
	if w := g.GetLoadBalancingWeight(); w != nil {
		if w.GetValue() == 0 {
			return lb.Locality{}, 0, 0, p.field("load_balancing_weight").errorf("0 must be >= 1")
		}
		lw = w.GetValue()
	}
	return loc, prio, lw, nil
}

// edsHealth maps Envoy's core.HealthStatus.
var edsHealth = map[corev3.HealthStatus]lb.EDSHealth{
	corev3.HealthStatus_UNKNOWN:   lb.EDSUnknown,
	corev3.HealthStatus_HEALTHY:   lb.EDSHealthy,
	corev3.HealthStatus_UNHEALTHY: lb.EDSUnhealthy,
	corev3.HealthStatus_DRAINING:  lb.EDSDraining,
	corev3.HealthStatus_TIMEOUT:   lb.EDSTimeout,
	corev3.HealthStatus_DEGRADED:  lb.EDSDegraded,
}

// translateLbEndpoint reads one LbEndpoint (locality and priority are the
// caller's).
func translateLbEndpoint(p path, lbe *endpointv3.LbEndpoint) (lb.Endpoint, error) {
	var ep lb.Endpoint
	if err := rejectUnsupported(p, lbe, "endpoint", "health_status", "metadata", "load_balancing_weight"); err != nil {
		return ep, err
	}
	e := lbe.GetEndpoint()
	ept := p.field("endpoint")
	if e == nil {
		return ep, ept.errorf("required")
	}
	// observability_name only renames the host in stats and logs.
	if err := rejectUnsupported(ept, e, "address", "hostname", "observability_name"); err != nil {
		return ep, err
	}
	addr, err := socketAddress(ept.field("address"), e.GetAddress())
	if err != nil {
		return ep, err
	}
	ep.Address, ep.Hostname, ep.Weight = addr, e.GetHostname(), 1
	if w := lbe.GetLoadBalancingWeight(); w != nil {
		if w.GetValue() == 0 {
			return ep, p.field("load_balancing_weight").errorf("0 must be >= 1")
		}
		ep.Weight = w.GetValue()
	}
	h, ok := edsHealth[lbe.GetHealthStatus()]
	if !ok {
		return ep, p.field("health_status").errorf("unknown health status %s", lbe.GetHealthStatus())
	}
	ep.Health = h
	key, hasKey, err := hashKey(p.field("metadata"), lbe.GetMetadata())
	if err != nil {
		return ep, err
	}
	meshed, identity, err := endpointMeshed(p.field("metadata"), lbe.GetMetadata())
	if err != nil {
		return ep, err
	}
	if hasKey || meshed {
		ep.Metadata = map[string]string{}
	}
	if hasKey {
		ep.Metadata["hash_key"] = key
	}
	if meshed {
		ep.Metadata[MeshedMetadataKey] = "true"
	}
	if identity != "" {
		ep.Metadata[IdentityMetadataKey] = identity
	}
	return ep, nil
}

// socketAddress renders an Address as "ip:port". meshlet resolves no names
// and has no named ports in static endpoints.
func socketAddress(p path, a *corev3.Address) (string, error) {
	if a == nil {
		return "", p.errorf("required")
	}
	if err := rejectUnsupported(p, a, "socket_address"); err != nil {
		return "", err
	}
	sa := a.GetSocketAddress()
	sp := p.field("socket_address")
	if sa == nil {
		return "", sp.errorf("required")
	}
	if sa.GetNamedPort() != "" {
		return "", sp.field("named_port").errorf("%q: named ports are not supported (want port_value)", sa.GetNamedPort())
	}
	if err := rejectUnsupported(sp, sa, "address", "port_value", "protocol"); err != nil {
		return "", err
	}
	if sa.GetProtocol() != corev3.SocketAddress_TCP {
		return "", sp.field("protocol").errorf("%s not supported (want TCP)", sa.GetProtocol())
	}
	ip, err := netip.ParseAddr(sa.GetAddress())
	if err != nil {
		return "", sp.field("address").errorf("%q is not an IP address", sa.GetAddress())
	}
	port := sa.GetPortValue()
	switch {
	case port == 0:
		return "", sp.field("port_value").errorf("required (1-65535)")
	case port > math.MaxUint16:
		return "", sp.field("port_value").errorf("%d out of range (1-65535)", port)
	}
	return netip.AddrPortFrom(ip, uint16(port)).String(), nil
}

// hashKey returns filter_metadata["envoy.lb"]["hash_key"], the key ring hash
// and Maglev use instead of the address. Other metadata is for filters and
// changes nothing here.
func hashKey(p path, md *corev3.Metadata) (string, bool, error) {
	s, ok := md.GetFilterMetadata()["envoy.lb"]
	if !ok {
		return "", false, nil
	}
	v, ok := s.GetFields()["hash_key"]
	if !ok {
		return "", false, nil
	}
	str, isString := v.GetKind().(*structpb.Value_StringValue)
	if !isString {
		return "", false, p.field("filter_metadata").key("envoy.lb").field("hash_key").errorf("want a string")
	}
	return str.StringValue, true, nil
}
