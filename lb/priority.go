package lb

import "math"

// Envoy's defaults for priority load.
const (
	// DefaultOverprovisioningFactor is 1.4, in percent.
	DefaultOverprovisioningFactor = 140
	// DefaultPanicThreshold is the healthy-panic threshold in percent.
	DefaultPanicThreshold = 50
)

// availability is the class of hosts a request was assigned to.
type availability uint8

const (
	// availHealthy: pick among healthy hosts.
	availHealthy availability = iota
	// availDegraded: pick among degraded hosts.
	availDegraded
)

// String returns "healthy" or "degraded".
func (a availability) String() string {
	if a == availDegraded {
		return "degraded"
	}
	return "healthy"
}

// PriorityAvailability is the input of the priority-load computation for one
// priority: counts (and weights) of its hosts by health.
type PriorityAvailability struct {
	Hosts, Healthy, Degraded, Excluded uint64
	// Weights, used only when WeightedPriorityHealth is set.
	HostsWeight, HealthyWeight, DegradedWeight, ExcludedWeight uint64
	OverprovisioningFactor                                     uint32
	WeightedPriorityHealth                                     bool
}

// PriorityLoad is how a cluster's traffic is spread over its priorities.
type PriorityLoad struct {
	// HealthyLoad and DegradedLoad are percentages; together they sum to 100.
	HealthyLoad, DegradedLoad []uint32
	// Health and DegradedAvailability are the per-priority availabilities
	// (overprovisioning applied, capped at 100).
	Health, DegradedAvailability []uint32
	// Panic tells, per priority, that the priority picks from all hosts.
	Panic []bool
	// NormalizedTotalAvailability is min(100, Σ health + Σ degraded).
	NormalizedTotalAvailability uint32
	// TotalPanic is set when every priority is in panic and the load is
	// spread by raw host counts.
	TotalPanic bool
}

func (a PriorityAvailability) availabilities() (health, degraded uint32) {
	count := a.Hosts - a.Excluded
	if a.Hosts < a.Excluded || count == 0 {
		return 0, 0
	}
	hw, dw, tw := a.Healthy, a.Degraded, count
	if a.WeightedPriorityHealth {
		hw, dw = a.HealthyWeight, a.DegradedWeight
		if a.HostsWeight <= a.ExcludedWeight {
			return 0, 0
		}
		tw = a.HostsWeight - a.ExcludedWeight
	}
	opf := uint64(a.OverprovisioningFactor)
	return uint32(min(100, opf*hw/tw)), uint32(min(100, opf*dw/tw))
}

// inPanic is Envoy's isHostSetInPanic: the share of healthy plus degraded
// hosts (by count, never weight) among non-excluded hosts is below threshold.
func (a PriorityAvailability) inPanic(threshold float64) bool {
	count := float64(a.Hosts) - float64(a.Excluded)
	pct := 0.0
	if count > 0 {
		pct = 100 * float64(a.Healthy+a.Degraded) / count
	}
	return pct < threshold
}

// ComputePriorityLoad distributes 100 % of traffic over the priorities as
// Envoy's recalculatePerPriorityState and recalculatePerPriorityPanic do;
// panicThreshold is in percent (0 disables panic).
func ComputePriorityLoad(prios []PriorityAvailability, panicThreshold float64) PriorityLoad {
	n := len(prios)
	l := PriorityLoad{
		HealthyLoad: make([]uint32, n), DegradedLoad: make([]uint32, n),
		Health: make([]uint32, n), DegradedAvailability: make([]uint32, n),
		Panic: make([]bool, n),
	}
	if n == 0 {
		return l
	}
	if math.IsNaN(panicThreshold) || panicThreshold < 0 {
		panicThreshold = 0
	}
	panicThreshold = min(panicThreshold, 100)
	var total uint32
	for i, p := range prios {
		l.Health[i], l.DegradedAvailability[i] = p.availabilities()
		total += l.Health[i] + l.DegradedAvailability[i]
	}
	nta := min(100, total)
	l.NormalizedTotalAvailability = nta
	if nta > 0 {
		remaining := uint32(100)
		firstHealthy, firstDegraded := -1, -1
		for i := range prios {
			l.HealthyLoad[i] = min(remaining, l.Health[i]*100/nta)
			remaining -= l.HealthyLoad[i]
			if firstHealthy < 0 && l.Health[i] > 0 {
				firstHealthy = i
			}
		}
		for i := range prios {
			l.DegradedLoad[i] = min(remaining, l.DegradedAvailability[i]*100/nta)
			remaining -= l.DegradedLoad[i]
			if firstDegraded < 0 && l.DegradedAvailability[i] > 0 {
				firstDegraded = i
			}
		}
		if remaining > 0 {
			if firstHealthy >= 0 {
				l.HealthyLoad[firstHealthy] += remaining
			} else {
				l.DegradedLoad[firstDegraded] += remaining
			}
		}
	}

	if panicThreshold == 0 && nta == 0 {
		// Nothing is selectable and panic is off: Envoy sends everything to
		// P0 (where picks then find no host). Other entries are zeroed here
		// where Envoy would leave stale values.
		l.HealthyLoad[0] = 100
		return l
	}
	allPanic := true
	for i, p := range prios {
		l.Panic[i] = nta < 100 && p.inPanic(panicThreshold)
		allPanic = allPanic && l.Panic[i]
	}
	if !allPanic {
		if nta == 0 {
			// Nothing is available yet some priority is not in panic (its
			// health rounded down to 0): Envoy keeps stale loads and its
			// choosePriority falls back to P0; say so explicitly.
			l.HealthyLoad[0] = 100
		}
		return l
	}
	l.TotalPanic = true
	var hosts uint64
	for _, p := range prios {
		hosts += p.Hosts
	}
	if hosts == 0 {
		clear(l.HealthyLoad)
		clear(l.DegradedLoad)
		l.HealthyLoad[0] = 100
		return l
	}
	remaining := uint32(100)
	first := -1
	for i, p := range prios {
		l.HealthyLoad[i] = uint32(100 * p.Hosts / hosts)
		l.DegradedLoad[i] = 0
		remaining -= l.HealthyLoad[i]
		if first < 0 && p.Hosts > 0 {
			first = i
		}
	}
	l.HealthyLoad[first] += remaining
	return l
}

// choosePriority maps a 64-bit hash to a priority and availability class:
// hash%100+1 against the cumulative healthy loads, then degraded loads.
func choosePriority(hash uint64, healthyLoad, degradedLoad []uint32) (int, availability) {
	h := uint32(hash%100) + 1
	var acc uint32
	for i, l := range healthyLoad {
		acc += l
		if h <= acc {
			return i, availHealthy
		}
	}
	for i, l := range degradedLoad {
		acc += l
		if h <= acc {
			return i, availDegraded
		}
	}
	// Loads always sum to 100; reaching here means no priorities at all.
	return 0, availHealthy
}
