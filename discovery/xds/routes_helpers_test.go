package xds

import (
	"regexp"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshlet-dev/meshlet/discovery"
	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
)

// t0 is the creation time of test routes unless they say otherwise.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// svcRef is a Service parentRef; ns "" leaves the namespace unset (the
// route's), port 0 unset.
func svcRef(ns, name string, port int32) gatewayv1.ParentReference {
	ref := gatewayv1.ParentReference{Group: ptr(gatewayv1.Group("")), Kind: ptr(gatewayv1.Kind("Service")), Name: gatewayv1.ObjectName(name)}
	if ns != "" {
		ref.Namespace = ptr(gatewayv1.Namespace(ns))
	}
	if port != 0 {
		ref.Port = ptr(port)
	}
	return ref
}

// httpRoute is an HTTPRoute created at t0 plus age seconds.
func httpRoute(ns, name string, age int, parents []gatewayv1.ParentReference, rules ...gatewayv1.HTTPRouteRule) *gatewayv1.HTTPRoute {
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec:       gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: parents}, Rules: rules},
	}
}

// to is a backendRef to a Service port (ns "": the route's), weight nil
// for the default.
func to(ns, name string, port int32, weight *int32) gatewayv1.HTTPBackendRef {
	b := gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{Weight: weight,
		BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(name), Port: ptr(port)}}}
	if ns != "" {
		b.Namespace = ptr(gatewayv1.Namespace(ns))
	}
	return b
}

// rule is a rule with matches forwarding to backends.
func rule(matches []gatewayv1.HTTPRouteMatch, backends ...gatewayv1.HTTPBackendRef) gatewayv1.HTTPRouteRule {
	return gatewayv1.HTTPRouteRule{Matches: matches, BackendRefs: backends}
}

func pathMatch(typ gatewayv1.PathMatchType, v string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: ptr(typ), Value: ptr(v)}}
}

// grpcRoute is a GRPCRoute created at t0 plus age seconds.
func grpcRoute(ns, name string, age int, parents []gatewayv1.ParentReference, rules ...gatewayv1.GRPCRouteRule) *gatewayv1.GRPCRoute {
	return &gatewayv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec:       gatewayv1.GRPCRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: parents}, Rules: rules},
	}
}

// gto is a GRPCRoute backendRef to a Service port, as to.
func gto(ns, name string, port int32, weight *int32) gatewayv1.GRPCBackendRef {
	return gatewayv1.GRPCBackendRef{BackendRef: to(ns, name, port, weight).BackendRef}
}

// grule is a GRPCRoute rule with matches forwarding to backends.
func grule(matches []gatewayv1.GRPCRouteMatch, backends ...gatewayv1.GRPCBackendRef) gatewayv1.GRPCRouteRule {
	return gatewayv1.GRPCRouteRule{Matches: matches, BackendRefs: backends}
}

// method is a GRPCRoute method match; "" leaves a part unset.
func method(typ gatewayv1.GRPCMethodMatchType, service, name string) gatewayv1.GRPCRouteMatch {
	mm := &gatewayv1.GRPCMethodMatch{Type: ptr(typ)}
	if service != "" {
		mm.Service = ptr(service)
	}
	if name != "" {
		mm.Method = ptr(name)
	}
	return gatewayv1.GRPCRouteMatch{Method: mm}
}

// routeServer is a synced Server holding services and routes (HTTPRoutes
// and GRPCRoutes), rebuilt once.
func routeServer(t *testing.T, services []*corev1.Service, routes ...any) *Server {
	t.Helper()
	s := NewServer(Options{Logger: quiet})
	for _, svc := range services {
		s.UpsertService(svc)
	}
	for _, r := range routes {
		switch r := r.(type) {
		case *gatewayv1.HTTPRoute:
			s.UpsertHTTPRoute(r)
		case *gatewayv1.GRPCRoute:
			s.UpsertGRPCRoute(r)
		default:
			t.Fatalf("routeServer: %T is not a route", r)
		}
	}
	s.SetSynced()
	s.rebuild()
	return s
}

// firstMatch is the name of the route a request meets first, as the
// sidecar (and Envoy) walk a table: prefix, exact path, path-separated
// prefix and whole-path RE2 matches, then every header, exact or RE2;
// "" when none matches.
func firstMatch(t *testing.T, rs []*routev3.Route, path string, headers map[string]string) string {
	t.Helper()
	full := func(re, v string) bool { return regexp.MustCompile("^(?:" + re + ")$").MatchString(v) }
	for _, r := range rs {
		m := r.GetMatch()
		var ok bool
		switch ps := m.GetPathSpecifier().(type) {
		case *routev3.RouteMatch_Prefix:
			ok = strings.HasPrefix(path, ps.Prefix)
		case *routev3.RouteMatch_Path:
			ok = path == ps.Path
		case *routev3.RouteMatch_PathSeparatedPrefix:
			ok = path == ps.PathSeparatedPrefix || strings.HasPrefix(path, ps.PathSeparatedPrefix+"/")
		case *routev3.RouteMatch_SafeRegex:
			ok = full(ps.SafeRegex.GetRegex(), path)
		default:
			t.Fatalf("route %s: path specifier %T", r.GetName(), ps)
		}
		for _, h := range m.GetHeaders() {
			v, has := headers[h.GetName()]
			sm := h.GetStringMatch()
			switch {
			case !has:
				ok = false
			case sm.GetSafeRegex() != nil:
				ok = ok && full(sm.GetSafeRegex().GetRegex(), v)
			default:
				ok = ok && v == sm.GetExact()
			}
		}
		if ok {
			return r.GetName()
		}
	}
	return ""
}

// groupFor builds the snapshot of the group of a sidecar whose node id
// is nodeID, and returns its clusters and RouteConfigurations by name.
func groupFor(t *testing.T, s *Server, nodeID string) (map[string]*clusterv3.Cluster, map[string]*routev3.RouteConfiguration) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &proxyState{}
	policy, wp := s.inboundPolicyLocked(nodeID)
	key := groupKey{locality: s.localityLocked(nodeID, p), consumerNS: s.consumerNamespaceLocked(nodeID, p), policy: policy}
	g := s.gen.buildGroup(key, s.results, s.routeResults, wp.ext)
	cs := map[string]*clusterv3.Cluster{}
	for name, r := range g.snap.GetResources(resource.ClusterType) {
		cs[name] = r.(*clusterv3.Cluster)
	}
	rcs := map[string]*routev3.RouteConfiguration{}
	for name, r := range g.snap.GetResources(resource.RouteType) {
		rc := r.(*routev3.RouteConfiguration)
		if err := rc.ValidateAll(); err != nil {
			t.Fatalf("route configuration %s does not validate: %v", name, err)
		}
		// Nothing outside what the sidecar reads (it refuses the rest).
		if _, err := discovery.TranslateRouteConfiguration(rc); err != nil {
			t.Fatalf("the sidecar refuses route configuration %s: %v", name, err)
		}
		rcs[name] = rc
	}
	return cs, rcs
}

// routeConfigOf returns the route_config a cluster's metadata names, "" none.
func routeConfigOf(c *clusterv3.Cluster) string {
	return c.GetMetadata().GetFilterMetadata()[meshmeta.MetadataNamespace].GetFields()[meshmeta.RouteConfigField].GetStringValue()
}

// routesOf returns the only virtual host's routes of rc.
func routesOf(t *testing.T, rc *routev3.RouteConfiguration) []*routev3.Route {
	t.Helper()
	if rc == nil {
		t.Fatal("no route configuration")
	}
	if len(rc.GetVirtualHosts()) != 1 || rc.GetVirtualHosts()[0].GetName() != rc.GetName() ||
		len(rc.GetVirtualHosts()[0].GetDomains()) != 1 || rc.GetVirtualHosts()[0].GetDomains()[0] != "*" {
		t.Fatalf("route configuration %s: want one virtual host %[1]s for \"*\", got %v", rc.GetName(), rc.GetVirtualHosts())
	}
	return rc.GetVirtualHosts()[0].GetRoutes()
}

func routeNames(rs []*routev3.Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetName())
	}
	return out
}

// protoEq fails unless got and want are the same message.
func protoEq(t *testing.T, what string, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Fatalf("%s:\ngot  %s\nwant %s", what, prototext.Format(got), prototext.Format(want))
	}
}
