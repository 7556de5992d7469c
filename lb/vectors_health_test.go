package lb

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Runners for the outlier-detection and health-check vector categories. They
// decode by field, drive the real OutlierDetector / HostHealthCheck, and
// compare what those report with the vector's expectations.
func init() {
	vectorRunners["outlier_ejection_time"] = runOutlierEjectionTime
	vectorRunners["outlier_success_rate"] = runOutlierSuccessRate
	vectorRunners["outlier_max_ejection_percent"] = runOutlierMaxEjectionPercent
	vectorRunners["outlier_consecutive"] = runOutlierConsecutive
	vectorRunners["health_check_interval"] = runHealthCheckInterval
	vectorRunners["health_check_state"] = runHealthCheckState
}

// healthRandom returns vals in turn, repeating the last; with no values it
// fails the test, for paths that must not draw.
type healthRandom struct {
	t    *testing.T
	vals []uint64
	n    int
}

func (r *healthRandom) Uint64() uint64 {
	r.n++
	if len(r.vals) == 0 {
		r.t.Errorf("unexpected random draw #%d", r.n)
		return 0
	}
	return r.vals[min(r.n, len(r.vals))-1]
}

// healthEpoch is time zero of the vectors' t_ms timelines.
var healthEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func atMs(ms int64) time.Time { return healthEpoch.Add(time.Duration(ms) * time.Millisecond) }

func msDur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// randomList decodes a "random" field that is one number or a list.
func randomList(t *testing.T, raw json.RawMessage) []uint64 {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	var one uint64
	if json.Unmarshal(raw, &one) == nil {
		return []uint64{one}
	}
	var many []uint64
	if err := json.Unmarshal(raw, &many); err != nil {
		t.Fatalf("random: %s is neither a number nor a list: %v", raw, err)
	}
	return many
}

// outlierOverrides are the outlier_detection fields a vector input may set;
// each present field replaces the default.
type outlierOverrides struct {
	IntervalMs                             *int64  `json:"interval_ms"`
	BaseEjectionTimeMs                     *int64  `json:"base_ejection_time_ms"`
	MaxEjectionTimeMs                      *int64  `json:"max_ejection_time_ms"`
	MaxEjectionTimeJitterMs                *int64  `json:"max_ejection_time_jitter_ms"`
	MaxEjectionPercent                     *uint32 `json:"max_ejection_percent"`
	AlwaysEjectOneHost                     *bool   `json:"always_eject_one_host"`
	Consecutive5xx                         *uint32 `json:"consecutive_5xx"`
	EnforcingConsecutive5xx                *uint32 `json:"enforcing_consecutive_5xx"`
	ConsecutiveGatewayFailure              *uint32 `json:"consecutive_gateway_failure"`
	EnforcingConsecutiveGatewayFailure     *uint32 `json:"enforcing_consecutive_gateway_failure"`
	SplitExternalLocalOriginErrors         *bool   `json:"split_external_local_origin_errors"`
	ConsecutiveLocalOriginFailure          *uint32 `json:"consecutive_local_origin_failure"`
	EnforcingConsecutiveLocalOriginFailure *uint32 `json:"enforcing_consecutive_local_origin_failure"`
	SuccessRateMinimumHosts                *uint32 `json:"success_rate_minimum_hosts"`
	SuccessRateRequestVolume               *uint32 `json:"success_rate_request_volume"`
	SuccessRateStdevFactor                 *uint32 `json:"success_rate_stdev_factor"`
	EnforcingSuccessRate                   *uint32 `json:"enforcing_success_rate"`
	EnforcingLocalOriginSuccessRate        *uint32 `json:"enforcing_local_origin_success_rate"`
	FailurePercentageThreshold             *uint32 `json:"failure_percentage_threshold"`
	FailurePercentageMinimumHosts          *uint32 `json:"failure_percentage_minimum_hosts"`
	FailurePercentageRequestVolume         *uint32 `json:"failure_percentage_request_volume"`
	EnforcingFailurePercentage             *uint32 `json:"enforcing_failure_percentage"`
	EnforcingFailurePercentageLocalOrigin  *uint32 `json:"enforcing_failure_percentage_local_origin"`
	SuccessfulActiveHCUnejectHost          *bool   `json:"successful_active_health_check_uneject_host"`
}

func (o outlierOverrides) apply(c OutlierConfig) OutlierConfig {
	setD := func(dst *time.Duration, ms *int64) {
		if ms != nil {
			*dst = msDur(*ms)
		}
	}
	setU := func(dst *uint32, v *uint32) {
		if v != nil {
			*dst = *v
		}
	}
	setB := func(dst *bool, v *bool) {
		if v != nil {
			*dst = *v
		}
	}
	setD(&c.Interval, o.IntervalMs)
	setD(&c.BaseEjectionTime, o.BaseEjectionTimeMs)
	if o.BaseEjectionTimeMs != nil && o.MaxEjectionTimeMs == nil {
		c.MaxEjectionTime = max(300*time.Second, c.BaseEjectionTime) // Envoy's default for unset max
	}
	setD(&c.MaxEjectionTime, o.MaxEjectionTimeMs)
	setD(&c.MaxEjectionTimeJitter, o.MaxEjectionTimeJitterMs)
	setU(&c.MaxEjectionPercent, o.MaxEjectionPercent)
	setB(&c.AlwaysEjectOneHost, o.AlwaysEjectOneHost)
	setU(&c.Consecutive5xx, o.Consecutive5xx)
	setU(&c.EnforcingConsecutive5xx, o.EnforcingConsecutive5xx)
	setU(&c.ConsecutiveGatewayFailure, o.ConsecutiveGatewayFailure)
	setU(&c.EnforcingConsecutiveGatewayFailure, o.EnforcingConsecutiveGatewayFailure)
	setB(&c.SplitExternalLocalOriginErrors, o.SplitExternalLocalOriginErrors)
	setU(&c.ConsecutiveLocalOriginFailure, o.ConsecutiveLocalOriginFailure)
	setU(&c.EnforcingConsecutiveLocalOriginFailure, o.EnforcingConsecutiveLocalOriginFailure)
	setU(&c.SuccessRateMinimumHosts, o.SuccessRateMinimumHosts)
	setU(&c.SuccessRateRequestVolume, o.SuccessRateRequestVolume)
	setU(&c.SuccessRateStdevFactor, o.SuccessRateStdevFactor)
	setU(&c.EnforcingSuccessRate, o.EnforcingSuccessRate)
	setU(&c.EnforcingLocalOriginSuccessRate, o.EnforcingLocalOriginSuccessRate)
	setU(&c.FailurePercentageThreshold, o.FailurePercentageThreshold)
	setU(&c.FailurePercentageMinimumHosts, o.FailurePercentageMinimumHosts)
	setU(&c.FailurePercentageRequestVolume, o.FailurePercentageRequestVolume)
	setU(&c.EnforcingFailurePercentage, o.EnforcingFailurePercentage)
	setU(&c.EnforcingFailurePercentageLocalOrigin, o.EnforcingFailurePercentageLocalOrigin)
	setB(&c.SuccessfulActiveHealthCheckUnejectHost, o.SuccessfulActiveHCUnejectHost)
	return c
}

// ejectionTypeByProto maps OutlierEjectionType names back to EjectionType.
func ejectionTypeByProto(name string) (EjectionType, bool) {
	for t := range NumEjectionTypes {
		if EjectionType(t).ProtoName() == name {
			return EjectionType(t), true
		}
	}
	return 0, false
}

// detections returns the detector of every detection event, in order.
func detections(evs []OutlierEvent) []string {
	out := []string{}
	for _, e := range evs {
		if e.Action != Unejected {
			out = append(out, e.Type.ProtoName())
		}
	}
	return out
}

// failConsecutive5xx feeds host id the run of 5xx that triggers detection.
func failConsecutive5xx(d *OutlierDetector, cfg OutlierConfig, id HostID, now time.Time) []OutlierEvent {
	var evs []OutlierEvent
	for range cfg.Consecutive5xx {
		evs = append(evs, d.PutHTTPResponseCode(id, 500, now)...)
	}
	return evs
}

// --- outlier_ejection_time ---------------------------------------------

type timelineStep struct {
	Action       string  `json:"action"`
	TMs          int64   `json:"t_ms"`
	Host         *uint32 `json:"host"`
	Multiplier   *uint32 `json:"eject_time_multiplier"`
	EjectedAfter *bool   `json:"ejected_after"`
	ScheduledMs  *int64  `json:"scheduled_ejection_ms"`
	Unejected    *bool   `json:"unejected"`
	check        bool    // listed in the vector (not an omitted tick/ejection)
}

// tickTimes decodes interval_ticks_ms: a list, or "every N from A to B".
func tickTimes(t *testing.T, raw json.RawMessage) []int64 {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	var list []int64
	if json.Unmarshal(raw, &list) == nil {
		return list
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("interval_ticks_ms: %s: %v", raw, err)
	}
	var every, from, to int64
	if _, err := fmt.Sscanf(s, "every %d from %d to %d", &every, &from, &to); err != nil || every <= 0 {
		t.Fatalf("interval_ticks_ms: cannot parse %q", s)
	}
	for x := from; x <= to; x += every {
		list = append(list, x)
	}
	return list
}

func runOutlierEjectionTime(t *testing.T, v vector) {
	var in struct {
		outlierOverrides
		Hosts        *int            `json:"hosts"`
		EjectAtMs    []int64         `json:"eject_at_ms"`
		IntervalTick json.RawMessage `json:"interval_ticks_ms"`
		Random       json.RawMessage `json:"random"`
	}
	var exp struct {
		DurationsMs []int64        `json:"ejection_durations_ms"`
		UnejectedAt []int64        `json:"unejected_at_ms"`
		Timeline    []timelineStep `json:"timeline"`
	}
	decodeVector(t, v, &in, &exp)
	// The Envoy test behind these vectors lets a lone host be ejected.
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	cfg = in.apply(cfg)
	hosts := 1
	if in.Hosts != nil {
		hosts = *in.Hosts
	}
	rnd := &healthRandom{t: t, vals: randomList(t, in.Random)}
	if len(rnd.vals) == 0 {
		rnd.vals = []uint64{0} // enforce (0 < any enforcing %), no jitter
	}
	d := NewOutlierDetector(cfg, rnd)
	for i := range hosts {
		d.AddHost(HostID(i))
	}

	// The timeline lists the interesting steps in order; omitted ticks go
	// before any listed step at the same time, omitted ejections after.
	steps := slices.Clone(exp.Timeline)
	for i := 1; i < len(steps); i++ {
		if steps[i].TMs < steps[i-1].TMs {
			t.Fatalf("timeline[%d]: t_ms %d before %d", i, steps[i].TMs, steps[i-1].TMs)
		}
	}
	for i := range steps {
		steps[i].check = true
	}
	listed := func(action string, at int64) bool {
		return slices.ContainsFunc(steps, func(s timelineStep) bool { return s.Action == action && s.TMs == at })
	}
	for _, at := range tickTimes(t, in.IntervalTick) {
		if !listed("interval_tick", at) {
			i := sort.Search(len(steps), func(i int) bool { return steps[i].TMs >= at })
			steps = slices.Insert(steps, i, timelineStep{Action: "interval_tick", TMs: at})
		}
	}
	for _, at := range in.EjectAtMs {
		if !listed("outlier_detected", at) {
			i := sort.Search(len(steps), func(i int) bool { return steps[i].TMs > at })
			steps = slices.Insert(steps, i, timelineStep{Action: "outlier_detected", TMs: at})
		}
	}

	var durations, unejectedAt []int64
	for n, s := range steps {
		host := HostID(0)
		if s.Host != nil {
			host = HostID(*s.Host)
		}
		var evs []OutlierEvent
		switch s.Action {
		case "interval_tick":
			evs = d.Tick(atMs(s.TMs))
		case "outlier_detected":
			evs = failConsecutive5xx(d, cfg, host, atMs(s.TMs))
		case "active_health_check_success":
			evs = d.OnActiveHealthCheckSuccess(host, atMs(s.TMs))
		default:
			t.Fatalf("timeline step %d: unknown action %q", n, s.Action)
		}
		var ejected *OutlierEvent
		unejected := false
		for i, e := range evs {
			switch e.Action {
			case Ejected:
				durations = append(durations, e.Duration.Milliseconds())
				ejected = &evs[i]
			case Unejected:
				unejectedAt = append(unejectedAt, s.TMs)
				unejected = true
			}
		}
		if !s.check {
			continue
		}
		where := fmt.Sprintf("timeline %s at t_ms=%d", s.Action, s.TMs)
		if s.Multiplier != nil {
			if got := d.EjectTimeMultiplier(host); got != *s.Multiplier {
				t.Errorf("%s: eject_time_multiplier got %d, want %d", where, got, *s.Multiplier)
			}
		}
		if s.EjectedAfter != nil {
			if got := d.IsEjected(host); got != *s.EjectedAfter {
				t.Errorf("%s: ejected_after got %v, want %v", where, got, *s.EjectedAfter)
			}
		}
		if s.Unejected != nil && unejected != *s.Unejected {
			t.Errorf("%s: unejected got %v, want %v", where, unejected, *s.Unejected)
		}
		if s.ScheduledMs != nil {
			switch {
			case ejected == nil:
				t.Errorf("%s: scheduled_ejection_ms want %d, but no ejection (events %+v)", where, *s.ScheduledMs, evs)
			case ejected.Duration != msDur(*s.ScheduledMs):
				t.Errorf("%s: scheduled_ejection_ms got %d, want %d", where, ejected.Duration.Milliseconds(), *s.ScheduledMs)
			}
		}
	}
	if exp.DurationsMs != nil && !slices.Equal(durations, exp.DurationsMs) {
		t.Errorf("ejection_durations_ms got %v, want %v", durations, exp.DurationsMs)
	}
	if exp.UnejectedAt != nil && !slices.Equal(unejectedAt, exp.UnejectedAt) {
		t.Errorf("unejected_at_ms got %v, want %v", unejectedAt, exp.UnejectedAt)
	}
}

// --- outlier_success_rate ----------------------------------------------

func approxEqual(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func checkFloat(t *testing.T, field string, got float64, want *float64) {
	t.Helper()
	if want != nil && !approxEqual(got, *want) {
		t.Errorf("%s got %v, want %v", field, got, *want)
	}
}

func runOutlierSuccessRate(t *testing.T, v vector) {
	var in struct {
		outlierOverrides
		SuccessRates []float64 `json:"success_rates"`
		Hosts        []struct {
			Success uint64 `json:"success"`
			Total   uint64 `json:"total"`
		} `json:"hosts"`
		TickMs *int64          `json:"interval_tick_ms"`
		Random json.RawMessage `json:"random"`
	}
	var exp struct {
		Mean, Stdev, Threshold, Variance *float64
		EjectionThreshold                *float64  `json:"ejection_threshold"`
		EjectedHosts                     []int     `json:"ejected_hosts"`
		EjectionType                     *string   `json:"ejection_type"`
		HostRates                        []float64 `json:"host_success_rates"`
		StillEjectedAt                   *int64    `json:"still_ejected_at_ms"`
		UnejectedAtOrAfter               *int64    `json:"unejected_at_or_after_ms"`
		UnejectedObservedAt              *int64    `json:"unejected_observed_at_ms"`
	}
	decodeVector(t, v, &in, &exp)

	if in.Hosts == nil {
		// The formula alone.
		if in.SuccessRateStdevFactor == nil {
			t.Fatalf("input: success_rate_stdev_factor missing")
		}
		mean, stdev, thr := SuccessRateEjectionThreshold(in.SuccessRates, *in.SuccessRateStdevFactor)
		checkFloat(t, "mean", mean, exp.Mean)
		checkFloat(t, "stdev", stdev, exp.Stdev)
		checkFloat(t, "threshold", thr, exp.Threshold)
		checkFloat(t, "threshold", thr, exp.EjectionThreshold)
		checkFloat(t, "variance", stdev*stdev, exp.Variance)
		return
	}

	// As in the Envoy test: a lone outlier may be ejected, and the
	// consecutive detectors are not enforced so that only the statistical
	// detectors eject.
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	cfg.EnforcingConsecutive5xx = 0
	cfg.EnforcingConsecutiveGatewayFailure = 0
	cfg.EnforcingConsecutiveLocalOriginFailure = 0
	cfg = in.apply(cfg)
	origin := OriginExternal
	if cfg.SplitExternalLocalOriginErrors {
		origin = OriginLocal
	}
	tick := cfg.Interval.Milliseconds()
	if in.TickMs != nil {
		tick = *in.TickMs
	}
	vals := randomList(t, in.Random)
	if vals == nil {
		vals = []uint64{0}
	}
	// setup loads the interval and runs the tick that evaluates it.
	setup := func() (*OutlierDetector, []OutlierEvent) {
		d := NewOutlierDetector(cfg, &healthRandom{t: t, vals: vals})
		for i := range in.Hosts {
			d.AddHost(HostID(i))
		}
		for i, h := range in.Hosts {
			id := HostID(i)
			for range h.Success {
				if origin == OriginLocal {
					d.PutLocalOriginResult(id, LocalOriginConnectSuccess, healthEpoch)
				} else {
					d.PutHTTPResponseCode(id, 200, healthEpoch)
				}
			}
			for range h.Total - h.Success {
				if origin == OriginLocal {
					d.PutLocalOriginResult(id, LocalOriginConnectFailed, healthEpoch)
				} else {
					d.PutHTTPResponseCode(id, 503, healthEpoch)
				}
			}
		}
		return d, d.Tick(atMs(tick))
	}

	d, evs := setup()
	var ejected []int
	var types []string
	for _, e := range evs {
		if e.Action == Ejected {
			ejected = append(ejected, int(e.Host))
			types = append(types, e.Type.ProtoName())
		}
	}
	if exp.EjectedHosts != nil && !slices.Equal(ejected, exp.EjectedHosts) {
		t.Errorf("ejected_hosts got %v, want %v", ejected, exp.EjectedHosts)
	}
	if exp.EjectionType != nil {
		if _, ok := ejectionTypeByProto(*exp.EjectionType); !ok {
			t.Fatalf("ejection_type: unknown %q", *exp.EjectionType)
		}
		for i, got := range types {
			if got != *exp.EjectionType {
				t.Errorf("ejection_type of host %d got %s, want %s", ejected[i], got, *exp.EjectionType)
			}
		}
	}
	if exp.Mean != nil || exp.Stdev != nil || exp.Threshold != nil || exp.EjectionThreshold != nil {
		s, ok := d.LastSuccessRate(origin)
		if !ok {
			t.Errorf("success rate was not evaluated at t_ms=%d", tick)
		}
		checkFloat(t, "mean", s.Mean, exp.Mean)
		checkFloat(t, "stdev", s.Stdev, exp.Stdev)
		checkFloat(t, "variance", s.Stdev*s.Stdev, exp.Variance)
		checkFloat(t, "threshold", s.Threshold, exp.Threshold)
		checkFloat(t, "ejection_threshold", s.Threshold, exp.EjectionThreshold)
	}
	for i, want := range exp.HostRates {
		got, ok := d.HostSuccessRate(HostID(i), origin)
		if !ok || !approxEqual(got, want) {
			t.Errorf("host_success_rates[%d] got %v (valid %v), want %v", i, got, ok, want)
		}
	}
	allEjected := func(d *OutlierDetector) (bool, bool) { // all, none
		all, none := true, true
		for _, h := range ejected {
			if d.IsEjected(HostID(h)) {
				none = false
			} else {
				all = false
			}
		}
		return all, none
	}
	if exp.StillEjectedAt != nil {
		d.Tick(atMs(*exp.StillEjectedAt))
		if all, _ := allEjected(d); !all {
			t.Errorf("still_ejected_at_ms %d: a host of %v is no longer ejected", *exp.StillEjectedAt, ejected)
		}
	}
	if exp.UnejectedObservedAt != nil {
		d.Tick(atMs(*exp.UnejectedObservedAt))
		if _, none := allEjected(d); !none {
			t.Errorf("unejected_observed_at_ms %d: a host of %v is still ejected", *exp.UnejectedObservedAt, ejected)
		}
	}
	if exp.UnejectedAtOrAfter != nil {
		at := *exp.UnejectedAtOrAfter
		d1, _ := setup()
		d1.Tick(atMs(at - 1))
		if all, _ := allEjected(d1); !all {
			t.Errorf("unejected_at_or_after_ms %d: unejected already at %d", at, at-1)
		}
		d2, _ := setup()
		d2.Tick(atMs(at))
		if _, none := allEjected(d2); !none {
			t.Errorf("unejected_at_or_after_ms %d: still ejected at %d", at, at)
		}
	}
}

// --- outlier_max_ejection_percent ----------------------------------------

func runOutlierMaxEjectionPercent(t *testing.T, v vector) {
	var in struct {
		Cases []struct {
			Active  int    `json:"active_ejections"`
			Always  bool   `json:"always_eject_one_host"`
			Percent uint32 `json:"max_ejection_percent"`
			Total   int    `json:"total_hosts"`
		} `json:"cases"`
	}
	var exp struct {
		Eject []bool `json:"eject"`
	}
	decodeVector(t, v, &in, &exp)
	if len(exp.Eject) != len(in.Cases) {
		t.Fatalf("eject has %d entries for %d cases", len(exp.Eject), len(in.Cases))
	}
	for i, c := range in.Cases {
		want := exp.Eject[i]
		if got := EjectionAllowed(c.Active, c.Total, c.Percent, c.Always); got != want {
			t.Errorf("case %d %+v: EjectionAllowed got %v, want eject %v", i, c, got, want)
		}
		// Also through the detector, when the case's active ejections can
		// be reached under the case's own limits.
		cfg := DefaultOutlierConfig()
		cfg.MaxEjectionPercent, cfg.AlwaysEjectOneHost = c.Percent, c.Always
		d := NewOutlierDetector(cfg, &healthRandom{t: t, vals: []uint64{0}})
		for h := range c.Total {
			d.AddHost(HostID(h))
		}
		for h := range c.Active {
			failConsecutive5xx(d, cfg, HostID(h), healthEpoch)
		}
		if int(d.Stats().EjectionsActive) != c.Active || c.Active >= c.Total {
			t.Logf("case %d: %d active ejections not reachable, detector not checked", i, c.Active)
			continue
		}
		overflow := d.Stats().EjectionsOverflow
		evs := failConsecutive5xx(d, cfg, HostID(c.Active), healthEpoch)
		if len(evs) != 1 {
			t.Fatalf("case %d: want one detection event, got %+v", i, evs)
		}
		if got := evs[0].Action == Ejected; got != want {
			t.Errorf("case %d %+v: detector action %v, want eject %v", i, c, evs[0].Action, want)
		}
		wantOverflow := uint64(1)
		if want {
			wantOverflow = 0
		}
		if got := d.Stats().EjectionsOverflow - overflow; got != wantOverflow {
			t.Errorf("case %d: ejections_overflow grew by %d, want %d", i, got, wantOverflow)
		}
	}
}

// --- outlier_consecutive -----------------------------------------------

func runOutlierConsecutive(t *testing.T, v vector) {
	var in struct {
		outlierOverrides
		Hosts     *int `json:"hosts"`
		Sequences []struct {
			Codes  []int           `json:"codes"`
			Host   *uint32         `json:"host"`
			Random json.RawMessage `json:"random"`
		} `json:"sequences"`
	}
	var exp struct {
		Results []struct {
			Detected []string `json:"detected"`
			Ejected  *bool    `json:"ejected"`
			// Note is prose for the reader, not an expectation.
			Note string `json:"note"`
		} `json:"results"`
	}
	decodeVector(t, v, &in, &exp)
	if len(exp.Results) != len(in.Sequences) {
		t.Fatalf("results has %d entries for %d sequences", len(exp.Results), len(in.Sequences))
	}
	cfg := in.apply(DefaultOutlierConfig())
	hosts := 1
	if in.Hosts != nil {
		hosts = *in.Hosts
	}
	for i, seq := range in.Sequences {
		vals := randomList(t, seq.Random)
		if vals == nil {
			vals = []uint64{0}
		}
		d := NewOutlierDetector(cfg, &healthRandom{t: t, vals: vals})
		for h := range hosts {
			d.AddHost(HostID(h))
		}
		id := HostID(0)
		if seq.Host != nil {
			id = HostID(*seq.Host)
		}
		var evs []OutlierEvent
		for _, code := range seq.Codes {
			evs = append(evs, d.PutHTTPResponseCode(id, code, healthEpoch)...)
		}
		want := exp.Results[i]
		for _, name := range want.Detected {
			if _, ok := ejectionTypeByProto(name); !ok {
				t.Fatalf("sequence %d: detected: unknown type %q", i, name)
			}
		}
		if got := detections(evs); want.Detected != nil && !slices.Equal(got, want.Detected) {
			t.Errorf("sequence %d %v: detected got %v, want %v", i, seq.Codes, got, want.Detected)
		}
		if want.Ejected != nil && d.IsEjected(id) != *want.Ejected {
			t.Errorf("sequence %d %v: ejected got %v, want %v", i, seq.Codes, d.IsEjected(id), *want.Ejected)
		}
	}
}

// --- health checks -------------------------------------------------------

// hcFields are the health-check settings a vector may give, in input or in
// input.config.
type hcFields struct {
	TimeoutMs                  *int64  `json:"timeout_ms"`
	IntervalMs                 *int64  `json:"interval_ms"`
	NoTrafficIntervalMs        *int64  `json:"no_traffic_interval_ms"`
	NoTrafficHealthyIntervalMs *int64  `json:"no_traffic_healthy_interval_ms"`
	UnhealthyIntervalMs        *int64  `json:"unhealthy_interval_ms"`
	UnhealthyEdgeIntervalMs    *int64  `json:"unhealthy_edge_interval_ms"`
	HealthyEdgeIntervalMs      *int64  `json:"healthy_edge_interval_ms"`
	InitialJitterMs            *int64  `json:"initial_jitter_ms"`
	IntervalJitterMs           *int64  `json:"interval_jitter_ms"`
	IntervalJitterPercent      *uint32 `json:"interval_jitter_percent"`
	UnhealthyThreshold         *uint32 `json:"unhealthy_threshold"`
	HealthyThreshold           *uint32 `json:"healthy_threshold"`
	MinIntervalMs              *int64  `json:"min_interval_ms"`
	MaxIntervalMs              *int64  `json:"max_interval_ms"`
}

func (f hcFields) apply(c HealthCheckConfig) HealthCheckConfig {
	for _, p := range []struct {
		dst *time.Duration
		ms  *int64
	}{
		{&c.Timeout, f.TimeoutMs}, {&c.Interval, f.IntervalMs},
		{&c.NoTrafficInterval, f.NoTrafficIntervalMs}, {&c.NoTrafficHealthyInterval, f.NoTrafficHealthyIntervalMs},
		{&c.UnhealthyInterval, f.UnhealthyIntervalMs}, {&c.UnhealthyEdgeInterval, f.UnhealthyEdgeIntervalMs},
		{&c.HealthyEdgeInterval, f.HealthyEdgeIntervalMs}, {&c.InitialJitter, f.InitialJitterMs},
		{&c.IntervalJitter, f.IntervalJitterMs}, {&c.MinInterval, f.MinIntervalMs}, {&c.MaxInterval, f.MaxIntervalMs},
	} {
		if p.ms != nil {
			*p.dst = msDur(*p.ms)
		}
	}
	for _, p := range []struct {
		dst *uint32
		v   *uint32
	}{
		{&c.IntervalJitterPercent, f.IntervalJitterPercent},
		{&c.UnhealthyThreshold, f.UnhealthyThreshold}, {&c.HealthyThreshold, f.HealthyThreshold},
	} {
		if p.v != nil {
			*p.dst = *p.v
		}
	}
	return c
}

func parseCheckResult(t *testing.T, s string) CheckResult {
	t.Helper()
	switch s {
	case "healthy":
		return CheckHealthy
	case "unhealthy":
		return CheckUnhealthy
	}
	t.Fatalf("check_result: unknown %q", s)
	return 0
}

func parseTransition(t *testing.T, s string) HealthTransition {
	t.Helper()
	for _, tr := range []HealthTransition{Unchanged, Changed, ChangePending} {
		if tr.String() == s {
			return tr
		}
	}
	t.Fatalf("transition: unknown %q", s)
	return 0
}

// hcTraffic reads "cluster_has_traffic" or its short form "traffic".
type hcTraffic struct {
	ClusterHasTraffic *bool `json:"cluster_has_traffic"`
	Traffic           *bool `json:"traffic"`
}

func (h hcTraffic) get(t *testing.T) bool {
	t.Helper()
	switch {
	case h.ClusterHasTraffic != nil:
		return *h.ClusterHasTraffic
	case h.Traffic != nil:
		return *h.Traffic
	}
	t.Fatalf("cluster_has_traffic missing")
	return false
}

func runHealthCheckInterval(t *testing.T, v vector) {
	var in struct {
		hcFields
		hcTraffic
		Config      *hcFields `json:"config"`
		CheckResult string    `json:"check_result"`
		Transition  string    `json:"transition"`
		Cases       []struct {
			hcTraffic
			CheckResult string `json:"check_result"`
			Transition  string `json:"transition"`
		} `json:"cases"`
	}
	var exp struct {
		BaseIntervalMs []int64 `json:"base_interval_ms"`
		Results        []struct {
			Random         json.RawMessage `json:"random"`
			NextIntervalMs int64           `json:"next_interval_ms"`
		} `json:"results"`
		FirstCheckDelays []struct {
			Random  json.RawMessage `json:"random"`
			DelayMs int64           `json:"first_check_delay_ms"`
		} `json:"first_check_delays"`
	}
	decodeVector(t, v, &in, &exp)
	cfg := in.apply(HealthCheckConfig{})
	if in.Config != nil {
		cfg = in.Config.apply(cfg)
	}
	if len(exp.BaseIntervalMs) > 0 {
		if len(exp.BaseIntervalMs) != len(in.Cases) {
			t.Fatalf("base_interval_ms has %d entries for %d cases", len(exp.BaseIntervalMs), len(in.Cases))
		}
		// The base interval is the next interval with every jitter and
		// clamp off; a draw would be a bug, so the random fails on use.
		base := cfg
		base.IntervalJitter, base.IntervalJitterPercent, base.MinInterval, base.MaxInterval = 0, 0, 0, 0
		for i, c := range in.Cases {
			r, tr := parseCheckResult(t, c.CheckResult), parseTransition(t, c.Transition)
			got := NextCheckInterval(base, r, tr, c.get(t), &healthRandom{t: t})
			if got != msDur(exp.BaseIntervalMs[i]) {
				t.Errorf("case %d (%s, %s, traffic %v): base_interval_ms got %d, want %d",
					i, c.CheckResult, c.Transition, c.get(t), got.Milliseconds(), exp.BaseIntervalMs[i])
			}
		}
	}
	if len(exp.Results) > 0 {
		r, tr := parseCheckResult(t, in.CheckResult), parseTransition(t, in.Transition)
		traffic := in.get(t)
		for i, want := range exp.Results {
			rnd := &healthRandom{t: t, vals: randomList(t, want.Random)}
			got := NextCheckInterval(cfg, r, tr, traffic, rnd)
			if got != msDur(want.NextIntervalMs) {
				t.Errorf("results[%d] random %s: next_interval_ms got %d, want %d",
					i, want.Random, got.Milliseconds(), want.NextIntervalMs)
			}
		}
	}
	for i, want := range exp.FirstCheckDelays {
		rnd := &healthRandom{t: t, vals: randomList(t, want.Random)}
		if got := FirstCheckDelay(cfg, rnd); got != msDur(want.DelayMs) {
			t.Errorf("first_check_delays[%d]: first_check_delay_ms got %d, want %d", i, got.Milliseconds(), want.DelayMs)
		}
	}
}

// applyCheck feeds one named check result to h. Names: success,
// degraded (a degraded success), network_failure / timeout, http_<code>
// (200 passes; a code in retriable is retriable; any other fails at once),
// retriable_failure, active_failure.
func applyCheck(t *testing.T, h *HostHealthCheck, cfg HealthCheckConfig, name string, retriable []int) HealthTransition {
	t.Helper()
	switch name {
	case "success", "healthy":
		return h.OnSuccess(false, cfg)
	case "degraded", "success_degraded":
		return h.OnSuccess(true, cfg)
	case "network_failure", "timeout", "network_timeout":
		return h.OnFailure(FailureNetwork, cfg)
	case "retriable_failure":
		return h.OnFailure(FailureRetriable, cfg)
	case "active_failure", "passive_failure":
		return h.OnFailure(FailureActive, cfg)
	}
	if code, ok := strings.CutPrefix(name, "http_"); ok {
		n, err := strconv.Atoi(code)
		if err == nil {
			switch {
			case n == 200:
				return h.OnSuccess(false, cfg)
			case slices.Contains(retriable, n):
				return h.OnFailure(FailureRetriable, cfg)
			default:
				return h.OnFailure(FailureActive, cfg)
			}
		}
	}
	t.Fatalf("results: unknown check result %q", name)
	return 0
}

func runHealthCheckState(t *testing.T, v vector) {
	var in struct {
		hcFields
		Config            *hcFields `json:"config"`
		Results           []string  `json:"results"`
		RetriableStatuses []int     `json:"retriable_statuses"`
	}
	var exp struct {
		Healthy     []bool   `json:"healthy_after_each"`
		Transitions []string `json:"transition_after_each"`
		Degraded    []bool   `json:"degraded_after_each"`
	}
	decodeVector(t, v, &in, &exp)
	cfg := in.apply(HealthCheckConfig{})
	if in.Config != nil {
		cfg = in.Config.apply(cfg)
	}
	for name, l := range map[string]int{"healthy_after_each": len(exp.Healthy),
		"transition_after_each": len(exp.Transitions), "degraded_after_each": len(exp.Degraded)} {
		if l != 0 && l != len(in.Results) {
			t.Fatalf("%s has %d entries for %d results", name, l, len(in.Results))
		}
	}
	h := NewHostHealthCheck()
	if !h.FailedActiveHC() || h.Healthy() {
		t.Errorf("new host: FailedActiveHC %v Healthy %v, want true false", h.FailedActiveHC(), h.Healthy())
	}
	for i, r := range in.Results {
		tr := applyCheck(t, h, cfg, r, in.RetriableStatuses)
		if len(exp.Transitions) > 0 {
			if want := parseTransition(t, exp.Transitions[i]); tr != want {
				t.Errorf("result %d (%s): transition got %s, want %s", i, r, tr, want)
			}
		}
		if len(exp.Healthy) > 0 && h.Healthy() != exp.Healthy[i] {
			t.Errorf("result %d (%s): healthy got %v, want %v", i, r, h.Healthy(), exp.Healthy[i])
		}
		if len(exp.Degraded) > 0 && h.Degraded() != exp.Degraded[i] {
			t.Errorf("result %d (%s): degraded got %v, want %v", i, r, h.Degraded(), exp.Degraded[i])
		}
	}
}
