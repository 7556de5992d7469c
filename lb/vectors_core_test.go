package lb

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func init() {
	vectorRunners["priority_load"] = runPriorityLoadVector
	vectorRunners["choose_priority"] = runChoosePriorityVector
}

// seqRandom returns queued values first, then fallback forever.
type seqRandom struct {
	queue    []uint64
	fallback uint64
	used     int
}

func (r *seqRandom) Uint64() uint64 {
	r.used++
	if len(r.queue) > 0 {
		v := r.queue[0]
		r.queue = r.queue[1:]
		return v
	}
	return r.fallback
}

// pcgRandom adapts math/rand/v2's PCG to Random.
type pcgRandom struct{ *rand.PCG }

func newPCG(seed uint64) pcgRandom { return pcgRandom{rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)} }

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ---- priority load ----

type prioVectorLevel struct {
	Hosts, Healthy, Degraded, Excluded uint64
	OverprovisioningFactor             uint32   `json:"overprovisioning_factor"`
	WeightedPriorityHealth             bool     `json:"weighted_priority_health"`
	HostWeights                        []uint32 `json:"host_weights"`
}

// vectorHosts realises a priority level with real hosts: healthy first,
// then degraded, excluded and unhealthy, carrying host_weights in order.
func (l prioVectorLevel) hosts(t *testing.T, prio uint32, nextID *HostID) []*Host {
	if l.Healthy+l.Degraded+l.Excluded > l.Hosts {
		t.Fatalf("priority %d: healthy+degraded+excluded %d > hosts %d", prio, l.Healthy+l.Degraded+l.Excluded, l.Hosts)
	}
	if len(l.HostWeights) != 0 && uint64(len(l.HostWeights)) != l.Hosts {
		t.Fatalf("priority %d: %d host_weights for %d hosts", prio, len(l.HostWeights), l.Hosts)
	}
	out := make([]*Host, 0, l.Hosts)
	for i := uint64(0); i < l.Hosts; i++ {
		var f HealthFlags
		switch {
		case i < l.Healthy:
		case i < l.Healthy+l.Degraded:
			f = DegradedEDSHealth
		case i < l.Healthy+l.Degraded+l.Excluded:
			f = PendingActiveHC | FailedActiveHC
		default:
			f = FailedEDSHealth
		}
		w := uint32(1)
		if len(l.HostWeights) != 0 {
			w = l.HostWeights[i]
		}
		out = append(out, &Host{ID: *nextID, Address: fmt.Sprintf("10.0.%d.%d:80", prio, i), Weight: w, Priority: prio, Flags: f})
		*nextID++
	}
	return out
}

type priorityLoadExpected struct {
	HealthyPriorityLoad            []uint32 `json:"healthy_priority_load"`
	DegradedPriorityLoad           []uint32 `json:"degraded_priority_load"`
	PerPriorityHealth              []uint32 `json:"per_priority_health"`
	PerPriorityDegradedAvailablity []uint32 `json:"per_priority_degraded_availability"`
	PerPriorityPanic               []bool   `json:"per_priority_panic"`
	NormalizedTotalAvailability    *uint32  `json:"normalized_total_availability"`
	TotalPanic                     *bool    `json:"total_panic"`
}

func checkPriorityLoad(t *testing.T, via string, got *PriorityLoad, want priorityLoadExpected) {
	t.Helper()
	cmpU := func(field string, g, w []uint32) {
		if w != nil && !slices.Equal(g, w) {
			t.Errorf("%s: %s = %v, want %v", via, field, g, w)
		}
	}
	cmpU("healthy_priority_load", got.HealthyLoad, want.HealthyPriorityLoad)
	cmpU("degraded_priority_load", got.DegradedLoad, want.DegradedPriorityLoad)
	cmpU("per_priority_health", got.Health, want.PerPriorityHealth)
	cmpU("per_priority_degraded_availability", got.DegradedAvailability, want.PerPriorityDegradedAvailablity)
	if want.PerPriorityPanic != nil && !slices.Equal(got.Panic, want.PerPriorityPanic) {
		t.Errorf("%s: per_priority_panic = %v, want %v", via, got.Panic, want.PerPriorityPanic)
	}
	if w := want.NormalizedTotalAvailability; w != nil && got.NormalizedTotalAvailability != *w {
		t.Errorf("%s: normalized_total_availability = %d, want %d", via, got.NormalizedTotalAvailability, *w)
	}
	if w := want.TotalPanic; w != nil && got.TotalPanic != *w {
		t.Errorf("%s: total_panic = %v, want %v", via, got.TotalPanic, *w)
	}
	var sum uint32
	for i := range got.HealthyLoad {
		sum += got.HealthyLoad[i] + got.DegradedLoad[i]
	}
	if sum != 100 {
		t.Errorf("%s: loads sum to %d, want 100", via, sum)
	}
}

func runPriorityLoadVector(t *testing.T, v vector) {
	var in struct {
		PanicThresholdPercent *float64          `json:"panic_threshold_percent"`
		Priorities            []prioVectorLevel `json:"priorities"`
	}
	var want priorityLoadExpected
	decodeVector(t, v, &in, &want)
	threshold := float64(DefaultPanicThreshold)
	if in.PanicThresholdPercent != nil {
		threshold = *in.PanicThresholdPercent
	}
	// The pure computation, with each priority's own factor and weighting.
	var nextID HostID
	var hosts []*Host
	avail := make([]PriorityAvailability, len(in.Priorities))
	uniform := true
	for p, l := range in.Priorities {
		if l.OverprovisioningFactor == 0 {
			l.OverprovisioningFactor = DefaultOverprovisioningFactor
			in.Priorities[p] = l
		}
		hs := l.hosts(t, uint32(p), &nextID)
		hosts = append(hosts, hs...)
		set := newHostSet(uint32(p), hs, Locality{}, l.OverprovisioningFactor, l.WeightedPriorityHealth)
		avail[p] = set.availability()
		uniform = uniform && l.OverprovisioningFactor == in.Priorities[0].OverprovisioningFactor &&
			l.WeightedPriorityHealth == in.Priorities[0].WeightedPriorityHealth
	}
	direct := ComputePriorityLoad(avail, threshold)
	checkPriorityLoad(t, "ComputePriorityLoad", &direct, want)
	if !uniform || len(in.Priorities) == 0 {
		return
	}
	// The same through a snapshot of real hosts, as the data plane builds it.
	cfg := DefaultClusterConfig()
	cfg.PanicThreshold = threshold
	s, err := NewSnapshot(cfg, BuildInput{Hosts: hosts, Priorities: len(in.Priorities), OverprovisioningFactor: in.Priorities[0].OverprovisioningFactor,
		WeightedPriorityHealth: in.Priorities[0].WeightedPriorityHealth}, nil)
	if err != nil {
		t.Fatalf("NewSnapshot: %v", err)
	}
	checkPriorityLoad(t, "Snapshot", s.Load(), want)
}

func runChoosePriorityVector(t *testing.T, v vector) {
	var in struct {
		Hashes       []uint64 `json:"hashes"`
		HealthyLoad  []uint32 `json:"healthy_priority_load"`
		DegradedLoad []uint32 `json:"degraded_priority_load"`
	}
	var want struct {
		Results []struct {
			Hash         uint64 `json:"hash"`
			Priority     int    `json:"priority"`
			Availability string `json:"availability"`
		} `json:"results"`
	}
	decodeVector(t, v, &in, &want)
	if len(want.Results) == 0 {
		t.Fatal("no expected results")
	}
	// The input's hashes are the ones the results are for, in order.
	if in.Hashes != nil {
		got := make([]uint64, len(want.Results))
		for i, r := range want.Results {
			got[i] = r.Hash
		}
		if !slices.Equal(got, in.Hashes) {
			t.Fatalf("results are for hashes %v, input gives %v", got, in.Hashes)
		}
	}
	for _, r := range want.Results {
		p, a := ChoosePriority(r.Hash, in.HealthyLoad, in.DegradedLoad)
		if p != r.Priority || a.String() != r.Availability {
			t.Errorf("hash %d: got (P%d, %s), want (P%d, %s)", r.Hash, p, a, r.Priority, r.Availability)
		}
	}
}

// deref returns *p, or def when p is nil (an absent optional field).
func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// drawQueue replays a vector's random draws and fails the test when the
// code under test needs more than the vector gives.
type drawQueue struct {
	t     *testing.T
	what  string
	draws []uint64
	used  int
}

func (r *drawQueue) Uint64() uint64 {
	r.used++
	if r.used > len(r.draws) {
		r.t.Errorf("%s: random draw #%d, but only %d are given", r.what, r.used, len(r.draws))
		return 0
	}
	return r.draws[r.used-1]
}

// unused returns how many draws were not consumed.
func (r *drawQueue) unused() int { return max(0, len(r.draws)-r.used) }
