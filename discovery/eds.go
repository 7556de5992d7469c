package discovery

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
	"github.com/meshlet-dev/meshlet/lb"
)

// The lb.Endpoint.Metadata keys of what an endpoint's
// filter_metadata["meshlet.io"] says (meshmeta.MeshedField,
// meshmeta.IdentityField).
const (
	// MeshedMetadataKey is the lb.Endpoint.Metadata key set to "true" for
	// a meshed endpoint.
	MeshedMetadataKey = config.MetadataMeshed
	// IdentityMetadataKey is the lb.Endpoint.Metadata key holding a meshed
	// endpoint's expected SPIFFE ID.
	IdentityMetadataKey = config.MetadataIdentity
)

// edsClusterFields are the Cluster fields an EDS cluster may set besides
// those of a static one (clusterFields).
var edsClusterFields = []string{"type", "eds_cluster_config"}

// TranslateEDSCluster translates an Envoy v3 Cluster of type EDS, as
// received over CDS, into the data plane's cluster without endpoints (see
// TranslateEDSLoadAssignment). The cluster goes through TranslateCluster's
// code; eds_cluster_config must take its endpoints from ADS, and
// load_assignment must be unset. Errors name the field by its Envoy JSON
// path, as TranslateCluster's do.
func TranslateEDSCluster(c *clusterv3.Cluster) (config.Cluster, error) {
	if err := checkEDSCluster(c); err != nil {
		return config.Cluster{}, fmt.Errorf("discovery: cluster %q: %w", c.GetName(), err)
	}
	static := proto.Clone(c).(*clusterv3.Cluster)
	static.ClusterDiscoveryType = nil // STATIC, which TranslateCluster reads
	static.EdsClusterConfig = nil
	return TranslateCluster(static)
}

// checkEDSCluster checks what TranslateEDSCluster removes before handing
// the cluster to TranslateCluster.
func checkEDSCluster(c *clusterv3.Cluster) error {
	var root path
	if c == nil {
		return root.errorf("no cluster")
	}
	if t := c.GetType(); t != clusterv3.Cluster_EDS {
		return root.field("type").errorf("%s not supported over CDS (want EDS)", t)
	}
	if c.GetLoadAssignment() != nil {
		return root.field("load_assignment").errorf("not supported on an EDS cluster (endpoints come over EDS)")
	}
	eds := c.GetEdsClusterConfig()
	ep := root.field("eds_cluster_config")
	if eds == nil {
		return ep.errorf("required for an EDS cluster")
	}
	if err := rejectUnsupported(ep, eds, "eds_config", "service_name"); err != nil {
		return err
	}
	src := eds.GetEdsConfig()
	sp := ep.field("eds_config")
	if src == nil {
		return sp.errorf("required (want ads: {})")
	}
	if err := rejectUnsupported(sp, src, "ads", "resource_api_version", "initial_fetch_timeout"); err != nil {
		return err
	}
	if src.GetAds() == nil {
		return sp.field("ads").errorf("required: meshlet receives endpoints over ADS only")
	}
	if v := src.GetResourceApiVersion(); v != corev3.ApiVersion_V3 && v != corev3.ApiVersion_AUTO {
		return sp.field("resource_api_version").errorf("%s not supported (want V3)", v)
	}
	return nil
}

// EDSServiceName returns the name of the ClusterLoadAssignment an EDS
// cluster takes its endpoints from: eds_cluster_config.service_name, or the
// cluster's name when that is empty.
func EDSServiceName(c *clusterv3.Cluster) string {
	if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n
	}
	return c.GetName()
}

// LoadAssignment is a translated ClusterLoadAssignment: what an EDS
// response sets in a cluster.
type LoadAssignment struct {
	// Endpoints carry MeshedMetadataKey for meshed endpoints.
	Endpoints []lb.Endpoint
	// Priorities is the number of declared priority levels.
	Priorities int
	// OverprovisioningFactor in percent (default 140).
	OverprovisioningFactor uint32
	// WeightedPriorityHealth is Envoy's policy flag of that name.
	WeightedPriorityHealth bool
}

// TranslateEDSLoadAssignment translates an EDS ClusterLoadAssignment with
// TranslateClusterLoadAssignment (whose endpoints carry MeshedMetadataKey
// and IdentityMetadataKey from filter_metadata["meshlet.io"]).
func TranslateEDSLoadAssignment(cla *endpointv3.ClusterLoadAssignment) (LoadAssignment, error) {
	eps, prios, opf, wph, err := TranslateClusterLoadAssignment(cla)
	if err != nil {
		return LoadAssignment{}, err
	}
	return LoadAssignment{Endpoints: eps, Priorities: prios, OverprovisioningFactor: opf, WeightedPriorityHealth: wph}, nil
}

// ApplyTo sets the endpoints and priority settings of c from a.
func (a LoadAssignment) ApplyTo(c *config.Cluster) {
	c.Endpoints = a.Endpoints
	c.Priorities = a.Priorities
	c.OverprovisioningFactor = a.OverprovisioningFactor
	c.WeightedPriorityHealth = a.WeightedPriorityHealth
}

// endpointMeshed reads filter_metadata["meshlet.io"]: meshed (false when
// absent) and identity (a SPIFFE ID, only with meshed: true).
func endpointMeshed(p path, md *corev3.Metadata) (meshed bool, identity string, err error) {
	s, ok := md.GetFilterMetadata()[meshmeta.MetadataNamespace]
	if !ok {
		return false, "", nil
	}
	sp := p.field("filter_metadata").key(meshmeta.MetadataNamespace)
	for _, k := range slices.Sorted(maps.Keys(s.GetFields())) {
		v := s.GetFields()[k]
		switch k {
		case meshmeta.MeshedField:
			b, isBool := v.GetKind().(*structpb.Value_BoolValue)
			if !isBool {
				return false, "", sp.field(k).errorf("want a bool")
			}
			meshed = b.BoolValue
		case meshmeta.IdentityField:
			str, isString := v.GetKind().(*structpb.Value_StringValue)
			if !isString {
				return false, "", sp.field(k).errorf("want a string (a SPIFFE ID)")
			}
			id, err := spiffeid.FromString(str.StringValue)
			if err != nil {
				return false, "", sp.field(k).errorf("%q: %v", str.StringValue, err)
			}
			identity = id.String()
		default:
			return false, "", sp.field(k).errorf("not supported by meshlet (want %s or %s)", meshmeta.MeshedField, meshmeta.IdentityField)
		}
	}
	if identity != "" && !meshed {
		return false, "", sp.field(meshmeta.IdentityField).errorf("set on an endpoint that is not meshed (want %s: true)", meshmeta.MeshedField)
	}
	return meshed, identity, nil
}

// ServiceRoutes returns the outbound routes the control plane attached to
// a cluster: one per cluster IP in filter_metadata["meshlet.io"]
// (service, port, addresses), matching that IP and port, with the timeout
// and retry policy of the RouteAction at typed_filter_metadata
// ["meshlet.io/route"] (defaults config.DefaultRouteTimeout and
// DefaultRetryPolicy), and the route configuration named by its
// route_config (whose rules the caller fills in from RDS: see
// TranslateRouteConfiguration). A cluster without addresses (a headless service, the
// local cluster) has no routes. Errors name the metadata field.
func ServiceRoutes(c *clusterv3.Cluster) ([]config.Route, error) {
	routes, err := serviceRoutes(path("metadata"), c)
	if err != nil {
		return nil, fmt.Errorf("discovery: cluster %q: %w", c.GetName(), err)
	}
	return routes, nil
}

func serviceRoutes(p path, c *clusterv3.Cluster) ([]config.Route, error) {
	md := c.GetMetadata()
	timeout, retry := config.DefaultRouteTimeout, DefaultRetryPolicy()
	if a, ok := md.GetTypedFilterMetadata()[meshmeta.RouteMetadataKey]; ok {
		rp := p.field("typed_filter_metadata").key(meshmeta.RouteMetadataKey)
		var ra routev3.RouteAction
		if err := a.UnmarshalTo(&ra); err != nil {
			return nil, rp.field("@type").errorf("%s not supported (want type.googleapis.com/%s)",
				a.GetTypeUrl(), (&ra).ProtoReflect().Descriptor().FullName())
		}
		if err := rejectUnsupported(rp, &ra, "timeout", "retry_policy"); err != nil {
			return nil, err
		}
		var err error
		if timeout, err = optDuration(rp.field("timeout"), ra.GetTimeout(), timeout); err != nil {
			return nil, err
		}
		if ra.GetRetryPolicy() != nil {
			if retry, err = translateRetryPolicy(rp.field("retry_policy"), ra.GetRetryPolicy()); err != nil {
				return nil, err
			}
		}
	}
	s, ok := md.GetFilterMetadata()[meshmeta.MetadataNamespace]
	if !ok {
		return nil, nil
	}
	sp := p.field("filter_metadata").key(meshmeta.MetadataNamespace)
	var port uint16
	var addrs []netip.Addr
	var routeConfig string
	// Sorted, so that the first error is always the same one.
	for _, k := range slices.Sorted(maps.Keys(s.GetFields())) {
		v := s.GetFields()[k]
		switch k {
		case meshmeta.ServiceField:
			if _, ok := v.GetKind().(*structpb.Value_StringValue); !ok {
				return nil, sp.field(k).errorf("want a string")
			}
		case meshmeta.PortField:
			n, ok := v.GetKind().(*structpb.Value_NumberValue)
			if !ok || n.NumberValue != math.Trunc(n.NumberValue) || n.NumberValue < 1 || n.NumberValue > math.MaxUint16 {
				return nil, sp.field(k).errorf("want a port number (1-65535)")
			}
			port = uint16(n.NumberValue)
		case meshmeta.AddressesField:
			list, ok := v.GetKind().(*structpb.Value_ListValue)
			if !ok {
				return nil, sp.field(k).errorf("want a list of IP addresses")
			}
			for i, e := range list.ListValue.GetValues() {
				ip, err := netip.ParseAddr(e.GetStringValue())
				if err != nil {
					return nil, sp.field(k).index(i).errorf("%q is not an IP address", e.GetStringValue())
				}
				addrs = append(addrs, ip)
			}
		case meshmeta.RouteConfigField:
			str, ok := v.GetKind().(*structpb.Value_StringValue)
			if !ok || str.StringValue == "" {
				return nil, sp.field(k).errorf("want the name of a route configuration")
			}
			routeConfig = str.StringValue
		default:
			return nil, sp.field(k).errorf("not supported by meshlet (want %s, %s, %s or %s)", meshmeta.ServiceField, meshmeta.PortField,
				meshmeta.AddressesField, meshmeta.RouteConfigField)
		}
	}
	if len(addrs) > 0 && port == 0 {
		return nil, sp.field(meshmeta.PortField).errorf("required with %s", meshmeta.AddressesField)
	}
	routes := make([]config.Route, 0, len(addrs))
	for _, ip := range addrs {
		routes = append(routes, config.Route{
			Name:        c.GetName(),
			Destination: netip.AddrPortFrom(ip, port).String(),
			Cluster:     c.GetName(),
			Timeout:     timeout,
			Retry:       retry,
			RouteConfig: routeConfig,
		})
	}
	return routes, nil
}
