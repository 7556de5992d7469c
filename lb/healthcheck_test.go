package lb

import (
	"strings"
	"testing"
	"time"
)

func validHCConfig() HealthCheckConfig {
	return HealthCheckConfig{Timeout: time.Second, Interval: 10 * time.Second, UnhealthyThreshold: 3, HealthyThreshold: 2}
}

func TestHealthCheckWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   HealthCheckConfig
		want HealthCheckConfig
	}{
		{"all unset", HealthCheckConfig{Interval: 5 * time.Second},
			HealthCheckConfig{Interval: 5 * time.Second, NoTrafficInterval: time.Minute, NoTrafficHealthyInterval: time.Minute,
				UnhealthyInterval: 5 * time.Second, UnhealthyEdgeInterval: 5 * time.Second, HealthyEdgeInterval: 5 * time.Second}},
		// Defaults chain: the edge interval follows a set unhealthy_interval
		// and no_traffic_healthy_interval a set no_traffic_interval.
		{"chained", HealthCheckConfig{Interval: 5 * time.Second, UnhealthyInterval: 2 * time.Second, NoTrafficInterval: 7 * time.Second},
			HealthCheckConfig{Interval: 5 * time.Second, NoTrafficInterval: 7 * time.Second, NoTrafficHealthyInterval: 7 * time.Second,
				UnhealthyInterval: 2 * time.Second, UnhealthyEdgeInterval: 2 * time.Second, HealthyEdgeInterval: 5 * time.Second}},
		{"all set", HealthCheckConfig{Interval: 1, NoTrafficInterval: 2, NoTrafficHealthyInterval: 3, UnhealthyInterval: 4,
			UnhealthyEdgeInterval: 5, HealthyEdgeInterval: 6},
			HealthCheckConfig{Interval: 1, NoTrafficInterval: 2, NoTrafficHealthyInterval: 3, UnhealthyInterval: 4,
				UnhealthyEdgeInterval: 5, HealthyEdgeInterval: 6}},
	}
	for _, tt := range tests {
		if got := tt.in.WithDefaults(); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
		if got := tt.in.WithDefaults().WithDefaults(); got != tt.want {
			t.Errorf("%s: not idempotent: %+v", tt.name, got)
		}
	}
}

func TestHealthCheckValidate(t *testing.T) {
	tests := []struct {
		mutate func(*HealthCheckConfig)
		want   string
	}{
		{func(c *HealthCheckConfig) {}, ""},
		{func(c *HealthCheckConfig) { c.Timeout = 0 }, "lb: health_check.timeout"},
		{func(c *HealthCheckConfig) { c.Interval = -time.Second }, "lb: health_check.interval"},
		{func(c *HealthCheckConfig) { c.UnhealthyThreshold = 0 }, "lb: health_check.unhealthy_threshold"},
		{func(c *HealthCheckConfig) { c.HealthyThreshold = 0 }, "lb: health_check.healthy_threshold"},
		{func(c *HealthCheckConfig) { c.IntervalJitter = -1 }, "lb: health_check.interval_jitter: -1ns < 0"},
		{func(c *HealthCheckConfig) { c.UnhealthyEdgeInterval = -time.Second }, "health_check.unhealthy_edge_interval"},
		{func(c *HealthCheckConfig) { c.MaxInterval = -time.Second }, "health_check.max_interval"},
	}
	for i, tt := range tests {
		c := validHCConfig()
		tt.mutate(&c)
		err := c.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("case %d: want valid, got %v", i, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("case %d: error got %v, want it to contain %q", i, err, tt.want)
		}
	}
}

type hcStep struct {
	op       string // "ok", "degraded", "net", "active", "retriable"
	want     HealthTransition
	healthy  bool
	degraded bool
}

func runHCSteps(t *testing.T, name string, cfg HealthCheckConfig, steps []hcStep) {
	t.Helper()
	h := NewHostHealthCheck()
	for i, s := range steps {
		var got HealthTransition
		switch s.op {
		case "ok":
			got = h.OnSuccess(false, cfg)
		case "degraded":
			got = h.OnSuccess(true, cfg)
		case "net":
			got = h.OnFailure(FailureNetwork, cfg)
		case "active":
			got = h.OnFailure(FailureActive, cfg)
		case "retriable":
			got = h.OnFailure(FailureRetriable, cfg)
		default:
			t.Fatalf("%s: bad op %q", name, s.op)
		}
		if got != s.want || h.Healthy() != s.healthy || h.Degraded() != s.degraded || h.FailedActiveHC() == h.Healthy() {
			t.Errorf("%s step %d (%s): got %s healthy %v degraded %v, want %s %v %v",
				name, i, s.op, got, h.Healthy(), h.Degraded(), s.want, s.healthy, s.degraded)
		}
	}
}

func TestHostHealthCheckStates(t *testing.T) {
	cfg := validHCConfig() // unhealthy 3, healthy 2
	runHCSteps(t, "first check fails", cfg, []hcStep{
		{"net", Unchanged, false, false}, // already failing: no change
		{"ok", ChangePending, false, false},
		{"ok", Changed, true, false},
	})
	runHCSteps(t, "retriable needs threshold", cfg, []hcStep{
		{"ok", Changed, true, false},
		{"retriable", ChangePending, true, false},
		{"retriable", ChangePending, true, false},
		{"retriable", Changed, false, false},
		{"retriable", Unchanged, false, false},
	})
	runHCSteps(t, "failure resets healthy run", cfg, []hcStep{
		{"ok", Changed, true, false},
		{"active", Changed, false, false},
		{"ok", ChangePending, false, false},
		{"net", Unchanged, false, false},
		{"ok", ChangePending, false, false},
		{"ok", Changed, true, false},
	})
	runHCSteps(t, "success resets unhealthy run", cfg, []hcStep{
		{"ok", Changed, true, false},
		{"net", ChangePending, true, false},
		{"net", ChangePending, true, false},
		{"ok", Unchanged, true, false},
		{"net", ChangePending, true, false},
		{"retriable", ChangePending, true, false},
		{"net", Changed, false, false}, // network and retriable failures count together
	})
	runHCSteps(t, "degraded toggling", cfg, []hcStep{
		{"degraded", Changed, true, true}, // first check: healthy and degraded at once
		{"degraded", Unchanged, true, true},
		{"ok", Changed, true, false},
		{"degraded", Changed, true, true},
		{"active", Changed, false, true},    // a failure leaves the degraded flag alone
		{"ok", ChangePending, false, false}, // the toggle does not hide the pending change
		{"degraded", Changed, true, true},
	})
	one := cfg
	one.HealthyThreshold, one.UnhealthyThreshold = 1, 1
	runHCSteps(t, "thresholds of one", one, []hcStep{
		{"ok", Changed, true, false},
		{"net", Changed, false, false},
		{"ok", Changed, true, false},
	})
}

func TestNextCheckInterval(t *testing.T) {
	cfg := HealthCheckConfig{Interval: 10 * time.Second, UnhealthyInterval: 3 * time.Second}
	tests := []struct {
		name    string
		mutate  func(*HealthCheckConfig)
		r       CheckResult
		tr      HealthTransition
		traffic bool
		draws   []uint64
		want    time.Duration
	}{
		{"healthy", nil, CheckHealthy, Unchanged, true, nil, 10 * time.Second},
		{"edge defaults", nil, CheckUnhealthy, ChangePending, true, nil, 3 * time.Second},
		{"no traffic default", nil, CheckHealthy, Changed, false, nil, 60 * time.Second},
		// Percent jitter draws first (mod 10% of 10 s = 1000), absolute second (mod 500).
		{"draw order", func(c *HealthCheckConfig) { c.IntervalJitterPercent = 10; c.IntervalJitter = 500 * time.Millisecond },
			CheckHealthy, Unchanged, true, []uint64{1234, 777}, 10*time.Second + 234*time.Millisecond + 277*time.Millisecond},
		{"percent below 1 ms draws nothing", func(c *HealthCheckConfig) { c.IntervalJitterPercent = 1; c.Interval = 50 * time.Millisecond },
			CheckHealthy, Unchanged, true, nil, 50 * time.Millisecond},
		{"max clamp", func(c *HealthCheckConfig) { c.MaxInterval = 5 * time.Second }, CheckHealthy, Unchanged, true, nil, 5 * time.Second},
		{"min clamp", func(c *HealthCheckConfig) { c.MinInterval = 20 * time.Second }, CheckHealthy, Unchanged, true, nil, 20 * time.Second},
		{"min wins over max", func(c *HealthCheckConfig) { c.MinInterval = 20 * time.Second; c.MaxInterval = 5 * time.Second },
			CheckHealthy, Unchanged, true, nil, 20 * time.Second},
		{"max clamps jitter", func(c *HealthCheckConfig) { c.IntervalJitter = time.Second; c.MaxInterval = 10 * time.Second },
			CheckHealthy, Unchanged, true, []uint64{999}, 10 * time.Second},
		{"1 ms floor", func(c *HealthCheckConfig) { c.Interval = 0 }, CheckHealthy, Unchanged, true, nil, time.Millisecond},
		{"sub-ms truncated", func(c *HealthCheckConfig) { c.Interval = 1500 * time.Microsecond }, CheckHealthy, Unchanged, true, nil, time.Millisecond},
	}
	for _, tt := range tests {
		c := cfg
		if tt.mutate != nil {
			tt.mutate(&c)
		}
		rnd := &healthRandom{t: t, vals: tt.draws}
		if got := NextCheckInterval(c, tt.r, tt.tr, tt.traffic, rnd); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
		if rnd.n != len(tt.draws) {
			t.Errorf("%s: %d draws, want %d", tt.name, rnd.n, len(tt.draws))
		}
	}
}

func TestFirstCheckDelay(t *testing.T) {
	tests := []struct {
		name  string
		cfg   HealthCheckConfig
		draws []uint64
		want  time.Duration
	}{
		{"no jitter: at once", HealthCheckConfig{Interval: time.Second, IntervalJitterPercent: 50}, nil, 0},
		{"jitter", HealthCheckConfig{InitialJitter: time.Second}, []uint64{1500}, 500 * time.Millisecond},
		{"percent jitter does not apply", HealthCheckConfig{InitialJitter: time.Second, IntervalJitterPercent: 50}, []uint64{1500}, 500 * time.Millisecond},
		{"1 ms floor", HealthCheckConfig{InitialJitter: time.Second}, []uint64{1000}, time.Millisecond},
		{"min clamp", HealthCheckConfig{InitialJitter: time.Second, MinInterval: 800 * time.Millisecond}, []uint64{1}, 800 * time.Millisecond},
	}
	for _, tt := range tests {
		rnd := &healthRandom{t: t, vals: tt.draws}
		if got := FirstCheckDelay(tt.cfg, rnd); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
		if rnd.n != len(tt.draws) {
			t.Errorf("%s: %d draws, want %d", tt.name, rnd.n, len(tt.draws))
		}
	}
}

func TestHealthCheckEnumStrings(t *testing.T) {
	for tr, want := range map[HealthTransition]string{Unchanged: "Unchanged", Changed: "Changed", ChangePending: "ChangePending", 9: "HealthTransition(9)"} {
		if tr.String() != want {
			t.Errorf("%d: got %q, want %q", int(tr), tr.String(), want)
		}
	}
}
