package lb

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Policy is the per-host load-balancing algorithm of a cluster.
type Policy uint8

const (
	// PolicyRoundRobin is weighted round robin (EDF when weights differ).
	PolicyRoundRobin Policy = iota
	// PolicyLeastRequest is power-of-N-choices least request, or EDF with
	// weight/(active+1)^bias when weights differ.
	PolicyLeastRequest
	// PolicyRandom picks uniformly, ignoring weights.
	PolicyRandom
	// PolicyRingHash is ketama consistent hashing (xxHash64 by default).
	PolicyRingHash
	// PolicyMaglev is Maglev consistent hashing.
	PolicyMaglev
)

var policyNames = [...]string{"ROUND_ROBIN", "LEAST_REQUEST", "RANDOM", "RING_HASH", "MAGLEV"}

// String returns Envoy's lb_policy name.
func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", p)
}

// ParsePolicy accepts Envoy's lb_policy names in any case, with '_' or '-'.
func ParsePolicy(s string) (Policy, error) {
	n := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	for i, name := range policyNames {
		if n == name {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("lb: lb_policy: unknown policy %q (want one of %s)", s, strings.Join(policyNames[:], ", "))
}

// LeastRequestConfig is Envoy's LeastRequest policy config.
type LeastRequestConfig struct {
	// ChoiceCount is the number of random hosts compared (default 2).
	ChoiceCount uint32
	// ActiveRequestBias is the exponent of weighted least request (default 1).
	ActiveRequestBias float64
	// FullScan compares all hosts instead of ChoiceCount random ones.
	FullScan bool
}

// ClusterConfig is how a cluster balances. Start from DefaultClusterConfig.
type ClusterConfig struct {
	Policy Policy
	// PanicThreshold in percent (healthy_panic_threshold, default 50; 0 disables panic).
	PanicThreshold float64
	// ZoneAware applies when the snapshot is built with a local cluster and
	// LocalityWeighted is off (Envoy makes the two a oneof).
	ZoneAware ZoneAwareConfig
	// LocalityWeighted chooses a locality by its effective EDS weight first.
	LocalityWeighted bool
	LeastRequest     LeastRequestConfig
	Ring             RingConfig
	// UseHostnameForHashing keys ring hash and Maglev by host name.
	UseHostnameForHashing bool
	// MaglevTableSize must be prime (default 65537).
	MaglevTableSize uint64
	SlowStart       SlowStartConfig
}

// DefaultClusterConfig returns Envoy's defaults: round robin, panic at 50 %,
// default zone-aware knobs, P2C least request with bias 1.
func DefaultClusterConfig() ClusterConfig {
	return ClusterConfig{
		Policy:         PolicyRoundRobin,
		PanicThreshold: DefaultPanicThreshold,
		ZoneAware:      DefaultZoneAwareConfig(),
		LeastRequest:   LeastRequestConfig{ChoiceCount: 2, ActiveRequestBias: 1},
		SlowStart:      SlowStartConfig{Aggression: 1, MinWeightPercent: 10},
	}
}

// Validate reports the first invalid field, by its Envoy name.
func (c ClusterConfig) Validate() error {
	switch {
	case c.Policy > PolicyMaglev:
		return fmt.Errorf("lb: lb_policy: unknown policy %d", c.Policy)
	case math.IsNaN(c.PanicThreshold) || c.PanicThreshold < 0 || c.PanicThreshold > 100:
		return fmt.Errorf("lb: common_lb_config.healthy_panic_threshold: %v not in [0, 100]", c.PanicThreshold)
	case c.ZoneAware.RoutingEnabledPercent > 100:
		return fmt.Errorf("lb: zone_aware_lb_config.routing_enabled: %d not in [0, 100]", c.ZoneAware.RoutingEnabledPercent)
	case c.Policy == PolicyLeastRequest && c.LeastRequest.ChoiceCount < 2 && !c.LeastRequest.FullScan:
		return fmt.Errorf("lb: least_request_lb_config.choice_count: %d must be >= 2", c.LeastRequest.ChoiceCount)
	case math.IsNaN(c.LeastRequest.ActiveRequestBias) || c.LeastRequest.ActiveRequestBias < 0:
		return fmt.Errorf("lb: least_request_lb_config.active_request_bias: %v must be >= 0", c.LeastRequest.ActiveRequestBias)
	case c.SlowStart.Window < 0:
		return fmt.Errorf("lb: slow_start_config.slow_start_window: %v must be >= 0", c.SlowStart.Window)
	case c.SlowStart.MinWeightPercent < 0 || c.SlowStart.MinWeightPercent > 100:
		return fmt.Errorf("lb: slow_start_config.min_weight_percent: %v not in [0, 100]", c.SlowStart.MinWeightPercent)
	case c.MaglevTableSize != 0 && !maglevPrime(c.MaglevTableSize):
		return fmt.Errorf("lb: maglev_lb_config.table_size: %d is not prime", c.MaglevTableSize)
	}
	return nil
}

// ApplyRuntime overrides a knob by its Envoy runtime key, as an operator
// would with Envoy's runtime layer: upstream.healthy_panic_threshold,
// upstream.zone_routing.enabled, upstream.zone_routing.min_cluster_size and
// upstream.zone_routing.force_local_zone.min_size.
func (c *ClusterConfig) ApplyRuntime(key string, value float64) error {
	if math.IsNaN(value) || value < 0 {
		return fmt.Errorf("lb: runtime %s: %v must be >= 0", key, value)
	}
	switch key {
	case "upstream.healthy_panic_threshold":
		c.PanicThreshold = min(value, 100)
	case "upstream.zone_routing.enabled":
		c.ZoneAware.RoutingEnabledPercent = uint32(min(value, 100))
	case "upstream.zone_routing.min_cluster_size":
		c.ZoneAware.MinClusterSize = uint64(value)
	case "upstream.zone_routing.force_local_zone.min_size":
		if value > 0 {
			c.ZoneAware.ForceLocalZoneMinSize = uint64(value)
		}
	default:
		return fmt.Errorf("lb: runtime key %q is not supported", key)
	}
	return nil
}

// MaxPriority is the highest priority level a host may have.
const MaxPriority = 127

// BuildInput is everything a snapshot is built from besides the config.
type BuildInput struct {
	// Hosts of all priorities.
	Hosts []*Host
	// Local is the client's own locality.
	Local Locality
	// LocalCluster is the local cluster's hosts (the fleet of clients, with
	// their localities); nil disables zone-aware routing.
	LocalCluster []*Host
	// Priorities is the number of priority levels, at least the highest
	// host priority + 1 (EDS may declare levels that have no host).
	Priorities int
	// OverprovisioningFactor in percent; 0 means 140.
	OverprovisioningFactor uint32
	// WeightedPriorityHealth computes availability from host weights.
	WeightedPriorityHealth bool
	// Seed is the random number Envoy draws at every rebuild to start
	// schedulers part-way (createWithPicks).
	Seed uint64
	// Now is the caller's clock, for slow start (same unit as Host.AddedAt).
	Now int64
}

// hostSource is one list of hosts a pick may draw from, with what its
// policy needs precomputed.
type hostSource struct {
	key     int32
	hosts   []*Host
	weights []float64 // per host; nil when all weights are equal
	edf     *edfSched // scheduler prototype when weights differ (RR, LR)
}

// prioState is the per-priority policy state of a snapshot.
type prioState struct {
	all      hostSource
	byClass  [2]hostSource   // healthy, degraded
	locality [2][]hostSource // per locality bucket: healthy, degraded
	// Locality-weighted schedulers (healthy, degraded), nil when Envoy
	// would build none; locWeights are their effective weights.
	locEDF     [2]*edfSched
	locWeights [2][]float64
	// Thread-aware structures (ring hash / Maglev) over healthy hosts, or
	// all hosts in panic, and the hosts their indices refer to.
	ring      *hashRing
	maglev    *maglevLookup
	hashHosts []*Host
}

// Snapshot is an immutable, fully computed view of one cluster: host sets,
// priority load, P0 zone routing and per-policy structures. Build a new one
// on every change and publish it atomically; any number of Pickers may read
// it concurrently.
type Snapshot struct {
	cfg   ClusterConfig
	sets  []HostSet
	load  PriorityLoad
	zone  ZoneRouting
	prios []prioState
	// zoneActive: a local cluster is configured and the policy does zone routing.
	zoneActive bool
	localPanic bool
	sources    int32
	maxID      HostID
	// SlowStartUntil is the caller-clock time until which some host is in
	// slow start; the owner should rebuild until then (0 = none).
	SlowStartUntil int64
}

// HostSets returns the per-priority host sets.
func (s *Snapshot) HostSets() []HostSet { return s.sets }

// Load returns the priority load.
func (s *Snapshot) Load() *PriorityLoad { return &s.load }

// ZoneRouting returns P0's zone-aware routing structures.
func (s *Snapshot) ZoneRouting() *ZoneRouting { return &s.zone }

// Config returns the config the snapshot was built with.
func (s *Snapshot) Config() ClusterConfig { return s.cfg }

// LocalClusterInPanic tells whether the local cluster's P0 is in panic.
func (s *Snapshot) LocalClusterInPanic() bool { return s.localPanic }

// NewSnapshot builds a snapshot. stats (may be nil) receives the
// regeneration counters (lb_recalculate_zone_structures,
// lb_zone_cluster_too_small, lb_local_cluster_not_ok).
func NewSnapshot(cfg ClusterConfig, in BuildInput, stats *Stats) (*Snapshot, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opf := in.OverprovisioningFactor
	if opf == 0 {
		opf = DefaultOverprovisioningFactor
	}
	s := &Snapshot{cfg: cfg}
	nprio := 0
	seen := newIDSet(len(in.Hosts))
	for i, h := range in.Hosts {
		switch {
		case h == nil:
			return nil, fmt.Errorf("lb: hosts[%d]: nil host", i)
		case h.Weight == 0:
			return nil, fmt.Errorf("lb: host %q: load_balancing_weight 0 must be >= 1", h.Address)
		case h.Priority > MaxPriority:
			return nil, fmt.Errorf("lb: host %q: priority %d > %d", h.Address, h.Priority, MaxPriority)
		}
		if !seen.add(h.ID) {
			return nil, fmt.Errorf("lb: host %q: duplicate host id %d", h.Address, h.ID)
		}
		nprio = max(nprio, int(h.Priority)+1)
		s.maxID = max(s.maxID, h.ID)
	}
	if in.Priorities > MaxPriority+1 {
		return nil, fmt.Errorf("lb: %d priorities > %d", in.Priorities, MaxPriority+1)
	}
	nprio = max(nprio, in.Priorities, 1)
	perPrio := make([]int, nprio)
	for _, h := range in.Hosts {
		perPrio[h.Priority]++
	}
	byPrio := make([][]*Host, nprio)
	for p, n := range perPrio {
		byPrio[p] = make([]*Host, 0, n)
	}
	for _, h := range in.Hosts {
		byPrio[h.Priority] = append(byPrio[h.Priority], h)
	}
	s.sets = make([]HostSet, nprio)
	avail := make([]PriorityAvailability, nprio)
	for p := range byPrio {
		s.sets[p] = newHostSet(uint32(p), byPrio[p], in.Local, opf, in.WeightedPriorityHealth)
		avail[p] = s.sets[p].availability()
	}
	s.load = ComputePriorityLoad(avail, cfg.PanicThreshold)

	hashing := cfg.Policy == PolicyRingHash || cfg.Policy == PolicyMaglev
	s.zoneActive = in.LocalCluster != nil && !cfg.LocalityWeighted && !hashing
	if s.zoneActive {
		local := newHostSet(0, in.LocalCluster, in.Local, DefaultOverprovisioningFactor, false)
		s.localPanic = local.availability().inPanic(cfg.PanicThreshold)
		var zs zoneStats
		s.zone, zs = computeZoneRouting(zoneInputs(&s.sets[0], &local), cfg.ZoneAware)
		if stats != nil {
			stats.RecalculateZoneStructures.Add(1)
			stats.LocalClusterNotOK.Add(zs.LocalClusterNotOK)
			stats.ZoneClusterTooSmall.Add(zs.ClusterTooSmall)
		}
	}

	s.prios = make([]prioState, nprio)
	for p := range s.sets {
		if err := s.buildPriority(p, in); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// idSet checks host ids for duplicates: a bitmap for the usual dense ids,
// a map for sparse ones.
type idSet struct {
	bits []uint64
	m    map[HostID]struct{}
}

func newIDSet(n int) idSet { return idSet{bits: make([]uint64, (4*n+1024)/64)} }

// add reports false when id was already present.
func (s *idSet) add(id HostID) bool {
	if w := int(id / 64); w < len(s.bits) {
		bit := uint64(1) << (id % 64)
		if s.bits[w]&bit != 0 {
			return false
		}
		s.bits[w] |= bit
		return true
	}
	if s.m == nil {
		s.m = map[HostID]struct{}{}
	}
	if _, ok := s.m[id]; ok {
		return false
	}
	s.m[id] = struct{}{}
	return true
}

func (hs *HostSet) availability() PriorityAvailability {
	a := PriorityAvailability{
		Hosts: uint64(len(hs.Hosts)), Healthy: uint64(len(hs.Healthy)),
		Degraded: uint64(len(hs.Degraded)), Excluded: uint64(len(hs.Excluded)),
		OverprovisioningFactor: hs.OverprovisioningFactor, WeightedPriorityHealth: hs.WeightedPriorityHealth,
	}
	if hs.WeightedPriorityHealth {
		a.HostsWeight, a.HealthyWeight = sumWeights(hs.Hosts), sumWeights(hs.Healthy)
		a.DegradedWeight, a.ExcludedWeight = sumWeights(hs.Degraded), sumWeights(hs.Excluded)
	}
	return a
}

func sumWeights(hosts []*Host) uint64 {
	var w uint64
	for _, h := range hosts {
		w += uint64(h.Weight)
	}
	return w
}

func zoneInputs(up, local *HostSet) zoneInput {
	in := zoneInput{UpstreamHasLocal: up.HasLocalLocality, UpstreamHealthy: uint64(len(up.Healthy)), LocalHasLocal: local.HasLocalLocality}
	for _, b := range up.Localities {
		in.Upstream = append(in.Upstream, zoneBucket{Locality: b.Locality, Healthy: uint64(len(b.Healthy)), HealthyWeight: sumWeights(b.Healthy)})
	}
	for _, b := range local.Localities {
		in.LocalHosts = append(in.LocalHosts, uint64(len(b.Hosts)))
		in.LocalHealthy = append(in.LocalHealthy, zoneBucket{Locality: b.Locality, Healthy: uint64(len(b.Healthy)), HealthyWeight: sumWeights(b.Healthy)})
	}
	return in
}

func (s *Snapshot) buildPriority(p int, in BuildInput) error {
	hs := &s.sets[p]
	ps := &s.prios[p]
	cfg := &s.cfg
	hashing := cfg.Policy == PolicyRingHash || cfg.Policy == PolicyMaglev
	if s.load.HealthyLoad[p] == 0 && s.load.DegradedLoad[p] == 0 &&
		(hashing || (s.load.Health[p] == 0 && s.load.DegradedAvailability[p] == 0)) {
		// No pick can choose this priority: skip its structures (a Maglev
		// table is 65537 entries) until a rebuild gives it load. A retry
		// priority (PickContext.RetryPriority) may send other policies'
		// retries to any level with availability, so those keep theirs.
		return nil
	}
	if hashing {
		return s.buildHashing(p)
	}
	ps.byClass[availHealthy] = s.source(hs.Healthy, in)
	ps.byClass[availDegraded] = s.source(hs.Degraded, in)
	switch {
	case !s.load.Panic[p]:
		// All hosts are only drawn from in panic.
		ps.all = hostSource{key: s.sources}
		s.sources++
	case len(hs.Healthy) == len(hs.Hosts):
		ps.all = ps.byClass[availHealthy] // the same hosts in the same order
		ps.all.key = s.sources
		s.sources++
	default:
		ps.all = s.source(hs.Hosts, in)
	}
	perLocality := cfg.LocalityWeighted || (p == 0 && s.zoneActive && s.zone.State != NoLocalityRouting)
	if !perLocality {
		return nil
	}
	for class := range 2 {
		ps.locality[class] = make([]hostSource, len(hs.Localities))
		for i := range hs.Localities {
			b := &hs.Localities[i]
			list := b.Healthy
			if class == int(availDegraded) {
				list = b.Degraded
			}
			ps.locality[class][i] = s.source(list, in)
		}
		if cfg.LocalityWeighted {
			if ws := localityWeights(hs, availability(class)); ws != nil {
				ps.locWeights[class] = ws
				ps.locEDF[class] = newEDF(len(ws), func(i int) float64 { return ws[i] }, in.Seed)
			}
		}
	}
	return nil
}

// source precomputes a host list for round robin / least request / random.
func (s *Snapshot) source(hosts []*Host, in BuildInput) hostSource {
	src := hostSource{key: s.sources, hosts: hosts}
	s.sources++
	if s.cfg.Policy == PolicyRandom || len(hosts) <= 1 {
		return src
	}
	slow := s.cfg.SlowStart
	equal := true
	for _, h := range hosts {
		if h.Weight != hosts[0].Weight || s.inSlowStart(h, in.Now) {
			equal = false
			break
		}
	}
	if equal {
		return src
	}
	src.weights = make([]float64, len(hosts))
	for i, h := range hosts {
		w := float64(h.Weight)
		if s.inSlowStart(h, in.Now) {
			w *= slowStartFactor(time.Duration(in.Now-h.AddedAt), slow.Window, slow.Aggression, slow.MinWeightPercent)
			s.SlowStartUntil = max(s.SlowStartUntil, h.AddedAt+int64(slow.Window))
		}
		src.weights[i] = w
	}
	ws := src.weights
	bias := s.cfg.LeastRequest.ActiveRequestBias
	if s.cfg.Policy == PolicyLeastRequest {
		src.edf = newEDF(len(ws), func(i int) float64 { return leastRequestWeight(ws[i], 0, bias) }, in.Seed)
	} else {
		src.edf = newEDF(len(ws), func(i int) float64 { return ws[i] }, in.Seed)
	}
	return src
}

// inSlowStart: a healthy host younger than the slow-start window.
func (s *Snapshot) inSlowStart(h *Host, now int64) bool {
	w := s.cfg.SlowStart.Window
	return w > 0 && h.Health() == Healthy && now-h.AddedAt < int64(w)
}

// buildHashing builds priority p's ring or Maglev table over its healthy
// hosts, or all hosts when the priority is in panic.
func (s *Snapshot) buildHashing(p int) error {
	hs := &s.sets[p]
	ps := &s.prios[p]
	hosts := hs.Healthy
	if s.load.Panic[p] {
		hosts = hs.Hosts
	}
	ps.hashHosts = hosts
	keys := make([]string, len(hosts))
	weights := make([]float64, len(hosts))
	var locTotal float64
	locHostWeight := map[Locality]float64{}
	if s.cfg.LocalityWeighted {
		for _, b := range hs.Localities {
			locTotal += float64(b.Weight)
		}
		for _, h := range hosts {
			locHostWeight[h.Locality] += float64(h.Weight)
		}
	}
	locWeight := map[Locality]float64{}
	for _, b := range hs.Localities {
		locWeight[b.Locality] = float64(b.Weight)
	}
	kept := hosts[:0:0]
	for _, h := range hosts {
		w := float64(h.Weight)
		if s.cfg.LocalityWeighted {
			// Thread-aware balancers ignore locality health and scale each
			// host by its locality's share of the total locality weight.
			lw := locWeight[h.Locality]
			if lw == 0 || locTotal == 0 {
				continue
			}
			w = lw / locTotal * w / locHostWeight[h.Locality]
		}
		keys[len(kept)] = h.hashKey(s.cfg.UseHostnameForHashing)
		weights[len(kept)] = w
		kept = append(kept, h)
	}
	ps.hashHosts = kept
	keys, weights = keys[:len(kept)], weights[:len(kept)]
	var err error
	if s.cfg.Policy == PolicyRingHash {
		ps.ring, err = buildRing(keys, weights, s.cfg.Ring)
	} else {
		ps.maglev, err = buildMaglev(keys, weights, s.cfg.MaglevTableSize)
	}
	if err != nil {
		return fmt.Errorf("lb: priority %d: %w", p, err)
	}
	return nil
}
