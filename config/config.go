// Package config holds the data plane's resolved configuration: what a
// static config file or xDS translates into and what the data plane runs.
// It is types and validation only, so that the translators (discovery) and
// the data plane share it without depending on each other.
package config

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/authz"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// Defaults that operators know from Envoy and Istio, or that meshlet chose.
const (
	// DefaultConnectTimeout is Envoy's cluster connect_timeout default.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultUpstreamIdleTimeout closes pooled upstream HTTP/1.1
	// connections after this idle time. It is deliberately shorter than
	// the common server keep-alive timeouts (Node.js 5 s, nginx 75 s) so
	// the proxy, not the upstream, closes an idle connection: that avoids
	// the race where a request is sent on a connection the upstream is
	// closing (Envoy's UC 503).
	DefaultUpstreamIdleTimeout = 4 * time.Second
	// DefaultRouteTimeout is Envoy's route timeout default.
	DefaultRouteTimeout = 15 * time.Second
	// DefaultDetectionTimeout bounds protocol sniffing on a new connection.
	DefaultDetectionTimeout = 100 * time.Millisecond
	// DefaultMaxHeadersCount is Envoy's default
	// common_http_protocol_options.max_headers_count: a request with more
	// header lines gets 431.
	DefaultMaxHeadersCount = 100
	// DefaultDrainTimeout is how long a draining sidecar waits for
	// in-flight work (Istio's terminationDrainDuration is 5 s).
	DefaultDrainTimeout = 5 * time.Second
	// DefaultTCPIdleTimeout is Envoy's tcp_proxy idle_timeout default.
	DefaultTCPIdleTimeout = time.Hour
	// DefaultStreamIdleTimeout is Envoy's HTTP connection manager
	// stream_idle_timeout default.
	DefaultStreamIdleTimeout = 5 * time.Minute
	// DefaultRequestHeadersTimeout bounds the wait for an HTTP/1
	// request's head once its first byte arrived. Envoy has no default
	// (request_headers_timeout 0); meshlet bounds a client that trickles
	// its head (slowloris) as net/http servers are usually configured.
	DefaultRequestHeadersTimeout = 30 * time.Second
	// DefaultAccessLogFlushInterval is how often buffered access-log
	// lines are written when access_log.flush_interval is 0 (Envoy's
	// --file-flush-interval-msec is 10 s; a second keeps `kubectl logs`
	// current).
	DefaultAccessLogFlushInterval = time.Second
)

// Well-known ports (Istio's numbers).
const (
	PortOutbound   = 15001
	PortInbound    = 15006
	PortAdmin      = 15000
	PortHealth     = 15021
	PortPrometheus = 15090
)

// Config is the whole data-plane configuration. It is immutable once
// built: the data plane swaps whole Configs.
type Config struct {
	// Node is the sidecar itself.
	Node Node
	// LocalCluster names the cluster that holds the clients of this fleet
	// (Envoy's cluster_manager.local_cluster_name); it enables zone-aware
	// routing for the other clusters. Empty: no zone-aware routing.
	LocalCluster string
	// Admin, Health and Prometheus are listen addresses ("" = off).
	Admin, Health, Prometheus string
	AccessLog                 AccessLog
	// Tracing, when set, starts and joins traces and exports their spans;
	// nil leaves the trace headers to pass through untouched.
	Tracing *Tracing
	// DrainTimeout bounds the graceful drain on SIGTERM or /drain.
	DrainTimeout time.Duration
	// GlobalDownstreamMaxConnections caps the downstream connections open
	// on all listeners together (Envoy's overload manager
	// global_downstream_max_connections): one more is accepted and closed
	// at once, so that an accept storm cannot use up the file descriptors
	// the open connections need. 0 is the default, derived from the
	// process's file descriptor limit (see the data plane's
	// DefaultMaxDownstreamConnections).
	GlobalDownstreamMaxConnections int64
	Listeners                      []Listener
	Clusters                       []Cluster
}

// Node identifies the sidecar and where it runs.
type Node struct {
	ID       string
	Cluster  string
	Locality lb.Locality
}

// Tracing is where the sidecar sends spans and how many requests it
// samples (Istio's meshConfig tracing settings).
type Tracing struct {
	// Endpoint is the OTLP/gRPC collector, host:port, dialled in
	// plaintext (a collector inside the cluster, as Istio's default
	// OpenTelemetry provider).
	Endpoint string
	// Sampling is the percentage, 0 to 100, of requests that arrive
	// without a caller's sampling decision that are sampled; a request's
	// own decision (traceparent's flag, B3's sampled or debug) is always
	// honoured. Default DefaultTraceSampling.
	Sampling float64
	// ServiceName is the spans' service.name (default: the node's
	// cluster, else its id).
	ServiceName string
}

// DefaultTraceSampling is Istio's default sampling percentage.
const DefaultTraceSampling = 1.0

// AccessLogFormat selects the access-log rendering.
type AccessLogFormat string

const (
	// AccessLogText is Envoy's default text format.
	AccessLogText AccessLogFormat = "text"
	// AccessLogJSON is one JSON object per line with the same fields.
	AccessLogJSON AccessLogFormat = "json"
)

// AccessLog says where access-log lines go.
type AccessLog struct {
	// Path is a file, "-" or "" for stdout, or "off".
	Path   string
	Format AccessLogFormat
	// FlushInterval is how often buffered lines are written (0: every
	// second); a worker's buffer passing 32 KiB is written sooner.
	FlushInterval time.Duration
}

// Direction is the traffic direction of a listener.
type Direction string

const (
	// Outbound listeners carry the app's connections to upstreams.
	Outbound Direction = "outbound"
	// Inbound listeners carry peers' connections to the local app.
	Inbound Direction = "inbound"
)

// Protocol is what a listener expects or detects.
type Protocol string

const (
	// ProtocolAuto sniffs HTTP/1.1, HTTP/2 prior knowledge, TLS and TCP.
	ProtocolAuto Protocol = "auto"
	// ProtocolTCP proxies opaque bytes.
	ProtocolTCP Protocol = "tcp"
	// ProtocolHTTP is HTTP/1.1 or HTTP/2 prior knowledge.
	ProtocolHTTP Protocol = "http"
)

// Listener is one listening address of the data plane and how connections
// arriving there are routed.
type Listener struct {
	Name      string
	Address   string
	Direction Direction
	// OriginalDestination, in static mode, is the destination every
	// connection on this listener is treated as having dialled (the eBPF
	// redirect supplies the real one per connection).
	OriginalDestination string
	Protocol            Protocol
	// DetectionTimeout bounds protocol sniffing.
	DetectionTimeout time.Duration
	// ServerFirstPorts are destination ports whose servers speak first
	// (MySQL, SMTP, ...): no sniffing, straight TCP.
	ServerFirstPorts []uint16
	// MaxHeadersCount limits the header lines of an HTTP/1 request
	// (Envoy's common_http_protocol_options.max_headers_count); 0 is
	// DefaultMaxHeadersCount.
	MaxHeadersCount uint32
	// TCPIdleTimeout is Envoy's tcp_proxy idle_timeout: a connection
	// proxied as opaque TCP (also one whose client sent nothing within
	// DetectionTimeout) is closed on both sides once no byte moved either
	// way for this long. 0 means never; the translators fill in
	// DefaultTCPIdleTimeout.
	TCPIdleTimeout time.Duration
	// StreamIdleTimeout is Envoy's stream_idle_timeout: an HTTP request
	// (HTTP/1 or an HTTP/2 stream, an upgraded one included) with no
	// byte moving in either direction for this long ends: 408 if its
	// response has not started, else a reset. It bounds what a request
	// holds when its route has no timeout (a silent upload, a client
	// that stops reading). 0 means never; the translators fill in
	// DefaultStreamIdleTimeout.
	StreamIdleTimeout time.Duration
	// RequestHeadersTimeout is Envoy's request_headers_timeout for
	// HTTP/1: a request whose head has not arrived whole this long after
	// its first byte gets 408 and the connection closes. 0 means never;
	// the translators fill in DefaultRequestHeadersTimeout.
	RequestHeadersTimeout time.Duration
	Routes                []Route
	// MTLS is an inbound listener's peer authentication and authorization;
	// nil means PERMISSIVE with every verified peer allowed (Istio's
	// default). It applies when the sidecar has a workload identity.
	MTLS *InboundMTLS
	// Authz is an inbound listener's authorization (Envoy's RBAC filters,
	// from the control plane's AuthorizationPolicies); nil allows every
	// request and connection.
	Authz *Authz
}

// Authz is an inbound listener's RBAC filters, in the order they run:
// HTTP for each request of a connection served as HTTP, Network for each
// connection proxied as opaque TCP (Istio's HTTP and TCP filter chains).
type Authz struct {
	HTTP, Network authz.Chain
}

// MTLSMode says whether an inbound port also accepts plaintext (Istio's
// PeerAuthentication modes).
type MTLSMode string

const (
	// MTLSStrict accepts only mutual TLS from peer sidecars.
	MTLSStrict MTLSMode = "STRICT"
	// MTLSPermissive accepts mutual TLS and plaintext.
	MTLSPermissive MTLSMode = "PERMISSIVE"
)

// PeerAuthorization is the mode and the allow lists of inbound ports. A
// verified peer is allowed when it matches any entry; with all three lists
// empty every verified peer is.
type PeerAuthorization struct {
	Mode MTLSMode
	// Principals are SPIFFE IDs allowed exactly.
	Principals []string
	// Namespaces allow spiffe://<any trusted domain>/ns/<namespace>/sa/<any>.
	Namespaces []string
	// TrustDomains allow every peer of these trust domains.
	TrustDomains []string
}

// InboundMTLS is the default PeerAuthorization of an inbound listener and
// its per-port overrides (keyed by the original destination port).
type InboundMTLS struct {
	PeerAuthorization
	Ports map[uint16]PeerAuthorization
}

// PassthroughPort is the port of an endpoint address that stands for the
// connection's original destination port: a cluster whose endpoint is
// 127.0.0.1:0 reaches the app on loopback at whatever port the client
// dialled, as Istio's InboundPassthroughCluster does for the ports a pod
// does not declare; one at 0.0.0.0:0 (PassthroughAddress) reaches the
// original destination itself, as Istio's PassthroughCluster does for
// destinations the mesh does not know.
const PassthroughPort = 0

// PassthroughAddress is the endpoint address that stands for the whole
// original destination (see PassthroughPort).
const PassthroughAddress = "0.0.0.0:0"

// Endpoint metadata keys (lb.Endpoint.Metadata) the data plane reads.
const (
	// MetadataMeshed is "true" on an endpoint whose pod runs a meshlet
	// sidecar: it is reached with mutual TLS.
	MetadataMeshed = "meshed"
	// MetadataIdentity is the SPIFFE ID a meshed endpoint must present;
	// without it any peer of the sidecar's own trust domain is accepted.
	MetadataIdentity = "identity"
)

// Route maps an original destination (and for HTTP a host) to a cluster.
type Route struct {
	Name string
	// Destination is "ip:port", or ":port" for any address; "" matches all.
	Destination string
	// Hosts are HTTP host names (":authority" / Host, port ignored); empty
	// matches any host. A "*." prefix matches any subdomain.
	Hosts   []string
	Cluster string
	// Timeout covers all attempts of an HTTP request (0 = no timeout).
	Timeout time.Duration
	Retry   retry.Policy
	// RouteConfig names the route table (RDS) whose Rules route HTTP
	// requests to this destination; "" for a plain route.
	RouteConfig string
	// Rules, when there are any, route each HTTP request instead of
	// Cluster, Timeout and Retry (which still carry opaque TCP).
	Rules []RouteRule
}

// HealthCheckKind is the active health checker type.
type HealthCheckKind string

// The health checker types (Envoy's http_health_check,
// tcp_health_check and grpc_health_check).
const (
	// HealthCheckHTTP sends a GET to the path and expects an expected status (200 by default).
	HealthCheckHTTP HealthCheckKind = "http"
	// HealthCheckTCP connects (and optionally exchanges send / receive bytes).
	HealthCheckTCP HealthCheckKind = "tcp"
	// HealthCheckGRPC calls grpc.health.v1.Health/Check and expects SERVING.
	HealthCheckGRPC HealthCheckKind = "grpc"
)

// HealthCheck is one active health checker of a cluster.
type HealthCheck struct {
	Kind HealthCheckKind
	// Timing and thresholds.
	lb.HealthCheckConfig
	// HTTP: path, host and expected status ranges [start, end).
	Path             string
	Host             string
	ExpectedStatuses [][2]uint32
	// TCP: bytes to send and to expect in return (empty: connect only).
	Send, Receive []byte
	// GRPC: the service name asked in grpc.health.v1.Health/Check.
	GRPCService string
}

// UpstreamProtocol is how the data plane talks HTTP to a cluster.
type UpstreamProtocol string

const (
	// UpstreamHTTP1 uses HTTP/1.1 keep-alive pools.
	UpstreamHTTP1 UpstreamProtocol = "http1"
	// UpstreamHTTP2 uses HTTP/2 (h2c) with multiplexing.
	UpstreamHTTP2 UpstreamProtocol = "http2"
)

// Cluster is one upstream cluster, resolved.
type Cluster struct {
	Name string
	// LB is the balancing config (policy, panic threshold, zone-aware,
	// locality-weighted, ring / Maglev, slow start).
	LB lb.ClusterConfig
	// Endpoints with locality, priority, weight and EDS health.
	Endpoints []lb.Endpoint
	// Priorities is the number of declared priority levels.
	Priorities             int
	OverprovisioningFactor uint32
	WeightedPriorityHealth bool
	ConnectTimeout         time.Duration
	// IdleTimeout closes idle pooled upstream connections.
	IdleTimeout time.Duration
	// MaxRequestsPerConnection, 0 = unlimited.
	MaxRequestsPerConnection uint32
	Protocol                 UpstreamProtocol
	CircuitBreakers          circuitbreaker.Thresholds
	// Outlier is nil when outlier detection is off.
	Outlier *lb.OutlierConfig
	// HealthChecks; IgnoreNewHostsUntilFirstHC mirrors Envoy's flag.
	HealthChecks               []HealthCheck
	IgnoreNewHostsUntilFirstHC bool
}

func (pa *PeerAuthorization) validate(where string) error {
	switch pa.Mode {
	case MTLSStrict, MTLSPermissive:
	default:
		return fmt.Errorf("config: %s.mode: %q (want STRICT or PERMISSIVE)", where, pa.Mode)
	}
	for i, id := range pa.Principals {
		if _, err := spiffeid.FromString(id); err != nil {
			return fmt.Errorf("config: %s.principals[%d]: %q: %v", where, i, id, err)
		}
	}
	for i, ns := range pa.Namespaces {
		if ns == "" || strings.Contains(ns, "/") {
			return fmt.Errorf("config: %s.namespaces[%d]: %q is not a namespace name", where, i, ns)
		}
	}
	for i, td := range pa.TrustDomains {
		if _, err := spiffeid.TrustDomainFromString(td); err != nil {
			return fmt.Errorf("config: %s.trust_domains[%d]: %q: %v", where, i, td, err)
		}
	}
	return nil
}

// ClusterByName returns the named cluster or nil.
func (c *Config) ClusterByName(name string) *Cluster {
	for i := range c.Clusters {
		if c.Clusters[i].Name == name {
			return &c.Clusters[i]
		}
	}
	return nil
}

// WithDefaults returns a copy of c whose settings that a zero value
// leaves to a default (a cluster's connect and idle timeouts, a
// listener's detection timeout and header-line limit, the access log's
// format and flush interval) hold the default, so that the data plane
// reads every setting as it is. The timeouts for
// which 0 means never (tcp_idle_timeout, stream_idle_timeout,
// request_headers_timeout) stay as they are.
func (c *Config) WithDefaults() *Config {
	out := *c
	if out.AccessLog.Format == "" {
		out.AccessLog.Format = AccessLogText
	}
	if out.AccessLog.FlushInterval <= 0 {
		out.AccessLog.FlushInterval = DefaultAccessLogFlushInterval
	}
	if c.Tracing != nil {
		t := *c.Tracing
		if t.ServiceName == "" {
			t.ServiceName = cmp.Or(c.Node.Cluster, c.Node.ID, "meshlet")
		}
		out.Tracing = &t
	}
	out.Listeners = slices.Clone(c.Listeners)
	for i := range out.Listeners {
		l := &out.Listeners[i]
		if l.DetectionTimeout <= 0 {
			l.DetectionTimeout = DefaultDetectionTimeout
		}
		if l.MaxHeadersCount == 0 {
			l.MaxHeadersCount = DefaultMaxHeadersCount
		}
	}
	out.Clusters = slices.Clone(c.Clusters)
	for i := range out.Clusters {
		cl := &out.Clusters[i]
		if cl.ConnectTimeout <= 0 {
			cl.ConnectTimeout = DefaultConnectTimeout
		}
		if cl.IdleTimeout <= 0 {
			cl.IdleTimeout = DefaultUpstreamIdleTimeout
		}
	}
	return &out
}

// Validate checks cross-references and values the translators cannot see
// alone; errors name the field by its path in the config file.
func (c *Config) Validate() error {
	names := map[string]bool{}
	for i := range c.Clusters {
		cl := &c.Clusters[i]
		where := fmt.Sprintf("clusters[%d]", i)
		switch {
		case cl.Name == "":
			return fmt.Errorf("config: %s.name: empty", where)
		case names[cl.Name]:
			return fmt.Errorf("config: %s.name: duplicate cluster %q", where, cl.Name)
		}
		names[cl.Name] = true
		if err := cl.LB.Validate(); err != nil {
			return fmt.Errorf("config: cluster %q: %w", cl.Name, err)
		}
		if cl.Outlier != nil {
			if err := cl.Outlier.Validate(); err != nil {
				return fmt.Errorf("config: cluster %q: %w", cl.Name, err)
			}
		}
		for j, hc := range cl.HealthChecks {
			if err := hc.Validate(); err != nil {
				return fmt.Errorf("config: cluster %q: health_checks[%d]: %w", cl.Name, j, err)
			}
		}
		seen := map[string]bool{}
		for j, ep := range cl.Endpoints {
			if _, err := netip.ParseAddrPort(ep.Address); err != nil {
				return fmt.Errorf("config: cluster %q: endpoints[%d].address %q: %v", cl.Name, j, ep.Address, err)
			}
			if seen[ep.Address] {
				return fmt.Errorf("config: cluster %q: endpoints[%d].address %q: duplicate", cl.Name, j, ep.Address)
			}
			seen[ep.Address] = true
		}
	}
	if c.LocalCluster != "" && !names[c.LocalCluster] {
		return fmt.Errorf("config: local_cluster: no cluster %q", c.LocalCluster)
	}
	addrs := map[string]bool{}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		where := fmt.Sprintf("listeners[%d]", i)
		if _, err := netip.ParseAddrPort(l.Address); err != nil {
			return fmt.Errorf("config: %s.address %q: %v", where, l.Address, err)
		}
		if addrs[l.Address] {
			return fmt.Errorf("config: %s.address %q: duplicate listener address", where, l.Address)
		}
		addrs[l.Address] = true
		switch l.Direction {
		case Outbound, Inbound:
		default:
			return fmt.Errorf("config: %s.direction: %q (want outbound or inbound)", where, l.Direction)
		}
		switch l.Protocol {
		case ProtocolAuto, ProtocolTCP, ProtocolHTTP:
		default:
			return fmt.Errorf("config: %s.protocol: %q (want auto, tcp or http)", where, l.Protocol)
		}
		if l.DetectionTimeout < 0 {
			return fmt.Errorf("config: %s.detection_timeout: %v must be >= 0", where, l.DetectionTimeout)
		}
		if l.TCPIdleTimeout < 0 {
			return fmt.Errorf("config: %s.tcp_idle_timeout: %v must be >= 0 (0 disables it)", where, l.TCPIdleTimeout)
		}
		if l.RequestHeadersTimeout < 0 {
			return fmt.Errorf("config: %s.request_headers_timeout: %v must be >= 0 (0 disables it)", where, l.RequestHeadersTimeout)
		}
		if l.StreamIdleTimeout < 0 {
			return fmt.Errorf("config: %s.stream_idle_timeout: %v must be >= 0 (0 disables it)", where, l.StreamIdleTimeout)
		}
		if l.OriginalDestination != "" {
			if _, err := netip.ParseAddrPort(l.OriginalDestination); err != nil {
				return fmt.Errorf("config: %s.original_destination %q: %v", where, l.OriginalDestination, err)
			}
		}
		if l.MTLS != nil {
			if l.Direction != Inbound {
				return fmt.Errorf("config: %s.mtls: only inbound listeners authenticate peers", where)
			}
			if err := l.MTLS.PeerAuthorization.validate(where + ".mtls"); err != nil {
				return err
			}
			for _, port := range slices.Sorted(maps.Keys(l.MTLS.Ports)) {
				pa := l.MTLS.Ports[port]
				if err := pa.validate(fmt.Sprintf("%s.mtls.ports[%d]", where, port)); err != nil {
					return err
				}
			}
		}
		for j, r := range l.Routes {
			rw := fmt.Sprintf("%s.routes[%d]", where, j)
			if !names[r.Cluster] {
				return fmt.Errorf("config: %s.cluster: no cluster %q", rw, r.Cluster)
			}
			if r.Destination != "" {
				d := r.Destination
				if strings.HasPrefix(d, ":") {
					d = "0.0.0.0" + d
				}
				if _, err := netip.ParseAddrPort(d); err != nil {
					return fmt.Errorf("config: %s.match.destination %q: %v", rw, r.Destination, err)
				}
			}
			if r.Timeout < 0 {
				return fmt.Errorf("config: %s.timeout: %v must be >= 0", rw, r.Timeout)
			}
			if err := validateRules(rw, r.Rules); err != nil {
				return err
			}
		}
	}
	for _, a := range []struct{ field, addr string }{{"admin", c.Admin}, {"health", c.Health}, {"prometheus", c.Prometheus}} {
		if a.addr == "" {
			continue
		}
		if _, err := netip.ParseAddrPort(a.addr); err != nil {
			return fmt.Errorf("config: %s %q: %v", a.field, a.addr, err)
		}
	}
	switch c.AccessLog.Format {
	case "", AccessLogText, AccessLogJSON:
	default:
		return fmt.Errorf("config: access_log.format: %q (want text or json)", c.AccessLog.Format)
	}
	if c.GlobalDownstreamMaxConnections < 0 {
		return fmt.Errorf("config: global_downstream_max_connections: %d must be >= 0 (0: the default from the file descriptor limit)",
			c.GlobalDownstreamMaxConnections)
	}
	if c.AccessLog.FlushInterval < 0 {
		return fmt.Errorf("config: access_log.flush_interval: %v must be >= 0", c.AccessLog.FlushInterval)
	}
	if t := c.Tracing; t != nil {
		if _, _, err := net.SplitHostPort(t.Endpoint); err != nil || t.Endpoint == "" {
			return fmt.Errorf("config: tracing.endpoint: %q: want host:port of an OTLP/gRPC collector", t.Endpoint)
		}
		if !(t.Sampling >= 0 && t.Sampling <= 100) { // NaN too
			return fmt.Errorf("config: tracing.sampling: %v: want a percentage from 0 to 100", t.Sampling)
		}
	}
	return nil
}
