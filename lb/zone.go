package lb

// ZoneRoutingState is the zone-aware routing mode of P0, recomputed whenever
// the upstream's P0 or the local cluster changes.
type ZoneRoutingState uint8

const (
	// NoLocalityRouting: a precondition failed; pick from all P0 hosts.
	NoLocalityRouting ZoneRoutingState = iota
	// LocalityDirect: all traffic goes to the own zone.
	LocalityDirect
	// LocalityResidual: LocalPercentToRoute stays in the own zone, the rest
	// is spread over zones with residual capacity.
	LocalityResidual
)

// String returns Envoy's name for the state.
func (s ZoneRoutingState) String() string {
	switch s {
	case LocalityDirect:
		return "LocalityDirect"
	case LocalityResidual:
		return "LocalityResidual"
	}
	return "NoLocalityRouting"
}

// LocalityBasis selects what zone percentages are computed from.
type LocalityBasis uint8

const (
	// BasisHealthyHostsNum counts healthy hosts (Envoy's default).
	BasisHealthyHostsNum LocalityBasis = iota
	// BasisHealthyHostsWeight sums the weights of healthy hosts.
	BasisHealthyHostsWeight
)

// ZoneAwareConfig is Envoy's ZoneAwareLbConfig plus the runtime overrides
// it documents. The zero value is not the default; use DefaultZoneAwareConfig.
type ZoneAwareConfig struct {
	// RoutingEnabledPercent is the share of picks that attempt zone routing
	// (upstream.zone_routing.enabled, default 100).
	RoutingEnabledPercent uint32
	// MinClusterSize is the number of healthy upstream P0 hosts below which
	// zone routing is off (upstream.zone_routing.min_cluster_size, default 6).
	MinClusterSize uint64
	// FailTrafficOnPanic fails picks instead of using all hosts in panic.
	FailTrafficOnPanic bool
	// ForceLocalZoneMinSize, when > 0, keeps all traffic in the own zone as
	// long as it has at least that many healthy hosts (force_local_zone).
	ForceLocalZoneMinSize uint64
	// Basis is locality_basis.
	Basis LocalityBasis
}

// DefaultZoneAwareConfig returns Envoy's defaults: routing enabled for 100 %
// of picks, min cluster size 6, no force-local, host-count basis.
func DefaultZoneAwareConfig() ZoneAwareConfig {
	return ZoneAwareConfig{RoutingEnabledPercent: 100, MinClusterSize: 6}
}

// LocalityPercentage is one upstream locality bucket's share of the local
// cluster and of the upstream, in basis points (x10000).
type LocalityPercentage struct {
	Local, Upstream uint64
}

// zoneBucket is the input of the zone computation for one locality bucket:
// its identity and its healthy host count and weight. An empty bucket
// (no healthy host) has Healthy == 0.
type zoneBucket struct {
	Locality      Locality
	Healthy       uint64
	HealthyWeight uint64
}

func (b zoneBucket) weight(basis LocalityBasis) uint64 {
	if basis == BasisHealthyHostsWeight {
		return b.HealthyWeight
	}
	return b.Healthy
}

// ZoneRouting holds P0's zone-aware routing structures.
type ZoneRouting struct {
	State ZoneRoutingState
	// Percentages are per upstream bucket (aligned with its locality list).
	Percentages []LocalityPercentage
	// LocalPercentToRoute is the x10000 share kept in the own zone (Residual).
	LocalPercentToRoute uint64
	// ResidualCumulative is the cumulative residual capacity per bucket.
	ResidualCumulative []uint64
}

// zoneInput describes both clusters for computeZoneRouting.
type zoneInput struct {
	// Upstream is P0's healthy hosts per locality bucket; bucket 0 is the
	// own zone iff UpstreamHasLocal.
	Upstream         []zoneBucket
	UpstreamHasLocal bool
	// UpstreamHealthy is the number of healthy P0 hosts.
	UpstreamHealthy uint64
	// LocalHosts is the local cluster's hosts (all, not only healthy) per
	// bucket and LocalHealthy its healthy ones; bucket 0 is the own zone iff
	// LocalHasLocal.
	LocalHosts    []uint64
	LocalHealthy  []zoneBucket
	LocalHasLocal bool
}

// zoneStats are the counters a regeneration moves.
type zoneStats struct {
	LocalClusterNotOK, ClusterTooSmall uint64
}

// computeZoneRouting is Envoy's regenerateLocalityRoutingStructures: it
// checks the preconditions and computes percentages, state, local percent to
// route and residual capacity.
func computeZoneRouting(in zoneInput, cfg ZoneAwareConfig) (ZoneRouting, zoneStats) {
	var zr ZoneRouting
	var st zoneStats
	if len(in.Upstream) < 2 {
		return zr, st
	}
	if cfg.ForceLocalZoneMinSize == 0 && len(in.LocalHosts) < 2 {
		return zr, st
	}
	if !in.LocalHasLocal || len(in.LocalHosts) == 0 || in.LocalHosts[0] == 0 {
		st.LocalClusterNotOK++
		return zr, st
	}
	if in.UpstreamHealthy < cfg.MinClusterSize {
		st.ClusterTooSmall++
		return zr, st
	}

	zr.Percentages = localityPercentages(in, cfg.Basis)
	p0 := zr.Percentages[0]
	if in.UpstreamHasLocal && ((p0.Upstream > 0 && p0.Upstream >= p0.Local) ||
		(cfg.ForceLocalZoneMinSize > 0 && in.Upstream[0].Healthy >= cfg.ForceLocalZoneMinSize)) {
		zr.State = LocalityDirect
		return zr, st
	}
	zr.State = LocalityResidual
	if in.UpstreamHasLocal && p0.Local > 0 {
		zr.LocalPercentToRoute = p0.Upstream * 10000 / p0.Local
	}
	zr.ResidualCumulative = make([]uint64, len(zr.Percentages))
	var acc uint64
	for i, p := range zr.Percentages {
		if !(i == 0 && in.UpstreamHasLocal) && p.Upstream > p.Local {
			acc += p.Upstream - p.Local
		}
		zr.ResidualCumulative[i] = acc
	}
	return zr, st
}

func localityPercentages(in zoneInput, basis LocalityBasis) []LocalityPercentage {
	var totalLocal, totalUp uint64
	localW := make(map[Locality]uint64, len(in.LocalHealthy))
	for _, b := range in.LocalHealthy {
		w := b.weight(basis)
		totalLocal += w
		if b.Healthy > 0 {
			localW[b.Locality] = w
		}
	}
	for _, b := range in.Upstream {
		totalUp += b.weight(basis)
	}
	out := make([]LocalityPercentage, len(in.Upstream))
	for i, b := range in.Upstream {
		if b.Healthy == 0 {
			continue
		}
		if totalLocal > 0 {
			out[i].Local = 10000 * localW[b.Locality] / totalLocal
		}
		if totalUp > 0 {
			out[i].Upstream = 10000 * b.weight(basis) / totalUp
		}
	}
	return out
}

// chooseLocality is Envoy's tryChooseLocalLocalityHosts: the bucket index a
// pick uses, drawing from rnd after the priority hash. It reports which
// counters moved.
func (zr *ZoneRouting) chooseLocality(rnd Random, s *Stats) int {
	if zr.State == LocalityDirect {
		s.ZoneRoutingAllDirectly.Add(1)
		return 0
	}
	if rnd.Uint64()%10000 < zr.LocalPercentToRoute {
		s.ZoneRoutingSampled.Add(1)
		return 0
	}
	s.ZoneRoutingCrossZone.Add(1)
	n := len(zr.ResidualCumulative)
	last := zr.ResidualCumulative[n-1]
	if last == 0 {
		s.ZoneNoCapacityLeft.Add(1)
		return int(rnd.Uint64() % uint64(n))
	}
	t := rnd.Uint64() % last
	i := 0
	for t >= zr.ResidualCumulative[i] {
		i++
	}
	return i
}
