package discovery

import (
	"math"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
)

// Envoy's limits on the hashing policies' sizes.
const (
	maxRingSize       = 8388608
	maxMaglevTableLen = 5000011
)

// translateBalancing reads lb_policy, its per-policy lb_config and
// common_lb_config into out.LB (and IgnoreNewHostsUntilFirstHC).
func translateBalancing(root path, c *clusterv3.Cluster, out *config.Cluster) error {
	cfg := &out.LB
	policy, err := lb.ParsePolicy(c.GetLbPolicy().String())
	if err != nil {
		return root.field("lb_policy").errorf("%s not supported (want ROUND_ROBIN, LEAST_REQUEST, RANDOM, RING_HASH or MAGLEV)", c.GetLbPolicy())
	}
	cfg.Policy = policy

	// The lb_config oneof must belong to the chosen policy: Envoy would
	// ignore another policy's block, which is almost certainly a mistake.
	var cfgName string
	var cfgPolicy lb.Policy
	switch v := c.GetLbConfig().(type) {
	case *clusterv3.Cluster_RoundRobinLbConfig_:
		cfgName, cfgPolicy = "round_robin_lb_config", lb.PolicyRoundRobin
		p := root.field(cfgName)
		if err := rejectUnsupported(p, v.RoundRobinLbConfig, "slow_start_config"); err != nil {
			return err
		}
		if ss := v.RoundRobinLbConfig.GetSlowStartConfig(); ss != nil {
			if cfg.SlowStart, err = translateSlowStart(p.field("slow_start_config"), ss); err != nil {
				return err
			}
		}
	case *clusterv3.Cluster_LeastRequestLbConfig_:
		cfgName, cfgPolicy = "least_request_lb_config", lb.PolicyLeastRequest
		if err := translateLeastRequest(root.field(cfgName), v.LeastRequestLbConfig, cfg); err != nil {
			return err
		}
	case *clusterv3.Cluster_RingHashLbConfig_:
		cfgName, cfgPolicy = "ring_hash_lb_config", lb.PolicyRingHash
		if err := translateRingHash(root.field(cfgName), v.RingHashLbConfig, cfg); err != nil {
			return err
		}
	case *clusterv3.Cluster_MaglevLbConfig_:
		cfgName, cfgPolicy = "maglev_lb_config", lb.PolicyMaglev
		p := root.field(cfgName)
		if err := rejectUnsupported(p, v.MaglevLbConfig, "table_size"); err != nil {
			return err
		}
		if ts := v.MaglevLbConfig.GetTableSize(); ts != nil {
			if ts.GetValue() > maxMaglevTableLen {
				return p.field("table_size").errorf("%d > %d", ts.GetValue(), maxMaglevTableLen)
			}
			cfg.MaglevTableSize = ts.GetValue()
		}
	}
	if cfgName != "" && cfgPolicy != policy {
		return root.field(cfgName).errorf("set, but lb_policy is %s", policy)
	}
	if cl := c.GetCommonLbConfig(); cl != nil {
		return translateCommonLB(root.field("common_lb_config"), cl, out)
	}
	return nil
}

func translateLeastRequest(p path, lr *clusterv3.Cluster_LeastRequestLbConfig, cfg *lb.ClusterConfig) error {
	if err := rejectUnsupported(p, lr, "choice_count", "active_request_bias", "slow_start_config"); err != nil {
		return err
	}
	if cc := lr.GetChoiceCount(); cc != nil {
		if cc.GetValue() < 2 {
			return p.field("choice_count").errorf("%d must be >= 2", cc.GetValue())
		}
		cfg.LeastRequest.ChoiceCount = cc.GetValue()
	}
	if b := lr.GetActiveRequestBias(); b != nil {
		v, err := runtimeDouble(p.field("active_request_bias"), b)
		if err != nil {
			return err
		}
		if v < 0 {
			return p.field("active_request_bias").errorf("%v must be >= 0", v)
		}
		cfg.LeastRequest.ActiveRequestBias = v
	}
	if ss := lr.GetSlowStartConfig(); ss != nil {
		var err error
		if cfg.SlowStart, err = translateSlowStart(p.field("slow_start_config"), ss); err != nil {
			return err
		}
	}
	return nil
}

func translateRingHash(p path, rh *clusterv3.Cluster_RingHashLbConfig, cfg *lb.ClusterConfig) error {
	if err := rejectUnsupported(p, rh, "minimum_ring_size", "maximum_ring_size", "hash_function"); err != nil {
		return err
	}
	minSize, maxSize := u64(rh.GetMinimumRingSize(), 1024), u64(rh.GetMaximumRingSize(), maxRingSize)
	switch {
	case minSize > maxRingSize:
		return p.field("minimum_ring_size").errorf("%d > %d", minSize, maxRingSize)
	case maxSize > maxRingSize:
		return p.field("maximum_ring_size").errorf("%d > %d", maxSize, maxRingSize)
	case minSize > maxSize:
		return p.field("maximum_ring_size").errorf("%d < minimum_ring_size %d (Envoy's default minimum is 1024)", maxSize, minSize)
	}
	cfg.Ring.MinimumRingSize = u64(rh.GetMinimumRingSize(), 0)
	cfg.Ring.MaximumRingSize = u64(rh.GetMaximumRingSize(), 0)
	switch h := rh.GetHashFunction(); h {
	case clusterv3.Cluster_RingHashLbConfig_XX_HASH:
		cfg.Ring.Hash = lb.HashXX
	case clusterv3.Cluster_RingHashLbConfig_MURMUR_HASH_2:
		cfg.Ring.Hash = lb.HashMurmur2
	default:
		return p.field("hash_function").errorf("%s not supported (want XX_HASH or MURMUR_HASH_2)", h)
	}
	return nil
}

// translateSlowStart reads a SlowStartConfig; unset knobs keep Envoy's
// defaults (aggression 1, min_weight_percent 10).
func translateSlowStart(p path, ss *clusterv3.Cluster_SlowStartConfig) (lb.SlowStartConfig, error) {
	out := lb.DefaultClusterConfig().SlowStart
	if err := rejectUnsupported(p, ss, "slow_start_window", "aggression", "min_weight_percent"); err != nil {
		return out, err
	}
	var err error
	if out.Window, err = optDuration(p.field("slow_start_window"), ss.GetSlowStartWindow(), 0); err != nil {
		return out, err
	}
	if a := ss.GetAggression(); a != nil {
		if out.Aggression, err = runtimeDouble(p.field("aggression"), a); err != nil {
			return out, err
		}
		if out.Aggression <= 0 {
			return out, p.field("aggression").errorf("%v must be > 0", out.Aggression)
		}
	}
	if mw := ss.GetMinWeightPercent(); mw != nil {
		if out.MinWeightPercent, err = percent(p.field("min_weight_percent"), mw); err != nil {
			return out, err
		}
	}
	return out, nil
}

// translateCommonLB reads common_lb_config.
func translateCommonLB(p path, cl *clusterv3.Cluster_CommonLbConfig, out *config.Cluster) error {
	if err := rejectUnsupported(p, cl, "healthy_panic_threshold", "zone_aware_lb_config",
		"locality_weighted_lb_config", "ignore_new_hosts_until_first_hc", "consistent_hashing_lb_config"); err != nil {
		return err
	}
	cfg := &out.LB
	var err error
	if t := cl.GetHealthyPanicThreshold(); t != nil {
		if cfg.PanicThreshold, err = percent(p.field("healthy_panic_threshold"), t); err != nil {
			return err
		}
	}
	out.IgnoreNewHostsUntilFirstHC = cl.GetIgnoreNewHostsUntilFirstHc()
	switch v := cl.GetLocalityConfigSpecifier().(type) {
	case *clusterv3.Cluster_CommonLbConfig_ZoneAwareLbConfig_:
		// The v1.40 Cluster's ZoneAwareLbConfig has no force_local_zone or
		// locality_basis (only the load_balancing_policy extensions do),
		// so those keep their defaults: off and HEALTHY_HOSTS_NUM.
		za, zp := v.ZoneAwareLbConfig, p.field("zone_aware_lb_config")
		if err := rejectUnsupported(zp, za, "routing_enabled", "min_cluster_size", "fail_traffic_on_panic"); err != nil {
			return err
		}
		if re := za.GetRoutingEnabled(); re != nil {
			pct, err := percent(zp.field("routing_enabled"), re)
			if err != nil {
				return err
			}
			// Envoy rounds the percentage to an integer.
			cfg.ZoneAware.RoutingEnabledPercent = uint32(math.Round(pct))
		}
		cfg.ZoneAware.MinClusterSize = u64(za.GetMinClusterSize(), cfg.ZoneAware.MinClusterSize)
		cfg.ZoneAware.FailTrafficOnPanic = za.GetFailTrafficOnPanic()
	case *clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_:
		cfg.LocalityWeighted = true
	}
	if ch := cl.GetConsistentHashingLbConfig(); ch != nil {
		if err := rejectUnsupported(p.field("consistent_hashing_lb_config"), ch, "use_hostname_for_hashing"); err != nil {
			return err
		}
		cfg.UseHostnameForHashing = ch.GetUseHostnameForHashing()
	}
	return nil
}

// percent reads an envoy.type.v3.Percent, which must be in [0, 100].
func percent(p path, v *typev3.Percent) (float64, error) {
	if err := rejectUnsupported(p, v, "value"); err != nil {
		return 0, err
	}
	x := v.GetValue()
	if math.IsNaN(x) || x < 0 || x > 100 {
		return 0, p.field("value").errorf("%v not in [0, 100]", x)
	}
	return x, nil
}

// runtimeDouble reads a RuntimeDouble's default_value. meshlet has no
// runtime layer, so runtime_key (which Envoy requires to be named) can
// never override it and is accepted only as a name.
func runtimeDouble(p path, v *corev3.RuntimeDouble) (float64, error) {
	x := v.GetDefaultValue()
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, p.field("default_value").errorf("%v is not a finite number", x)
	}
	return x, nil
}
