package discovery

import (
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet-dev/meshlet/lb"
)

// translateOutlier reads outlier_detection; unset fields take Envoy's
// defaults (lb.DefaultOutlierConfig). monitors and detect_degraded_hosts
// have no counterpart in lb and are rejected.
func translateOutlier(p path, od *clusterv3.OutlierDetection) (*lb.OutlierConfig, error) {
	cfg := lb.DefaultOutlierConfig()
	counts := []struct {
		name string
		src  *wrapperspb.UInt32Value
		dst  *uint32
	}{
		{"consecutive_5xx", od.GetConsecutive_5Xx(), &cfg.Consecutive5xx},
		{"max_ejection_percent", od.GetMaxEjectionPercent(), &cfg.MaxEjectionPercent},
		{"enforcing_consecutive_5xx", od.GetEnforcingConsecutive_5Xx(), &cfg.EnforcingConsecutive5xx},
		{"enforcing_success_rate", od.GetEnforcingSuccessRate(), &cfg.EnforcingSuccessRate},
		{"success_rate_minimum_hosts", od.GetSuccessRateMinimumHosts(), &cfg.SuccessRateMinimumHosts},
		{"success_rate_request_volume", od.GetSuccessRateRequestVolume(), &cfg.SuccessRateRequestVolume},
		{"success_rate_stdev_factor", od.GetSuccessRateStdevFactor(), &cfg.SuccessRateStdevFactor},
		{"consecutive_gateway_failure", od.GetConsecutiveGatewayFailure(), &cfg.ConsecutiveGatewayFailure},
		{"enforcing_consecutive_gateway_failure", od.GetEnforcingConsecutiveGatewayFailure(), &cfg.EnforcingConsecutiveGatewayFailure},
		{"consecutive_local_origin_failure", od.GetConsecutiveLocalOriginFailure(), &cfg.ConsecutiveLocalOriginFailure},
		{"enforcing_consecutive_local_origin_failure", od.GetEnforcingConsecutiveLocalOriginFailure(), &cfg.EnforcingConsecutiveLocalOriginFailure},
		{"enforcing_local_origin_success_rate", od.GetEnforcingLocalOriginSuccessRate(), &cfg.EnforcingLocalOriginSuccessRate},
		{"failure_percentage_threshold", od.GetFailurePercentageThreshold(), &cfg.FailurePercentageThreshold},
		{"enforcing_failure_percentage", od.GetEnforcingFailurePercentage(), &cfg.EnforcingFailurePercentage},
		{"enforcing_failure_percentage_local_origin", od.GetEnforcingFailurePercentageLocalOrigin(), &cfg.EnforcingFailurePercentageLocalOrigin},
		{"failure_percentage_minimum_hosts", od.GetFailurePercentageMinimumHosts(), &cfg.FailurePercentageMinimumHosts},
		{"failure_percentage_request_volume", od.GetFailurePercentageRequestVolume(), &cfg.FailurePercentageRequestVolume},
	}
	durations := []struct {
		name     string
		src      *durationpb.Duration
		dst      *time.Duration
		positive bool
	}{
		{"interval", od.GetInterval(), &cfg.Interval, true},
		{"base_ejection_time", od.GetBaseEjectionTime(), &cfg.BaseEjectionTime, true},
		{"max_ejection_time", od.GetMaxEjectionTime(), &cfg.MaxEjectionTime, true},
		{"max_ejection_time_jitter", od.GetMaxEjectionTimeJitter(), &cfg.MaxEjectionTimeJitter, false},
	}
	handled := []string{"split_external_local_origin_errors", "successful_active_health_check_uneject_host", "always_eject_one_host"}
	for _, f := range counts {
		handled = append(handled, f.name)
	}
	for _, f := range durations {
		handled = append(handled, f.name)
	}
	if err := rejectUnsupported(p, od, handled...); err != nil {
		return nil, err
	}

	for _, f := range counts {
		*f.dst = u32(f.src, *f.dst)
	}
	for _, f := range durations {
		if f.src == nil {
			continue
		}
		var err error
		if f.positive {
			*f.dst, err = positiveDuration(p.field(f.name), f.src)
		} else {
			*f.dst, err = optDuration(p.field(f.name), f.src, 0)
		}
		if err != nil {
			return nil, err
		}
	}
	// Envoy's max_ejection_time default follows a larger base_ejection_time.
	if od.GetMaxEjectionTime() == nil {
		cfg.MaxEjectionTime = max(lb.DefaultOutlierConfig().MaxEjectionTime, cfg.BaseEjectionTime)
	}
	cfg.SplitExternalLocalOriginErrors = od.GetSplitExternalLocalOriginErrors()
	cfg.SuccessfulActiveHealthCheckUnejectHost = boolOr(od.GetSuccessfulActiveHealthCheckUnejectHost(), cfg.SuccessfulActiveHealthCheckUnejectHost)
	cfg.AlwaysEjectOneHost = boolOr(od.GetAlwaysEjectOneHost(), cfg.AlwaysEjectOneHost)
	if err := cfg.Validate(); err != nil {
		return nil, lbError(err)
	}
	return &cfg, nil
}
