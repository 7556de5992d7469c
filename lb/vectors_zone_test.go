package lb

import (
	"fmt"
	"slices"
	"testing"
)

// Runners for the zone-aware vector categories: the upstream P0 and the
// local cluster are realised as real hosts and checked through a snapshot
// and a worker's picker.
func init() {
	vectorRunners["zone_aware"] = runZoneAwareVector
	vectorRunners["zone_aware_preconditions"] = runZonePreconditionsVector
}

// ---- zone aware ----

// zoneVectorBucket is one locality bucket of a zone vector. Zone vectors'
// local hosts are all healthy unless a bucket says otherwise, so hosts
// defaults to healthy_hosts and healthy_hosts to hosts; a bucket giving
// both has hosts-healthy_hosts unhealthy hosts too (the way to put a
// cluster in panic).
type zoneVectorBucket struct {
	Zone          *string `json:"zone"`
	Hosts         *uint64 `json:"hosts"`
	HealthyHosts  *uint64 `json:"healthy_hosts"`
	HealthyWeight *uint64 `json:"healthy_weight_total"`
}

// counts returns the bucket's host and healthy-host counts.
func (b zoneVectorBucket) counts(t *testing.T, what string) (hosts, healthy uint64) {
	t.Helper()
	switch {
	case b.Hosts == nil && b.HealthyHosts == nil:
		t.Fatalf("%s: neither hosts nor healthy_hosts", what)
	case b.Hosts == nil:
		return *b.HealthyHosts, *b.HealthyHosts
	case b.HealthyHosts == nil:
		return *b.Hosts, *b.Hosts
	case *b.HealthyHosts > *b.Hosts:
		t.Fatalf("%s: healthy_hosts %d > hosts %d", what, *b.HealthyHosts, *b.Hosts)
	}
	return *b.Hosts, *b.HealthyHosts
}

type zoneVectorInput struct {
	FailTrafficOnPanic    bool               `json:"fail_traffic_on_panic"`
	ForceLocalZoneMinSize *uint64            `json:"force_local_zone_min_size"`
	ForceLocalityDirect   bool               `json:"force_locality_direct_routing"`
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

// localBuckets merges the two ways a vector lists the local cluster: its
// healthy hosts per locality, its hosts per locality, or both (then bucket
// by bucket, same zones, hosts from the one and healthy_hosts from the
// other).
func (in zoneVectorInput) localBuckets(t *testing.T) []zoneVectorBucket {
	t.Helper()
	switch {
	case in.LocalHealthy == nil:
		return in.LocalHosts
	case in.LocalHosts == nil:
		return in.LocalHealthy
	case len(in.LocalHosts) != len(in.LocalHealthy):
		t.Fatalf("local_cluster_hosts_per_locality has %d buckets, local_cluster_healthy_hosts_per_locality %d",
			len(in.LocalHosts), len(in.LocalHealthy))
	}
	out := make([]zoneVectorBucket, len(in.LocalHealthy))
	for i, h := range in.LocalHealthy {
		a := in.LocalHosts[i]
		if deref(a.Zone, "") != deref(h.Zone, "") || (a.Zone == nil) != (h.Zone == nil) {
			t.Fatalf("local cluster bucket %d: zone %v in one list, %v in the other", i, deref(a.Zone, "null"), deref(h.Zone, "null"))
		}
		if a.HealthyHosts != nil || h.Hosts != nil {
			t.Fatalf("local cluster bucket %d: give hosts in local_cluster_hosts_per_locality and healthy_hosts in local_cluster_healthy_hosts_per_locality", i)
		}
		out[i] = zoneVectorBucket{Zone: h.Zone, Hosts: a.Hosts, HealthyHosts: h.HealthyHosts, HealthyWeight: h.HealthyWeight}
	}
	return out
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
	} else if in.ForceLocalityDirect {
		// The deprecated bool means force_local_zone{min_size: 1} when
		// force_local_zone itself is absent.
		cfg.ZoneAware.ForceLocalZoneMinSize = 1
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
	local := in.localBuckets(t)
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
	// add appends n hosts of zone to list: healthy ones carrying
	// weightTotal between them, the rest with flags.
	add := func(list *[]*Host, zone string, n, healthy uint64, weightTotal *uint64, flags HealthFlags) {
		for j := uint64(0); j < n; j++ {
			w := uint32(1)
			if weightTotal != nil && j < healthy {
				if *weightTotal < healthy {
					t.Fatalf("zone %s: healthy_weight_total %d < %d healthy hosts", zone, *weightTotal, healthy)
				}
				w = uint32(*weightTotal / healthy)
				if j == 0 {
					w += uint32(*weightTotal % healthy)
				}
			}
			f := HealthFlags(0)
			if j >= healthy {
				f = flags
			}
			*list = append(*list, &Host{ID: id, Address: fmt.Sprintf("%s-%d:80", zone, j), Weight: w, Locality: Locality{Zone: zone}, Flags: f})
			id++
		}
	}
	var upTotal uint64
	for i, b := range in.Upstream {
		zone := fmt.Sprintf("u%03d-%s", i, deref(b.Zone, "null"))
		n, healthy := b.counts(t, fmt.Sprintf("upstream bucket %d", i))
		if n == 0 {
			// A bucket with no host at all: one excluded host keeps the
			// locality without changing availability.
			add(&zc.in.Hosts, zone, 1, 0, nil, PendingActiveHC|FailedActiveHC)
			continue
		}
		add(&zc.in.Hosts, zone, n, healthy, b.HealthyWeight, FailedEDSHealth)
		upTotal += healthy
	}
	if in.UpstreamTotal != nil && *in.UpstreamTotal != upTotal {
		t.Fatalf("upstream_p0_healthy_hosts_total %d, buckets sum to %d", *in.UpstreamTotal, upTotal)
	}
	zc.in.LocalCluster = []*Host{}
	for i, b := range local {
		n, healthy := b.counts(t, fmt.Sprintf("local cluster bucket %d", i))
		add(&zc.in.LocalCluster, localName(i, b), n, healthy, b.HealthyWeight, FailedEDSHealth)
	}
	// The names must reproduce the vector's claims about the own zone;
	// otherwise the vector contradicts itself.
	up := newHostSet(0, zc.in.Hosts, zc.in.Local, DefaultOverprovisioningFactor, false)
	lc := newHostSet(0, zc.in.LocalCluster, zc.in.Local, DefaultOverprovisioningFactor, false)
	if len(in.Upstream) > 0 && up.HasLocalLocality != upHasLocal {
		t.Fatalf("upstream_has_local_locality is %v but the upstream buckets say %v", upHasLocal, up.HasLocalLocality)
	}
	if len(local) > 0 && lc.HasLocalLocality != localHasLocal {
		t.Fatalf("local_cluster_has_local_locality is %v but the local cluster buckets say %v", localHasLocal, lc.HasLocalLocality)
	}
	return zc
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
			Zone     *string `json:"zone"`
			Fraction float64 `json:"fraction"`
		} `json:"pick_fractions"`
		Picks []struct {
			Chosen *int     `json:"chosen_locality_index"`
			Draws  []uint64 `json:"lb_random_draws"`
			Stats  []string `json:"stats_incremented"`
			// HostReturned false: the pick yields no host (fail_traffic_on_panic).
			HostReturned *bool `json:"host_returned"`
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
			if pf.Index < 0 || pf.Index >= len(in.Upstream) {
				t.Fatalf("pick_fractions: locality_index %d outside the %d upstream buckets", pf.Index, len(in.Upstream))
			}
			// The zone names the bucket; it must be the input's.
			if z := in.Upstream[pf.Index].Zone; pf.Zone != nil && (z == nil || *z != *pf.Zone) {
				t.Errorf("pick_fractions[%d]: zone %q, but upstream bucket %d is %q", pf.Index, *pf.Zone, pf.Index, deref(z, "null"))
			}
			if got := counts[pf.Index] / n; !near(got, pf.Fraction, 0.01) {
				t.Errorf("pick_fractions[%d] = %.4f over %d picks, want %.4f ± 0.01", pf.Index, got, n, pf.Fraction)
			}
		}
	}
	for i, pk := range want.Picks {
		what := fmt.Sprintf("picks[%d] (draws %v)", i, pk.Draws)
		noHost := pk.HostReturned != nil && !*pk.HostReturned
		if noHost == (pk.Chosen != nil) {
			t.Fatalf("%s: give chosen_locality_index or host_returned false", what)
		}
		// The picker draws its round-robin seed (0) first, then the pick
		// consumes the vector's draws; it may not need more than given.
		rnd := &drawQueue{t: t, what: what, draws: append([]uint64{0}, pk.Draws...)}
		stats := &Stats{}
		p := NewPicker(rnd, stats)
		h := p.Pick(s, nil)
		switch {
		case noHost && h != nil:
			t.Errorf("%s: got host %s, want none", what, h.Address)
		case !noHost && h == nil:
			t.Errorf("%s: no host", what)
		case !noHost:
			if got := zc.bucketOf[h.Locality]; got != *pk.Chosen {
				t.Errorf("%s: chosen_locality_index = %d, want %d", what, got, *pk.Chosen)
			}
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
	if ws, ok := zoneRoutingStates[want.RoutingState]; !ok {
		t.Fatalf("routing_state %q unknown", want.RoutingState)
	} else if s.ZoneRouting().State != ws {
		t.Errorf("routing_state = %v, want %v", s.ZoneRouting().State, ws)
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
		if _, ok := zoneRoutingStates[w.RoutingState]; !ok {
			t.Fatalf("with_runtime_min_cluster_size_1: routing_state %q unknown", w.RoutingState)
		}
		if g := s.ZoneRouting().State.String(); g != w.RoutingState {
			t.Errorf("with runtime min_cluster_size 1: routing_state = %s, want %s", g, w.RoutingState)
		}
		h := NewPicker(&seqRandom{}, nil).Pick(s, nil)
		if h == nil || zc.bucketOf[h.Locality] != w.ChosenLocalityIndex {
			t.Errorf("with runtime min_cluster_size 1: chosen host %v, want bucket %d", h, w.ChosenLocalityIndex)
		}
	}
}
