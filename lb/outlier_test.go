package lb

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// newTestDetector returns a detector over hosts 0..n-1 drawing vals.
func newTestDetector(t *testing.T, cfg OutlierConfig, n int, vals ...uint64) *OutlierDetector {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	if vals == nil {
		vals = []uint64{0}
	}
	d := NewOutlierDetector(cfg, &healthRandom{t: t, vals: vals})
	for i := range n {
		d.AddHost(HostID(i))
	}
	return d
}

func actions(evs []OutlierEvent) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Type.String()+":"+e.Action.String())
	}
	return out
}

func TestDefaultOutlierConfig(t *testing.T) {
	c := DefaultOutlierConfig()
	checks := []struct {
		name      string
		got, want any
	}{
		{"interval", c.Interval, 10 * time.Second},
		{"base_ejection_time", c.BaseEjectionTime, 30 * time.Second},
		{"max_ejection_time", c.MaxEjectionTime, 300 * time.Second},
		{"max_ejection_percent", c.MaxEjectionPercent, uint32(10)},
		{"enforcing_consecutive_gateway_failure", c.EnforcingConsecutiveGatewayFailure, uint32(0)},
		{"enforcing_consecutive_5xx", c.EnforcingConsecutive5xx, uint32(100)},
		{"success_rate_stdev_factor", c.SuccessRateStdevFactor, uint32(1900)},
		{"failure_percentage_threshold", c.FailurePercentageThreshold, uint32(85)},
		{"failure_percentage_request_volume", c.FailurePercentageRequestVolume, uint32(50)},
		{"enforcing_failure_percentage", c.EnforcingFailurePercentage, uint32(0)},
		{"successful_active_health_check_uneject_host", c.SuccessfulActiveHealthCheckUnejectHost, true},
		{"always_eject_one_host", c.AlwaysEjectOneHost, false},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

func TestOutlierConfigValidate(t *testing.T) {
	tests := []struct {
		mutate func(*OutlierConfig)
		want   string
	}{
		{func(c *OutlierConfig) { c.MaxEjectionPercent = 120 }, "lb: outlier_detection.max_ejection_percent: 120 > 100"},
		{func(c *OutlierConfig) { c.EnforcingSuccessRate = 101 }, "outlier_detection.enforcing_success_rate: 101 > 100"},
		{func(c *OutlierConfig) { c.FailurePercentageThreshold = 200 }, "outlier_detection.failure_percentage_threshold"},
		{func(c *OutlierConfig) { c.EnforcingFailurePercentageLocalOrigin = 101 }, "enforcing_failure_percentage_local_origin"},
		{func(c *OutlierConfig) { c.Interval = 0 }, "outlier_detection.interval"},
		{func(c *OutlierConfig) { c.BaseEjectionTime = -time.Second }, "outlier_detection.base_ejection_time"},
		{func(c *OutlierConfig) { c.MaxEjectionTime = 10 * time.Second }, "outlier_detection.max_ejection_time: 10s < base_ejection_time 30s"},
		{func(c *OutlierConfig) { c.MaxEjectionTimeJitter = -1 }, "outlier_detection.max_ejection_time_jitter"},
		{func(c *OutlierConfig) { c.MaxEjectionPercent = 100 }, ""},
	}
	for _, tt := range tests {
		c := DefaultOutlierConfig()
		tt.mutate(&c)
		err := c.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("want valid, got %v", err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("error got %v, want it to contain %q", err, tt.want)
		}
	}
}

func TestEjectionTypeNames(t *testing.T) {
	want := map[EjectionType][2]string{
		Consecutive5xx:                {"consecutive_5xx", "CONSECUTIVE_5XX"},
		ConsecutiveGatewayFailure:     {"consecutive_gateway_failure", "CONSECUTIVE_GATEWAY_FAILURE"},
		ConsecutiveLocalOriginFailure: {"consecutive_local_origin_failure", "CONSECUTIVE_LOCAL_ORIGIN_FAILURE"},
		SuccessRate:                   {"success_rate", "SUCCESS_RATE"},
		SuccessRateLocalOrigin:        {"local_origin_success_rate", "SUCCESS_RATE_LOCAL_ORIGIN"},
		FailurePercentage:             {"failure_percentage", "FAILURE_PERCENTAGE"},
		FailurePercentageLocalOrigin:  {"local_origin_failure_percentage", "FAILURE_PERCENTAGE_LOCAL_ORIGIN"},
	}
	for typ, w := range want {
		if typ.String() != w[0] || typ.ProtoName() != w[1] {
			t.Errorf("%d: got %s / %s, want %s / %s", int(typ), typ, typ.ProtoName(), w[0], w[1])
		}
	}
	if s := EjectionType(99).String(); s != "EjectionType(99)" {
		t.Errorf("out of range String got %q", s)
	}
	names := map[string]bool{}
	OutlierStats{}.Each(func(name string, _ uint64) { names[name] = true })
	for _, n := range []string{"ejections_enforced_total", "ejections_active", "ejections_overflow",
		"ejections_detected_local_origin_failure_percentage", "ejections_enforced_consecutive_5xx",
		"ejections_total", "ejections_success_rate"} {
		if !names[n] {
			t.Errorf("Each: missing stat %s", n)
		}
	}
}

func TestEjectionAllowed(t *testing.T) {
	tests := []struct {
		active, total int
		pct           uint32
		always, want  bool
	}{
		{0, 5, 10, false, false}, // 20% > 10%: small clusters eject nobody
		{0, 5, 20, false, true},
		{1, 5, 20, false, false},
		{0, 5, 10, true, true},
		{1, 5, 10, true, false}, // always_eject_one_host only helps the first
		{4, 5, 100, false, true},
		{0, 1, 200, false, true}, // percentages above 100 act as 100
		{0, 0, 100, false, false},
		{0, 0, 0, true, true},
	}
	for _, tt := range tests {
		if got := EjectionAllowed(tt.active, tt.total, tt.pct, tt.always); got != tt.want {
			t.Errorf("EjectionAllowed(%d, %d, %d, %v) got %v, want %v", tt.active, tt.total, tt.pct, tt.always, got, tt.want)
		}
	}
}

func TestConsecutiveNonSplitLocalOrigin(t *testing.T) {
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	cfg.EnforcingConsecutiveGatewayFailure = 100
	now := time.Unix(0, 0)
	tests := []struct {
		name    string
		results []LocalOriginResult
		want    []string
	}{
		// Connect failures are 503s: the gateway detector fires first.
		{"connect failed", slices.Repeat([]LocalOriginResult{LocalOriginConnectFailed}, 5),
			[]string{"consecutive_gateway_failure:ejected"}},
		{"timeouts", slices.Repeat([]LocalOriginResult{LocalOriginTimeout}, 5),
			[]string{"consecutive_gateway_failure:ejected"}},
		// A bare connect success says nothing, so the run continues.
		{"connect success ignored", []LocalOriginResult{LocalOriginConnectFailed, LocalOriginConnectFailed,
			LocalOriginConnectSuccess, LocalOriginConnectFailed, LocalOriginConnectFailed, LocalOriginConnectFailed},
			[]string{"consecutive_gateway_failure:ejected"}},
		// A final connect success is a 200 and breaks the run.
		{"final success resets", []LocalOriginResult{LocalOriginConnectFailed, LocalOriginConnectFailed,
			LocalOriginConnectSuccessFinal, LocalOriginConnectFailed, LocalOriginConnectFailed, LocalOriginConnectFailed},
			[]string{}},
	}
	for _, tt := range tests {
		d := newTestDetector(t, cfg, 1)
		var evs []OutlierEvent
		for _, r := range tt.results {
			evs = append(evs, d.PutLocalOriginResult(0, r, now)...)
		}
		if got := actions(evs); !slices.Equal(got, tt.want) {
			t.Errorf("%s: events got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestConsecutiveHTTPCodes(t *testing.T) {
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	cfg.EnforcingConsecutiveGatewayFailure = 100
	cfg.Consecutive5xx = 100 // keep the 5xx detector out of the way
	tests := []struct {
		codes []int
		want  []string
	}{
		{[]int{502, 503, 504, 502, 503}, []string{"consecutive_gateway_failure:ejected"}},
		// A non-gateway 5xx breaks the gateway run.
		{[]int{502, 502, 500, 502, 502, 502, 502}, []string{}},
		// Any non-5xx breaks it too; 4xx are not failures.
		{[]int{502, 502, 502, 502, 404, 502}, []string{}},
		{[]int{599, 502, 502, 502, 502, 502}, []string{"consecutive_gateway_failure:ejected"}},
	}
	for _, tt := range tests {
		d := newTestDetector(t, cfg, 1)
		var evs []OutlierEvent
		for _, c := range tt.codes {
			evs = append(evs, d.PutHTTPResponseCode(0, c, time.Unix(0, 0))...)
		}
		if got := actions(evs); !slices.Equal(got, tt.want) {
			t.Errorf("%v: got %v, want %v", tt.codes, got, tt.want)
		}
	}
}

func TestConsecutiveSplitLocalOrigin(t *testing.T) {
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	cfg.SplitExternalLocalOriginErrors = true
	now := time.Unix(0, 0)

	d := newTestDetector(t, cfg, 1)
	var evs []OutlierEvent
	// Local-origin failures must not feed the 5xx detector, nor HTTP codes
	// the local-origin one: interleaved, neither run reaches 5 until the
	// fifth of each.
	for range 4 {
		evs = append(evs, d.PutLocalOriginResult(0, LocalOriginConnectFailed, now)...)
		evs = append(evs, d.PutHTTPResponseCode(0, 500, now)...)
	}
	if len(evs) != 0 {
		t.Fatalf("after 4+4 failures: events %v, want none", actions(evs))
	}
	evs = d.PutLocalOriginResult(0, LocalOriginTimeout, now)
	if got, want := actions(evs), []string{"consecutive_local_origin_failure:ejected"}; !slices.Equal(got, want) {
		t.Errorf("5th local-origin failure: got %v, want %v", got, want)
	}
	if s := d.Stats(); s.EjectionsEnforcedByType[ConsecutiveLocalOriginFailure] != 1 || s.EjectionsDetectedByType[ConsecutiveLocalOriginFailure] != 1 {
		t.Errorf("stats: %+v", s)
	}

	// In split mode any connect success resets the local-origin run.
	d = newTestDetector(t, cfg, 1)
	for _, r := range []LocalOriginResult{LocalOriginConnectFailed, LocalOriginConnectFailed, LocalOriginConnectFailed,
		LocalOriginConnectFailed, LocalOriginConnectSuccess, LocalOriginConnectFailed} {
		if evs := d.PutLocalOriginResult(0, r, now); evs != nil {
			t.Errorf("result %v: unexpected %v", r, actions(evs))
		}
	}
}

// loadInterval gives each host success/total responses of one origin.
func loadInterval(d *OutlierDetector, local bool, success, total []uint64, now time.Time) {
	for i := range success {
		id := HostID(i)
		for j := range total[i] {
			ok := j < success[i]
			switch {
			case local && ok:
				d.PutLocalOriginResult(id, LocalOriginConnectSuccess, now)
			case local:
				d.PutLocalOriginResult(id, LocalOriginConnectFailed, now)
			case ok:
				d.PutHTTPResponseCode(id, 200, now)
			default:
				d.PutHTTPResponseCode(id, 503, now)
			}
		}
	}
}

func TestStatisticalDetectors(t *testing.T) {
	t0 := time.Unix(0, 0)
	isolate := func(c *OutlierConfig) {
		c.MaxEjectionPercent = 100
		c.EnforcingConsecutive5xx, c.EnforcingConsecutiveGatewayFailure, c.EnforcingConsecutiveLocalOriginFailure = 0, 0, 0
	}
	tests := []struct {
		name    string
		mutate  func(*OutlierConfig)
		local   bool
		success []uint64
		total   []uint64
		want    []string // Ejected events at the tick
	}{
		{"success rate", nil, false,
			[]uint64{200, 200, 200, 200, 200}, []uint64{200, 200, 200, 200, 400},
			[]string{"success_rate:ejected"}},
		{"success rate needs volume", nil, false,
			[]uint64{200, 200, 200, 200, 50}, []uint64{200, 200, 200, 200, 99},
			[]string{}},
		{"success rate local origin", func(c *OutlierConfig) { c.SplitExternalLocalOriginErrors = true }, true,
			[]uint64{200, 200, 200, 200, 200}, []uint64{200, 200, 200, 200, 400},
			[]string{"local_origin_success_rate:ejected"}},
		{"failure percentage", func(c *OutlierConfig) { c.EnforcingSuccessRate = 0; c.EnforcingFailurePercentage = 100 }, false,
			[]uint64{50, 50, 50, 50, 7}, []uint64{50, 50, 50, 50, 50}, // 86% failures
			[]string{"failure_percentage:ejected"}},
		{"failure percentage at threshold", func(c *OutlierConfig) {
			c.EnforcingSuccessRate = 0
			c.EnforcingFailurePercentage = 100
			c.FailurePercentageThreshold = 86
		}, false,
			[]uint64{50, 50, 50, 50, 7}, []uint64{50, 50, 50, 50, 50},
			[]string{"failure_percentage:ejected"}},
		{"failure percentage below threshold", func(c *OutlierConfig) {
			c.EnforcingSuccessRate = 0
			c.EnforcingFailurePercentage = 100
			c.FailurePercentageThreshold = 87
		}, false,
			[]uint64{50, 50, 50, 50, 7}, []uint64{50, 50, 50, 50, 50},
			[]string{}},
		{"failure percentage local origin", func(c *OutlierConfig) {
			c.SplitExternalLocalOriginErrors = true
			c.EnforcingLocalOriginSuccessRate = 0
			c.EnforcingFailurePercentageLocalOrigin = 100
		}, true,
			[]uint64{50, 50, 50, 0, 50}, []uint64{50, 50, 50, 50, 50},
			[]string{"local_origin_failure_percentage:ejected"}},
		{"failure percentage skips a host success rate ejected", func(c *OutlierConfig) { c.EnforcingFailurePercentage = 100 }, false,
			[]uint64{100, 100, 100, 100, 0}, []uint64{100, 100, 100, 100, 100},
			[]string{"success_rate:ejected"}},
		{"too few hosts", func(c *OutlierConfig) { c.SuccessRateMinimumHosts = 6; c.FailurePercentageMinimumHosts = 6 }, false,
			[]uint64{200, 200, 200, 200, 0}, []uint64{200, 200, 200, 200, 200},
			[]string{}},
	}
	for _, tt := range tests {
		cfg := DefaultOutlierConfig()
		isolate(&cfg)
		if tt.mutate != nil {
			tt.mutate(&cfg)
		}
		d := newTestDetector(t, cfg, len(tt.success))
		loadInterval(d, tt.local, tt.success, tt.total, t0)
		var got []string
		for _, e := range d.Tick(t0.Add(cfg.Interval)) {
			if e.Action != Unejected {
				got = append(got, e.Type.String()+":"+e.Action.String())
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: events got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestSuccessRateOnlyEvaluatesLastInterval(t *testing.T) {
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	cfg.EnforcingConsecutive5xx, cfg.EnforcingConsecutiveGatewayFailure = 0, 0
	t0 := time.Unix(0, 0)
	// Data written during interval 1 is evaluated at the end of interval 1
	// only: the next tick sees the empty interval 2.
	d2 := newTestDetector(t, cfg, 5)
	loadInterval(d2, false, []uint64{200, 200, 200, 200, 200}, []uint64{200, 200, 200, 200, 400}, t0)
	d2.Tick(t0.Add(5 * time.Second))
	if !d2.IsEjected(4) {
		t.Fatalf("host 4 not ejected at the first tick")
	}
	if evs := d2.Tick(t0.Add(15 * time.Second)); len(evs) != 0 {
		t.Errorf("second tick: %v, want nothing (previous interval empty)", actions(evs))
	}
	if _, ok := d2.LastSuccessRate(OriginExternal); ok {
		t.Errorf("second tick: success rate evaluated on an empty interval")
	}
	if _, ok := d2.HostSuccessRate(0, OriginExternal); ok {
		t.Errorf("second tick: host rate kept from an old interval")
	}
	if _, ok := d2.LastSuccessRate(OriginLocal); ok {
		t.Errorf("local origin evaluated outside split mode")
	}
}

func TestMaxEjectionPercentOverflow(t *testing.T) {
	cfg := DefaultOutlierConfig() // 10%
	d := newTestDetector(t, cfg, 10)
	now := time.Unix(0, 0)
	if got := actions(failConsecutive5xx(d, cfg, 0, now)); !slices.Equal(got, []string{"consecutive_5xx:ejected"}) {
		t.Fatalf("first ejection: %v", got)
	}
	for run := 1; run <= 2; run++ {
		// The counter resets after an overflowed detection, so each run of
		// five detects again and overflows again.
		got := actions(failConsecutive5xx(d, cfg, 1, now))
		if !slices.Equal(got, []string{"consecutive_5xx:ejection_overflow"}) {
			t.Errorf("run %d: got %v, want overflow", run, got)
		}
	}
	s := d.Stats()
	if s.EjectionsOverflow != 2 || s.EjectionsActive != 1 || s.EjectionsEnforcedTotal != 1 ||
		s.EjectionsDetectedByType[Consecutive5xx] != 3 || s.EjectionsEnforcedByType[Consecutive5xx] != 1 ||
		s.EjectionsTotal != 1 || s.EjectionsConsecutive5xx != 3 {
		t.Errorf("stats %+v", s)
	}
	// Removing the ejected host frees the slot (and shrinks the cluster).
	d.RemoveHost(0)
	if s := d.Stats(); s.EjectionsActive != 0 {
		t.Errorf("after RemoveHost: ejections_active %d, want 0", s.EjectionsActive)
	}
	d.AddHost(10) // back to 10 hosts: 1 of 10 is allowed again
	if got := actions(failConsecutive5xx(d, cfg, 1, now)); !slices.Equal(got, []string{"consecutive_5xx:ejected"}) {
		t.Errorf("after removal: %v, want ejected", got)
	}
}

func TestEnforcementAndJitterDraws(t *testing.T) {
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	cfg.EnforcingConsecutive5xx = 30
	cfg.BaseEjectionTime = 10 * time.Second
	cfg.MaxEjectionTimeJitter = 5 * time.Second
	now := time.Unix(0, 0)
	tests := []struct {
		draws    []uint64
		want     OutlierAction
		duration time.Duration
	}{
		{[]uint64{129, 12345}, Ejected, 10*time.Second + 2343*time.Millisecond}, // 129%100 < 30; 12345 % 5001
		{[]uint64{30, 12345}, DetectedNotEnforced, 0},
		{[]uint64{0, 5000}, Ejected, 15 * time.Second},
		{[]uint64{0, 5001}, Ejected, 10 * time.Second},
	}
	for _, tt := range tests {
		rnd := &healthRandom{t: t, vals: tt.draws}
		d := NewOutlierDetector(cfg, rnd)
		d.AddHost(7)
		evs := failConsecutive5xx(d, cfg, 7, now)
		if len(evs) != 1 || evs[0].Action != tt.want || evs[0].Duration != tt.duration || evs[0].Host != 7 {
			t.Errorf("draws %v: got %+v, want %v for %v", tt.draws, evs, tt.want, tt.duration)
			continue
		}
		if tt.want != Ejected {
			if rnd.n != 1 {
				t.Errorf("draws %v: %d draws, want 1 (no jitter draw when not enforced)", tt.draws, rnd.n)
			}
			continue
		}
		// The jitter delays unejection to the millisecond.
		if d.Tick(now.Add(tt.duration - time.Millisecond)); !d.IsEjected(7) {
			t.Errorf("draws %v: unejected 1 ms early", tt.draws)
		}
		if evs := d.Tick(now.Add(tt.duration)); d.IsEjected(7) || len(evs) != 1 || evs[0].Action != Unejected || evs[0].Type != Consecutive5xx {
			t.Errorf("draws %v: at %v got %+v, want unejected", tt.draws, tt.duration, evs)
		}
	}
}

func TestMultiplierCapAndDecay(t *testing.T) {
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	cfg.BaseEjectionTime = 10 * time.Second
	cfg.MaxEjectionTime = 30 * time.Second
	d := newTestDetector(t, cfg, 1)
	now := time.Unix(0, 0)
	// Eject again right after each unejection: the multiplier grows while
	// base×multiplier < max+base, i.e. up to 4, while durations cap at max.
	wantDur := []time.Duration{10, 20, 30, 30, 30}
	wantMult := []uint32{1, 2, 3, 4, 4}
	for i := range wantDur {
		evs := failConsecutive5xx(d, cfg, 0, now)
		if len(evs) != 1 || evs[0].Duration != wantDur[i]*time.Second {
			t.Fatalf("ejection %d: got %+v, want %v", i, evs, wantDur[i]*time.Second)
		}
		if m := d.EjectTimeMultiplier(0); m != wantMult[i] {
			t.Errorf("ejection %d: multiplier %d, want %d", i, m, wantMult[i])
		}
		now = now.Add(evs[0].Duration)
		if d.Tick(now); d.IsEjected(0) {
			t.Fatalf("ejection %d: not unejected after %v", i, evs[0].Duration)
		}
	}
	// Each tick a full interval after the unejection lowers it by one.
	for want := uint32(3); ; want-- {
		now = now.Add(cfg.Interval)
		d.Tick(now)
		if got := d.EjectTimeMultiplier(0); got != want {
			t.Fatalf("decay: multiplier %d, want %d", got, want)
		}
		if want == 0 {
			break
		}
	}
	d.Tick(now.Add(cfg.Interval))
	if got := d.EjectTimeMultiplier(0); got != 0 {
		t.Errorf("multiplier went below 0: %d", got)
	}
	// A tick less than an interval after unejection does not decay.
	d2 := newTestDetector(t, cfg, 1)
	failConsecutive5xx(d2, cfg, 0, time.Unix(0, 0))
	d2.Tick(time.Unix(10, 0))
	d2.Tick(time.Unix(19, 0))
	if got := d2.EjectTimeMultiplier(0); got != 1 {
		t.Errorf("decayed before a full interval: multiplier %d", got)
	}
}

func TestUnejectResetsCounters(t *testing.T) {
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	d := newTestDetector(t, cfg, 1)
	now := time.Unix(0, 0)
	failConsecutive5xx(d, cfg, 0, now)
	// 5xx while ejected keep counting but cannot detect again.
	for range 9 {
		if evs := d.PutHTTPResponseCode(0, 500, now); evs != nil {
			t.Fatalf("detection on an ejected host: %v", actions(evs))
		}
	}
	d.Tick(now.Add(cfg.BaseEjectionTime))
	if d.IsEjected(0) {
		t.Fatal("not unejected")
	}
	for i := 1; i <= 5; i++ {
		evs := d.PutHTTPResponseCode(0, 500, now)
		if (evs != nil) != (i == 5) {
			t.Errorf("5xx #%d after unejection: events %v", i, actions(evs))
		}
	}
}

func TestOnActiveHealthCheckSuccess(t *testing.T) {
	now := time.Unix(0, 0)
	cfg := DefaultOutlierConfig()
	cfg.MaxEjectionPercent = 100
	d := newTestDetector(t, cfg, 2)
	failConsecutive5xx(d, cfg, 0, now)
	if evs := d.OnActiveHealthCheckSuccess(1, now); evs != nil {
		t.Errorf("host not ejected: got %v", actions(evs))
	}
	evs := d.OnActiveHealthCheckSuccess(0, now.Add(time.Second))
	if len(evs) != 1 || evs[0].Action != Unejected || evs[0].Host != 0 || d.IsEjected(0) || d.Stats().EjectionsActive != 0 {
		t.Errorf("got %+v, ejected %v, want immediate unejection", evs, d.IsEjected(0))
	}
	// The unejection counts for decay like one from a tick.
	d.Tick(now.Add(11 * time.Second))
	if m := d.EjectTimeMultiplier(0); m != 0 {
		t.Errorf("multiplier %d after an interval, want 0", m)
	}

	cfg.SuccessfulActiveHealthCheckUnejectHost = false
	d = newTestDetector(t, cfg, 1)
	failConsecutive5xx(d, cfg, 0, now)
	if evs := d.OnActiveHealthCheckSuccess(0, now); evs != nil || !d.IsEjected(0) {
		t.Errorf("disabled: got %v, ejected %v", actions(evs), d.IsEjected(0))
	}
}

func TestOutlierUnknownHosts(t *testing.T) {
	cfg := DefaultOutlierConfig()
	d := newTestDetector(t, cfg, 1)
	now := time.Unix(0, 0)
	const unknown = HostID(42)
	if evs := d.PutHTTPResponseCode(unknown, 500, now); evs != nil {
		t.Errorf("PutHTTPResponseCode: %v", evs)
	}
	if evs := d.PutLocalOriginResult(unknown, LocalOriginConnectFailed, now); evs != nil {
		t.Errorf("PutLocalOriginResult: %v", evs)
	}
	if evs := d.OnActiveHealthCheckSuccess(unknown, now); evs != nil {
		t.Errorf("OnActiveHealthCheckSuccess: %v", evs)
	}
	if d.IsEjected(unknown) || d.EjectTimeMultiplier(unknown) != 0 {
		t.Errorf("unknown host reported ejected or with a multiplier")
	}
	if _, ok := d.HostSuccessRate(unknown, OriginExternal); ok {
		t.Errorf("HostSuccessRate: ok for an unknown host")
	}
	d.RemoveHost(unknown)
	d.AddHost(0) // again: keeps state, no duplicate
	if evs := d.Tick(now); evs != nil {
		t.Errorf("Tick: %v", evs)
	}
}

func TestSuccessRateEjectionThreshold(t *testing.T) {
	tests := []struct {
		rates                  []float64
		factor                 uint32
		mean, stdev, threshold float64
	}{
		{[]float64{50, 100, 100, 100, 100}, 1900, 90, 20, 52},
		{[]float64{100, 100, 100}, 1900, 100, 0, 100},
		{[]float64{80, 100}, 1000, 90, 10, 80},
		{nil, 1900, 0, 0, 0},
	}
	for _, tt := range tests {
		m, s, th := SuccessRateEjectionThreshold(tt.rates, tt.factor)
		if !approxEqual(m, tt.mean) || !approxEqual(s, tt.stdev) || !approxEqual(th, tt.threshold) {
			t.Errorf("%v/%d: got %v %v %v, want %v %v %v", tt.rates, tt.factor, m, s, th, tt.mean, tt.stdev, tt.threshold)
		}
	}
}

// TestPutHTTPSuccessesMatchesOneByOne: successes delivered in batches
// (before each failure and each tick, as the data plane delivers them)
// leave the detector exactly where one call per response does: the same
// events, ejections, stats and success rates.
func TestPutHTTPSuccessesMatchesOneByOne(t *testing.T) {
	cfg := DefaultOutlierConfig()
	cfg.EnforcingConsecutiveGatewayFailure = 100
	cfg.EnforcingSuccessRate = 100
	cfg.EnforcingFailurePercentage = 100
	cfg.SuccessRateMinimumHosts = 3
	cfg.SuccessRateRequestVolume = 20
	cfg.FailurePercentageMinimumHosts = 3
	cfg.FailurePercentageRequestVolume = 20
	cfg.MaxEjectionPercent = 50
	const hosts = 5
	one := newTestDetector(t, cfg, hosts, 7, 3, 11)
	batch := newTestDetector(t, cfg, hosts, 7, 3, 11)
	pending := make([]uint64, hosts)
	flush := func(h int) {
		batch.PutHTTPSuccesses(HostID(h), pending[h])
		pending[h] = 0
	}
	rnd := uint64(12345)
	next := func(n uint64) uint64 { // xorshift: a fixed, varied sequence
		rnd ^= rnd << 13
		rnd ^= rnd >> 7
		rnd ^= rnd << 17
		return rnd % n
	}
	now := time.Unix(0, 0)
	var got, want []string
	for step := 0; step < 20000; step++ {
		now = now.Add(time.Millisecond)
		if step%1000 == 999 {
			for h := range hosts {
				flush(h)
			}
			want = append(want, actions(one.Tick(now))...)
			got = append(got, actions(batch.Tick(now))...)
			continue
		}
		h := int(next(hosts))
		// Host 0 fails often, host 1 sometimes, the rest rarely.
		failPct := []uint64{60, 20, 3, 3, 3}[h]
		code := 200
		if next(100) < failPct {
			code = []int{500, 502, 503, 504}[next(4)]
		} else if next(10) == 0 {
			code = 404
		}
		want = append(want, actions(one.PutHTTPResponseCode(HostID(h), code, now))...)
		if code < 500 {
			pending[h]++
			continue
		}
		flush(h)
		got = append(got, actions(batch.PutHTTPResponseCode(HostID(h), code, now))...)
	}
	if len(want) == 0 {
		t.Fatal("the sequence ejected nobody: the test exercises nothing")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("batched events differ:\nbatched  %v\none by one %v", got, want)
	}
	if one.Stats() != batch.Stats() {
		t.Fatalf("stats differ: batched %+v, one by one %+v", batch.Stats(), one.Stats())
	}
	for o := range OutlierOrigin(2) {
		a, aok := one.LastSuccessRate(o)
		b, bok := batch.LastSuccessRate(o)
		if a != b || aok != bok {
			t.Fatalf("success rate (origin %d) differs: batched %+v %v, one by one %+v %v", o, b, bok, a, aok)
		}
	}
}
