package discovery

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/authz"
	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// staticCluster is a minimal clusters list for static-file tests.
const staticCluster = `clusters:
  - name: echo
    load_assignment:
      endpoints:
        - locality: {region: r1, zone: a}
          lb_endpoints:
            - endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 8080}}}
`

// TestParseStaticRouteConfig: a static route may carry an Envoy
// RouteConfiguration, whose rules then route its HTTP requests.
func TestParseStaticRouteConfig(t *testing.T) {
	cfg, err := ParseStatic([]byte(staticCluster + `listeners:
  - address: 127.0.0.1:15001
    routes:
      - name: echo
        cluster: echo
        route_config:
          virtual_hosts:
            - name: echo
              domains: ["*"]
              routes:
                - match: {path_separated_prefix: /v2}
                  route: {weighted_clusters: {clusters: [{name: echo, weight: 9}, {name: echo-v2, weight: 1}]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Listeners[0].Routes[0]
	eq(t, r.RouteConfig, "echo")
	if len(r.Rules) != 1 || len(r.Rules[0].Backends) != 2 || r.Rules[0].Backends[1].Cluster != "echo-v2" || r.Rules[0].Match.Path != "/v2" {
		t.Fatalf("rules %+v", r.Rules)
	}
}

func TestParseStaticDefaults(t *testing.T) {
	cfg, err := ParseStatic([]byte(staticCluster + `listeners:
  - address: 127.0.0.1:15001
    routes:
      - cluster: echo
`))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, cfg.Admin, "127.0.0.1:15000")
	eq(t, cfg.Health, "0.0.0.0:15021")
	eq(t, cfg.Prometheus, "0.0.0.0:15090")
	eq(t, cfg.AccessLog, config.AccessLog{Path: "-", Format: config.AccessLogText})
	eq(t, cfg.DrainTimeout, config.DefaultDrainTimeout)
	eq(t, cfg.LocalCluster, "")
	if len(cfg.Listeners) != 1 {
		t.Fatalf("%d listeners, want 1", len(cfg.Listeners))
	}
	l := cfg.Listeners[0]
	eq(t, l.Name, "127.0.0.1:15001")
	eq(t, l.Direction, config.Outbound)
	eq(t, l.Protocol, config.ProtocolAuto)
	eq(t, l.DetectionTimeout, config.DefaultDetectionTimeout)
	eq(t, l.Routes, []config.Route{{Cluster: "echo", Timeout: config.DefaultRouteTimeout, Retry: DefaultRetryPolicy()}})
	eq(t, cfg.Clusters[0].Endpoints[0].Address, "10.0.0.1:8080")
}

func TestDefaultAddressesUseTheWellKnownPorts(t *testing.T) {
	for _, c := range []struct {
		addr string
		port int
	}{{DefaultAdmin, config.PortAdmin}, {DefaultHealth, config.PortHealth}, {DefaultPrometheus, config.PortPrometheus}} {
		ap, err := netip.ParseAddrPort(c.addr)
		if err != nil || int(ap.Port()) != c.port {
			t.Errorf("%s: want port %d (%v)", c.addr, c.port, err)
		}
	}
}

// An empty file (a truncated write, a wrong mount) is refused, so that a
// reload keeps the running config instead of a sidecar with nothing in it.
func TestParseStaticEmpty(t *testing.T) {
	for _, in := range []string{"", "\n  \n", "# only a comment\n", "---\n"} {
		cfg, err := ParseStatic([]byte(in))
		if err == nil || !strings.Contains(err.Error(), "the config is empty") {
			t.Errorf("ParseStatic(%q) = %+v, %v; want the config is empty", in, cfg, err)
		}
	}
	name := filepath.Join(t.TempDir(), "sidecar.yaml")
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadStaticFile(name); err == nil || !strings.Contains(err.Error(), name+": parse: the config is empty") {
		t.Errorf("LoadStaticFile(empty file) error %v: want the file named and the config is empty", err)
	}
	// An explicit empty object is a config (every default), as before.
	cfg, err := ParseStatic([]byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listeners)+len(cfg.Clusters) != 0 || cfg.Admin != DefaultAdmin {
		t.Fatalf("{}: %+v", cfg)
	}
}

func TestParseStaticSections(t *testing.T) {
	cfg, err := ParseStatic([]byte(staticCluster + `
node: {id: sidecar-a, cluster: web, locality: {region: r1, zone: a, sub_zone: s}}
local_cluster: echo
admin: off
health: ""
prometheus: "off"
access_log: {path: /var/log/meshlet.log, format: json, flush_interval: 250ms}
drain_timeout: 1.5s
global_downstream_max_connections: 5000
listeners:
  - name: in
    address: "[::1]:15006"
    direction: inbound
    protocol: http
    detection_timeout: 250ms
    tcp_idle_timeout: 0s
    stream_idle_timeout: 30s
    request_headers_timeout: 10s
    server_first_ports: [3306, 25]
    common_http_protocol_options: {max_headers_count: 20}
    routes:
      - name: any-echo
        match: {destination: ":80", hosts: ["echo", "*.echo.svc"]}
        cluster: echo
        timeout: 0s
        retry_policy: {retry_on: gateway-error, num_retries: 4}
  - address: 127.0.0.1:15002
    original_destination: 10.96.0.20:9000
    protocol: tcp
    routes: [{match: {destination: "10.96.0.20:9000"}, cluster: echo}]
`))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, cfg.Node, config.Node{ID: "sidecar-a", Cluster: "web", Locality: lb.Locality{Region: "r1", Zone: "a", SubZone: "s"}})
	eq(t, cfg.LocalCluster, "echo")
	eq(t, [3]string{cfg.Admin, cfg.Health, cfg.Prometheus}, [3]string{})
	eq(t, cfg.AccessLog, config.AccessLog{Path: "/var/log/meshlet.log", Format: config.AccessLogJSON, FlushInterval: 250 * time.Millisecond})
	eq(t, cfg.DrainTimeout, 1500*time.Millisecond)
	eq(t, cfg.GlobalDownstreamMaxConnections, int64(5000))
	in := cfg.Listeners[0]
	eq(t, in.Name, "in")
	eq(t, in.Address, "[::1]:15006")
	eq(t, in.Direction, config.Inbound)
	eq(t, in.Protocol, config.ProtocolHTTP)
	eq(t, in.DetectionTimeout, 250*time.Millisecond)
	eq(t, in.TCPIdleTimeout, time.Duration(0)) // "0s": never, as 0 is for Envoy
	eq(t, in.StreamIdleTimeout, 30*time.Second)
	eq(t, in.RequestHeadersTimeout, 10*time.Second)
	eq(t, in.ServerFirstPorts, []uint16{3306, 25})
	eq(t, in.MaxHeadersCount, uint32(20))
	r := in.Routes[0]
	eq(t, r.Name, "any-echo")
	eq(t, r.Destination, ":80")
	eq(t, r.Hosts, []string{"echo", "*.echo.svc"})
	eq(t, r.Timeout, time.Duration(0))
	eq(t, r.Retry.RetryOn, retry.OnGatewayError)
	eq(t, r.Retry.NumRetries, uint32(4))
	tcp := cfg.Listeners[1]
	eq(t, tcp.OriginalDestination, "10.96.0.20:9000")
	eq(t, tcp.Protocol, config.ProtocolTCP)
	eq(t, tcp.TCPIdleTimeout, config.DefaultTCPIdleTimeout)
	eq(t, tcp.StreamIdleTimeout, config.DefaultStreamIdleTimeout)
	eq(t, tcp.RequestHeadersTimeout, config.DefaultRequestHeadersTimeout)
	eq(t, tcp.Routes[0].Destination, "10.96.0.20:9000")
	eq(t, tcp.MaxHeadersCount, uint32(0)) // unset: config.DefaultMaxHeadersCount
}

func TestParseStaticAccessLogOff(t *testing.T) {
	for _, y := range []string{"access_log: {path: off}\n", "access_log: {path: \"off\"}\n"} {
		cfg, err := ParseStatic([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		eq(t, cfg.AccessLog.Path, "off")
	}
}

func TestParseStaticJSON(t *testing.T) {
	cfg, err := ParseStatic([]byte(`{"admin": "127.0.0.1:9901", "clusters": [{"name": "echo", "connectTimeout": "2s",
		"loadAssignment": {"endpoints": [{"lbEndpoints": [{"endpoint": {"address": {"socketAddress": {"address": "10.0.0.1", "portValue": 80}}}}]}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, cfg.Admin, "127.0.0.1:9901")
	eq(t, cfg.Clusters[0].ConnectTimeout, 2*time.Second)
	eq(t, cfg.Clusters[0].Endpoints[0].Address, "10.0.0.1:80")
}

// TestParseStaticErrors checks that every rejected input names its field.
// TestParseStaticRBAC: an inbound listener may carry Envoy RBAC filter
// configurations, which then decide its requests.
func TestParseStaticRBAC(t *testing.T) {
	cfg, err := ParseStatic([]byte(staticCluster + `listeners:
  - address: 0.0.0.0:15006
    direction: inbound
    routes: [{name: echo, cluster: echo}]
    rbac:
      http:
        - rules:
            action: ALLOW
            policies:
              get-only:
                permissions: [{header: {name: ":method", string_match: {exact: GET}}}]
                principals: [{authenticated: {principal_name: {prefix: "spiffe://cluster.local/ns/prod/"}}}]
      network:
        - {stat_prefix: tcp, rules: {action: DENY, policies: {none: {permissions: [{destination_port: 9}], principals: [{any: true}]}}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Listeners[0].Authz
	if a == nil || len(a.HTTP) != 1 || len(a.Network) != 1 {
		t.Fatalf("authz %+v", a)
	}
	in := &authz.Input{HTTP: true, Method: "GET", Authenticated: true, Principal: "spiffe://cluster.local/ns/prod/sa/x"}
	if !a.HTTP.Decide(in, nil).Allowed {
		t.Error("GET from prod denied")
	}
	in.Method = "POST"
	if a.HTTP.Decide(in, nil).Allowed {
		t.Error("POST allowed")
	}
}

func TestParseStaticErrors(t *testing.T) {
	const l = "listeners:\n  - address: 127.0.0.1:15001\n"
	tests := []struct {
		name, y string
		parts   []string
	}{
		{"rbac on an outbound listener", l + "    rbac: {http: []}\n", []string{"listeners[0].rbac: only an inbound listener authorizes"}},
		{"rbac field meshlet cannot enforce", "listeners:\n  - address: 127.0.0.1:15006\n    direction: inbound\n    rbac: {http: [{shadow_rules: {}}]}\n",
			[]string{"listeners[0].rbac.http[0]: shadow_rules: not supported"}},
		{"rbac unknown field", "listeners:\n  - address: 127.0.0.1:15006\n    direction: inbound\n    rbac: {http: [{rulez: {}}]}\n",
			[]string{"listeners[0].rbac.http[0]", "rulez"}},
		{"yaml syntax", "listeners: [", []string{"discovery: parse: yaml"}},
		{"duplicate yaml key", "admin: a\nadmin: b\n", []string{"discovery: parse:", "admin"}},
		{"not an object", "- a\n", []string{"discovery: want an object, got a list"}},
		{"unknown top-level key", "listners: []\n", []string{"discovery: listners: unknown field"}},
		{"unknown node key", "node: {zone: a}\n", []string{"node.zone: unknown field"}},
		{"unknown locality key", "node: {locality: {city: x}}\n", []string{"node.locality.city: unknown field"}},
		{"YAML bool as a string", "node: {locality: {zone: no}}\n", []string{"node.locality.zone: want a string, got bool", "quote"}},
		{"unknown listener key", l + "    port: 1\n", []string{"listeners[0].port: unknown field"}},
		{"unknown route key", staticCluster + l + "    routes: [{cluster: echo, prefix: /}]\n", []string{"listeners[0].routes[0].prefix: unknown field"}},
		{"unknown match key", staticCluster + l + "    routes: [{cluster: echo, match: {path: /}}]\n", []string{"listeners[0].routes[0].match.path: unknown field"}},
		{"unknown Envoy cluster field", staticCluster + "  - name: b\n    conect_timeout: 1s\n", []string{`discovery: clusters[1] (cluster "b"): conect_timeout: unknown field`}},
		{"unknown nested Envoy field", staticCluster + "  - name: b\n    load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {adress: {}}}]}]}\n",
			[]string{`clusters[1] (cluster "b"): load_assignment.endpoints[0].lb_endpoints[0].endpoint.adress: unknown field`}},
		{"bad enum", staticCluster + "  - name: b\n    lb_policy: ROUND_ROBINS\n", []string{`clusters[1] (cluster "b"): lb_policy: invalid value for enum`, "ROUND_ROBINS"}},
		{"unresolvable Any type", staticCluster + "  - name: b\n    typed_extension_protocol_options: {x: {\"@type\": type.googleapis.com/foo.Bar}}\n",
			[]string{`clusters[1] (cluster "b"): typed_extension_protocol_options["x"].@type: unable to resolve`}},
		{"unknown field inside an Any", staticCluster + "  - name: b\n    typed_extension_protocol_options: {envoy.extensions.upstreams.http.v3.HttpProtocolOptions: {\"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions, explicit_http_config: {http3: {}}}}\n",
			[]string{`clusters[1] (cluster "b"): typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].explicit_http_config.http3: unknown field`}},
		{"bad enum in a list element", staticCluster + "  - name: b\n    health_checks: [{timeout: 1s}, {http_health_check: {codec_client_type: HTTP9}}]\n",
			[]string{`clusters[1] (cluster "b"): health_checks[1].http_health_check.codec_client_type: invalid value for enum`}},
		{"unknown route_config field", staticCluster + l + "    routes: [{cluster: echo, route_config: {virtual_hosts: [{domains: ['*'], rutes: []}]}}]\n",
			[]string{"listeners[0].routes[0].route_config.virtual_hosts[0].rutes: unknown field"}},
		{"route_config meshlet refuses", staticCluster + l + "    routes: [{cluster: echo, route_config: {virtual_hosts: [{name: v, domains: ['*'], routes: [{match: {prefix: /}, route: {cluster: echo, cluster_header: x}}]}]}}]\n",
			[]string{"listeners[0].routes[0].route_config.virtual_hosts[0].routes[0].route"}},
		{"route_config on tcp", staticCluster + "listeners:\n  - address: 127.0.0.1:15001\n    protocol: tcp\n    routes: [{cluster: echo, route_config: {}}]\n",
			[]string{"listeners[0].routes[0].route_config: HTTP only"}},
		{"bad scalar in a list", staticCluster + l + "    routes: [{cluster: echo, retry_policy: {retriable_status_codes: [503, x]}}]\n",
			[]string{"listeners[0].routes[0].retry_policy.retriable_status_codes[1]: invalid value"}},
		{"bad Envoy duration", staticCluster + "  - name: b\n    connect_timeout: 100ms\n", []string{`clusters[1] (cluster "b"): connect_timeout:`, `"0.1s"`}},
		{"unsupported lb_policy", staticCluster + "  - name: b\n    lb_policy: LOAD_BALANCING_POLICY_CONFIG\n", []string{`clusters[1] (cluster "b"): lb_policy: LOAD_BALANCING_POLICY_CONFIG not supported`}},
		{"unsupported cluster type", staticCluster + "  - name: b\n    type: STRICT_DNS\n", []string{`clusters[1] (cluster "b"): type: STRICT_DNS not supported`}},
		{"bad address", staticCluster + "  - name: b\n    load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.0.300, port_value: 80}}}}]}]}\n",
			[]string{`clusters[1] (cluster "b"): load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address: "10.0.0.300" is not an IP address`}},
		{"port out of range", staticCluster + "  - name: b\n    load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.0.3, port_value: 70000}}}}]}]}\n",
			[]string{`clusters[1] (cluster "b"): load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value: 70000 out of range`}},
		{"cluster name missing", staticCluster + "  - connect_timeout: 1s\n", []string{"clusters[1]: name: required"}},
		{"duplicate cluster", staticCluster + "  - name: echo\n", []string{`clusters[1].name: duplicate cluster "echo"`}},
		{"clusters not a list", "clusters: {name: a}\n", []string{"clusters: want a list"}},
		{"missing route cluster", staticCluster + l + "    routes: [{cluster: nope}]\n", []string{`listeners[0].routes[0].cluster: no cluster "nope"`}},
		{"empty route cluster", staticCluster + l + "    routes: [{name: r}]\n", []string{"listeners[0].routes[0].cluster: required"}},
		{"duplicate listener address", l + "  - address: 127.0.0.1:15001\n", []string{`listeners[1].address "127.0.0.1:15001": duplicate listener address`}},
		{"listener address missing", "listeners: [{name: x}]\n", []string{"listeners[0].address: required"}},
		{"bad listener address", "listeners: [{address: localhost:1}]\n", []string{`listeners[0].address "localhost:1"`}},
		{"bad direction", l + "    direction: sideways\n", []string{"listeners[0].direction"}},
		{"bad protocol", l + "    protocol: udp\n", []string{"listeners[0].protocol"}},
		{"bad original_destination", l + "    original_destination: 10.0.0.1\n", []string{"listeners[0].original_destination"}},
		{"bad duration", l + "    detection_timeout: 100\n", []string{"listeners[0].detection_timeout: want a duration string"}},
		{"bad duration syntax", l + "    detection_timeout: fast\n", []string{`listeners[0].detection_timeout: "fast" is not a duration`}},
		{"negative duration", "drain_timeout: -1s\n", []string{"drain_timeout: -1s must be >= 0"}},
		{"negative tcp idle timeout", l + "    tcp_idle_timeout: -1m\n", []string{"listeners[0].tcp_idle_timeout: -1m0s must be >= 0"}},
		{"tcp idle timeout not a duration", l + "    tcp_idle_timeout: 3600\n", []string{"listeners[0].tcp_idle_timeout: want a duration string"}},
		{"negative stream idle timeout", l + "    stream_idle_timeout: -1s\n", []string{"listeners[0].stream_idle_timeout: -1s must be >= 0"}},
		{"zero connection cap", "global_downstream_max_connections: 0\n", []string{"global_downstream_max_connections: 0 must be > 0 (leave it out for the default"}},
		{"negative connection cap", "global_downstream_max_connections: -3\n", []string{"global_downstream_max_connections: -3 must be > 0"}},
		{"connection cap not a number", "global_downstream_max_connections: many\n", []string{"global_downstream_max_connections: want a number, got string"}},
		{"fractional connection cap", "global_downstream_max_connections: 1.5\n", []string{"global_downstream_max_connections: want a number"}},
		{"negative route timeout", staticCluster + l + "    routes: [{cluster: echo, timeout: -2s}]\n", []string{"listeners[0].routes[0].timeout: -2s must be >= 0"}},
		{"server first port 0", l + "    server_first_ports: [0]\n", []string{"listeners[0].server_first_ports[0]: 0 is not a port"}},
		{"max_headers_count 0", l + "    common_http_protocol_options: {max_headers_count: 0}\n",
			[]string{"listeners[0].common_http_protocol_options.max_headers_count: value must be greater than or equal to 1"}},
		{"unsupported HTTP protocol option", l + "    common_http_protocol_options: {idle_timeout: 1s}\n",
			[]string{"listeners[0].common_http_protocol_options.idle_timeout: not supported by meshlet"}},
		{"HTTP protocol options on tcp", l + "    protocol: tcp\n    common_http_protocol_options: {max_headers_count: 50}\n",
			[]string{"listeners[0].common_http_protocol_options: HTTP only"}},
		{"unknown HTTP protocol option", l + "    common_http_protocol_options: {max_header_count: 50}\n",
			[]string{"listeners[0].common_http_protocol_options.max_header_count: unknown field"}},
		{"server first port too big", l + "    server_first_ports: [70000]\n", []string{"listeners[0].server_first_ports: want a non-negative integer of 16 bits"}},
		{"bad retry_on", staticCluster + l + "    routes: [{cluster: echo, retry_policy: {retry_on: \"5xx,sometimes\"}}]\n",
			[]string{`listeners[0].routes[0].retry_policy.retry_on: "5xx,sometimes": unknown condition "sometimes"`}},
		{"unknown retry field", staticCluster + l + "    routes: [{cluster: echo, retry_policy: {retry_onn: 5xx}}]\n",
			[]string{"listeners[0].routes[0].retry_policy.retry_onn: unknown field"}},
		{"bad retry duration", staticCluster + l + "    routes: [{cluster: echo, retry_policy: {per_try_timeout: 1m}}]\n",
			[]string{"listeners[0].routes[0].retry_policy.per_try_timeout:"}},
		{"tcp route with hosts", staticCluster + l + "    protocol: tcp\n    routes: [{cluster: echo, match: {hosts: [a]}}]\n",
			[]string{"listeners[0].routes[0].match.hosts: a tcp listener cannot match HTTP hosts"}},
		{"tcp route with retries", staticCluster + l + "    protocol: tcp\n    routes: [{cluster: echo, retry_policy: {retry_on: reset}}]\n",
			[]string{"listeners[0].routes[0].retry_policy: HTTP only"}},
		{"bad route destination", staticCluster + l + "    routes: [{cluster: echo, match: {destination: \"10.0.0.1\"}}]\n",
			[]string{"listeners[0].routes[0].match.destination"}},
		{"empty host", staticCluster + l + "    routes: [{cluster: echo, match: {hosts: [\"\"]}}]\n", []string{"listeners[0].routes[0].match.hosts[0]: empty host name"}},
		{"missing local cluster", "local_cluster: clients\n", []string{`local_cluster: no cluster "clients"`}},
		{"local cluster with priorities", "local_cluster: c\nclusters: [{name: c, load_assignment: {endpoints: [{priority: 1, lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 1}}}}]}]}}]\n",
			[]string{`local_cluster: cluster "c" has endpoint 10.0.0.1:1 at priority 1`}},
		{"bad admin address", "admin: localhost\n", []string{`admin "localhost"`}},
		{"admin not a string", "admin: 15000\n", []string{"admin: want a string or off"}},
		{"bad access log format", "access_log: {format: xml}\n", []string{`access_log.format: "xml" (want text or json)`}},
		{"negative access log flush interval", "access_log: {flush_interval: -1s}\n", []string{`access_log.flush_interval: -1s must be >= 0`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseStatic([]byte(tt.y))
			if cfg != nil {
				t.Errorf("config %+v returned with an error", cfg)
			}
			wantErr(t, err, tt.parts...)
			if !strings.HasPrefix(err.Error(), "discovery: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestLoadStaticFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "sidecar.yaml")
	if err := os.WriteFile(good, []byte(staticCluster), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadStaticFile(good)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, cfg.Clusters[0].Name, "echo")

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadStaticFile(bad)
	wantErr(t, err, "discovery: "+bad+": bogus: unknown field")

	_, err = LoadStaticFile(filepath.Join(dir, "missing.yaml"))
	wantErr(t, err, "discovery: open", "missing.yaml")
}
