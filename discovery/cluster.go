package discovery

import (
	"errors"
	"fmt"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
)

// clusterFields are the Cluster fields meshlet reads; any other set field
// is an error. metadata is carried by Envoy for filters and stats and
// changes nothing here, so it is accepted and ignored.
var clusterFields = []string{
	"name", "type", "connect_timeout", "lb_policy", "load_assignment",
	"health_checks", "circuit_breakers", "outlier_detection", "common_lb_config",
	"ring_hash_lb_config", "maglev_lb_config", "least_request_lb_config", "round_robin_lb_config",
	"typed_extension_protocol_options",
	// Deprecated in favour of typed_extension_protocol_options, still in v1.40.
	"max_requests_per_connection", "common_http_protocol_options",
	"http_protocol_options", "http2_protocol_options",
	"metadata",
}

// TranslateCluster translates an Envoy v3 Cluster of type STATIC (or unset)
// with an inline load_assignment into the data plane's cluster: balancing
// policy and knobs, endpoints, outlier detection, active health checks,
// circuit breakers and the upstream HTTP protocol. Unset fields take
// Envoy's defaults, except the upstream idle timeout
// (config.DefaultUpstreamIdleTimeout). Any set field meshlet does not
// implement is an error; errors name the field by its Envoy JSON path.
func TranslateCluster(c *clusterv3.Cluster) (config.Cluster, error) {
	out, err := translateCluster(c)
	if err != nil {
		return config.Cluster{}, fmt.Errorf("discovery: cluster %q: %w", c.GetName(), err)
	}
	return out, nil
}

// translateCluster is TranslateCluster with errors relative to the cluster.
func translateCluster(c *clusterv3.Cluster) (config.Cluster, error) {
	var root path
	if c == nil {
		return config.Cluster{}, root.errorf("no cluster")
	}
	if c.GetName() == "" {
		return config.Cluster{}, root.field("name").errorf("required")
	}
	if err := rejectUnsupported(root, c, clusterFields...); err != nil {
		return config.Cluster{}, err
	}
	// Only STATIC clusters carry their endpoints; EDS will reuse the rest
	// of this translation with endpoints from TranslateClusterLoadAssignment.
	if t := c.GetType(); t != clusterv3.Cluster_STATIC {
		return config.Cluster{}, root.field("type").errorf("%s not supported in a static config (want STATIC)", t)
	}
	out := config.Cluster{
		Name:                   c.GetName(),
		LB:                     lb.DefaultClusterConfig(),
		OverprovisioningFactor: lb.DefaultOverprovisioningFactor,
		ConnectTimeout:         config.DefaultConnectTimeout,
		IdleTimeout:            config.DefaultUpstreamIdleTimeout,
		Protocol:               config.UpstreamHTTP1,
		CircuitBreakers:        circuitbreaker.DefaultThresholds(),
	}
	var err error
	if c.ConnectTimeout != nil {
		if out.ConnectTimeout, err = positiveDuration(root.field("connect_timeout"), c.ConnectTimeout); err != nil {
			return config.Cluster{}, err
		}
	}
	if err := translateBalancing(root, c, &out); err != nil {
		return config.Cluster{}, err
	}
	if cla := c.GetLoadAssignment(); cla != nil {
		p := root.field("load_assignment")
		out.Endpoints, out.Priorities, out.OverprovisioningFactor, out.WeightedPriorityHealth, err = translateLoadAssignment(p, cla)
		if err != nil {
			return config.Cluster{}, err
		}
	}
	if od := c.GetOutlierDetection(); od != nil {
		if out.Outlier, err = translateOutlier(root.field("outlier_detection"), od); err != nil {
			return config.Cluster{}, err
		}
	}
	for i, hc := range c.GetHealthChecks() {
		h, err := translateHealthCheck(root.field("health_checks").index(i), hc, c.GetName())
		if err != nil {
			return config.Cluster{}, err
		}
		out.HealthChecks = append(out.HealthChecks, h)
	}
	if cb := c.GetCircuitBreakers(); cb != nil {
		if out.CircuitBreakers, err = translateCircuitBreakers(root.field("circuit_breakers"), cb); err != nil {
			return config.Cluster{}, err
		}
	}
	if err := translateUpstreamProtocol(root, c, &out); err != nil {
		return config.Cluster{}, err
	}
	if err := validateClusterProto(c); err != nil {
		return config.Cluster{}, err
	}
	return out, checkCluster(&out)
}

// validateClusterProto applies Envoy's protoc-gen-validate rules. Envoy
// requires load_assignment.cluster_name even for a static cluster, where
// it means nothing; meshlet lets it default to the cluster's name.
func validateClusterProto(c *clusterv3.Cluster) error {
	if cla := c.GetLoadAssignment(); cla != nil && cla.GetClusterName() == "" {
		c = proto.Clone(c).(*clusterv3.Cluster)
		c.LoadAssignment.ClusterName = c.GetName()
	}
	return validateProto("", c)
}

// checkCluster runs lb's validation of the translated values, a safety net
// behind the per-field checks above (its errors name Envoy fields too).
func checkCluster(c *config.Cluster) error {
	if err := c.LB.Validate(); err != nil {
		return lbError(err)
	}
	if c.Outlier != nil {
		if err := c.Outlier.Validate(); err != nil {
			return lbError(err)
		}
	}
	for i := range c.HealthChecks {
		if err := c.HealthChecks[i].Validate(); err != nil {
			return path("health_checks").index(i).wrap(lbError(err))
		}
	}
	return nil
}

// lbError drops lb's package prefix: its messages already start with the
// Envoy field they are about, which reads as a path below ours.
func lbError(err error) error {
	return errors.New(strings.TrimPrefix(err.Error(), "lb: "))
}
