package lb

import "sync/atomic"

// Stats are Envoy's load-balancer counters (cluster.<name>.lb_*). A worker
// owns one shard and adds to it; a scrape reads all shards.
type Stats struct {
	RecalculateZoneStructures atomic.Uint64 // lb_recalculate_zone_structures
	ZoneClusterTooSmall       atomic.Uint64 // lb_zone_cluster_too_small
	LocalClusterNotOK         atomic.Uint64 // lb_local_cluster_not_ok
	ZoneRoutingAllDirectly    atomic.Uint64 // lb_zone_routing_all_directly
	ZoneRoutingSampled        atomic.Uint64 // lb_zone_routing_sampled
	ZoneRoutingCrossZone      atomic.Uint64 // lb_zone_routing_cross_zone
	ZoneNoCapacityLeft        atomic.Uint64 // lb_zone_no_capacity_left
	HealthyPanic              atomic.Uint64 // lb_healthy_panic
}

// StatNames lists the counters of Stats by their Envoy names, in Each order.
var StatNames = []string{
	"lb_recalculate_zone_structures", "lb_zone_cluster_too_small", "lb_local_cluster_not_ok",
	"lb_zone_routing_all_directly", "lb_zone_routing_sampled", "lb_zone_routing_cross_zone",
	"lb_zone_no_capacity_left", "lb_healthy_panic",
}

// Each calls f with every counter's Envoy name and current value.
func (s *Stats) Each(f func(name string, value uint64)) {
	for i, c := range s.counters() {
		f(StatNames[i], c.Load())
	}
}

// Map returns the counters by Envoy name.
func (s *Stats) Map() map[string]uint64 {
	m := make(map[string]uint64, len(StatNames))
	s.Each(func(n string, v uint64) { m[n] = v })
	return m
}

func (s *Stats) counters() []*atomic.Uint64 {
	return []*atomic.Uint64{&s.RecalculateZoneStructures, &s.ZoneClusterTooSmall, &s.LocalClusterNotOK,
		&s.ZoneRoutingAllDirectly, &s.ZoneRoutingSampled, &s.ZoneRoutingCrossZone, &s.ZoneNoCapacityLeft, &s.HealthyPanic}
}

// PickContext carries what a request adds to a pick. The zero value (or a
// nil pointer) is a plain pick.
type PickContext struct {
	// Hash is the request hash for ring hash and Maglev; without HasHash
	// they use a random number, as Envoy does without a hash policy.
	Hash    uint64
	HasHash bool
	// Previous lists hosts already tried by this request; a host among them
	// is re-picked up to SelectionRetries times (previous_hosts predicate
	// with host_selection_retry_max_attempts), then accepted anyway.
	Previous         []HostID
	SelectionRetries uint32
	// RetryPriority, when set, replaces the snapshot's priority load for
	// round robin, least request and random (Envoy's determinePriorityLoad);
	// ring hash and Maglev keep theirs, as Envoy's thread-aware balancers
	// never consult the plugin.
	RetryPriority *PreviousPriorities
}

func (c *PickContext) rejects(h *Host) bool {
	for _, id := range c.Previous {
		if id == h.ID {
			return true
		}
	}
	return false
}

// Picker is one worker's mutable load-balancing state for one cluster:
// round-robin cursors, its copies of the snapshot's schedulers and its
// active-request counts. It is not safe for concurrent use; each worker
// owns its own, and they share only the immutable Snapshot.
type Picker struct {
	rnd   Random
	seed  uint64
	stats *Stats
	snap  *Snapshot
	gen   uint32
	// Per source key: round-robin cursor, scheduler copy and the generation
	// the copy was made in.
	cursor []uint64
	edf    []edfSched
	edfGen []uint32
	// Locality schedulers per (priority, class).
	locEDF    []edfSched
	locEDFGen []uint32
	active    []uint32
}

// NewPicker returns a Picker drawing from rnd and counting into stats
// (nil: a private shard). It draws its round-robin seed from rnd now.
func NewPicker(rnd Random, stats *Stats) *Picker {
	if stats == nil {
		stats = &Stats{}
	}
	return &Picker{rnd: rnd, seed: rnd.Uint64(), stats: stats}
}

// Stats returns the counters this picker adds to.
func (p *Picker) Stats() *Stats { return p.stats }

// sync adopts a new snapshot: cursors keep their values per source key,
// scheduler copies are refreshed lazily.
func (p *Picker) sync(s *Snapshot) {
	if p.snap == s {
		return
	}
	p.snap = s
	p.gen++
	for len(p.cursor) < int(s.sources) {
		p.cursor = append(p.cursor, p.seed)
		p.edf = append(p.edf, edfSched{})
		p.edfGen = append(p.edfGen, 0)
	}
	if n := 2 * len(s.prios); len(p.locEDF) < n {
		p.locEDF = append(p.locEDF, make([]edfSched, n-len(p.locEDF))...)
		p.locEDFGen = append(p.locEDFGen, make([]uint32, n-len(p.locEDFGen))...)
	}
	if n := int(s.maxID) + 1; len(p.active) < n {
		p.active = append(p.active, make([]uint32, n-len(p.active))...)
	}
}

// RequestStarted counts an active request on h (least request reads it).
func (p *Picker) RequestStarted(h *Host) {
	if int(h.ID) >= len(p.active) {
		p.active = append(p.active, make([]uint32, int(h.ID)+1-len(p.active))...)
	}
	p.active[h.ID]++
}

// RequestFinished ends an active request on h.
func (p *Picker) RequestFinished(h *Host) {
	if int(h.ID) < len(p.active) && p.active[h.ID] > 0 {
		p.active[h.ID]--
	}
}

// Active returns the active requests this worker has on h.
func (p *Picker) Active(h *Host) uint32 {
	if int(h.ID) < len(p.active) {
		return p.active[h.ID]
	}
	return 0
}

// Pick chooses a host from s for one request, or nil when none is
// available (no healthy upstream: the caller's UH). It allocates nothing.
func (p *Picker) Pick(s *Snapshot, ctx *PickContext) *Host {
	p.sync(s)
	if ctx == nil {
		ctx = &PickContext{}
	}
	var h *Host
	for attempt := 0; attempt <= int(ctx.SelectionRetries); attempt++ {
		h = p.pickOnce(s, ctx, attempt)
		if h == nil || !ctx.rejects(h) {
			return h
		}
	}
	return h
}

func (p *Picker) pickOnce(s *Snapshot, ctx *PickContext, attempt int) *Host {
	switch s.cfg.Policy {
	case PolicyRingHash, PolicyMaglev:
		return p.pickHashing(s, ctx, attempt)
	}
	r := p.rnd.Uint64()
	healthy, degraded := s.load.HealthyLoad, s.load.DegradedLoad
	if ctx.RetryPriority != nil {
		healthy, degraded = ctx.RetryPriority.PriorityLoad(&s.load)
	}
	prio, class := choosePriority(r, healthy, degraded)
	src := p.hostSource(s, prio, class)
	if src == nil || len(src.hosts) == 0 {
		return nil
	}
	switch s.cfg.Policy {
	case PolicyRandom:
		return src.hosts[r%uint64(len(src.hosts))]
	case PolicyLeastRequest:
		return p.pickLeastRequest(s, src)
	}
	return p.pickRoundRobin(s, src)
}

// hostSource is Envoy's hostSourceToUse: which host list of which priority
// the pick draws from.
func (p *Picker) hostSource(s *Snapshot, prio int, class availability) *hostSource {
	ps := &s.prios[prio]
	if s.load.Panic[prio] {
		p.stats.HealthyPanic.Add(1)
		if s.cfg.ZoneAware.FailTrafficOnPanic {
			return nil
		}
		return &ps.all
	}
	if s.cfg.LocalityWeighted {
		if i := p.chooseLocality(s, prio, class); i >= 0 {
			return &ps.locality[class][i]
		}
		return &ps.byClass[class]
	}
	if prio != 0 || !s.zoneActive || s.zone.State == NoLocalityRouting {
		return &ps.byClass[class]
	}
	if pct := s.cfg.ZoneAware.RoutingEnabledPercent; pct < 100 && p.rnd.Uint64()%100 >= uint64(pct) {
		return &ps.byClass[class]
	}
	if s.localPanic {
		p.stats.LocalClusterNotOK.Add(1)
		if s.cfg.ZoneAware.FailTrafficOnPanic {
			return nil
		}
		return &ps.byClass[class]
	}
	// The bucket index comes from the healthy structures even for the
	// degraded class, as in Envoy.
	return &ps.locality[class][s.zone.chooseLocality(p.rnd, p.stats)]
}

// chooseLocality picks a locality of priority prio by effective weight with
// the worker's copy of the scheduler; -1 when there is none.
func (p *Picker) chooseLocality(s *Snapshot, prio int, class availability) int {
	proto := s.prios[prio].locEDF[class]
	if proto == nil {
		return -1
	}
	k := 2*prio + int(class)
	e := &p.locEDF[k]
	if p.locEDFGen[k] != p.gen {
		proto.CloneInto(e)
		p.locEDFGen[k] = p.gen
	}
	ws := s.prios[prio].locWeights[class]
	return e.Pick(func(i int) float64 { return ws[i] })
}

// schedulerFor returns the worker's copy of src's scheduler, refreshed from
// the snapshot's prototype and advanced by the worker's seed so workers do
// not all start on the same host.
func (p *Picker) schedulerFor(src *hostSource, weight func(int) float64) *edfSched {
	e := &p.edf[src.key]
	if p.edfGen[src.key] != p.gen {
		src.edf.CloneInto(e)
		p.edfGen[src.key] = p.gen
		for range p.seed % uint64(len(src.hosts)) {
			e.Pick(weight)
		}
		e.useClasses(weight) // O(classes) picks while weights take few values
	}
	return e
}

func (p *Picker) pickRoundRobin(s *Snapshot, src *hostSource) *Host {
	if src.edf == nil {
		i := p.cursor[src.key]
		p.cursor[src.key]++
		return src.hosts[i%uint64(len(src.hosts))]
	}
	ws := src.weights
	weight := func(i int) float64 { return ws[i] }
	return src.hosts[p.schedulerFor(src, weight).Pick(weight)]
}

func (p *Picker) pickLeastRequest(s *Snapshot, src *hostSource) *Host {
	hosts := src.hosts
	if src.edf != nil {
		ws, active, bias := src.weights, p.active, s.cfg.LeastRequest.ActiveRequestBias
		weight := func(i int) float64 { return leastRequestWeight(ws[i], uint64(active[hosts[i].ID]), bias) }
		return hosts[p.schedulerFor(src, weight).Pick(weight)]
	}
	n := uint64(len(hosts))
	if s.cfg.LeastRequest.FullScan {
		var best *Host
		var ties uint64
		for _, h := range hosts {
			switch a := p.active[h.ID]; {
			case best == nil || a < p.active[best.ID]:
				best, ties = h, 1
			case a == p.active[best.ID]:
				// Reservoir sampling keeps each tied host with equal chance.
				ties++
				if p.rnd.Uint64()%ties == 0 {
					best = h
				}
			}
		}
		return best
	}
	best := hosts[p.rnd.Uint64()%n]
	for c := uint32(1); c < s.cfg.LeastRequest.ChoiceCount; c++ {
		if h := hosts[p.rnd.Uint64()%n]; p.active[h.ID] < p.active[best.ID] {
			best = h
		}
	}
	return best
}

func (p *Picker) pickHashing(s *Snapshot, ctx *PickContext, attempt int) *Host {
	hash := ctx.Hash
	if !ctx.HasHash {
		hash = p.rnd.Uint64()
	}
	prio, _ := choosePriority(hash, s.load.HealthyLoad, s.load.DegradedLoad)
	ps := &s.prios[prio]
	if s.load.Panic[prio] {
		p.stats.HealthyPanic.Add(1)
		if s.cfg.ZoneAware.FailTrafficOnPanic {
			return nil
		}
	}
	i := -1
	if ps.ring != nil {
		i = ps.ring.Pick(hash, attempt)
	} else if ps.maglev != nil {
		i = ps.maglev.Pick(hash, attempt)
	}
	if i < 0 {
		return nil
	}
	return ps.hashHosts[i]
}
