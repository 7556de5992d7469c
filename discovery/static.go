package discovery

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"sigs.k8s.io/yaml"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
)

// The default listen addresses of the static config file's admin, health
// and Prometheus endpoints, on Istio's ports (config.PortAdmin, ...).
const (
	DefaultAdmin      = "127.0.0.1:15000"
	DefaultHealth     = "0.0.0.0:15021"
	DefaultPrometheus = "0.0.0.0:15090"
)

// staticKeys are the top-level keys of the static config file.
var staticKeys = []string{"node", "local_cluster", "admin", "health", "prometheus",
	"access_log", "tracing", "drain_timeout", "global_downstream_max_connections", "listeners", "clusters"}

// LoadStaticFile reads and parses the static config file at name (see
// ParseStatic); errors start with the file name.
func LoadStaticFile(name string) (*config.Config, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	cfg, err := parseStatic(data)
	if err != nil {
		return nil, fmt.Errorf("discovery: %s: %w", name, err)
	}
	return cfg, nil
}

// ParseStatic parses the sidecar's static config file, YAML or JSON:
//
//	node: {id, cluster, locality: {region, zone, sub_zone}}
//	local_cluster: name of the cluster holding this fleet's clients (optional)
//	admin, health, prometheus: listen addresses; "" or off disables
//	    (defaults DefaultAdmin, DefaultHealth, DefaultPrometheus)
//	access_log: {path: "-" (stdout, default), a file or off; format: text (default) or json;
//	             flush_interval: how often buffered lines are written (default 1s)}
//	tracing: {endpoint: host:port of an OTLP/gRPC collector (required),
//	          sampling: percentage 0-100 (default config.DefaultTraceSampling),
//	          service_name (default: node.cluster)}; absent: no tracing
//	drain_timeout: Go duration (default config.DefaultDrainTimeout)
//	global_downstream_max_connections: a whole number > 0 (default: from
//	    the file descriptor limit, see config.Config)
//	listeners: [{name (default: the address), address, direction (outbound),
//	    original_destination, protocol (auto|tcp|http), detection_timeout
//	    (config.DefaultDetectionTimeout), tcp_idle_timeout
//	    (config.DefaultTCPIdleTimeout; "0s" disables), stream_idle_timeout
//	    (config.DefaultStreamIdleTimeout; "0s" disables),
//	    request_headers_timeout (config.DefaultRequestHeadersTimeout; "0s"
//	    disables), server_first_ports,
//	    common_http_protocol_options ({max_headers_count}: Envoy v3
//	    HttpProtocolOptions; default config.DefaultMaxHeadersCount),
//	    mtls (inbound only: see decodeInboundMTLS),
//	    routes: [{name, match: {destination, hosts}, cluster,
//	        timeout (config.DefaultRouteTimeout; "0s" disables),
//	        retry_policy (Envoy v3 RetryPolicy; default DefaultRetryPolicy)}]}]
//	clusters: [Envoy v3 Cluster in protojson form (see TranslateCluster)]
//
// Unknown keys are errors; meshlet's sections take Go durations ("100ms"),
// the Envoy resources protojson's ("0.1s"). The result has every default
// filled in and passes config.Config.Validate. Errors name the field by its
// path, as in clusters[2] (cluster "echo"): lb_policy.
func ParseStatic(data []byte) (*config.Config, error) {
	cfg, err := parseStatic(data)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	return cfg, nil
}

// parseStatic is ParseStatic without the package prefix on errors.
func parseStatic(data []byte) (*config.Config, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		// yaml's multi-line messages ("unmarshal errors:\n  line 2: ...")
		// read better on one line.
		return nil, fmt.Errorf("parse: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	// An empty file (or one of comments only) is a mistake, not a sidecar
	// that proxies nothing: refuse it so a reload keeps the running config.
	if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
		return nil, fmt.Errorf("parse: the config is empty: want at least one of %s", strings.Join(staticKeys, ", "))
	}
	top, err := decodeObject("", js, staticKeys...)
	if err != nil {
		return nil, err
	}
	cfg := &config.Config{
		Admin:        DefaultAdmin,
		Health:       DefaultHealth,
		Prometheus:   DefaultPrometheus,
		AccessLog:    config.AccessLog{Path: "-", Format: config.AccessLogText},
		DrainTimeout: config.DefaultDrainTimeout,
	}
	if cfg.Node, err = decodeNode(top); err != nil {
		return nil, err
	}
	if err := top.get("local_cluster", &cfg.LocalCluster); err != nil {
		return nil, err
	}
	for _, a := range []struct {
		key string
		dst *string
	}{{"admin", &cfg.Admin}, {"health", &cfg.Health}, {"prometheus", &cfg.Prometheus}} {
		if !top.has(a.key) {
			continue
		}
		var s switchable
		if err := top.get(a.key, &s); err != nil {
			return nil, err
		}
		*a.dst = s.value
		if s.off {
			*a.dst = "" // config: "" is off
		}
	}
	if cfg.AccessLog, err = decodeAccessLog(top); err != nil {
		return nil, err
	}
	if cfg.Tracing, err = decodeTracing(top); err != nil {
		return nil, err
	}
	if cfg.DrainTimeout, err = nonNegative(top, "drain_timeout", cfg.DrainTimeout); err != nil {
		return nil, err
	}
	if top.has("global_downstream_max_connections") {
		var n int64
		if err := top.get("global_downstream_max_connections", &n); err != nil {
			return nil, err
		}
		if n <= 0 {
			return nil, path("global_downstream_max_connections").errorf("%d must be > 0 (leave it out for the default from the file descriptor limit)", n)
		}
		cfg.GlobalDownstreamMaxConnections = n
	}
	if cfg.Clusters, err = decodeClusters(top); err != nil {
		return nil, err
	}
	if cfg.Listeners, err = decodeListeners(top); err != nil {
		return nil, err
	}
	if err := checkLocalCluster(cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func decodeNode(top *object) (config.Node, error) {
	var n config.Node
	o, err := decodeObject("node", top.raw("node"), "id", "cluster", "locality")
	if err != nil {
		return n, err
	}
	if err := o.get("id", &n.ID); err != nil {
		return n, err
	}
	if err := o.get("cluster", &n.Cluster); err != nil {
		return n, err
	}
	n.Locality, err = decodeLocality(o, "locality")
	return n, err
}

// decodeLocality reads {region, zone, sub_zone} at key of o.
func decodeLocality(o *object, key string) (lb.Locality, error) {
	var l lb.Locality
	lo, err := decodeObject(o.p.field(key), o.raw(key), "region", "zone", "sub_zone")
	if err != nil {
		return l, err
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"region", &l.Region}, {"zone", &l.Zone}, {"sub_zone", &l.SubZone}} {
		if err := lo.get(f.key, f.dst); err != nil {
			return l, err
		}
	}
	return l, nil
}

func decodeAccessLog(top *object) (config.AccessLog, error) {
	al := config.AccessLog{Path: "-", Format: config.AccessLogText}
	o, err := decodeObject("access_log", top.raw("access_log"), "path", "format", "flush_interval")
	if err != nil {
		return al, err
	}
	if o.has("path") {
		var s switchable
		if err := o.get("path", &s); err != nil {
			return al, err
		}
		switch {
		case s.off:
			al.Path = "off"
		case s.value == "":
			al.Path = "-" // "" is stdout too; "-" says so
		default:
			al.Path = s.value
		}
	}
	var format string
	if err := o.get("format", &format); err != nil {
		return al, err
	}
	switch config.AccessLogFormat(format) {
	case "":
	case config.AccessLogText, config.AccessLogJSON:
		al.Format = config.AccessLogFormat(format)
	default:
		return al, o.p.field("format").errorf("%q (want text or json)", format)
	}
	if al.FlushInterval, err = nonNegative(o, "flush_interval", 0); err != nil {
		return al, err
	}
	return al, nil
}

// decodeTracing reads the tracing section (nil when absent).
func decodeTracing(top *object) (*config.Tracing, error) {
	if !top.has("tracing") {
		return nil, nil
	}
	o, err := decodeObject("tracing", top.raw("tracing"), "endpoint", "sampling", "service_name")
	if err != nil {
		return nil, err
	}
	t := &config.Tracing{Sampling: config.DefaultTraceSampling}
	if err := o.get("endpoint", &t.Endpoint); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(t.Endpoint); err != nil || t.Endpoint == "" {
		return nil, o.p.field("endpoint").errorf("%q: want host:port of an OTLP/gRPC collector", t.Endpoint)
	}
	if err := o.get("sampling", &t.Sampling); err != nil {
		return nil, err
	}
	if !(t.Sampling >= 0 && t.Sampling <= 100) {
		return nil, o.p.field("sampling").errorf("%v: want a percentage from 0 to 100", t.Sampling)
	}
	if err := o.get("service_name", &t.ServiceName); err != nil {
		return nil, err
	}
	return t, nil
}

// nonNegative reads an optional duration key of o that must be >= 0.
func nonNegative(o *object, key string, def time.Duration) (time.Duration, error) {
	if !o.has(key) {
		return def, nil
	}
	var d duration
	if err := o.get(key, &d); err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, o.p.field(key).errorf("%v must be >= 0", time.Duration(d))
	}
	return time.Duration(d), nil
}

// decodeClusters decodes and translates each element of clusters on its
// own, so that errors say which one failed.
func decodeClusters(top *object) ([]config.Cluster, error) {
	list, err := top.list("clusters")
	if err != nil {
		return nil, err
	}
	out := make([]config.Cluster, 0, len(list))
	for i, raw := range list {
		where := fmt.Sprintf("clusters[%d]", i)
		var c clusterv3.Cluster
		if err := unmarshalProto("", raw, &c); err != nil {
			if name := peekName(raw); name != "" {
				where += fmt.Sprintf(" (cluster %q)", name)
			}
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if c.GetName() != "" {
			where += fmt.Sprintf(" (cluster %q)", c.GetName())
		}
		cl, err := translateCluster(&c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out = append(out, cl)
	}
	return out, nil
}

// peekName returns the "name" of a JSON object that failed to decode.
func peekName(raw json.RawMessage) string {
	var v struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(raw, &v)
	return v.Name
}

// checkLocalCluster applies Envoy's rule that the local cluster has only
// priority 0: it describes where the clients run, not a failover order.
func checkLocalCluster(cfg *config.Config) error {
	lc := cfg.ClusterByName(cfg.LocalCluster)
	if lc == nil {
		return nil // Validate reports a missing cluster
	}
	for _, ep := range lc.Endpoints {
		if ep.Priority != 0 {
			return path("local_cluster").errorf("cluster %q has endpoint %s at priority %d; a local cluster may only use priority 0",
				lc.Name, ep.Address, ep.Priority)
		}
	}
	return nil
}
