package cli

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
)

// InboundPassthroughCluster is the inbound cluster of the ports a pod
// does not declare, PassthroughCluster the outbound one of destinations
// the mesh does not know (Istio's names).
const (
	InboundPassthroughCluster = "InboundPassthroughCluster"
	PassthroughCluster        = "PassthroughCluster"
)

// podConfig is the sidecar's configuration inside a Kubernetes pod
// (`run -pod`): Istio's ports, outbound clusters from xDS, one inbound
// route per app port (MESHLET_APP_PORTS, set by the injector from the
// containers' ports) to the app on loopback, where sk_lookup delivers
// connections for those ports, and a last one for every other port, to
// the app at the port dialled. MESHLET_MTLS_MODE (STRICT or PERMISSIVE,
// the default) is the inbound mTLS mode once the sidecar has an identity.
// MESHLET_ZONE and MESHLET_REGION are the node's topology labels (the
// injector maps them from the pod's own, which Kubernetes 1.35 and later
// copy from the node at binding): the sidecar's locality, for zone
// accounting and spans. MESHLET_TRACING_ENDPOINT (host:port of an
// OTLP/gRPC collector) turns tracing on, with MESHLET_TRACE_SAMPLING
// percent sampled (default config.DefaultTraceSampling) and
// MESHLET_TRACE_SERVICE.POD_NAMESPACE as the spans' service.name.
func podConfig(getenv func(string) string) (*config.Config, error) {
	cfg := &config.Config{
		Node:         config.Node{ID: strings.Trim(getenv("POD_NAME")+"."+getenv("POD_NAMESPACE"), "."), Cluster: getenv("SERVICE_ACCOUNT")},
		Admin:        fmt.Sprintf("127.0.0.1:%d", config.PortAdmin),
		Health:       fmt.Sprintf("0.0.0.0:%d", config.PortHealth),
		Prometheus:   fmt.Sprintf("0.0.0.0:%d", config.PortPrometheus),
		AccessLog:    config.AccessLog{Path: "-", Format: config.AccessLogText},
		DrainTimeout: config.DefaultDrainTimeout,
		Listeners: []config.Listener{
			{Name: "outbound", Address: fmt.Sprintf("127.0.0.1:%d", config.PortOutbound), Direction: config.Outbound,
				Protocol: config.ProtocolAuto, DetectionTimeout: config.DefaultDetectionTimeout, TCPIdleTimeout: config.DefaultTCPIdleTimeout, StreamIdleTimeout: config.DefaultStreamIdleTimeout,
				RequestHeadersTimeout: config.DefaultRequestHeadersTimeout},
			{Name: "inbound", Address: fmt.Sprintf("0.0.0.0:%d", config.PortInbound), Direction: config.Inbound,
				Protocol: config.ProtocolAuto, DetectionTimeout: config.DefaultDetectionTimeout, TCPIdleTimeout: config.DefaultTCPIdleTimeout, StreamIdleTimeout: config.DefaultStreamIdleTimeout,
				RequestHeadersTimeout: config.DefaultRequestHeadersTimeout},
		},
	}
	cfg.Node.Locality = lb.Locality{Region: getenv("MESHLET_REGION"), Zone: getenv("MESHLET_ZONE")}
	if ep := getenv("MESHLET_TRACING_ENDPOINT"); ep != "" {
		t := &config.Tracing{Endpoint: ep, Sampling: config.DefaultTraceSampling, ServiceName: getenv("MESHLET_TRACE_SERVICE")}
		if ns := getenv("POD_NAMESPACE"); t.ServiceName != "" && ns != "" {
			t.ServiceName += "." + ns
		}
		if v := getenv("MESHLET_TRACE_SAMPLING"); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 100) {
				return nil, fmt.Errorf("run -pod: MESHLET_TRACE_SAMPLING: %q (want a percentage from 0 to 100)", v)
			}
			t.Sampling = f
		}
		cfg.Tracing = t
	}
	if hasIPv6Loopback() {
		// connect6 sends the app's IPv6 connects here (the same routes as
		// IPv4 arrive over xDS: mergeXDS fills both).
		cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "outbound6", Address: fmt.Sprintf("[::1]:%d", config.PortOutbound),
			Direction: config.Outbound, Protocol: config.ProtocolAuto, DetectionTimeout: config.DefaultDetectionTimeout,
			TCPIdleTimeout: config.DefaultTCPIdleTimeout, StreamIdleTimeout: config.DefaultStreamIdleTimeout,
			RequestHeadersTimeout: config.DefaultRequestHeadersTimeout})
	}
	if m := getenv("MESHLET_MTLS_MODE"); m != "" {
		mode := config.MTLSMode(strings.ToUpper(m))
		if mode != config.MTLSStrict && mode != config.MTLSPermissive {
			return nil, fmt.Errorf("run -pod: MESHLET_MTLS_MODE: %q (want STRICT or PERMISSIVE)", m)
		}
		cfg.Listeners[1].MTLS = &config.InboundMTLS{PeerAuthorization: config.PeerAuthorization{Mode: mode}}
	}
	for _, f := range strings.Split(getenv("MESHLET_APP_PORTS"), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.ParseUint(f, 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("run -pod: MESHLET_APP_PORTS: %q is not a port", f)
		}
		name := fmt.Sprintf("inbound|%d", p)
		cfg.Clusters = append(cfg.Clusters, config.Cluster{Name: name, LB: lb.DefaultClusterConfig(),
			Endpoints: []lb.Endpoint{{Address: fmt.Sprintf("127.0.0.1:%d", p)}}, ConnectTimeout: time.Second,
			CircuitBreakers: circuitbreaker.DefaultThresholds(), Protocol: config.UpstreamHTTP1, IdleTimeout: config.DefaultUpstreamIdleTimeout})
		cfg.Listeners[1].Routes = append(cfg.Listeners[1].Routes, config.Route{Name: name, Destination: fmt.Sprintf(":%d", p),
			Cluster: name, Timeout: 0, Retry: discovery.DefaultRetryPolicy()})
	}
	// The ports the pod does not declare: sk_lookup delivers them too, and
	// they reach the app at the port dialled, as through Istio's
	// InboundPassthroughCluster.
	cfg.Clusters = append(cfg.Clusters, config.Cluster{Name: InboundPassthroughCluster, LB: lb.DefaultClusterConfig(),
		Endpoints:      []lb.Endpoint{{Address: fmt.Sprintf("127.0.0.1:%d", config.PassthroughPort)}},
		ConnectTimeout: time.Second, CircuitBreakers: circuitbreaker.DefaultThresholds(), Protocol: config.UpstreamHTTP1,
		IdleTimeout: config.DefaultUpstreamIdleTimeout})
	cfg.Listeners[1].Routes = append(cfg.Listeners[1].Routes, config.Route{Name: InboundPassthroughCluster,
		Cluster: InboundPassthroughCluster, Timeout: 0, Retry: discovery.DefaultRetryPolicy()})
	// Destinations the mesh does not know (a pod's own address, anything
	// outside the cluster) go where they were dialled, as Istio's default
	// outbound policy (ALLOW_ANY) sends them through its
	// PassthroughCluster; mergeXDS keeps this catch-all after the
	// Services' routes.
	cfg.Clusters = append(cfg.Clusters, config.Cluster{Name: PassthroughCluster, LB: lb.DefaultClusterConfig(),
		Endpoints:      []lb.Endpoint{{Address: config.PassthroughAddress}},
		ConnectTimeout: 10 * time.Second, CircuitBreakers: circuitbreaker.DefaultThresholds(), Protocol: config.UpstreamHTTP1,
		IdleTimeout: config.DefaultUpstreamIdleTimeout})
	for i := range cfg.Listeners {
		if l := &cfg.Listeners[i]; l.Direction == config.Outbound {
			l.Routes = append(l.Routes, config.Route{Name: PassthroughCluster, Cluster: PassthroughCluster, Timeout: 0,
				Retry: discovery.DefaultRetryPolicy()})
		}
	}
	return cfg, cfg.Validate()
}

// hasIPv6Loopback reports whether ::1 can be listened on (a pod whose
// IPv6 is disabled has none); a variable so tests can pretend.
var hasIPv6Loopback = func() bool {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	l.Close()
	return true
}
