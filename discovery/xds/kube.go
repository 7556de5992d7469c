package xds

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
	"github.com/meshlet-dev/meshlet/lb"
)

// ServiceInput is everything one Service translates from.
type ServiceInput struct {
	Service *corev1.Service
	// Slices are the Service's EndpointSlices; slices of other services
	// (by namespace and the kubernetes.io/service-name label) are ignored.
	Slices []*discoveryv1.EndpointSlice
	// Nodes by name give endpoints their region, zone (when the endpoint
	// has none) and sub-zone through the endpoint's nodeName.
	Nodes map[string]*corev1.Node
	// MeshedPods are the pods that run a meshlet sidecar (their
	// meshlet.io/status annotation), matched through the endpoint's
	// targetRef, with the SPIFFE ID each must present ("" names none).
	MeshedPods map[types.NamespacedName]string
	// Plaintext, when set, says which container ports of a meshed pod its
	// PeerAuthentication sets to DISABLE: clients reach those in
	// plaintext, as Istio's auto mTLS does, so their endpoints carry no
	// meshed metadata.
	Plaintext func(pod types.NamespacedName, port uint16) bool
	// ClusterDomain defaults to DefaultClusterDomain.
	ClusterDomain string
}

// ServiceCluster is one translated Service port.
type ServiceCluster struct {
	Service  types.NamespacedName
	Port     int32
	PortName string
	// Cluster is an EDS cluster named ClusterName(host, Port) that takes
	// its endpoints over ADS.
	Cluster *clusterv3.Cluster
	// LoadAssignment has every endpoint at priority 0 (see FailoverLabels).
	LoadAssignment *endpointv3.ClusterLoadAssignment
	// FailoverLabels, from meshlet.io/failover-labels, are what
	// AssignFailover orders priorities by for each client; nil: none.
	FailoverLabels []string
}

// TranslateService translates a Service into one ServiceCluster per TCP
// port, in the order of spec.ports. An ExternalName Service has no
// endpoints and gives none; UDP and SCTP ports, FQDN slices, slice ports
// without a number and endpoints without an IP address are skipped.
// Endpoints:
//
//   - address: the endpoint's first address with the slice port matching
//     the Service port's name;
//   - locality: zone from the endpoint's zone, else from its Node's
//     topology.kubernetes.io/zone; region and sub-zone from the Node's
//     topology.kubernetes.io/region and topology.istio.io/subzone;
//   - health: ready (unset counts as ready) -> HEALTHY, else serving (unset
//     counts as serving) and terminating -> DRAINING, else UNHEALTHY; an
//     address in several slices keeps its healthiest entry;
//   - weight 1; each locality's weight is its number of endpoints;
//   - filter_metadata["meshlet.io"].meshed and .identity for pods in
//     MeshedPods, but on a port Plaintext names.
//
// The Service's annotations (ANNOTATIONS.md) set the balancing policy,
// zone-aware or locality-weighted balancing, the overprovisioning factor,
// outlier detection, the connect timeout and, in the cluster's metadata,
// the route timeout and retry policy; a port whose appProtocol (or name
// prefix) is http2, grpc or h2c is reached over HTTP/2. A bad annotation
// is an *AnnotationError and nothing is translated.
func TranslateService(in ServiceInput) ([]ServiceCluster, error) {
	svc := in.Service
	if svc == nil {
		return nil, errors.New("xds: translate: no service")
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, nil
	}
	set, err := parseAnnotations(svc)
	if err != nil {
		return nil, err
	}
	host := ServiceHost(key, in.ClusterDomain)
	own := serviceSlices(key, in.Slices)
	addrs := clusterIPs(svc)
	var out []ServiceCluster
	for _, sp := range svc.Spec.Ports {
		if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		name := ClusterName(host, sp.Port)
		cla := loadAssignment(name, sp.Name, own, in, set)
		c, err := buildCluster(name, host, sp, addrs, set)
		if err != nil {
			return nil, fmt.Errorf("xds: service %s: port %d: %w", key, sp.Port, err)
		}
		out = append(out, ServiceCluster{Service: key, Port: sp.Port, PortName: sp.Name, Cluster: c,
			LoadAssignment: cla, FailoverLabels: set.failover})
	}
	return out, nil
}

// serviceSlices returns the IP slices of svc, sorted by name so that the
// output does not depend on the informer's order.
func serviceSlices(svc types.NamespacedName, all []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, s := range all {
		if s == nil || s.Namespace != svc.Namespace || s.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// clusterIPs returns the Service's cluster IPs (none when headless).
func clusterIPs(svc *corev1.Service) []string {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []string
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, a.String())
		}
	}
	return out
}

// endpoint is one endpoint of a Service port, before grouping.
type endpoint struct {
	addr     netip.AddrPort
	locality lb.Locality
	health   corev3.HealthStatus
	meshed   bool
	identity string
}

// healthRank orders health for de-duplication (lower is better).
func healthRank(h corev3.HealthStatus) int {
	switch h {
	case corev3.HealthStatus_HEALTHY:
		return 0
	case corev3.HealthStatus_DRAINING:
		return 1
	}
	return 2
}

// loadAssignment collects the endpoints of the Service port named
// portName into a ClusterLoadAssignment grouped by locality.
func loadAssignment(name, portName string, own []*discoveryv1.EndpointSlice, in ServiceInput, set serviceSettings) *endpointv3.ClusterLoadAssignment {
	byAddr := map[netip.AddrPort]endpoint{}
	for _, s := range own {
		port, ok := slicePort(s, portName)
		if !ok {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			ip, err := netip.ParseAddr(e.Addresses[0])
			if err != nil {
				continue
			}
			ep := endpoint{
				addr:     netip.AddrPortFrom(ip.Unmap(), port),
				locality: endpointLocality(e, in.Nodes),
				health:   endpointHealth(e.Conditions),
			}
			var key types.NamespacedName
			key, ep.identity, ep.meshed = podMeshed(e.TargetRef, s.Namespace, in.MeshedPods)
			if ep.meshed && in.Plaintext != nil && in.Plaintext(key, port) {
				ep.identity, ep.meshed = "", false
			}
			if old, dup := byAddr[ep.addr]; dup && healthRank(old.health) <= healthRank(ep.health) {
				continue
			}
			byAddr[ep.addr] = ep
		}
	}
	groups := map[lb.Locality][]endpoint{}
	for _, ep := range byAddr {
		groups[ep.locality] = append(groups[ep.locality], ep)
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	if set.opf != 0 {
		cla.Policy = &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(set.opf)}
	}
	locs := make([]lb.Locality, 0, len(groups))
	for l := range groups {
		locs = append(locs, l)
	}
	slices.SortFunc(locs, lb.Locality.Compare)
	for _, l := range locs {
		eps := groups[l]
		slices.SortFunc(eps, func(a, b endpoint) int { return a.addr.Compare(b.addr) })
		g := &endpointv3.LocalityLbEndpoints{LoadBalancingWeight: wrapperspb.UInt32(uint32(len(eps)))}
		if l != (lb.Locality{}) {
			g.Locality = &corev3.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}
		}
		for _, ep := range eps {
			g.LbEndpoints = append(g.LbEndpoints, lbEndpoint(ep))
		}
		cla.Endpoints = append(cla.Endpoints, g)
	}
	return cla
}

// slicePort finds the slice's TCP port named name ("" for the unnamed
// port of a single-port Service).
func slicePort(s *discoveryv1.EndpointSlice, name string) (uint16, bool) {
	for _, p := range s.Ports {
		pn := ""
		if p.Name != nil {
			pn = *p.Name
		}
		if pn != name || (p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP) || p.Port == nil {
			continue
		}
		if *p.Port < 1 || *p.Port > 65535 {
			return 0, false
		}
		return uint16(*p.Port), true
	}
	return 0, false
}

// endpointLocality reads the endpoint's zone, else its Node's labels.
func endpointLocality(e discoveryv1.Endpoint, nodes map[string]*corev1.Node) lb.Locality {
	var l lb.Locality
	if e.NodeName != nil {
		if n := nodes[*e.NodeName]; n != nil {
			l = lb.Locality{Region: n.Labels[lb.LabelRegion], Zone: n.Labels[lb.LabelZone], SubZone: n.Labels[lb.LabelSubZone]}
		}
	}
	if e.Zone != nil && *e.Zone != "" {
		l.Zone = *e.Zone
	}
	return l
}

// endpointHealth maps the endpoint conditions, reading unset ready and
// serving as true and unset terminating as false, as the API says.
func endpointHealth(c discoveryv1.EndpointConditions) corev3.HealthStatus {
	ready := c.Ready == nil || *c.Ready
	serving := c.Serving == nil || *c.Serving
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case ready:
		return corev3.HealthStatus_HEALTHY
	case serving && terminating:
		return corev3.HealthStatus_DRAINING
	}
	return corev3.HealthStatus_UNHEALTHY
}

// podMeshed names the endpoint's target pod and says whether it is
// meshed, and its SPIFFE ID.
func podMeshed(ref *corev1.ObjectReference, sliceNamespace string, meshed map[types.NamespacedName]string) (types.NamespacedName, string, bool) {
	if ref == nil || (ref.Kind != "" && ref.Kind != "Pod") {
		return types.NamespacedName{}, "", false
	}
	key := types.NamespacedName{Namespace: cmp.Or(ref.Namespace, sliceNamespace), Name: ref.Name}
	id, ok := meshed[key]
	return key, id, ok
}

// lbEndpoint renders one endpoint.
func lbEndpoint(ep endpoint) *endpointv3.LbEndpoint {
	lbe := &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address:       ep.addr.Addr().String(),
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(ep.addr.Port())},
			}}},
		}},
		HealthStatus:        ep.health,
		LoadBalancingWeight: wrapperspb.UInt32(1),
	}
	if ep.meshed {
		fields := map[string]*structpb.Value{meshmeta.MeshedField: structpb.NewBoolValue(true)}
		if ep.identity != "" {
			fields[meshmeta.IdentityField] = structpb.NewStringValue(ep.identity)
		}
		lbe.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{meshmeta.MetadataNamespace: {Fields: fields}}}
	}
	return lbe
}

// edsConfig is where an EDS cluster takes its endpoints from: ADS.
func edsConfig(name string) *clusterv3.Cluster_EdsClusterConfig {
	return &clusterv3.Cluster_EdsClusterConfig{
		EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			ResourceApiVersion:    corev3.ApiVersion_V3,
		},
		ServiceName: name,
	}
}

// buildCluster renders the cluster of one Service port.
func buildCluster(name, host string, sp corev1.ServicePort, addrs []string, set serviceSettings) (*clusterv3.Cluster, error) {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     edsConfig(name),
		LbPolicy:             set.policy,
		ConnectTimeout:       set.connectTimeout,
		OutlierDetection:     set.outlier,
	}
	switch {
	case set.localityWeighted:
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{LocalityConfigSpecifier: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
			LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{}}}
	case set.zoneAware != nil:
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{LocalityConfigSpecifier: &clusterv3.Cluster_CommonLbConfig_ZoneAwareLbConfig_{
			ZoneAwareLbConfig: set.zoneAware}}
	}
	if portHTTP2(sp) {
		opts, err := anypb.New(&httpv3.HttpProtocolOptions{UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})
		if err != nil {
			return nil, fmt.Errorf("protocol options: %w", err)
		}
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
	}
	svc := map[string]any{meshmeta.ServiceField: host, meshmeta.PortField: float64(sp.Port)}
	if len(addrs) > 0 {
		list := make([]any, len(addrs))
		for i, a := range addrs {
			list[i] = a
		}
		svc[meshmeta.AddressesField] = list
	}
	md, err := structpb.NewStruct(svc)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	c.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{meshmeta.MetadataNamespace: md}}
	if set.timeout != nil || set.retry != nil {
		ra, err := anypb.New(&routev3.RouteAction{Timeout: set.timeout, RetryPolicy: set.retry})
		if err != nil {
			return nil, fmt.Errorf("route metadata: %w", err)
		}
		c.Metadata.TypedFilterMetadata = map[string]*anypb.Any{meshmeta.RouteMetadataKey: ra}
	}
	return c, nil
}

// portHTTP2 says whether a Service port speaks HTTP/2 to its endpoints:
// appProtocol http2, grpc, h2c or kubernetes.io/h2c, or without one a
// name with such a prefix (Istio's convention, grpc-web excepted).
func portHTTP2(sp corev1.ServicePort) bool {
	if sp.AppProtocol != nil {
		switch strings.ToLower(*sp.AppProtocol) {
		case "http2", "grpc", "h2c", "kubernetes.io/h2c":
			return true
		}
		return false
	}
	n := strings.ToLower(sp.Name)
	if strings.HasPrefix(n, "grpc-web") {
		return false
	}
	for _, p := range []string{"http2", "grpc", "h2c"} {
		if n == p || strings.HasPrefix(n, p+"-") {
			return true
		}
	}
	return false
}
