package lb

import (
	"fmt"
	"time"
)

// HealthCheckConfig holds the timing and threshold fields of a cluster's
// active health check. A zero optional duration means "not set" and takes
// Envoy's default in WithDefaults. Durations are used at millisecond
// granularity, as Envoy reads them.
type HealthCheckConfig struct {
	// Timeout for one check (required). The data plane enforces it; a
	// timeout is reported as FailureNetwork.
	Timeout time.Duration
	// Interval between checks of a healthy host (required).
	Interval time.Duration
	// NoTrafficInterval replaces the intervals while the cluster has never
	// carried traffic (default 60 s).
	NoTrafficInterval time.Duration
	// NoTrafficHealthyInterval is used instead for settled healthy hosts of
	// such a cluster (default NoTrafficInterval).
	NoTrafficHealthyInterval time.Duration
	// UnhealthyInterval is used after a failed check (default Interval).
	UnhealthyInterval time.Duration
	// UnhealthyEdgeInterval is used after a failure that has not yet made
	// the host unhealthy (default UnhealthyInterval).
	UnhealthyEdgeInterval time.Duration
	// HealthyEdgeInterval is used after a success that has not yet made the
	// host healthy (default Interval).
	HealthyEdgeInterval time.Duration
	// InitialJitter delays each host's first check by up to this much.
	InitialJitter time.Duration
	// IntervalJitter adds up to this much to each interval.
	IntervalJitter time.Duration
	// IntervalJitterPercent adds up to this % of the interval.
	IntervalJitterPercent uint32
	// UnhealthyThreshold is the run of failures that makes a host unhealthy
	// (immediate failures aside) (required).
	UnhealthyThreshold uint32
	// HealthyThreshold is the run of successes that makes a failed host
	// healthy (required).
	HealthyThreshold uint32
	// MinInterval and MaxInterval clamp every interval (Envoy runtime keys
	// health_check.min_interval / health_check.max_interval); 0 = no clamp.
	MinInterval, MaxInterval time.Duration
}

// WithDefaults returns c with Envoy's defaults filled into unset optional
// intervals. Defaults chain (unhealthy_edge_interval defaults to the possibly
// defaulted unhealthy_interval), so the order below matters.
func (c HealthCheckConfig) WithDefaults() HealthCheckConfig {
	if c.NoTrafficInterval == 0 {
		c.NoTrafficInterval = 60 * time.Second
	}
	if c.NoTrafficHealthyInterval == 0 {
		c.NoTrafficHealthyInterval = c.NoTrafficInterval
	}
	if c.UnhealthyInterval == 0 {
		c.UnhealthyInterval = c.Interval
	}
	if c.UnhealthyEdgeInterval == 0 {
		c.UnhealthyEdgeInterval = c.UnhealthyInterval
	}
	if c.HealthyEdgeInterval == 0 {
		c.HealthyEdgeInterval = c.Interval
	}
	return c
}

// Validate reports the first invalid field, named by its proto field.
func (c HealthCheckConfig) Validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("lb: health_check.timeout: %v, required and must be > 0", c.Timeout)
	}
	if c.Interval <= 0 {
		return fmt.Errorf("lb: health_check.interval: %v, required and must be > 0", c.Interval)
	}
	if c.UnhealthyThreshold == 0 {
		return fmt.Errorf("lb: health_check.unhealthy_threshold: required and must be > 0")
	}
	if c.HealthyThreshold == 0 {
		return fmt.Errorf("lb: health_check.healthy_threshold: required and must be > 0")
	}
	optional := []struct {
		name string
		d    time.Duration
	}{
		{"no_traffic_interval", c.NoTrafficInterval},
		{"no_traffic_healthy_interval", c.NoTrafficHealthyInterval},
		{"unhealthy_interval", c.UnhealthyInterval},
		{"unhealthy_edge_interval", c.UnhealthyEdgeInterval},
		{"healthy_edge_interval", c.HealthyEdgeInterval},
		{"initial_jitter", c.InitialJitter},
		{"interval_jitter", c.IntervalJitter},
		{"min_interval", c.MinInterval},
		{"max_interval", c.MaxInterval},
	}
	for _, f := range optional {
		if f.d < 0 {
			return fmt.Errorf("lb: health_check.%s: %v < 0", f.name, f.d)
		}
	}
	return nil
}

// HealthTransition is what a check result did to the host's health.
type HealthTransition int

const (
	// Unchanged: the health did not change and no change is under way.
	Unchanged HealthTransition = iota
	// Changed: the host became healthy, unhealthy, degraded or not degraded.
	Changed
	// ChangePending: the result points to a change the threshold has not
	// confirmed yet.
	ChangePending
)

// String returns Envoy's enum name.
func (t HealthTransition) String() string {
	switch t {
	case Unchanged:
		return "Unchanged"
	case Changed:
		return "Changed"
	case ChangePending:
		return "ChangePending"
	}
	return fmt.Sprintf("HealthTransition(%d)", int(t))
}

// CheckResult is the outcome of the check that just finished.
type CheckResult int

const (
	// CheckHealthy: the check passed.
	CheckHealthy CheckResult = iota
	// CheckUnhealthy: the check failed.
	CheckUnhealthy
)

// CheckFailure classifies a failed check, which decides whether the
// unhealthy threshold applies.
type CheckFailure int

const (
	// FailureNetwork: connect error, reset or timeout; counts toward
	// UnhealthyThreshold, since the network may be at fault.
	FailureNetwork CheckFailure = iota
	// FailureActive: the host answered and said no (status outside the
	// expected ones and not retriable, or a passive ejection); the host is
	// unhealthy at once.
	FailureActive
	// FailureRetriable: a status in retriable_statuses; counts toward
	// UnhealthyThreshold.
	FailureRetriable
)

// HostHealthCheck is one host's active health-check state. A new host is
// failing (FAILED_ACTIVE_HC) and never checked; its first passing check
// makes it healthy at once to speed up start-up. It is not safe for
// concurrent use; drive it from the main loop.
type HostHealthCheck struct {
	failed, degraded bool
	checked          bool
	numHealthy       uint32
	numUnhealthy     uint32
}

// NewHostHealthCheck returns the state of a host that was just added.
func NewHostHealthCheck() *HostHealthCheck {
	return &HostHealthCheck{failed: true}
}

// OnSuccess records a passing check; degraded is whether the response asked
// for the host to be degraded (x-envoy-degraded). cfg supplies
// HealthyThreshold.
func (h *HostHealthCheck) OnSuccess(degraded bool, cfg HealthCheckConfig) HealthTransition {
	h.numUnhealthy = 0
	t := Unchanged
	if h.failed {
		// The first check short-circuits the threshold, so it does not count
		// toward numHealthy either.
		if !h.checked {
			h.failed, t = false, Changed
		} else if h.numHealthy++; h.numHealthy == cfg.HealthyThreshold {
			h.failed, t = false, Changed
		} else {
			t = ChangePending
		}
	}
	if degraded != h.degraded {
		h.degraded = degraded
		// A degraded toggle is a change, but must not hide a pending one.
		if t == Unchanged {
			t = Changed
		}
	}
	h.checked = true
	return t
}

// OnFailure records a failed check; cfg supplies UnhealthyThreshold. A host
// that is already failing stays so (Unchanged); the degraded flag is left
// as it was, as Envoy does.
func (h *HostHealthCheck) OnFailure(kind CheckFailure, cfg HealthCheckConfig) HealthTransition {
	h.numHealthy = 0
	t := Unchanged
	if !h.failed {
		if kind == FailureActive {
			h.failed, t = true, Changed
		} else if h.numUnhealthy++; h.numUnhealthy == cfg.UnhealthyThreshold {
			h.failed, t = true, Changed
		} else {
			t = ChangePending
		}
	}
	h.checked = true
	return t
}

// Healthy reports whether the host passes active health checking.
func (h *HostHealthCheck) Healthy() bool { return !h.failed }

// Degraded reports whether the last passing check asked for degraded.
func (h *HostHealthCheck) Degraded() bool { return h.degraded }

// FailedActiveHC reports Envoy's FAILED_ACTIVE_HC flag (the inverse of Healthy).
func (h *HostHealthCheck) FailedActiveHC() bool { return h.failed }

// msOf converts to Envoy's whole milliseconds; negatives count as 0.
func msOf(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}

// NextCheckInterval returns the delay before the host's next check after a
// check with result r and transition t. clusterHadTraffic is whether the
// cluster ever carried upstream traffic; until then Envoy checks slowly.
// Unset optional intervals take their defaults.
func NextCheckInterval(cfg HealthCheckConfig, r CheckResult, t HealthTransition, clusterHadTraffic bool, rnd Random) time.Duration {
	cfg = cfg.WithDefaults()
	var base time.Duration
	switch {
	case !clusterHadTraffic && r == CheckHealthy && t != ChangePending:
		base = cfg.NoTrafficHealthyInterval
	case !clusterHadTraffic:
		base = cfg.NoTrafficInterval
	case r == CheckUnhealthy && t == ChangePending:
		base = cfg.UnhealthyEdgeInterval
	case r == CheckUnhealthy:
		base = cfg.UnhealthyInterval
	case t == ChangePending:
		base = cfg.HealthyEdgeInterval
	default:
		base = cfg.Interval
	}
	return withJitter(cfg, msOf(base), msOf(cfg.IntervalJitter), rnd)
}

// FirstCheckDelay returns the delay before a new host's first check: none
// without initial jitter, else a random part of it (at least 1 ms).
func FirstCheckDelay(cfg HealthCheckConfig, rnd Random) time.Duration {
	jitter := msOf(cfg.InitialJitter)
	if jitter == 0 {
		return 0
	}
	return withJitter(cfg, 0, jitter, rnd)
}

// withJitter adds the percent jitter, then the absolute jitter (one random
// draw each, in that order, only when its modulus is positive), then clamps
// to [MinInterval, MaxInterval] and to at least 1 ms so timers never spin.
func withJitter(cfg HealthCheckConfig, baseMs, jitterMs uint64, rnd Random) time.Duration {
	if mod := uint64(cfg.IntervalJitterPercent) * baseMs / 100; mod > 0 {
		baseMs += rnd.Uint64() % mod
	}
	if jitterMs > 0 {
		baseMs += rnd.Uint64() % jitterMs
	}
	if maxMs := msOf(cfg.MaxInterval); maxMs > 0 {
		baseMs = min(baseMs, maxMs)
	}
	baseMs = max(1, baseMs, msOf(cfg.MinInterval))
	return time.Duration(baseMs) * time.Millisecond
}
