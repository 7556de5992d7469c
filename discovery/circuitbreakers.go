package discovery

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
)

// translateCircuitBreakers reads circuit_breakers.thresholds. meshlet routes
// every request at the DEFAULT routing priority (it has no route priority
// setting), so only DEFAULT thresholds can ever apply; HIGH thresholds are
// checked like DEFAULT ones, so that configs written for Envoy load, and
// then dropped. Unset limits take Envoy's defaults
// (circuitbreaker.DefaultThresholds).
func translateCircuitBreakers(p path, cb *clusterv3.CircuitBreakers) (circuitbreaker.Thresholds, error) {
	out := circuitbreaker.DefaultThresholds()
	if err := rejectUnsupported(p, cb, "thresholds"); err != nil {
		return out, err
	}
	seen := map[corev3.RoutingPriority]bool{}
	for i, t := range cb.GetThresholds() {
		tp := p.field("thresholds").index(i)
		th, err := translateThresholds(tp, t)
		if err != nil {
			return out, err
		}
		prio := t.GetPriority()
		if seen[prio] {
			return out, tp.field("priority").errorf("duplicate thresholds for %s", prio)
		}
		seen[prio] = true
		switch prio {
		case corev3.RoutingPriority_DEFAULT:
			out = th
		case corev3.RoutingPriority_HIGH:
		default:
			return out, tp.field("priority").errorf("unknown routing priority %s", prio)
		}
	}
	return out, nil
}

// translateThresholds reads one priority's thresholds. track_remaining is
// rejected: meshlet has no remaining_* gauges yet.
func translateThresholds(p path, t *clusterv3.CircuitBreakers_Thresholds) (circuitbreaker.Thresholds, error) {
	out := circuitbreaker.DefaultThresholds()
	if err := rejectUnsupported(p, t, "priority", "max_connections", "max_pending_requests",
		"max_requests", "max_retries", "retry_budget", "max_connection_pools"); err != nil {
		return out, err
	}
	out.MaxConnections = u32(t.GetMaxConnections(), out.MaxConnections)
	out.MaxPendingRequests = u32(t.GetMaxPendingRequests(), out.MaxPendingRequests)
	out.MaxRequests = u32(t.GetMaxRequests(), out.MaxRequests)
	out.MaxRetries = u32(t.GetMaxRetries(), out.MaxRetries)
	out.MaxConnectionPools = u32(t.GetMaxConnectionPools(), out.MaxConnectionPools)
	if rb := t.GetRetryBudget(); rb != nil {
		bp := p.field("retry_budget")
		if err := rejectUnsupported(bp, rb, "budget_percent", "min_retry_concurrency"); err != nil {
			return out, err
		}
		budget := circuitbreaker.DefaultRetryBudget()
		if pct := rb.GetBudgetPercent(); pct != nil {
			var err error
			if budget.BudgetPercent, err = percent(bp.field("budget_percent"), pct); err != nil {
				return out, err
			}
		}
		budget.MinRetryConcurrency = u32(rb.GetMinRetryConcurrency(), budget.MinRetryConcurrency)
		out.RetryBudget = &budget
	}
	return out, nil
}
