package lb

import (
	"slices"
	"testing"
)

// retryPriority returns rp as retry.State.RetryPriority does: nil when the
// plugin is disabled.
func retryPriority(rp *PreviousPriorities) *PreviousPriorities {
	if !rp.Enabled() {
		return nil
	}
	return rp
}

// attemptPriorities runs n attempts of one request through a worker's
// picker with the retry priority plugin at updateFrequency (0: none),
// recording each attempted host as Envoy's router (and retry.State) does,
// and returns the priority of each attempt.
func attemptPriorities(t *testing.T, s *Snapshot, updateFrequency uint32, n int) []uint32 {
	t.Helper()
	var rp PreviousPriorities
	rp.Init(updateFrequency)
	p := NewPicker(newPCG(7), nil)
	var got []uint32
	for i := range n {
		h := p.Pick(s, &PickContext{RetryPriority: retryPriority(&rp)})
		if h == nil {
			t.Fatalf("attempt %d (priorities so far %v): no host", i+1, got)
		}
		got = append(got, h.Priority)
		rp.OnHostAttempted(h.Priority)
	}
	return got
}

// The example of Envoy's PreviousPrioritiesConfig documentation: P0, P1, P2
// 100 %, 0 % and 50 % healthy with update_frequency 1 give P0, P2 (P0
// excluded, P2 the only available level), P0 (nothing left: the
// exclusions reset), P2. P2 has no load of its own (P0 takes 100 %), so
// this also needs its hosts ready for picks.
func TestPreviousPrioritiesDocumentedSequence(t *testing.T) {
	var id HostID
	var hosts []*Host
	hosts = append(hosts, hostsIn(&id, 0, "a", 2, 0)...)
	hosts = append(hosts, hostsIn(&id, 1, "a", 2, 2)...)
	hosts = append(hosts, hostsIn(&id, 2, "a", 2, 1)...)
	s := mustSnapshot(t, DefaultClusterConfig(), BuildInput{Hosts: hosts})
	if l := s.Load(); !slices.Equal(l.HealthyLoad, []uint32{100, 0, 0}) || !slices.Equal(l.Health, []uint32{100, 0, 70}) {
		t.Fatalf("setup: load %v health %v, want 100/0/0 and 100/0/70", l.HealthyLoad, l.Health)
	}
	if got, want := attemptPriorities(t, s, 1, 4), []uint32{0, 2, 0, 2}; !slices.Equal(got, want) {
		t.Errorf("attempts went to priorities %v, want %v", got, want)
	}
	// Without the plugin every attempt stays where the load is.
	if got, want := attemptPriorities(t, s, 0, 4), []uint32{0, 0, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("without retry_priority: attempts went to %v, want %v", got, want)
	}
}

// update_frequency 2, as its documentation puts it: the first two attempts
// use the unmodified load, the third and fourth exclude the priorities of
// the first two, the fifth and sixth those of the first four; the seventh
// finds every level excluded, resets and starts over.
func TestPreviousPrioritiesUpdateFrequency(t *testing.T) {
	var id HostID
	var hosts []*Host
	for prio := range uint32(3) {
		hosts = append(hosts, hostsIn(&id, prio, "a", 2, 0)...)
	}
	s := mustSnapshot(t, DefaultClusterConfig(), BuildInput{Hosts: hosts})
	if got, want := attemptPriorities(t, s, 2, 8), []uint32{0, 0, 1, 1, 2, 2, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("attempts went to priorities %v, want %v", got, want)
	}
}

// The recomputed load spreads 100 points over the remaining levels in
// proportion to their availability (capped at 100 in total), healthy
// before degraded, with the rounding leftover to the first available level.
func TestPreviousPrioritiesRecomputedLoad(t *testing.T) {
	tests := []struct {
		name                  string
		health, degraded      []uint32
		wantHealthy, wantDegr []uint32
		attempted             []uint32
	}{
		// 33 * 100 / 99 = 33 three times, the leftover 1 to P1.
		{"rounding leftover", []uint32{100, 33, 33, 33}, []uint32{0, 0, 0, 0}, []uint32{0, 34, 33, 33}, []uint32{0, 0, 0, 0}, []uint32{0}},
		// 20 * 100 / 50 = 40 healthy, then 30 * 100 / 50 = 60 degraded.
		{"degraded after healthy", []uint32{100, 20, 0}, []uint32{0, 0, 30}, []uint32{0, 40, 0}, []uint32{0, 0, 60}, []uint32{0}},
		// 80 + 70 caps at 100: P1 takes 80, P2 the 20 left.
		{"spill-over", []uint32{100, 80, 70}, []uint32{0, 0, 0}, []uint32{0, 80, 20}, []uint32{0, 0, 0}, []uint32{0}},
		// P0 and P2 excluded: all to P1.
		{"two excluded", []uint32{100, 10, 100}, []uint32{0, 0, 0}, []uint32{0, 100, 0}, []uint32{0, 0, 0}, []uint32{0, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p PreviousPriorities
			p.Init(uint32(len(tt.attempted)))
			for _, prio := range tt.attempted {
				p.OnHostAttempted(prio)
			}
			n := len(tt.health)
			l := &PriorityLoad{Health: tt.health, DegradedAvailability: tt.degraded,
				HealthyLoad: append([]uint32{100}, make([]uint32, n-1)...), DegradedLoad: make([]uint32, n)}
			h, d := p.PriorityLoad(l)
			if !slices.Equal(h, tt.wantHealthy) || !slices.Equal(d, tt.wantDegr) {
				t.Errorf("load %v / %v, want %v / %v", h, d, tt.wantHealthy, tt.wantDegr)
			}
		})
	}
}

// With nothing available anywhere the original load is used, exclusions or
// not, and the attempts start over.
func TestPreviousPrioritiesNothingAvailable(t *testing.T) {
	var p PreviousPriorities
	p.Init(1)
	p.OnHostAttempted(0)
	l := &PriorityLoad{Health: []uint32{0, 0}, DegradedAvailability: []uint32{0, 0},
		HealthyLoad: []uint32{100, 0}, DegradedLoad: []uint32{0, 0}}
	h, d := p.PriorityLoad(l)
	if &h[0] != &l.HealthyLoad[0] || &d[0] != &l.DegradedLoad[0] {
		t.Errorf("got load %v / %v, want the original slices", h, d)
	}
	if p.attempts != 0 {
		t.Errorf("%d attempts remembered after the reset, want 0", p.attempts)
	}
}

// Ring hash and Maglev choose the priority from the request hash and the
// snapshot's load: Envoy's thread-aware balancers never ask the retry
// priority plugin.
func TestPreviousPrioritiesIgnoredByHashing(t *testing.T) {
	for _, pol := range []Policy{PolicyRingHash, PolicyMaglev} {
		var id HostID
		hosts := append(hostsIn(&id, 0, "a", 2, 0), hostsIn(&id, 1, "a", 2, 0)...)
		cfg := DefaultClusterConfig()
		cfg.Policy = pol
		s := mustSnapshot(t, cfg, BuildInput{Hosts: hosts})
		var rp PreviousPriorities
		rp.Init(1)
		rp.OnHostAttempted(hosts[0].Priority) // P0 attempted: a round-robin retry would leave it
		p := NewPicker(newPCG(3), nil)
		if h := p.Pick(s, &PickContext{Hash: 12345, HasHash: true, RetryPriority: &rp}); h == nil || h.Priority != 0 {
			t.Errorf("%v: retry went to %v, want a P0 host", pol, h)
		}
	}
}
