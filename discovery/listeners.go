package discovery

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/authz"
	"github.com/meshlet-dev/meshlet/config"
)

var (
	listenerKeys = []string{"name", "address", "direction", "original_destination", "protocol",
		"detection_timeout", "tcp_idle_timeout", "stream_idle_timeout", "request_headers_timeout", "server_first_ports", "common_http_protocol_options", "routes", "mtls", "rbac"}
	peerAuthKeys = []string{"mode", "principals", "namespaces", "trust_domains"}
	routeKeys    = []string{"name", "match", "cluster", "timeout", "retry_policy", "route_config"}
	// httpOnlyRouteKeys make no sense on a listener that proxies opaque TCP.
	httpOnlyRouteKeys = []string{"timeout", "retry_policy", "route_config"}
)

// decodeListeners reads the listeners list of the static file.
func decodeListeners(top *object) ([]config.Listener, error) {
	list, err := top.list("listeners")
	if err != nil {
		return nil, err
	}
	out := make([]config.Listener, 0, len(list))
	for i, raw := range list {
		l, err := decodeListener(path("listeners").index(i), raw)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// decodeListener reads one listener: defaults outbound, protocol auto,
// config.DefaultDetectionTimeout, config.DefaultTCPIdleTimeout,
// config.DefaultStreamIdleTimeout and config.DefaultRequestHeadersTimeout
// ("0s" disables them, as 0 does Envoy's) and the address as name.
func decodeListener(p path, raw json.RawMessage) (config.Listener, error) {
	l := config.Listener{Direction: config.Outbound, Protocol: config.ProtocolAuto, DetectionTimeout: config.DefaultDetectionTimeout,
		TCPIdleTimeout: config.DefaultTCPIdleTimeout, StreamIdleTimeout: config.DefaultStreamIdleTimeout,
		RequestHeadersTimeout: config.DefaultRequestHeadersTimeout}
	o, err := decodeObject(p, raw, listenerKeys...)
	if err != nil {
		return l, err
	}
	var direction, protocol string
	for _, f := range []struct {
		key string
		dst *string
	}{{"name", &l.Name}, {"address", &l.Address}, {"direction", &direction},
		{"original_destination", &l.OriginalDestination}, {"protocol", &protocol}} {
		if err := o.get(f.key, f.dst); err != nil {
			return l, err
		}
	}
	if l.Address == "" {
		return l, p.field("address").errorf("required")
	}
	if l.Name == "" {
		l.Name = l.Address
	}
	if o.has("direction") {
		l.Direction = config.Direction(direction)
	}
	if o.has("protocol") {
		l.Protocol = config.Protocol(protocol)
	}
	if l.DetectionTimeout, err = nonNegative(o, "detection_timeout", l.DetectionTimeout); err != nil {
		return l, err
	}
	if l.TCPIdleTimeout, err = nonNegative(o, "tcp_idle_timeout", l.TCPIdleTimeout); err != nil {
		return l, err
	}
	if l.StreamIdleTimeout, err = nonNegative(o, "stream_idle_timeout", l.StreamIdleTimeout); err != nil {
		return l, err
	}
	if l.RequestHeadersTimeout, err = nonNegative(o, "request_headers_timeout", l.RequestHeadersTimeout); err != nil {
		return l, err
	}
	if err := o.get("server_first_ports", &l.ServerFirstPorts); err != nil {
		return l, err
	}
	for i, port := range l.ServerFirstPorts {
		if port == 0 {
			return l, p.field("server_first_ports").index(i).errorf("0 is not a port")
		}
	}
	if o.has("common_http_protocol_options") {
		if l.MaxHeadersCount, err = decodeListenerHTTPOptions(p.field("common_http_protocol_options"), o.raw("common_http_protocol_options"), l.Protocol); err != nil {
			return l, err
		}
	}
	if o.has("mtls") {
		if l.MTLS, err = decodeInboundMTLS(p.field("mtls"), o.raw("mtls")); err != nil {
			return l, err
		}
	}
	if o.has("rbac") {
		if l.Direction != config.Inbound {
			return l, p.field("rbac").errorf("only an inbound listener authorizes")
		}
		if l.Authz, err = decodeRBAC(p.field("rbac"), o.raw("rbac")); err != nil {
			return l, err
		}
	}
	routes, err := o.list("routes")
	if err != nil {
		return l, err
	}
	for i, raw := range routes {
		r, err := decodeRoute(p.field("routes").index(i), raw, l.Protocol)
		if err != nil {
			return l, err
		}
		l.Routes = append(l.Routes, r)
	}
	return l, nil
}

// decodeListenerHTTPOptions reads a listener's
// common_http_protocol_options, an Envoy v3 core HttpProtocolOptions as
// on Envoy's HTTP connection manager, of which meshlet takes
// max_headers_count (Envoy's rule: at least 1; unset,
// config.DefaultMaxHeadersCount), returned; any other field is an error.
func decodeListenerHTTPOptions(p path, raw json.RawMessage, protocol config.Protocol) (uint32, error) {
	if protocol == config.ProtocolTCP {
		return 0, p.errorf("HTTP only, but the listener's protocol is tcp")
	}
	var o corev3.HttpProtocolOptions
	if err := unmarshalProto(p, raw, &o); err != nil {
		return 0, err
	}
	if err := rejectUnsupported(p, &o, "max_headers_count"); err != nil {
		return 0, err
	}
	if err := validateProto(p, &o); err != nil {
		return 0, err
	}
	return u32(o.GetMaxHeadersCount(), config.DefaultMaxHeadersCount), nil
}

// decodeRoute reads one route: timeout config.DefaultRouteTimeout unless
// set ("0s" disables it), retry_policy an Envoy v3 RetryPolicy or
// DefaultRetryPolicy, route_config an Envoy v3 RouteConfiguration whose
// rules then route its HTTP requests (TranslateRouteConfiguration; its
// clusters need not exist: a request for a missing one gets NC).
func decodeRoute(p path, raw json.RawMessage, protocol config.Protocol) (config.Route, error) {
	r := config.Route{Timeout: config.DefaultRouteTimeout}
	o, err := decodeObject(p, raw, routeKeys...)
	if err != nil {
		return r, err
	}
	if err := o.get("name", &r.Name); err != nil {
		return r, err
	}
	if err := o.get("cluster", &r.Cluster); err != nil {
		return r, err
	}
	if r.Cluster == "" {
		return r, p.field("cluster").errorf("required")
	}
	m, err := decodeObject(p.field("match"), o.raw("match"), "destination", "hosts")
	if err != nil {
		return r, err
	}
	if err := m.get("destination", &r.Destination); err != nil {
		return r, err
	}
	if err := m.get("hosts", &r.Hosts); err != nil {
		return r, err
	}
	for i, h := range r.Hosts {
		if h == "" {
			return r, m.p.field("hosts").index(i).errorf("empty host name")
		}
	}
	if protocol == config.ProtocolTCP {
		if len(r.Hosts) > 0 {
			return r, m.p.field("hosts").errorf("a tcp listener cannot match HTTP hosts")
		}
		for _, k := range httpOnlyRouteKeys {
			if o.has(k) {
				return r, p.field(k).errorf("HTTP only, but the listener's protocol is tcp")
			}
		}
	}
	if r.Timeout, err = nonNegative(o, "timeout", r.Timeout); err != nil {
		return r, err
	}
	r.Retry = DefaultRetryPolicy()
	if o.has("retry_policy") {
		rp := p.field("retry_policy")
		var policy routev3.RetryPolicy
		if err := unmarshalProto(rp, o.raw("retry_policy"), &policy); err != nil {
			return r, err
		}
		if r.Retry, err = translateRetryPolicy(rp, &policy); err != nil {
			return r, err
		}
	}
	if o.has("route_config") {
		rp := p.field("route_config")
		var rc routev3.RouteConfiguration
		if err := unmarshalProto(rp, o.raw("route_config"), &rc); err != nil {
			return r, err
		}
		rules, err := translateRouteConfiguration(&rc)
		if err != nil {
			return r, rp.wrap(err)
		}
		r.RouteConfig, r.Rules = rc.GetName(), rules
		if r.RouteConfig == "" {
			r.RouteConfig = r.Name
		}
	}
	return r, nil
}

// decodeInboundMTLS reads an inbound listener's mtls section:
//
//	mtls: {mode: STRICT|PERMISSIVE (default PERMISSIVE), principals: [SPIFFE ID],
//	       namespaces: [name], trust_domains: [name],
//	       ports: {"<port>": {mode, principals, namespaces, trust_domains}}}
//
// A port entry's unset mode is the listener's.
func decodeInboundMTLS(p path, raw json.RawMessage) (*config.InboundMTLS, error) {
	o, err := decodeObject(p, raw, append([]string{"ports"}, peerAuthKeys...)...)
	if err != nil {
		return nil, err
	}
	m := &config.InboundMTLS{}
	if m.PeerAuthorization, err = decodePeerAuthorization(o, config.MTLSPermissive); err != nil {
		return nil, err
	}
	var ports map[string]json.RawMessage
	if err := o.get("ports", &ports); err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(ports)) {
		n, err := strconv.ParseUint(k, 10, 16)
		if err != nil || n == 0 {
			return nil, p.field("ports").key(k).errorf("not a port number")
		}
		po, err := decodeObject(p.field("ports").key(k), ports[k], peerAuthKeys...)
		if err != nil {
			return nil, err
		}
		pa, err := decodePeerAuthorization(po, m.Mode)
		if err != nil {
			return nil, err
		}
		if m.Ports == nil {
			m.Ports = map[uint16]config.PeerAuthorization{}
		}
		m.Ports[uint16(n)] = pa
	}
	return m, nil
}

func decodePeerAuthorization(o *object, mode config.MTLSMode) (config.PeerAuthorization, error) {
	pa := config.PeerAuthorization{Mode: mode}
	var m string
	if err := o.get("mode", &m); err != nil {
		return pa, err
	}
	if o.has("mode") {
		pa.Mode = config.MTLSMode(strings.ToUpper(m))
		if pa.Mode != config.MTLSStrict && pa.Mode != config.MTLSPermissive {
			return pa, o.p.field("mode").errorf("%q (want STRICT or PERMISSIVE)", m)
		}
	}
	for _, f := range []struct {
		key string
		dst *[]string
	}{{"principals", &pa.Principals}, {"namespaces", &pa.Namespaces}, {"trust_domains", &pa.TrustDomains}} {
		if err := o.get(f.key, f.dst); err != nil {
			return pa, err
		}
	}
	for i, id := range pa.Principals {
		if _, err := spiffeid.FromString(id); err != nil {
			return pa, o.p.field("principals").index(i).errorf("%q: %v", id, err)
		}
	}
	for i, td := range pa.TrustDomains {
		if _, err := spiffeid.TrustDomainFromString(td); err != nil {
			return pa, o.p.field("trust_domains").index(i).errorf("%q: %v", td, err)
		}
	}
	return pa, nil
}

// decodeRBAC reads an inbound listener's rbac: http and network, lists of
// Envoy RBAC filter configurations (envoy.extensions.filters.http.rbac.v3
// and network.rbac.v3 RBAC, in their JSON form) run in order, as a control
// plane sends them over ECDS.
func decodeRBAC(p path, raw json.RawMessage) (*config.Authz, error) {
	o, err := decodeObject(p, raw, "http", "network")
	if err != nil {
		return nil, err
	}
	a := &config.Authz{}
	httpList, err := o.list("http")
	if err != nil {
		return nil, err
	}
	for i, r := range httpList {
		var m httprbacv3.RBAC
		if err := unmarshalProto(p.field("http").index(i), r, &m); err != nil {
			return nil, err
		}
		f, err := authz.Compile(&m)
		if err != nil {
			return nil, p.field("http").index(i).errorf("%v", err)
		}
		a.HTTP = append(a.HTTP, f)
	}
	netList, err := o.list("network")
	if err != nil {
		return nil, err
	}
	for i, r := range netList {
		var m netrbacv3.RBAC
		if err := unmarshalProto(p.field("network").index(i), r, &m); err != nil {
			return nil, err
		}
		f, err := authz.CompileNetwork(&m)
		if err != nil {
			return nil, p.field("network").index(i).errorf("%v", err)
		}
		a.Network = append(a.Network, f)
	}
	return a, nil
}
