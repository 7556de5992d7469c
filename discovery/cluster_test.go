package discovery

import (
	"reflect"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
)

func TestTranslateClusterDefaults(t *testing.T) {
	got, err := TranslateCluster(clusterYAML(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Cluster{
		Name: "echo",
		LB:   lb.DefaultClusterConfig(),
		Endpoints: []lb.Endpoint{{Address: "10.0.0.1:8080", Weight: 1,
			Locality: lb.Locality{Region: "r1", Zone: "a"}}},
		Priorities:             1,
		OverprovisioningFactor: lb.DefaultOverprovisioningFactor,
		ConnectTimeout:         config.DefaultConnectTimeout,
		IdleTimeout:            config.DefaultUpstreamIdleTimeout,
		Protocol:               config.UpstreamHTTP1,
		CircuitBreakers:        circuitbreaker.DefaultThresholds(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

// TestTranslateClusterFields checks that each Envoy field lands in the
// right config / lb field.
func TestTranslateClusterFields(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		check func(t *testing.T, c config.Cluster)
	}{
		{"connect_timeout", "connect_timeout: 2.5s\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.ConnectTimeout, 2500*time.Millisecond)
		}},
		{"type STATIC explicit", "type: STATIC\n", func(t *testing.T, c config.Cluster) {
			eq(t, len(c.Endpoints), 1)
		}},
		{"lb_policy LEAST_REQUEST", "lb_policy: LEAST_REQUEST\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.Policy, lb.PolicyLeastRequest)
		}},
		{"lb_policy RANDOM", "lb_policy: RANDOM\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.Policy, lb.PolicyRandom)
		}},
		{"lb_policy RING_HASH", "lb_policy: RING_HASH\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.Policy, lb.PolicyRingHash)
		}},
		{"lb_policy MAGLEV", "lb_policy: MAGLEV\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.Policy, lb.PolicyMaglev)
		}},
		{"least_request_lb_config", `lb_policy: LEAST_REQUEST
least_request_lb_config:
  choice_count: 3
  active_request_bias: {default_value: 0.5, runtime_key: lr.bias}
  slow_start_config:
    slow_start_window: 10s
    aggression: {default_value: 2, runtime_key: lr.aggression}
    min_weight_percent: {value: 20}
`, func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.LeastRequest, lb.LeastRequestConfig{ChoiceCount: 3, ActiveRequestBias: 0.5})
			eq(t, c.LB.SlowStart, lb.SlowStartConfig{Window: 10 * time.Second, Aggression: 2, MinWeightPercent: 20})
		}},
		{"round_robin_lb_config.slow_start_config", "round_robin_lb_config: {slow_start_config: {slow_start_window: 5s}}\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.SlowStart, lb.SlowStartConfig{Window: 5 * time.Second, Aggression: 1, MinWeightPercent: 10})
		}},
		{"ring_hash_lb_config", "lb_policy: RING_HASH\nring_hash_lb_config: {minimum_ring_size: 2048, maximum_ring_size: 4096, hash_function: MURMUR_HASH_2}\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.Ring, lb.RingConfig{MinimumRingSize: 2048, MaximumRingSize: 4096, Hash: lb.HashMurmur2})
		}},
		{"ring_hash_lb_config defaults", "lb_policy: RING_HASH\nring_hash_lb_config: {}\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.Ring, lb.RingConfig{Hash: lb.HashXX})
		}},
		{"maglev_lb_config.table_size", "lb_policy: MAGLEV\nmaglev_lb_config: {table_size: 5003}\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.MaglevTableSize, uint64(5003))
		}},
		{"common_lb_config zone aware", `common_lb_config:
  healthy_panic_threshold: {value: 30}
  zone_aware_lb_config: {routing_enabled: {value: 40.4}, min_cluster_size: 2, fail_traffic_on_panic: true}
  ignore_new_hosts_until_first_hc: true
`, func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.PanicThreshold, 30.0)
			eq(t, c.LB.ZoneAware, lb.ZoneAwareConfig{RoutingEnabledPercent: 40, MinClusterSize: 2, FailTrafficOnPanic: true})
			eq(t, c.LB.LocalityWeighted, false)
			eq(t, c.IgnoreNewHostsUntilFirstHC, true)
		}},
		{"healthy_panic_threshold 0 disables panic", "common_lb_config: {healthy_panic_threshold: {value: 0}}\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.PanicThreshold, 0.0)
		}},
		{"locality_weighted_lb_config", "common_lb_config: {locality_weighted_lb_config: {}}\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.LocalityWeighted, true)
			eq(t, c.LB.ZoneAware, lb.DefaultZoneAwareConfig())
		}},
		{"consistent_hashing_lb_config", "lb_policy: MAGLEV\ncommon_lb_config: {consistent_hashing_lb_config: {use_hostname_for_hashing: true}}\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.LB.UseHostnameForHashing, true)
		}},
		{"metadata is ignored", "metadata: {filter_metadata: {istio: {config: x}}}\n", func(t *testing.T, c config.Cluster) {
			eq(t, c.Name, "echo")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := TranslateCluster(clusterYAML(t, tt.extra))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestTranslateClusterOutlier(t *testing.T) {
	t.Run("every field", func(t *testing.T) {
		c, err := TranslateCluster(clusterYAML(t, `outlier_detection:
  consecutive_5xx: 7
  interval: 3s
  base_ejection_time: 20s
  max_ejection_percent: 40
  enforcing_consecutive_5xx: 90
  enforcing_success_rate: 80
  success_rate_minimum_hosts: 4
  success_rate_request_volume: 60
  success_rate_stdev_factor: 1500
  consecutive_gateway_failure: 6
  enforcing_consecutive_gateway_failure: 70
  split_external_local_origin_errors: true
  consecutive_local_origin_failure: 8
  enforcing_consecutive_local_origin_failure: 60
  enforcing_local_origin_success_rate: 50
  failure_percentage_threshold: 75
  enforcing_failure_percentage: 40
  enforcing_failure_percentage_local_origin: 30
  failure_percentage_minimum_hosts: 3
  failure_percentage_request_volume: 20
  max_ejection_time: 200s
  max_ejection_time_jitter: 2s
  successful_active_health_check_uneject_host: false
  always_eject_one_host: true
`))
		if err != nil {
			t.Fatal(err)
		}
		want := lb.OutlierConfig{
			Interval: 3 * time.Second, BaseEjectionTime: 20 * time.Second, MaxEjectionTime: 200 * time.Second,
			MaxEjectionTimeJitter: 2 * time.Second, MaxEjectionPercent: 40, AlwaysEjectOneHost: true,
			Consecutive5xx: 7, EnforcingConsecutive5xx: 90,
			ConsecutiveGatewayFailure: 6, EnforcingConsecutiveGatewayFailure: 70,
			SplitExternalLocalOriginErrors: true, ConsecutiveLocalOriginFailure: 8, EnforcingConsecutiveLocalOriginFailure: 60,
			SuccessRateMinimumHosts: 4, SuccessRateRequestVolume: 60, SuccessRateStdevFactor: 1500,
			EnforcingSuccessRate: 80, EnforcingLocalOriginSuccessRate: 50,
			FailurePercentageThreshold: 75, FailurePercentageMinimumHosts: 3, FailurePercentageRequestVolume: 20,
			EnforcingFailurePercentage: 40, EnforcingFailurePercentageLocalOrigin: 30,
			SuccessfulActiveHealthCheckUnejectHost: false,
		}
		if c.Outlier == nil || *c.Outlier != want {
			t.Fatalf("got  %+v\nwant %+v", c.Outlier, want)
		}
	})
	t.Run("empty block takes Envoy's defaults", func(t *testing.T) {
		c, err := TranslateCluster(clusterYAML(t, "outlier_detection: {}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if want := lb.DefaultOutlierConfig(); c.Outlier == nil || *c.Outlier != want {
			t.Fatalf("got %+v, want %+v", c.Outlier, want)
		}
	})
	t.Run("max_ejection_time follows a larger base", func(t *testing.T) {
		c, err := TranslateCluster(clusterYAML(t, "outlier_detection: {base_ejection_time: 400s}\n"))
		if err != nil {
			t.Fatal(err)
		}
		eq(t, c.Outlier.MaxEjectionTime, 400*time.Second)
	})
	t.Run("absent block means off", func(t *testing.T) {
		c, err := TranslateCluster(clusterYAML(t, ""))
		if err != nil {
			t.Fatal(err)
		}
		if c.Outlier != nil {
			t.Fatalf("outlier %+v, want nil", c.Outlier)
		}
	})
}

func TestTranslateClusterHealthChecks(t *testing.T) {
	c, err := TranslateCluster(clusterYAML(t, `health_checks:
  - timeout: 1s
    interval: 2s
    no_traffic_interval: 30s
    no_traffic_healthy_interval: 40s
    unhealthy_interval: 3s
    unhealthy_edge_interval: 4s
    healthy_edge_interval: 5s
    initial_jitter: 0.5s
    interval_jitter: 0.25s
    interval_jitter_percent: 10
    unhealthy_threshold: 3
    healthy_threshold: 2
    http_health_check:
      path: /healthz
      host: echo.local
      expected_statuses: [{start: 200, end: 300}, {start: 404, end: 405}]
  - timeout: 1s
    interval: 10s
    unhealthy_threshold: 1
    healthy_threshold: 1
    http_health_check: {path: /ready}
  - timeout: 1s
    interval: 10s
    unhealthy_threshold: 2
    healthy_threshold: 1
    tcp_health_check: {send: {text: "50494e47"}, receive: [{binary: "UE9ORw=="}]}
  - timeout: 1s
    interval: 10s
    unhealthy_threshold: 2
    healthy_threshold: 1
    grpc_health_check: {service_name: echo.v1.Echo}
common_lb_config: {ignore_new_hosts_until_first_hc: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.HealthChecks) != 4 {
		t.Fatalf("%d health checks, want 4", len(c.HealthChecks))
	}
	full := lb.HealthCheckConfig{
		Timeout: time.Second, Interval: 2 * time.Second,
		NoTrafficInterval: 30 * time.Second, NoTrafficHealthyInterval: 40 * time.Second,
		UnhealthyInterval: 3 * time.Second, UnhealthyEdgeInterval: 4 * time.Second, HealthyEdgeInterval: 5 * time.Second,
		InitialJitter: 500 * time.Millisecond, IntervalJitter: 250 * time.Millisecond, IntervalJitterPercent: 10,
		UnhealthyThreshold: 3, HealthyThreshold: 2,
	}
	eq(t, c.HealthChecks[0], config.HealthCheck{Kind: config.HealthCheckHTTP, HealthCheckConfig: full,
		Path: "/healthz", Host: "echo.local", ExpectedStatuses: [][2]uint32{{200, 300}, {404, 405}}})
	// Unset intervals take Envoy's defaults; host and statuses too.
	defaulted := lb.HealthCheckConfig{Timeout: time.Second, Interval: 10 * time.Second,
		UnhealthyThreshold: 1, HealthyThreshold: 1}.WithDefaults()
	eq(t, c.HealthChecks[1], config.HealthCheck{Kind: config.HealthCheckHTTP, HealthCheckConfig: defaulted,
		Path: "/ready", Host: "echo", ExpectedStatuses: [][2]uint32{{200, 201}}})
	eq(t, c.HealthChecks[1].NoTrafficInterval, 60*time.Second)
	eq(t, c.HealthChecks[2].Kind, config.HealthCheckTCP)
	eq(t, string(c.HealthChecks[2].Send), "PING")
	eq(t, string(c.HealthChecks[2].Receive), "PONG")
	eq(t, c.HealthChecks[3].Kind, config.HealthCheckGRPC)
	eq(t, c.HealthChecks[3].GRPCService, "echo.v1.Echo")
	eq(t, c.IgnoreNewHostsUntilFirstHC, true)
}

func TestTranslateClusterCircuitBreakers(t *testing.T) {
	t.Run("DEFAULT thresholds with a retry budget, HIGH ignored", func(t *testing.T) {
		c, err := TranslateCluster(clusterYAML(t, `circuit_breakers:
  thresholds:
    - priority: HIGH
      max_connections: 1
    - max_connections: 100
      max_pending_requests: 50
      max_requests: 200
      max_retries: 5
      max_connection_pools: 7
      retry_budget: {budget_percent: {value: 25}, min_retry_concurrency: 4}
`))
		if err != nil {
			t.Fatal(err)
		}
		eq(t, c.CircuitBreakers, circuitbreaker.Thresholds{MaxConnections: 100, MaxPendingRequests: 50,
			MaxRequests: 200, MaxRetries: 5, MaxConnectionPools: 7,
			RetryBudget: &circuitbreaker.RetryBudget{BudgetPercent: 25, MinRetryConcurrency: 4}})
	})
	t.Run("unset limits and budget fields take Envoy's defaults", func(t *testing.T) {
		c, err := TranslateCluster(clusterYAML(t, "circuit_breakers: {thresholds: [{priority: DEFAULT, max_requests: 10, retry_budget: {}}]}\n"))
		if err != nil {
			t.Fatal(err)
		}
		want := circuitbreaker.DefaultThresholds()
		want.MaxRequests = 10
		budget := circuitbreaker.DefaultRetryBudget()
		want.RetryBudget = &budget
		eq(t, c.CircuitBreakers, want)
	})
}

func TestTranslateClusterUpstreamProtocol(t *testing.T) {
	const ext = `typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
`
	tests := []struct {
		name     string
		extra    string
		protocol config.UpstreamProtocol
		idle     time.Duration
		maxReq   uint32
	}{
		{"default", "", config.UpstreamHTTP1, config.DefaultUpstreamIdleTimeout, 0},
		{"explicit http2 with common options", ext + `    explicit_http_config: {http2_protocol_options: {}}
    common_http_protocol_options: {idle_timeout: 30s, max_requests_per_connection: 100}
`, config.UpstreamHTTP2, 30 * time.Second, 100},
		{"explicit http1", ext + "    explicit_http_config: {http_protocol_options: {}}\n", config.UpstreamHTTP1, config.DefaultUpstreamIdleTimeout, 0},
		{"idle_timeout 0 disables", ext + "    explicit_http_config: {http_protocol_options: {}}\n    common_http_protocol_options: {idle_timeout: 0s}\n", config.UpstreamHTTP1, 0, 0},
		{"deprecated http2_protocol_options", "http2_protocol_options: {}\n", config.UpstreamHTTP2, config.DefaultUpstreamIdleTimeout, 0},
		{"deprecated common_http_protocol_options", "common_http_protocol_options: {idle_timeout: 10s, max_requests_per_connection: 5}\n", config.UpstreamHTTP1, 10 * time.Second, 5},
		{"deprecated max_requests_per_connection", "max_requests_per_connection: 9\n", config.UpstreamHTTP1, config.DefaultUpstreamIdleTimeout, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := TranslateCluster(clusterYAML(t, tt.extra))
			if err != nil {
				t.Fatal(err)
			}
			eq(t, c.Protocol, tt.protocol)
			eq(t, c.IdleTimeout, tt.idle)
			eq(t, c.MaxRequestsPerConnection, tt.maxReq)
		})
	}
}

// TestTranslateClusterErrors checks that each rejected input names its
// field by its Envoy JSON path.
func TestTranslateClusterErrors(t *testing.T) {
	const ep = "        - endpoint: {address: {socket_address: {address: 10.0.0.2, port_value: 80}}}\n"
	tests := []struct {
		name  string
		y     string // a whole cluster, or extra fields for baseCluster
		parts []string
	}{
		{"name missing", "!load_assignment: {cluster_name: x}\n", []string{"name: required"}},
		{"unsupported cluster type", "type: EDS\n", []string{`cluster "echo"`, "type: EDS not supported"}},
		{"unsupported field", "dns_lookup_family: V4_ONLY\n", []string{"dns_lookup_family: not supported by meshlet"}},
		{"transport_socket", "transport_socket: {name: tls}\n", []string{"transport_socket: not supported"}},
		{"unsupported lb_policy", "lb_policy: CLUSTER_PROVIDED\n", []string{"lb_policy: CLUSTER_PROVIDED not supported"}},
		{"lb config of another policy", "ring_hash_lb_config: {}\n", []string{"ring_hash_lb_config: set, but lb_policy is ROUND_ROBIN"}},
		{"original_dst_lb_config", "original_dst_lb_config: {}\n", []string{"original_dst_lb_config: not supported"}},
		{"choice_count 1", "lb_policy: LEAST_REQUEST\nleast_request_lb_config: {choice_count: 1}\n", []string{"least_request_lb_config.choice_count: 1 must be >= 2"}},
		{"slow start aggression 0", "round_robin_lb_config: {slow_start_config: {aggression: {default_value: 0, runtime_key: k}}}\n", []string{"round_robin_lb_config.slow_start_config.aggression: 0 must be > 0"}},
		{"ring too big", "lb_policy: RING_HASH\nring_hash_lb_config: {maximum_ring_size: 9000000}\n", []string{"ring_hash_lb_config.maximum_ring_size: 9000000 > 8388608"}},
		{"ring min above max", "lb_policy: RING_HASH\nring_hash_lb_config: {maximum_ring_size: 512}\n", []string{"ring_hash_lb_config.maximum_ring_size: 512 < minimum_ring_size 1024"}},
		{"maglev not prime", "lb_policy: MAGLEV\nmaglev_lb_config: {table_size: 1000}\n", []string{`cluster "echo": maglev_lb_config.table_size: 1000 is not prime`}},
		{"panic threshold above 100", "common_lb_config: {healthy_panic_threshold: {value: 150}}\n", []string{"common_lb_config.healthy_panic_threshold.value: 150 not in [0, 100]"}},
		{"update_merge_window", "common_lb_config: {update_merge_window: 1s}\n", []string{"common_lb_config.update_merge_window: not supported"}},
		{"hash_balance_factor", "common_lb_config: {consistent_hashing_lb_config: {hash_balance_factor: 150}}\n", []string{"common_lb_config.consistent_hashing_lb_config.hash_balance_factor: not supported"}},
		{"port out of range", "!name: echo\nload_assignment:\n  endpoints:\n    - lb_endpoints:\n" + ep + "    - lb_endpoints:\n        - endpoint: {address: {socket_address: {address: 10.0.0.3, port_value: 70000}}}\n",
			[]string{`discovery: cluster "echo": load_assignment.endpoints[1].lb_endpoints[0].endpoint.address.socket_address.port_value: 70000 out of range`}},
		{"port missing", "!name: echo\nload_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.0.3}}}}]}]}\n",
			[]string{"load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value: required"}},
		{"host name address", "!name: echo\nload_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: echo.default, port_value: 80}}}}]}]}\n",
			[]string{`socket_address.address: "echo.default" is not an IP address`}},
		{"named port", "!name: echo\nload_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.0.3, named_port: http}}}}]}]}\n",
			[]string{"socket_address.named_port", "named ports are not supported"}},
		{"udp", "!name: echo\nload_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {protocol: UDP, address: 10.0.0.3, port_value: 53}}}}]}]}\n",
			[]string{"socket_address.protocol: UDP not supported"}},
		{"pipe address", "!name: echo\nload_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {pipe: {path: /tmp/s}}}}]}]}\n",
			[]string{"load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.pipe: not supported"}},
		{"endpoint missing", "!name: echo\nload_assignment: {endpoints: [{lb_endpoints: [{health_status: HEALTHY}]}]}\n",
			[]string{"load_assignment.endpoints[0].lb_endpoints[0].endpoint: required"}},
		{"duplicate endpoint", "!name: echo\nload_assignment:\n  endpoints:\n    - lb_endpoints:\n" + ep + ep,
			[]string{"load_assignment.endpoints[0].lb_endpoints[1].endpoint.address: duplicate endpoint 10.0.0.2:80 (also at load_assignment.endpoints[0].lb_endpoints[0].endpoint.address)"}},
		{"endpoint weight 0", "!name: echo\nload_assignment: {endpoints: [{lb_endpoints: [{load_balancing_weight: 0, endpoint: {address: {socket_address: {address: 10.0.0.3, port_value: 80}}}}]}]}\n",
			[]string{"load_assignment.endpoints[0].lb_endpoints[0].load_balancing_weight: 0 must be >= 1"}},
		{"locality weight 0", "!name: echo\nload_assignment: {endpoints: [{load_balancing_weight: 0, lb_endpoints: []}]}\n",
			[]string{"load_assignment.endpoints[0].load_balancing_weight: 0 must be >= 1"}},
		{"priority too high", "!name: echo\nload_assignment: {endpoints: [{priority: 200}]}\n",
			[]string{"load_assignment.endpoints[0].priority: 200 > 127"}},
		{"proximity", "!name: echo\nload_assignment: {endpoints: [{proximity: 1}]}\n",
			[]string{"load_assignment.endpoints[0].proximity: not supported"}},
		{"overprovisioning_factor 0", "!name: echo\nload_assignment: {policy: {overprovisioning_factor: 0}}\n",
			[]string{"load_assignment.policy.overprovisioning_factor: 0 must be > 0"}},
		{"drop_overloads", "!name: echo\nload_assignment: {policy: {drop_overloads: [{category: x, drop_percentage: {numerator: 1}}]}}\n",
			[]string{"load_assignment.policy.drop_overloads: not supported"}},
		{"hash_key not a string", "!name: echo\nload_assignment: {endpoints: [{lb_endpoints: [{metadata: {filter_metadata: {envoy.lb: {hash_key: 3}}}, endpoint: {address: {socket_address: {address: 10.0.0.3, port_value: 80}}}}]}]}\n",
			[]string{`load_assignment.endpoints[0].lb_endpoints[0].metadata.filter_metadata["envoy.lb"].hash_key: want a string`}},
		{"endpoint health_check_config", "!name: echo\nload_assignment: {endpoints: [{lb_endpoints: [{endpoint: {health_check_config: {port_value: 9}, address: {socket_address: {address: 10.0.0.3, port_value: 80}}}}]}]}\n",
			[]string{"lb_endpoints[0].endpoint.health_check_config: not supported"}},
		{"connect_timeout 0", "connect_timeout: 0s\n", []string{"connect_timeout: 0s must be > 0"}},
		{"outlier interval 0", "outlier_detection: {interval: 0s}\n", []string{"outlier_detection.interval: 0s must be > 0"}},
		{"outlier percent above 100", "outlier_detection: {max_ejection_percent: 150}\n", []string{`cluster "echo": outlier_detection.max_ejection_percent: 150 > 100`}},
		{"outlier max below base", "outlier_detection: {base_ejection_time: 60s, max_ejection_time: 10s}\n", []string{"outlier_detection.max_ejection_time"}},
		{"outlier monitors", "outlier_detection: {detect_degraded_hosts: true}\n", []string{"outlier_detection.detect_degraded_hosts: not supported"}},
		{"health check timeout missing", "health_checks: [{interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, tcp_health_check: {}}]\n", []string{"health_checks[0].timeout: required"}},
		{"health check threshold missing", "health_checks: [{timeout: 1s, interval: 1s, healthy_threshold: 1, tcp_health_check: {}}]\n", []string{"health_checks[0].unhealthy_threshold: required"}},
		{"health check without checker", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1}]\n", []string{"health_checks[0]: one of http_health_check"}},
		{"custom health check", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, custom_health_check: {name: x}}]\n", []string{"health_checks[0].custom_health_check: not supported"}},
		{"http path missing", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {host: x}}]\n", []string{"health_checks[0].http_health_check.path: required"}},
		{"expected status range", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {path: /h, expected_statuses: [{start: 200, end: 700}]}}]\n",
			[]string{"health_checks[0].http_health_check.expected_statuses[0].end: 700 not in"}},
		{"http2 health check", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {path: /h, codec_client_type: HTTP2}}]\n",
			[]string{"health_checks[0].http_health_check.codec_client_type: HTTP2 not supported"}},
		{"retriable statuses", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {path: /h, retriable_statuses: [{start: 500, end: 501}]}}]\n",
			[]string{"health_checks[0].http_health_check.retriable_statuses: not supported"}},
		{"bad hex payload", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, tcp_health_check: {send: {text: zz}}}]\n",
			[]string{"health_checks[0].tcp_health_check.send.text", "not hex"}},
		{"two receive blocks", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, tcp_health_check: {receive: [{text: '00'}, {text: '01'}]}}]\n",
			[]string{"health_checks[0].tcp_health_check.receive: 2 blocks"}},
		{"reuse_connection false", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, reuse_connection: false, tcp_health_check: {}}]\n",
			[]string{"health_checks[0].reuse_connection: false not supported"}},
		{"health check host with newline (validate rule)", "health_checks: [{timeout: 1s, interval: 1s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {path: /h, host: \"a\\nb\"}}]\n",
			[]string{"health_checks[0].http_health_check.host:"}},
		{"per_host_thresholds", "circuit_breakers: {per_host_thresholds: [{max_connections: 1}]}\n", []string{"circuit_breakers.per_host_thresholds: not supported"}},
		{"duplicate DEFAULT thresholds", "circuit_breakers: {thresholds: [{max_connections: 1}, {priority: DEFAULT}]}\n", []string{"circuit_breakers.thresholds[1].priority: duplicate thresholds for DEFAULT"}},
		{"track_remaining", "circuit_breakers: {thresholds: [{track_remaining: true}]}\n", []string{"circuit_breakers.thresholds[0].track_remaining: not supported"}},
		{"budget_interval", "circuit_breakers: {thresholds: [{retry_budget: {budget_interval: 1s}}]}\n", []string{"circuit_breakers.thresholds[0].retry_budget.budget_interval: not supported"}},
		{"unknown protocol options", "typed_extension_protocol_options: {envoy.upstreams.other: {\"@type\": type.googleapis.com/envoy.config.core.v3.Http1ProtocolOptions}}\n",
			[]string{`typed_extension_protocol_options["envoy.upstreams.other"]: not supported`}},
		{"protocol options of the wrong type", "typed_extension_protocol_options: {envoy.extensions.upstreams.http.v3.HttpProtocolOptions: {\"@type\": type.googleapis.com/envoy.config.core.v3.Http1ProtocolOptions}}\n",
			[]string{`typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].@type`}},
		{"protocol options without a protocol (validate rule)", "typed_extension_protocol_options: {envoy.extensions.upstreams.http.v3.HttpProtocolOptions: {\"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions}}\n",
			[]string{`typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].upstream_protocol_options: value is required (one of explicit_http_config`}},
		{"auto_config", "typed_extension_protocol_options: {envoy.extensions.upstreams.http.v3.HttpProtocolOptions: {\"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions, auto_config: {}}}\n",
			[]string{`typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].auto_config: not supported`}},
		{"http2 option", "typed_extension_protocol_options: {envoy.extensions.upstreams.http.v3.HttpProtocolOptions: {\"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions, explicit_http_config: {http2_protocol_options: {max_concurrent_streams: 10}}}}\n",
			[]string{"explicit_http_config.http2_protocol_options.max_concurrent_streams: not supported"}},
		{"typed and deprecated options", "http2_protocol_options: {}\ntyped_extension_protocol_options: {envoy.extensions.upstreams.http.v3.HttpProtocolOptions: {\"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions, explicit_http_config: {http_protocol_options: {}}}}\n",
			[]string{"http2_protocol_options: deprecated field cannot be combined"}},
		{"deprecated http1 and http2", "http_protocol_options: {}\nhttp2_protocol_options: {}\n", []string{"http2_protocol_options: cannot be combined with http_protocol_options"}},
		{"request limit twice", "max_requests_per_connection: 1\ncommon_http_protocol_options: {max_requests_per_connection: 2}\n",
			[]string{"max_requests_per_connection: cannot be combined with common_http_protocol_options.max_requests_per_connection"}},
		{"http1 option", "http_protocol_options: {accept_http_10: true}\n", []string{"http_protocol_options.accept_http_10: not supported"}},
		{"common option not implemented", "common_http_protocol_options: {max_connection_duration: 10s}\n", []string{"common_http_protocol_options.max_connection_duration: not supported"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var y string
			if len(tt.y) > 0 && tt.y[0] == '!' {
				y = tt.y[1:]
			} else {
				y = baseCluster + tt.y
			}
			var c = clusterFromYAMLString(t, y)
			_, err := TranslateCluster(c)
			wantErr(t, err, tt.parts...)
		})
	}
}

func TestTranslateClusterNil(t *testing.T) {
	_, err := TranslateCluster(nil)
	wantErr(t, err, "no cluster")
}

func eq[T any](t *testing.T, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}
