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
	vectorRunners["zone_aware"] = runZoneAwareVector
	vectorRunners["zone_aware_preconditions"] = runZonePreconditionsVector
	vectorRunners["locality_weighted"] = runLocalityWeightedVector
	vectorRunners["round_robin_edf"] = runRoundRobinVector
	vectorRunners["slow_start"] = runSlowStartVector
	vectorRunners["least_request"] = runLeastRequestVector
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
	for _, r := range want.Results {
		p, a := ChoosePriority(r.Hash, in.HealthyLoad, in.DegradedLoad)
		if p != r.Priority || a.String() != r.Availability {
			t.Errorf("hash %d: got (P%d, %s), want (P%d, %s)", r.Hash, p, a, r.Priority, r.Availability)
		}
	}
}

// ---- zone aware ----

type zoneVectorBucket struct {
	Zone          *string `json:"zone"`
	Hosts         *uint64 `json:"hosts"`
	HealthyHosts  uint64  `json:"healthy_hosts"`
	HealthyWeight *uint64 `json:"healthy_weight_total"`
}

func (b zoneVectorBucket) count() uint64 {
	if b.Hosts != nil {
		return *b.Hosts
	}
	return b.HealthyHosts
}

type zoneVectorInput struct {
	FailTrafficOnPanic    bool               `json:"fail_traffic_on_panic"`
	ForceLocalZoneMinSize *uint64            `json:"force_local_zone_min_size"`
	LocalHasLocal         *bool              `json:"local_cluster_has_local_locality"`
	LocalHealthy          []zoneVectorBucket `json:"local_cluster_healthy_hosts_per_locality"`
	LocalHosts            []zoneVectorBucket `json:"local_cluster_hosts_per_locality"`
	LocalityBasis         string             `json:"locality_basis"`
	MinClusterSize        *uint64            `json:"min_cluster_size"`
	PanicThreshold        *float64           `json:"panic_threshold_percent"`
	RoutingEnabled        *uint32            `json:"routing_enabled_percent"`
	UpstreamHasLocal      *bool              `json:"upstream_has_local_locality"`
	Upstream              []zoneVectorBucket `json:"upstream_p0_healthy_hosts_per_locality"`
	UpstreamTotal         *uint64            `json:"upstream_p0_healthy_hosts_total"`
	Runtime               map[string]float64 `json:"runtime"`
}

// zoneCluster is a zone vector realised as real hosts: the upstream P0 and
// the local cluster, with zone names chosen so that Envoy's bucket order
// (own zone first, then lexicographic) reproduces the vector's order.
type zoneCluster struct {
	cfg      ClusterConfig
	in       BuildInput
	bucketOf map[Locality]int // upstream locality -> vector bucket index
}

func buildZoneCluster(t *testing.T, in zoneVectorInput) *zoneCluster {
	t.Helper()
	cfg := DefaultClusterConfig()
	if in.MinClusterSize != nil {
		cfg.ZoneAware.MinClusterSize = *in.MinClusterSize
	}
	if in.RoutingEnabled != nil {
		cfg.ZoneAware.RoutingEnabledPercent = *in.RoutingEnabled
	}
	if in.PanicThreshold != nil {
		cfg.PanicThreshold = *in.PanicThreshold
	}
	if in.ForceLocalZoneMinSize != nil {
		cfg.ZoneAware.ForceLocalZoneMinSize = *in.ForceLocalZoneMinSize
	}
	cfg.ZoneAware.FailTrafficOnPanic = in.FailTrafficOnPanic
	switch in.LocalityBasis {
	case "", "HEALTHY_HOSTS_NUM":
	case "HEALTHY_HOSTS_WEIGHT":
		cfg.ZoneAware.Basis = BasisHealthyHostsWeight
	default:
		t.Fatalf("locality_basis %q unknown", in.LocalityBasis)
	}
	for k, val := range in.Runtime {
		if err := cfg.ApplyRuntime(k, val); err != nil {
			t.Fatalf("runtime: %v", err)
		}
	}
	upHasLocal := in.UpstreamHasLocal == nil || *in.UpstreamHasLocal
	local := in.LocalHealthy
	if local == nil {
		local = in.LocalHosts
	}
	localHasLocal := in.LocalHasLocal == nil || *in.LocalHasLocal

	zc := &zoneCluster{cfg: cfg, bucketOf: map[Locality]int{}}
	names := map[string]string{}
	for i, b := range in.Upstream {
		name := fmt.Sprintf("u%03d-null", i)
		if b.Zone != nil {
			name = fmt.Sprintf("u%03d-%s", i, *b.Zone)
			names[*b.Zone] = name
		}
		zc.bucketOf[Locality{Zone: name}] = i
	}
	localName := func(i int, b zoneVectorBucket) string {
		if b.Zone == nil {
			return fmt.Sprintf("l%03d-null", i)
		}
		if n, ok := names[*b.Zone]; ok {
			return n
		}
		return fmt.Sprintf("l%03d-%s", i, *b.Zone)
	}
	switch {
	case upHasLocal && len(in.Upstream) > 0:
		zc.in.Local = Locality{Zone: fmt.Sprintf("u%03d-%s", 0, deref(in.Upstream[0].Zone, "null"))}
	case localHasLocal && len(local) > 0:
		zc.in.Local = Locality{Zone: localName(0, local[0])}
	default:
		zc.in.Local = Locality{Zone: "own-zone-nowhere"}
	}
	var id HostID
	add := func(list *[]*Host, zone string, n uint64, weightTotal *uint64, flags HealthFlags) {
		for j := uint64(0); j < n; j++ {
			w := uint32(1)
			if weightTotal != nil {
				if *weightTotal < n {
					t.Fatalf("zone %s: healthy_weight_total %d < %d hosts", zone, *weightTotal, n)
				}
				w = uint32(*weightTotal / n)
				if j == 0 {
					w += uint32(*weightTotal % n)
				}
			}
			*list = append(*list, &Host{ID: id, Address: fmt.Sprintf("%s-%d:80", zone, j), Weight: w, Locality: Locality{Zone: zone}, Flags: flags})
			id++
		}
	}
	var upTotal uint64
	for i, b := range in.Upstream {
		zone := fmt.Sprintf("u%03d-%s", i, deref(b.Zone, "null"))
		if b.HealthyHosts == 0 {
			// A bucket with no healthy host: one excluded host keeps the
			// locality without changing availability.
			add(&zc.in.Hosts, zone, 1, nil, PendingActiveHC|FailedActiveHC)
			continue
		}
		add(&zc.in.Hosts, zone, b.HealthyHosts, b.HealthyWeight, 0)
		upTotal += b.HealthyHosts
	}
	if in.UpstreamTotal != nil && *in.UpstreamTotal != upTotal {
		t.Fatalf("upstream_p0_healthy_hosts_total %d, buckets sum to %d", *in.UpstreamTotal, upTotal)
	}
	zc.in.LocalCluster = []*Host{}
	for i, b := range local {
		if i == 0 && !localHasLocal && localName(0, b) == zc.in.Local.Zone {
			t.Fatalf("local cluster bucket 0 is the own zone but local_cluster_has_local_locality is false")
		}
		add(&zc.in.LocalCluster, localName(i, b), b.count(), b.HealthyWeight, 0)
	}
	return zc
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func (zc *zoneCluster) snapshot(t *testing.T, stats *Stats) *Snapshot {
	t.Helper()
	s, err := NewSnapshot(zc.cfg, zc.in, stats)
	if err != nil {
		t.Fatalf("NewSnapshot: %v", err)
	}
	return s
}

var zoneRoutingStates = map[string]ZoneRoutingState{
	"NoLocalityRouting": NoLocalityRouting, "LocalityDirect": LocalityDirect, "LocalityResidual": LocalityResidual,
}

// zonePickCounters are the counters a single pick may move.
var zonePickCounters = []string{"lb_zone_routing_all_directly", "lb_zone_routing_sampled", "lb_zone_routing_cross_zone",
	"lb_zone_no_capacity_left", "lb_local_cluster_not_ok", "lb_healthy_panic"}

func runZoneAwareVector(t *testing.T, v vector) {
	var in zoneVectorInput
	var want struct {
		RoutingState        string `json:"routing_state"`
		LocalityPercentages []struct {
			Index    int    `json:"locality_index"`
			Local    uint64 `json:"local_percentage"`
			Upstream uint64 `json:"upstream_percentage"`
		} `json:"locality_percentages"`
		LocalPercentToRoute *uint64  `json:"local_percent_to_route"`
		Residual            []uint64 `json:"residual_capacity_cumulative"`
		PickFractions       []struct {
			Index    int     `json:"locality_index"`
			Fraction float64 `json:"fraction"`
		} `json:"pick_fractions"`
		Picks []struct {
			Chosen int      `json:"chosen_locality_index"`
			Draws  []uint64 `json:"lb_random_draws"`
			Stats  []string `json:"stats_incremented"`
		} `json:"picks"`
	}
	decodeVector(t, v, &in, &want)
	zc := buildZoneCluster(t, in)
	s := zc.snapshot(t, nil)
	zr := s.ZoneRouting()
	if ws, ok := zoneRoutingStates[want.RoutingState]; !ok {
		t.Fatalf("routing_state %q unknown", want.RoutingState)
	} else if zr.State != ws {
		t.Errorf("routing_state = %v, want %v", zr.State, ws)
	}
	for _, lp := range want.LocalityPercentages {
		if lp.Index >= len(zr.Percentages) {
			t.Errorf("locality_percentages[%d]: only %d buckets", lp.Index, len(zr.Percentages))
			continue
		}
		if g := zr.Percentages[lp.Index]; g.Local != lp.Local || g.Upstream != lp.Upstream {
			t.Errorf("locality_percentages[%d] = local %d upstream %d, want local %d upstream %d", lp.Index, g.Local, g.Upstream, lp.Local, lp.Upstream)
		}
	}
	if w := want.LocalPercentToRoute; w != nil && zr.LocalPercentToRoute != *w {
		t.Errorf("local_percent_to_route = %d, want %d", zr.LocalPercentToRoute, *w)
	}
	if want.Residual != nil && !slices.Equal(zr.ResidualCumulative, want.Residual) {
		t.Errorf("residual_capacity_cumulative = %v, want %v", zr.ResidualCumulative, want.Residual)
	}
	if len(want.PickFractions) > 0 {
		const n = 200000
		counts := make([]float64, len(in.Upstream))
		p := NewPicker(newPCG(uint64(len(v.ID))), nil)
		for range n {
			h := p.Pick(s, nil)
			if h == nil {
				t.Fatal("pick returned no host")
			}
			counts[zc.bucketOf[h.Locality]]++
		}
		for _, pf := range want.PickFractions {
			if got := counts[pf.Index] / n; !near(got, pf.Fraction, 0.01) {
				t.Errorf("pick_fractions[%d] = %.4f over %d picks, want %.4f ± 0.01", pf.Index, got, n, pf.Fraction)
			}
		}
	}
	for i, pk := range want.Picks {
		rnd := &seqRandom{}
		stats := &Stats{}
		p := NewPicker(rnd, stats)
		rnd.queue = append([]uint64(nil), pk.Draws...)
		h := p.Pick(s, nil)
		if h == nil {
			t.Errorf("picks[%d] (draws %v): no host", i, pk.Draws)
			continue
		}
		if got := zc.bucketOf[h.Locality]; got != pk.Chosen {
			t.Errorf("picks[%d] (draws %v): chosen_locality_index = %d, want %d", i, pk.Draws, got, pk.Chosen)
		}
		checkPickCounters(t, fmt.Sprintf("picks[%d]", i), stats, pk.Stats)
	}
}

// checkPickCounters asserts that exactly the named counters moved, by one.
func checkPickCounters(t *testing.T, what string, stats *Stats, moved []string) {
	t.Helper()
	m := stats.Map()
	for _, name := range zonePickCounters {
		want := uint64(0)
		if slices.Contains(moved, name) {
			want = 1
		}
		if m[name] != want {
			t.Errorf("%s: %s = %d, want %d", what, name, m[name], want)
		}
	}
	for _, name := range moved {
		if _, ok := m[name]; !ok {
			t.Errorf("%s: counter %q does not exist", what, name)
		}
	}
}

func runZonePreconditionsVector(t *testing.T, v vector) {
	var in zoneVectorInput
	var want struct {
		RoutingState string            `json:"routing_state"`
		Stats        map[string]uint64 `json:"stats"`
		PerRegen     map[string]uint64 `json:"stats_per_regeneration"`
		WithMinSize1 *struct {
			ChosenLocalityIndex int    `json:"chosen_locality_index"`
			RoutingState        string `json:"routing_state"`
		} `json:"with_runtime_min_cluster_size_1"`
	}
	decodeVector(t, v, &in, &want)
	zc := buildZoneCluster(t, in)
	stats := &Stats{}
	s := zc.snapshot(t, stats)
	if ws := zoneRoutingStates[want.RoutingState]; s.ZoneRouting().State != ws || want.RoutingState == "" {
		t.Errorf("routing_state = %v, want %q", s.ZoneRouting().State, want.RoutingState)
	}
	if want.PerRegen != nil {
		m := stats.Map()
		for name, w := range want.PerRegen {
			if g, ok := m[name]; !ok || g != w {
				t.Errorf("stats_per_regeneration: %s = %d (exists %v), want %d", name, g, ok, w)
			}
		}
		// A second regeneration moves them again by the same amount.
		zc.snapshot(t, stats)
		m2 := stats.Map()
		for name, w := range want.PerRegen {
			if m2[name] != 2*w {
				t.Errorf("after 2 regenerations %s = %d, want %d", name, m2[name], 2*w)
			}
		}
	}
	// NoLocalityRouting picks are plain round robin over all healthy P0 hosts.
	p := NewPicker(&seqRandom{}, &Stats{})
	healthy := s.HostSets()[0].Healthy
	seen := map[HostID]bool{}
	for range len(healthy) {
		h := p.Pick(s, nil)
		if h == nil {
			t.Fatal("no host")
		}
		seen[h.ID] = true
	}
	if s.ZoneRouting().State == NoLocalityRouting && len(seen) != len(healthy) {
		t.Errorf("%d picks reached %d of %d healthy hosts, want all (round robin)", len(healthy), len(seen), len(healthy))
	}
	for name, w := range want.Stats {
		if g, ok := p.Stats().Map()[name]; !ok || g != w {
			t.Errorf("stats after picks: %s = %d (exists %v), want %d", name, g, ok, w)
		}
	}
	if w := want.WithMinSize1; w != nil {
		if err := zc.cfg.ApplyRuntime("upstream.zone_routing.min_cluster_size", 1); err != nil {
			t.Fatal(err)
		}
		s := zc.snapshot(t, nil)
		if g := s.ZoneRouting().State.String(); g != w.RoutingState {
			t.Errorf("with runtime min_cluster_size 1: routing_state = %s, want %s", g, w.RoutingState)
		}
		h := NewPicker(&seqRandom{}, nil).Pick(s, nil)
		if h == nil || zc.bucketOf[h.Locality] != w.ChosenLocalityIndex {
			t.Errorf("with runtime min_cluster_size 1: chosen host %v, want bucket %d", h, w.ChosenLocalityIndex)
		}
	}
}

// ---- locality weighted ----

func runLocalityWeightedVector(t *testing.T, v vector) {
	var in struct {
		Hosts    []uint64 `json:"hosts"`
		Healthy  []uint64 `json:"healthy"`
		Excluded []uint64 `json:"excluded"`
		Weights  []uint32 `json:"locality_weights"`
		OPF      uint32   `json:"overprovisioning_factor"`
		Seed     uint64   `json:"seed"`
		Picks    int      `json:"picks"`
	}
	var want struct {
		EffectiveWeights []float64 `json:"effective_weights"`
		Fractions        []float64 `json:"traffic_fraction_exact"`
		DocPercent       []float64 `json:"doc_percent"`
		PickSequence     []int     `json:"pick_sequence"`
		PickCounts       []int     `json:"pick_counts"`
	}
	decodeVector(t, v, &in, &want)
	if len(in.Hosts) != len(in.Healthy) || len(in.Hosts) != len(in.Weights) {
		t.Fatalf("hosts, healthy and locality_weights differ in length")
	}
	if in.OPF == 0 {
		in.OPF = DefaultOverprovisioningFactor
	}
	// Real hosts per locality, grouped by the same code a snapshot uses.
	var hosts []*Host
	var id HostID
	for i := range in.Hosts {
		var excl uint64
		if i < len(in.Excluded) {
			excl = in.Excluded[i]
		}
		for j := uint64(0); j < in.Hosts[i]; j++ {
			var f HealthFlags
			switch {
			case j < in.Healthy[i]:
			case j < in.Healthy[i]+excl:
				f = PendingActiveHC | FailedActiveHC
			default:
				f = FailedActiveHC
			}
			hosts = append(hosts, &Host{ID: id, Weight: 1, Locality: Locality{Zone: fmt.Sprintf("z%03d", i)}, LocalityWeight: in.Weights[i], Flags: f})
			id++
		}
	}
	hs := newHostSet(0, hosts, Locality{}, in.OPF, false)
	ws := localityWeights(&hs, AvailHealthy)
	if ws == nil {
		ws = make([]float64, len(in.Hosts))
	}
	for i, w := range want.EffectiveWeights {
		if !near(ws[i], w, 0.0011) {
			t.Errorf("effective_weights[%d] = %.4f, want %.4f", i, ws[i], w)
		}
	}
	var total float64
	for _, w := range ws {
		total += w
	}
	for i, f := range want.Fractions {
		if got := ws[i] / total; !near(got, f, 0.0001) {
			t.Errorf("traffic_fraction_exact[%d] = %.4f, want %.4f", i, got, f)
		}
	}
	for i, d := range want.DocPercent {
		if got := 100 * ws[i] / total; !near(got, d, 1) {
			t.Errorf("doc_percent[%d] = %.2f, want %.0f ± 1", i, got, d)
		}
	}
	if want.PickSequence == nil && want.PickCounts == nil {
		return
	}
	e := NewEDF(len(ws), func(i int) float64 { return ws[i] }, in.Seed)
	n := max(in.Picks, len(want.PickSequence))
	counts := make([]int, len(ws))
	var seq []int
	for range n {
		i := e.Pick(func(i int) float64 { return ws[i] })
		seq = append(seq, i)
		counts[i]++
	}
	if want.PickSequence != nil && !slices.Equal(seq[:len(want.PickSequence)], want.PickSequence) {
		t.Errorf("pick_sequence = %v, want %v", seq[:len(want.PickSequence)], want.PickSequence)
	}
	if want.PickCounts != nil && !slices.Equal(counts, want.PickCounts) {
		t.Errorf("pick_counts over %d picks = %v, want %v", n, counts, want.PickCounts)
	}
}

// ---- round robin ----

func runRoundRobinVector(t *testing.T, v vector) {
	var in struct {
		Weights          []uint32  `json:"weights"`
		EffectiveWeights []float64 `json:"effective_weights"`
		Seed             uint64    `json:"seed"`
		Hosts            int       `json:"hosts"`
		Healthy          int       `json:"healthy"`
		PanicThreshold   *float64  `json:"panic_threshold_percent"`
	}
	var want struct {
		PickSequence []int  `json:"pick_sequence"`
		FirstPicks   []int  `json:"first_picks"`
		HostSource   string `json:"host_source"`
		StatPerPick  string `json:"stat_per_pick"`
		FailOnPanic  *struct {
			HostReturned bool `json:"host_returned"`
		} `json:"fail_traffic_on_panic"`
		Panic0NoHealthy *struct {
			HostReturned   bool    `json:"host_returned"`
			LbHealthyPanic *uint64 `json:"lb_healthy_panic"`
		} `json:"panic_threshold_0_no_healthy"`
	}
	decodeVector(t, v, &in, &want)
	switch {
	case in.Weights != nil:
		// Weighted round robin through a snapshot and a worker's picker.
		hosts := make([]*Host, len(in.Weights))
		for i, w := range in.Weights {
			hosts[i] = &Host{ID: HostID(i), Address: fmt.Sprintf("10.0.0.%d:80", i), Weight: w}
		}
		s, err := NewSnapshot(DefaultClusterConfig(), BuildInput{Hosts: hosts, Seed: in.Seed}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := NewPicker(&seqRandom{}, nil)
		var seq []int
		for range want.PickSequence {
			seq = append(seq, int(p.Pick(s, nil).ID))
		}
		if !slices.Equal(seq, want.PickSequence) {
			t.Errorf("pick_sequence = %v, want %v", seq, want.PickSequence)
		}
	case in.EffectiveWeights != nil:
		ws := in.EffectiveWeights
		e := NewEDF(len(ws), func(i int) float64 { return ws[i] }, in.Seed)
		var seq []int
		for range want.PickSequence {
			seq = append(seq, e.Pick(func(i int) float64 { return ws[i] }))
		}
		if !slices.Equal(seq, want.PickSequence) {
			t.Errorf("pick_sequence = %v, want %v", seq, want.PickSequence)
		}
	case in.Hosts > 0:
		runRoundRobinPanicVector(t, in.Hosts, in.Healthy, deref(in.PanicThreshold, DefaultPanicThreshold), want.FirstPicks,
			want.HostSource, want.StatPerPick, want.FailOnPanic, want.Panic0NoHealthy)
	default:
		t.Fatal("vector has neither weights, effective_weights nor hosts")
	}
}

func runRoundRobinPanicVector(t *testing.T, nHosts, nHealthy int, threshold float64, firstPicks []int, source, statPerPick string,
	failOnPanic *struct {
		HostReturned bool `json:"host_returned"`
	}, panic0 *struct {
		HostReturned   bool    `json:"host_returned"`
		LbHealthyPanic *uint64 `json:"lb_healthy_panic"`
	}) {
	mk := func(healthy int) []*Host {
		hosts := make([]*Host, nHosts)
		for i := range hosts {
			hosts[i] = &Host{ID: HostID(i), Address: fmt.Sprintf("10.0.0.%d:80", i), Weight: 1}
			if i >= healthy {
				hosts[i].Flags = FailedActiveHC
			}
		}
		return hosts
	}
	cfg := DefaultClusterConfig()
	cfg.PanicThreshold = threshold
	s, err := NewSnapshot(cfg, BuildInput{Hosts: mk(nHealthy)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPicker(&seqRandom{}, nil)
	var seq []int
	for range max(len(firstPicks), nHosts) {
		seq = append(seq, int(p.Pick(s, nil).ID))
	}
	if firstPicks != nil && !slices.Equal(seq[:len(firstPicks)], firstPicks) {
		t.Errorf("first_picks = %v, want %v", seq[:len(firstPicks)], firstPicks)
	}
	if source == "all hosts" {
		seen := map[int]bool{}
		for _, i := range seq[:nHosts] {
			seen[i] = true
		}
		if len(seen) != nHosts {
			t.Errorf("host_source: %d picks reached %d hosts, want all %d", nHosts, len(seen), nHosts)
		}
	}
	if statPerPick != "" {
		if g := p.Stats().Map()[statPerPick]; g != uint64(len(seq)) {
			t.Errorf("%s = %d after %d picks, want one per pick", statPerPick, g, len(seq))
		}
	}
	if failOnPanic != nil {
		c := cfg
		c.ZoneAware.FailTrafficOnPanic = true
		s, _ := NewSnapshot(c, BuildInput{Hosts: mk(nHealthy)}, nil)
		if h := NewPicker(&seqRandom{}, nil).Pick(s, nil); (h != nil) != failOnPanic.HostReturned {
			t.Errorf("fail_traffic_on_panic: host %v, want host_returned %v", h, failOnPanic.HostReturned)
		}
	}
	if panic0 != nil {
		c := cfg
		c.PanicThreshold = 0
		s, _ := NewSnapshot(c, BuildInput{Hosts: mk(0)}, nil)
		pk := NewPicker(&seqRandom{}, nil)
		if h := pk.Pick(s, nil); (h != nil) != panic0.HostReturned {
			t.Errorf("panic_threshold_0_no_healthy: host %v, want host_returned %v", h, panic0.HostReturned)
		}
		if w := panic0.LbHealthyPanic; w != nil && pk.Stats().HealthyPanic.Load() != *w {
			t.Errorf("panic_threshold_0_no_healthy: lb_healthy_panic = %d, want %d", pk.Stats().HealthyPanic.Load(), *w)
		}
	}
}

func runSlowStartVector(t *testing.T, v vector) {
	var in struct {
		Cases []struct {
			Aggression       float64 `json:"aggression"`
			MinWeightPercent float64 `json:"min_weight_percent"`
			T                float64 `json:"t_s"`
			Window           float64 `json:"window_s"`
		} `json:"cases"`
	}
	var want struct {
		Factors []float64 `json:"factors"`
	}
	decodeVector(t, v, &in, &want)
	if len(in.Cases) != len(want.Factors) {
		t.Fatalf("%d cases, %d factors", len(in.Cases), len(want.Factors))
	}
	for i, c := range in.Cases {
		got := SlowStartFactor(seconds(c.T), seconds(c.Window), c.Aggression, c.MinWeightPercent)
		if !near(got, want.Factors[i], 0.00051) {
			t.Errorf("cases[%d] %+v: factor %.4f, want %.4f", i, c, got, want.Factors[i])
		}
	}
}

func runLeastRequestVector(t *testing.T, v vector) {
	var in struct {
		Cases []struct {
			Active         *uint64  `json:"active"`
			Bias           float64  `json:"bias"`
			Weight         float64  `json:"weight"`
			ActiveRequests []uint32 `json:"active_requests"`
		} `json:"cases"`
		Bias    *float64 `json:"active_request_bias"`
		Weights []uint32 `json:"weights"`
		Phases  []struct {
			ActiveRequests []uint32 `json:"active_requests"`
			Picks          int      `json:"picks"`
		} `json:"phases"`
	}
	var want struct {
		EffectiveWeights []float64 `json:"effective_weights"`
		Results          []struct {
			Chosen       *int    `json:"chosen"`
			Uniformly    []int   `json:"chosen_uniformly_among"`
			EachFraction float64 `json:"each_fraction"`
			Tolerance    float64 `json:"tolerance"`
		} `json:"results"`
		PickSequences [][]int `json:"pick_sequences"`
	}
	decodeVector(t, v, &in, &want)
	checked := false
	if want.EffectiveWeights != nil {
		checked = true
		for i, c := range in.Cases {
			got := LeastRequestWeight(c.Weight, deref(c.Active, 0), c.Bias)
			if !near(got, want.EffectiveWeights[i], 0.00051) {
				t.Errorf("cases[%d]: effective weight %.4f, want %.4f", i, got, want.EffectiveWeights[i])
			}
		}
	}
	if want.Results != nil {
		checked = true
		for i, c := range in.Cases {
			r := want.Results[i]
			hosts := make([]*Host, len(c.ActiveRequests))
			for j := range hosts {
				hosts[j] = &Host{ID: HostID(j), Address: fmt.Sprintf("10.0.0.%d:80", j), Weight: 1}
			}
			cfg := DefaultClusterConfig()
			cfg.Policy = PolicyLeastRequest
			cfg.LeastRequest.FullScan = true
			s, err := NewSnapshot(cfg, BuildInput{Hosts: hosts}, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := NewPicker(newPCG(uint64(i)), nil)
			for j, a := range c.ActiveRequests {
				for range a {
					p.RequestStarted(hosts[j])
				}
			}
			const n = 100000
			counts := make([]float64, len(hosts))
			for range n {
				counts[p.Pick(s, nil).ID]++
			}
			if r.Chosen != nil && counts[*r.Chosen] != n {
				t.Errorf("cases[%d]: host %d chosen %v of %d picks, want always (counts %v)", i, *r.Chosen, counts[*r.Chosen], n, counts)
			}
			var among float64
			for _, j := range r.Uniformly {
				among += counts[j]
				if got := counts[j] / n; !near(got, r.EachFraction, max(r.Tolerance, 0.005)) {
					t.Errorf("cases[%d]: host %d fraction %.4f, want %.4f ± %.3f", i, j, got, r.EachFraction, r.Tolerance)
				}
			}
			if r.Uniformly != nil && among != n {
				t.Errorf("cases[%d]: %v of %d picks outside %v", i, n-among, n, r.Uniformly)
			}
		}
	}
	if want.PickSequences != nil {
		checked = true
		hosts := make([]*Host, len(in.Weights))
		for j, w := range in.Weights {
			hosts[j] = &Host{ID: HostID(j), Address: fmt.Sprintf("10.0.0.%d:80", j), Weight: w}
		}
		cfg := DefaultClusterConfig()
		cfg.Policy = PolicyLeastRequest
		cfg.LeastRequest.ActiveRequestBias = deref(in.Bias, 1)
		s, err := NewSnapshot(cfg, BuildInput{Hosts: hosts}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := NewPicker(&seqRandom{}, nil)
		for ph, phase := range in.Phases {
			for j, a := range phase.ActiveRequests {
				for p.Active(hosts[j]) < a {
					p.RequestStarted(hosts[j])
				}
				for p.Active(hosts[j]) > a {
					p.RequestFinished(hosts[j])
				}
			}
			var seq []int
			for range phase.Picks {
				seq = append(seq, int(p.Pick(s, nil).ID))
			}
			if ph < len(want.PickSequences) && !slices.Equal(seq, want.PickSequences[ph]) {
				t.Errorf("phase %d: pick sequence %v, want %v", ph, seq, want.PickSequences[ph])
			}
		}
	}
	if !checked {
		t.Fatal("vector has no expected field this runner knows")
	}
}
