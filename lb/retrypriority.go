package lb

import "slices"

// PreviousPrioritiesName is the name of Envoy's one built-in retry priority
// plugin, which PreviousPriorities implements.
const PreviousPrioritiesName = "envoy.retry_priorities.previous_priorities"

// PreviousPriorities is Envoy's retry priority plugin
// envoy.retry_priorities.previous_priorities for one request (spec 9.2):
// every UpdateFrequency attempts, the priorities of the hosts attempted so
// far are excluded and the priority load is recomputed over the remaining
// priorities from their health and degraded availability, so that retries
// leave a priority whose hosts all still look healthy. When no priority is
// left the exclusions reset; when nothing is available at all the original
// load is used. A plain value, meant to live in the request's retry.State.
type PreviousPriorities struct {
	freq uint32
	// attempts counts the hosts attempted since the last reset and
	// attempted holds their priorities (Envoy keeps the hosts; only their
	// priorities are ever read). excluded are the priorities excluded at
	// the last update.
	attempts            uint32
	attempted, excluded [(MaxPriority + 1) / 64]uint64
	// healthy and degraded are the load of the last successful update
	// (Envoy's per_priority_load_); valid says there was one.
	healthy, degraded []uint32
	valid             bool
}

// Init resets p for a new request; updateFrequency 0 disables the plugin
// (Envoy requires update_frequency > 0 to configure it).
func (p *PreviousPriorities) Init(updateFrequency uint32) {
	h, d := p.healthy[:0], p.degraded[:0]
	*p = PreviousPriorities{freq: updateFrequency, healthy: h, degraded: d}
}

// Enabled reports whether the plugin is configured.
func (p *PreviousPriorities) Enabled() bool { return p != nil && p.freq > 0 }

// OnHostAttempted records that a host of the given priority was attempted
// (Envoy's onHostAttempted, called for every attempt, the first included).
func (p *PreviousPriorities) OnHostAttempted(priority uint32) {
	if !p.Enabled() || priority > MaxPriority {
		return
	}
	p.attempts++
	p.attempted[priority/64] |= 1 << (priority % 64)
}

// PriorityLoad returns the healthy and degraded load the next pick should
// use instead of l's (Envoy's determinePriorityLoad): l's own until
// UpdateFrequency hosts were attempted; on every multiple of it, a load
// recomputed without the attempted priorities; in between, the load of the
// last update.
func (p *PreviousPriorities) PriorityLoad(l *PriorityLoad) (healthy, degraded []uint32) {
	if !p.Enabled() || p.attempts < p.freq {
		return l.HealthyLoad, l.DegradedLoad
	}
	if p.attempts%p.freq == 0 {
		p.excluded[0] |= p.attempted[0]
		p.excluded[1] |= p.attempted[1]
		p.valid = p.adjust(l)
	}
	// A rebuild that changed the number of priorities since the update
	// makes the stored load index other levels: use the snapshot's then.
	if !p.valid || len(p.healthy) != len(l.HealthyLoad) {
		return l.HealthyLoad, l.DegradedLoad
	}
	return p.healthy, p.degraded
}

func (p *PreviousPriorities) isExcluded(prio int) bool {
	return prio <= MaxPriority && p.excluded[prio/64]&(1<<(prio%64)) != 0
}

// available is the sum of the health and degraded availability of the
// priorities not excluded, capped at 100.
func (p *PreviousPriorities) available(l *PriorityLoad) uint32 {
	var total uint32
	for i := range l.Health {
		if !p.isExcluded(i) {
			total += l.Health[i] + l.DegradedAvailability[i]
		}
	}
	return min(total, 100)
}

// adjust is Envoy's adjustForAttemptedPriorities: false means "use the
// original load".
func (p *PreviousPriorities) adjust(l *PriorityLoad) bool {
	total := p.available(l)
	if total == 0 {
		// Every priority left is unavailable: start over from the
		// beginning rather than fail the request.
		clear(p.excluded[:])
		clear(p.attempted[:])
		p.attempts = 0
		total = p.available(l)
	}
	if total == 0 {
		return false // nothing anywhere: keep the original's behaviour
	}
	n := len(l.Health)
	p.healthy = slices.Grow(p.healthy[:0], n)[:n]
	p.degraded = slices.Grow(p.degraded[:0], n)[:n]
	clear(p.healthy)
	clear(p.degraded)
	// Distribute as the load balancer does, repeating the pass until all
	// 100 points are placed: the rounding leftover goes to the first
	// available priority. Each pass places at least one point, because
	// some level has availability >= 1 and total <= 100.
	remaining := uint32(100)
	for remaining > 0 {
		for _, pass := range [2]struct{ avail, load []uint32 }{{l.Health, p.healthy}, {l.DegradedAvailability, p.degraded}} {
			for i, a := range pass.avail {
				if p.isExcluded(i) {
					continue
				}
				d := min(remaining, a*100/total)
				pass.load[i] += d
				remaining -= d
			}
		}
	}
	return true
}
