package lb

import (
	"math"
	"time"
)

// localityEffectiveWeight is the weight locality-weighted balancing gives a
// locality: its EDS weight times min(1, overprovisioning x eligible share),
// where eligible hosts are the healthy (or, for the degraded scheduler, the
// degraded) ones and excluded hosts count on neither side.
func localityEffectiveWeight(weight uint32, hosts, excluded, eligible uint64, opf uint32) float64 {
	if hosts <= excluded {
		return 0
	}
	ratio := float64(eligible) / float64(hosts-excluded)
	return float64(weight) * math.Min(1, float64(opf)/100*ratio)
}

// localityWeights returns the effective weights of a host set's localities
// for the healthy or degraded scheduler, or nil when Envoy would build no
// scheduler: no locality weights, no eligible host, or all weights zero.
func localityWeights(hs *HostSet, class availability) []float64 {
	eligibleTotal := len(hs.Healthy)
	if class == availDegraded {
		eligibleTotal = len(hs.Degraded)
	}
	if eligibleTotal == 0 {
		return nil
	}
	ws := make([]float64, len(hs.Localities))
	any := false
	for i := range hs.Localities {
		b := &hs.Localities[i]
		eligible := len(b.Healthy)
		if class == availDegraded {
			eligible = len(b.Degraded)
		}
		ws[i] = localityEffectiveWeight(b.Weight, uint64(len(b.Hosts)), uint64(b.Excluded), uint64(eligible), hs.OverprovisioningFactor)
		any = any || ws[i] > 0
	}
	if !any {
		return nil
	}
	return ws
}

// SlowStartConfig ramps a new host's weight up over Window
// (Envoy's SlowStartConfig).
type SlowStartConfig struct {
	// Window is how long a new host warms up; 0 disables slow start.
	Window time.Duration
	// Aggression shapes the ramp; 1 is linear. Values <= 0 or NaN mean 1.
	Aggression float64
	// MinWeightPercent is the floor of the ramp in percent (default 10).
	MinWeightPercent float64
}

// slowStartFactor is the multiplier of a host's weight t after it joined:
// max(minWeightPercent/100, (max(t,1ms)/window)^(1/aggression)), and 1 once
// the window has passed.
func slowStartFactor(t, window time.Duration, aggression, minWeightPercent float64) float64 {
	if window <= 0 || t >= window {
		return 1
	}
	if aggression <= 0 || math.IsNaN(aggression) {
		aggression = 1
	}
	t = max(t, time.Millisecond)
	f := math.Pow(float64(t)/float64(window), 1/aggression)
	return math.Max(minWeightPercent/100, f)
}

// leastRequestWeight is weighted least request's dynamic weight:
// weight / (active+1)^bias.
func leastRequestWeight(weight float64, active uint64, bias float64) float64 {
	if bias == 1 {
		return weight / float64(active+1)
	}
	if bias == 0 {
		return weight
	}
	return weight / math.Pow(float64(active+1), bias)
}
