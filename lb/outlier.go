// This file is over 600 lines: Envoy's outlier detection is one state
// machine (consecutive errors, success rate, failure percentage, ejection
// and its back-off) whose parts read the same per-host state.

package lb

import (
	"fmt"
	"math"
	"time"
)

// OutlierConfig is a cluster's outlier_detection block. Go zero values cannot
// mean "unset" for fields whose zero is meaningful (an enforcing percentage
// of 0 disables a detector), so start from DefaultOutlierConfig and override.
// Durations are used at millisecond granularity, as Envoy reads them.
type OutlierConfig struct {
	// Interval is the time between analysis sweeps (Tick calls).
	Interval time.Duration
	// BaseEjectionTime is multiplied by the host's ejection multiplier.
	BaseEjectionTime time.Duration
	// MaxEjectionTime caps BaseEjectionTime × multiplier; must be ≥ base.
	MaxEjectionTime time.Duration
	// MaxEjectionTimeJitter adds a random 0..jitter ms to each ejection so
	// that ejected hosts do not all come back at once.
	MaxEjectionTimeJitter time.Duration
	// MaxEjectionPercent caps the share of hosts ejected at the same time.
	MaxEjectionPercent uint32
	// AlwaysEjectOneHost allows the first ejection whatever the percentage.
	AlwaysEjectOneHost bool

	// Consecutive5xx is the run of 5xx responses that makes a host an outlier.
	Consecutive5xx uint32
	// EnforcingConsecutive5xx is the % chance such an outlier is ejected.
	EnforcingConsecutive5xx uint32
	// ConsecutiveGatewayFailure is the run of 502/503/504 responses that
	// makes a host an outlier.
	ConsecutiveGatewayFailure uint32
	// EnforcingConsecutiveGatewayFailure is the % chance it is ejected.
	EnforcingConsecutiveGatewayFailure uint32

	// SplitExternalLocalOriginErrors keeps connection-level (local origin)
	// failures apart from HTTP responses instead of mapping them to 503/504.
	SplitExternalLocalOriginErrors bool
	// ConsecutiveLocalOriginFailure is the run of local-origin failures
	// (split mode only) that makes a host an outlier.
	ConsecutiveLocalOriginFailure uint32
	// EnforcingConsecutiveLocalOriginFailure is the % chance it is ejected.
	EnforcingConsecutiveLocalOriginFailure uint32

	// SuccessRateMinimumHosts is the number of hosts with enough volume
	// needed before success-rate ejection is evaluated.
	SuccessRateMinimumHosts uint32
	// SuccessRateRequestVolume is the per-interval volume a host needs to
	// take part in success-rate ejection.
	SuccessRateRequestVolume uint32
	// SuccessRateStdevFactor is the stdev multiplier ×1000 (1900 = 1.9).
	SuccessRateStdevFactor uint32
	// EnforcingSuccessRate is the % chance a success-rate outlier is ejected.
	EnforcingSuccessRate uint32
	// EnforcingLocalOriginSuccessRate is the same for local-origin rates.
	EnforcingLocalOriginSuccessRate uint32

	// FailurePercentageThreshold is the failure % at or above which a host
	// is an outlier.
	FailurePercentageThreshold uint32
	// FailurePercentageMinimumHosts is the number of hosts with enough
	// volume needed before failure-percentage ejection is evaluated.
	FailurePercentageMinimumHosts uint32
	// FailurePercentageRequestVolume is the per-interval volume a host needs
	// to take part in failure-percentage ejection.
	FailurePercentageRequestVolume uint32
	// EnforcingFailurePercentage is the % chance such an outlier is ejected.
	EnforcingFailurePercentage uint32
	// EnforcingFailurePercentageLocalOrigin is the same for local origin.
	EnforcingFailurePercentageLocalOrigin uint32

	// SuccessfulActiveHealthCheckUnejectHost lets a passing active health
	// check bring an ejected host back at once.
	SuccessfulActiveHealthCheckUnejectHost bool
}

// DefaultOutlierConfig returns Envoy's defaults for an outlier_detection block
// that sets nothing.
func DefaultOutlierConfig() OutlierConfig {
	base := 30 * time.Second
	return OutlierConfig{
		Interval:                               10 * time.Second,
		BaseEjectionTime:                       base,
		MaxEjectionTime:                        max(300*time.Second, base),
		MaxEjectionPercent:                     10,
		Consecutive5xx:                         5,
		EnforcingConsecutive5xx:                100,
		ConsecutiveGatewayFailure:              5,
		EnforcingConsecutiveGatewayFailure:     0,
		ConsecutiveLocalOriginFailure:          5,
		EnforcingConsecutiveLocalOriginFailure: 100,
		SuccessRateMinimumHosts:                5,
		SuccessRateRequestVolume:               100,
		SuccessRateStdevFactor:                 1900,
		EnforcingSuccessRate:                   100,
		EnforcingLocalOriginSuccessRate:        100,
		FailurePercentageThreshold:             85,
		FailurePercentageMinimumHosts:          5,
		FailurePercentageRequestVolume:         50,
		SuccessfulActiveHealthCheckUnejectHost: true,
	}
}

// Validate reports the first field Envoy would reject, named by its proto
// field so the message points at the user's config.
func (c OutlierConfig) Validate() error {
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"interval", c.Interval},
		{"base_ejection_time", c.BaseEjectionTime},
		{"max_ejection_time", c.MaxEjectionTime},
	}
	for _, f := range positive {
		if f.d <= 0 {
			return fmt.Errorf("lb: outlier_detection.%s: %v, must be > 0", f.name, f.d)
		}
	}
	if c.MaxEjectionTimeJitter < 0 {
		return fmt.Errorf("lb: outlier_detection.max_ejection_time_jitter: %v < 0", c.MaxEjectionTimeJitter)
	}
	if c.MaxEjectionTime < c.BaseEjectionTime {
		return fmt.Errorf("lb: outlier_detection.max_ejection_time: %v < base_ejection_time %v",
			c.MaxEjectionTime, c.BaseEjectionTime)
	}
	percents := []struct {
		name string
		v    uint32
	}{
		{"max_ejection_percent", c.MaxEjectionPercent},
		{"enforcing_consecutive_5xx", c.EnforcingConsecutive5xx},
		{"enforcing_consecutive_gateway_failure", c.EnforcingConsecutiveGatewayFailure},
		{"enforcing_consecutive_local_origin_failure", c.EnforcingConsecutiveLocalOriginFailure},
		{"enforcing_success_rate", c.EnforcingSuccessRate},
		{"enforcing_local_origin_success_rate", c.EnforcingLocalOriginSuccessRate},
		{"failure_percentage_threshold", c.FailurePercentageThreshold},
		{"enforcing_failure_percentage", c.EnforcingFailurePercentage},
		{"enforcing_failure_percentage_local_origin", c.EnforcingFailurePercentageLocalOrigin},
	}
	for _, f := range percents {
		if f.v > 100 {
			return fmt.Errorf("lb: outlier_detection.%s: %d > 100", f.name, f.v)
		}
	}
	return nil
}

// EjectionType says which detector found an outlier.
type EjectionType int

// The detectors. The values are not Envoy's proto enum numbers; ProtoName
// gives its names.
const (
	// Consecutive5xx: a run of 5xx responses.
	Consecutive5xx EjectionType = iota
	// ConsecutiveGatewayFailure: a run of 502, 503 or 504 responses.
	ConsecutiveGatewayFailure
	// ConsecutiveLocalOriginFailure: a run of connection failures (split mode).
	ConsecutiveLocalOriginFailure
	// SuccessRate: success rate below the cluster's mean − factor × stdev.
	SuccessRate
	// SuccessRateLocalOrigin: the same on connection results (split mode).
	SuccessRateLocalOrigin
	// FailurePercentage: failure percentage at or above the threshold.
	FailurePercentage
	// FailurePercentageLocalOrigin: the same on connection results (split mode).
	FailurePercentageLocalOrigin
)

// NumEjectionTypes sizes the per-type stat arrays.
const NumEjectionTypes = int(FailurePercentageLocalOrigin) + 1

var ejectionTypeStat = [NumEjectionTypes]string{
	"consecutive_5xx", "consecutive_gateway_failure", "consecutive_local_origin_failure",
	"success_rate", "local_origin_success_rate", "failure_percentage", "local_origin_failure_percentage",
}

var ejectionTypeProto = [NumEjectionTypes]string{
	"CONSECUTIVE_5XX", "CONSECUTIVE_GATEWAY_FAILURE", "CONSECUTIVE_LOCAL_ORIGIN_FAILURE",
	"SUCCESS_RATE", "SUCCESS_RATE_LOCAL_ORIGIN", "FAILURE_PERCENTAGE", "FAILURE_PERCENTAGE_LOCAL_ORIGIN",
}

// String returns Envoy's stat suffix: ejections_enforced_<String()>.
func (t EjectionType) String() string {
	if t < 0 || int(t) >= NumEjectionTypes {
		return fmt.Sprintf("EjectionType(%d)", int(t))
	}
	return ejectionTypeStat[t]
}

// ProtoName returns the envoy.data.cluster.v3.OutlierEjectionType name, the
// spelling of Envoy's outlier event log.
func (t EjectionType) ProtoName() string {
	if t < 0 || int(t) >= NumEjectionTypes {
		return fmt.Sprintf("EjectionType(%d)", int(t))
	}
	return ejectionTypeProto[t]
}

// LocalOriginResult is a connection-level outcome the data plane reports
// (Envoy's Outlier::Result without the external-origin values, which are
// reported as HTTP codes instead).
type LocalOriginResult int

const (
	// LocalOriginConnectSuccess: connected; the HTTP result follows
	// separately, so outside split mode it counts for nothing.
	LocalOriginConnectSuccess LocalOriginResult = iota
	// LocalOriginConnectFailed: the connection failed (503 outside split mode).
	LocalOriginConnectFailed
	// LocalOriginTimeout: the request timed out (504 outside split mode).
	LocalOriginTimeout
	// LocalOriginConnectSuccessFinal: connected and nothing else will be
	// reported (200 outside split mode).
	LocalOriginConnectSuccessFinal
)

// OutlierAction is what happened to a host.
type OutlierAction int

const (
	// Ejected: the host was detected and ejected.
	Ejected OutlierAction = iota
	// Unejected: the host came back into service.
	Unejected
	// DetectedNotEnforced: the host was detected, but the enforcing
	// percentage draw said not to eject it.
	DetectedNotEnforced
	// EjectionOverflow: the host was detected, but max_ejection_percent
	// forbade another ejection.
	EjectionOverflow
)

// String returns the lower-case name of a.
func (a OutlierAction) String() string {
	switch a {
	case Ejected:
		return "ejected"
	case Unejected:
		return "unejected"
	case DetectedNotEnforced:
		return "detected_not_enforced"
	case EjectionOverflow:
		return "ejection_overflow"
	}
	return fmt.Sprintf("OutlierAction(%d)", int(a))
}

// OutlierEvent reports one detection or unejection so the caller can log it
// and rebuild snapshots. Every detection yields exactly one event.
type OutlierEvent struct {
	Host HostID
	// Type is the detector; for Unejected, the one that ejected the host.
	Type   EjectionType
	Action OutlierAction
	// Duration is the ejection length, jitter included, when Ejected.
	Duration time.Duration
}

// OutlierStats mirrors cluster.<name>.outlier_detection.* counters.
type OutlierStats struct {
	EjectionsEnforcedTotal uint64
	// EjectionsActive is a gauge.
	EjectionsActive         uint64
	EjectionsOverflow       uint64
	EjectionsEnforcedByType [NumEjectionTypes]uint64
	EjectionsDetectedByType [NumEjectionTypes]uint64
	// EjectionsTotal is deprecated in Envoy: consecutive-5xx and success-rate
	// detections that max_ejection_percent allowed, enforced or not.
	EjectionsTotal uint64
	// EjectionsConsecutive5xx is deprecated: consecutive-5xx detections.
	EjectionsConsecutive5xx uint64
	// EjectionsSuccessRate is deprecated: success-rate detections (both origins).
	EjectionsSuccessRate uint64
}

// Each calls f with every stat under Envoy's name (without the
// "cluster.<name>.outlier_detection." prefix).
func (s OutlierStats) Each(f func(name string, value uint64)) {
	f("ejections_enforced_total", s.EjectionsEnforcedTotal)
	f("ejections_active", s.EjectionsActive)
	f("ejections_overflow", s.EjectionsOverflow)
	for t := range NumEjectionTypes {
		f("ejections_enforced_"+ejectionTypeStat[t], s.EjectionsEnforcedByType[t])
		f("ejections_detected_"+ejectionTypeStat[t], s.EjectionsDetectedByType[t])
	}
	f("ejections_total", s.EjectionsTotal)
	f("ejections_consecutive_5xx", s.EjectionsConsecutive5xx)
	f("ejections_success_rate", s.EjectionsSuccessRate)
}

// OutlierOrigin selects which success-rate statistics to read.
type OutlierOrigin int

const (
	// OriginExternal: HTTP responses (all results outside split mode).
	OriginExternal OutlierOrigin = iota
	// OriginLocal: connection-level results in split mode.
	OriginLocal
)

// SuccessRateStats is the outcome of one success-rate evaluation.
type SuccessRateStats struct {
	Mean, Stdev, Threshold float64
}

// srBucket counts one interval's requests.
type srBucket struct{ success, total uint64 }

// srMonitor keeps the interval being written and the one just finished;
// only the finished one is evaluated so a tick never sees a partial interval.
type srMonitor struct{ cur, prev srBucket }

func (m *srMonitor) rotate() { m.prev, m.cur = m.cur, srBucket{} }

type outlierHost struct {
	id         HostID
	ejected    bool
	ejectType  EjectionType
	multiplier uint32
	jitter     time.Duration
	ejectedAt  time.Time
	// unejectedAt is valid once unejectedOnce: decay only starts after a
	// host has come back at least once.
	unejectedAt   time.Time
	unejectedOnce bool

	c5xx, gateway, localOrigin uint32

	mon      [2]srMonitor // by OutlierOrigin
	rate     [2]float64   // last evaluated success rate, by OutlierOrigin
	rateSeen [2]bool
}

// OutlierDetector is Envoy's passive health checker for one cluster. It only
// computes state: the data plane feeds it results, the main loop calls Tick
// every Interval, and the snapshot builder reads IsEjected. It is not safe for
// concurrent use; drive it from one goroutine.
type OutlierDetector struct {
	cfg   OutlierConfig
	rnd   Random
	hosts []*outlierHost // insertion order: ticks walk hosts (and draw randoms) in it
	byID  map[HostID]*outlierHost
	stats OutlierStats

	active  int
	srStats [2]SuccessRateStats
	srValid [2]bool
}

// NewOutlierDetector returns a detector with no hosts. cfg should have passed
// Validate; its durations are truncated to milliseconds like Envoy's.
func NewOutlierDetector(cfg OutlierConfig, rnd Random) *OutlierDetector {
	for _, d := range []*time.Duration{&cfg.Interval, &cfg.BaseEjectionTime, &cfg.MaxEjectionTime, &cfg.MaxEjectionTimeJitter} {
		*d = d.Truncate(time.Millisecond)
	}
	return &OutlierDetector{cfg: cfg, rnd: rnd, byID: map[HostID]*outlierHost{}}
}

// AddHost starts tracking id; adding a tracked host keeps its state.
func (d *OutlierDetector) AddHost(id HostID) {
	if _, ok := d.byID[id]; ok {
		return
	}
	h := &outlierHost{id: id}
	d.hosts = append(d.hosts, h)
	d.byID[id] = h
}

// RemoveHost stops tracking id; an ejected host no longer counts as active.
func (d *OutlierDetector) RemoveHost(id HostID) {
	h, ok := d.byID[id]
	if !ok {
		return
	}
	if h.ejected {
		d.active--
		d.stats.EjectionsActive = uint64(d.active)
	}
	delete(d.byID, id)
	for i, x := range d.hosts {
		if x == h {
			d.hosts = append(d.hosts[:i], d.hosts[i+1:]...)
			break
		}
	}
}

// PutHTTPResponseCode records an upstream response (or a code the router
// generated for the upstream) and runs the consecutive detectors inline.
func (d *OutlierDetector) PutHTTPResponseCode(id HostID, code int, now time.Time) []OutlierEvent {
	h, ok := d.byID[id]
	if !ok {
		return nil
	}
	return d.putCode(h, code, now)
}

// PutHTTPSuccesses records n responses that are not failures (codes
// below 500) at once, as n calls of PutHTTPResponseCode with one would: a
// data plane may count successes where they happen and deliver them in a
// batch before the host's next failure and before each Tick.
func (d *OutlierDetector) PutHTTPSuccesses(id HostID, n uint64) {
	h, ok := d.byID[id]
	if !ok || n == 0 {
		return
	}
	m := &h.mon[OriginExternal].cur
	m.total += n
	m.success += n
	h.c5xx, h.gateway = 0, 0
}

func (d *OutlierDetector) putCode(h *outlierHost, code int, now time.Time) []OutlierEvent {
	var evs []OutlierEvent
	h.mon[OriginExternal].cur.total++
	if code < 500 || code >= 600 {
		h.mon[OriginExternal].cur.success++
		h.c5xx, h.gateway = 0, 0
		return nil
	}
	if code == 502 || code == 503 || code == 504 {
		h.gateway++
		if h.gateway == d.cfg.ConsecutiveGatewayFailure {
			evs = d.detectConsecutive(h, ConsecutiveGatewayFailure, now, evs)
		}
	} else {
		h.gateway = 0
	}
	h.c5xx++
	if h.c5xx == d.cfg.Consecutive5xx {
		evs = d.detectConsecutive(h, Consecutive5xx, now, evs)
	}
	return evs
}

// PutLocalOriginResult records a connection-level result. Outside split mode
// it is mapped to an HTTP code, as Envoy does.
func (d *OutlierDetector) PutLocalOriginResult(id HostID, r LocalOriginResult, now time.Time) []OutlierEvent {
	h, ok := d.byID[id]
	if !ok {
		return nil
	}
	if !d.cfg.SplitExternalLocalOriginErrors {
		switch r {
		case LocalOriginConnectFailed:
			return d.putCode(h, 503, now)
		case LocalOriginTimeout:
			return d.putCode(h, 504, now)
		case LocalOriginConnectSuccessFinal:
			return d.putCode(h, 200, now)
		}
		return nil // a plain connect success leaves the verdict to the HTTP code
	}
	m := &h.mon[OriginLocal]
	m.cur.total++
	if r == LocalOriginConnectFailed || r == LocalOriginTimeout {
		h.localOrigin++
		if h.localOrigin == d.cfg.ConsecutiveLocalOriginFailure {
			return d.detectConsecutive(h, ConsecutiveLocalOriginFailure, now, nil)
		}
		return nil
	}
	m.cur.success++
	h.localOrigin = 0
	return nil
}

// detectConsecutive handles a consecutive detector reaching its threshold.
// The counter is reset only when the detection is processed (not for an
// already ejected host), so a bout is detected once per threshold run.
func (d *OutlierDetector) detectConsecutive(h *outlierHost, t EjectionType, now time.Time, evs []OutlierEvent) []OutlierEvent {
	if h.ejected {
		return evs
	}
	d.stats.EjectionsDetectedByType[t]++
	evs = append(evs, d.eject(h, t, now))
	switch t {
	case Consecutive5xx:
		d.stats.EjectionsConsecutive5xx++
		h.c5xx = 0
	case ConsecutiveGatewayFailure:
		h.gateway = 0
	case ConsecutiveLocalOriginFailure:
		h.localOrigin = 0
	}
	return evs
}

// ejectionAllowed reports whether one more ejection keeps the ejected share
// within maxEjectionPercent (capped at 100), counting the new host.
func ejectionAllowed(activeEjections, totalHosts int, maxEjectionPercent uint32, alwaysEjectOneHost bool) bool {
	if alwaysEjectOneHost && activeEjections == 0 {
		return true
	}
	if totalHosts <= 0 {
		return false
	}
	pct := 100.0 * float64(activeEjections+1) / float64(totalHosts)
	return pct <= float64(min(maxEjectionPercent, 100))
}

func (d *OutlierDetector) enforcing(t EjectionType) uint32 {
	c := &d.cfg
	return [NumEjectionTypes]uint32{
		c.EnforcingConsecutive5xx, c.EnforcingConsecutiveGatewayFailure, c.EnforcingConsecutiveLocalOriginFailure,
		c.EnforcingSuccessRate, c.EnforcingLocalOriginSuccessRate,
		c.EnforcingFailurePercentage, c.EnforcingFailurePercentageLocalOrigin,
	}[t]
}

// eject applies max_ejection_percent, then the enforcement draw, then the
// jitter draw: the order of random draws is Envoy's.
func (d *OutlierDetector) eject(h *outlierHost, t EjectionType, now time.Time) OutlierEvent {
	ev := OutlierEvent{Host: h.id, Type: t}
	if !ejectionAllowed(d.active, len(d.hosts), d.cfg.MaxEjectionPercent, d.cfg.AlwaysEjectOneHost) {
		d.stats.EjectionsOverflow++
		ev.Action = EjectionOverflow
		return ev
	}
	if t == Consecutive5xx || t == SuccessRate {
		d.stats.EjectionsTotal++
	}
	if d.rnd.Uint64()%100 >= uint64(d.enforcing(t)) {
		ev.Action = DetectedNotEnforced
		return ev
	}
	d.active++
	d.stats.EjectionsActive = uint64(d.active)
	d.stats.EjectionsEnforcedTotal++
	d.stats.EjectionsEnforcedByType[t]++
	h.ejected, h.ejectType, h.ejectedAt = true, t, now
	jitterMs := uint64(d.cfg.MaxEjectionTimeJitter / time.Millisecond)
	h.jitter = time.Duration(d.rnd.Uint64()%(jitterMs+1)) * time.Millisecond
	// The multiplier stops growing once base×multiplier is past max: more
	// would not lengthen ejections but would slow the decay back to base.
	base, maxT := d.cfg.BaseEjectionTime, d.cfg.MaxEjectionTime
	if time.Duration(h.multiplier)*base < maxT+base {
		h.multiplier++
	}
	ev.Action = Ejected
	ev.Duration = d.ejectionLength(h)
	return ev
}

func (d *OutlierDetector) ejectionLength(h *outlierHost) time.Duration {
	return min(time.Duration(h.multiplier)*d.cfg.BaseEjectionTime, d.cfg.MaxEjectionTime) + h.jitter
}

func (d *OutlierDetector) uneject(h *outlierHost, now time.Time) OutlierEvent {
	d.active--
	d.stats.EjectionsActive = uint64(d.active)
	h.ejected = false
	// A counter left near its threshold would re-eject after very few errors.
	h.c5xx, h.gateway, h.localOrigin = 0, 0, 0
	h.unejectedAt, h.unejectedOnce = now, true
	return OutlierEvent{Host: h.id, Type: h.ejectType, Action: Unejected}
}

// Tick is the interval timer: it unejects hosts whose time is up, closes the
// interval's success-rate buckets and evaluates them, then decays the
// multiplier of hosts that stayed in service for a whole interval. The
// caller re-arms its timer for Interval.
func (d *OutlierDetector) Tick(now time.Time) []OutlierEvent {
	var evs []OutlierEvent
	for _, h := range d.hosts {
		if h.ejected && d.ejectionLength(h) <= now.Sub(h.ejectedAt) {
			evs = append(evs, d.uneject(h, now))
		}
		for o := range h.mon {
			h.mon[o].rotate()
			h.rateSeen[o] = false
		}
	}
	evs = d.evaluateRates(OriginExternal, now, evs)
	evs = d.evaluateRates(OriginLocal, now, evs)
	for _, h := range d.hosts {
		if !h.ejected && h.unejectedOnce && h.multiplier > 0 && now.Sub(h.unejectedAt) >= d.cfg.Interval {
			h.multiplier--
		}
	}
	return evs
}

type hostRate struct {
	h    *outlierHost
	rate float64
}

// evaluateRates runs success-rate and failure-percentage ejection on the
// interval that just ended, for one origin.
func (d *OutlierDetector) evaluateRates(o OutlierOrigin, now time.Time, evs []OutlierEvent) []OutlierEvent {
	c := &d.cfg
	d.srValid[o] = false
	n := uint64(len(d.hosts))
	if n < uint64(c.SuccessRateMinimumHosts) && n < uint64(c.FailurePercentageMinimumHosts) {
		return evs
	}
	var srHosts, fpHosts []hostRate
	for _, h := range d.hosts {
		b := h.mon[o].prev
		if h.ejected || b.total == 0 {
			continue
		}
		rate := float64(b.success) * 100 / float64(b.total)
		if b.total >= uint64(min(c.SuccessRateRequestVolume, c.FailurePercentageRequestVolume)) {
			h.rate[o], h.rateSeen[o] = rate, true
		}
		if b.total >= uint64(c.SuccessRateRequestVolume) {
			srHosts = append(srHosts, hostRate{h, rate})
		}
		if b.total >= uint64(c.FailurePercentageRequestVolume) {
			fpHosts = append(fpHosts, hostRate{h, rate})
		}
	}
	srType, fpType := SuccessRate, FailurePercentage
	if o == OriginLocal {
		srType, fpType = SuccessRateLocalOrigin, FailurePercentageLocalOrigin
	}
	if len(srHosts) > 0 && len(srHosts) >= int(c.SuccessRateMinimumHosts) {
		rates := make([]float64, len(srHosts))
		for i, hr := range srHosts {
			rates[i] = hr.rate
		}
		var s SuccessRateStats
		s.Mean, s.Stdev, s.Threshold = successRateEjectionThreshold(rates, c.SuccessRateStdevFactor)
		d.srStats[o], d.srValid[o] = s, true
		for _, hr := range srHosts {
			if hr.rate < s.Threshold {
				d.stats.EjectionsSuccessRate++
				d.stats.EjectionsDetectedByType[srType]++
				evs = append(evs, d.eject(hr.h, srType, now))
			}
		}
	}
	if len(fpHosts) > 0 && len(fpHosts) >= int(c.FailurePercentageMinimumHosts) {
		for _, hr := range fpHosts {
			// Envoy would eject a host the success-rate pass just ejected a
			// second time; skipping it keeps the active count right.
			if hr.h.ejected || 100-hr.rate < float64(c.FailurePercentageThreshold) {
				continue
			}
			d.stats.EjectionsDetectedByType[fpType]++
			evs = append(evs, d.eject(hr.h, fpType, now))
		}
	}
	return evs
}

// successRateEjectionThreshold returns the mean and population standard
// deviation of rates and the ejection threshold mean − stdevFactor/1000 ×
// stdev, computed in Envoy's order of operations so results match to the bit.
// An empty rates gives zeros.
func successRateEjectionThreshold(rates []float64, stdevFactor uint32) (mean, stdev, threshold float64) {
	if len(rates) == 0 {
		return 0, 0, 0
	}
	var sum float64
	for _, r := range rates {
		sum += r
	}
	k := float64(len(rates))
	mean = sum / k
	var variance float64
	for _, r := range rates {
		variance += (r - mean) * (r - mean)
	}
	variance /= k
	stdev = math.Sqrt(variance)
	return mean, stdev, mean - float64(stdevFactor)/1000.0*stdev
}

// OnActiveHealthCheckSuccess brings an ejected host back at once. Call it
// after a check that passed and left the host not failing active health
// checks (HostHealthCheck.FailedActiveHC false); it does nothing unless
// SuccessfulActiveHealthCheckUnejectHost is set.
func (d *OutlierDetector) OnActiveHealthCheckSuccess(id HostID, now time.Time) []OutlierEvent {
	h, ok := d.byID[id]
	if !ok || !h.ejected || !d.cfg.SuccessfulActiveHealthCheckUnejectHost {
		return nil
	}
	return []OutlierEvent{d.uneject(h, now)}
}

// IsEjected reports whether id is currently ejected (FAILED_OUTLIER_CHECK).
func (d *OutlierDetector) IsEjected(id HostID) bool {
	h, ok := d.byID[id]
	return ok && h.ejected
}

// EjectTimeMultiplier returns the host's current ejection multiplier: the
// next ejection lasts min(base × (multiplier+1), max).
func (d *OutlierDetector) EjectTimeMultiplier(id HostID) uint32 {
	if h, ok := d.byID[id]; ok {
		return h.multiplier
	}
	return 0
}

// HostSuccessRate returns the host's success rate from the last Tick, when
// its volume reached the smaller of the two request-volume settings.
func (d *OutlierDetector) HostSuccessRate(id HostID, o OutlierOrigin) (float64, bool) {
	h, ok := d.byID[id]
	if !ok || o < OriginExternal || o > OriginLocal || !h.rateSeen[o] {
		return 0, false
	}
	return h.rate[o], true
}

// LastSuccessRate returns the cluster's success-rate numbers from the last
// Tick; false when that Tick did not evaluate success rate for o.
func (d *OutlierDetector) LastSuccessRate(o OutlierOrigin) (SuccessRateStats, bool) {
	if o < OriginExternal || o > OriginLocal || !d.srValid[o] {
		return SuccessRateStats{}, false
	}
	return d.srStats[o], true
}

// Stats returns a copy of the counters.
func (d *OutlierDetector) Stats() OutlierStats { return d.stats }
