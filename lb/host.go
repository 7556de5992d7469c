package lb

import (
	"cmp"
	"slices"
)

// Locality is where a host runs: Envoy's core.Locality, filled from the
// node's topology.kubernetes.io/{region,zone} and topology.istio.io/subzone
// labels.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"sub_zone,omitempty"`
}

// Compare orders localities lexicographically by region, zone, sub-zone, the
// order in which Envoy lays out per-locality host lists after the local one.
func (l Locality) Compare(o Locality) int {
	if c := cmp.Compare(l.Region, o.Region); c != 0 {
		return c
	}
	if c := cmp.Compare(l.Zone, o.Zone); c != 0 {
		return c
	}
	return cmp.Compare(l.SubZone, o.SubZone)
}

// String renders the locality as region/zone[/sub_zone].
func (l Locality) String() string {
	if l.SubZone == "" {
		return l.Region + "/" + l.Zone
	}
	return l.Region + "/" + l.Zone + "/" + l.SubZone
}

// Health is a host's coarse health as the load balancer sees it.
type Health uint8

const (
	// Healthy hosts take traffic.
	Healthy Health = iota
	// Degraded hosts take traffic only when healthy capacity is not enough.
	Degraded
	// Unhealthy hosts take traffic only in panic.
	Unhealthy
	// Excluded hosts exist but count neither for nor against availability
	// (for instance not yet health checked when the cluster asks for that).
	Excluded
)

// String returns the lower-case name of h.
func (h Health) String() string {
	switch h {
	case Healthy:
		return "healthy"
	case Degraded:
		return "degraded"
	case Unhealthy:
		return "unhealthy"
	case Excluded:
		return "excluded"
	}
	return "invalid"
}

// HealthFlags are the reasons behind a host's health, as Envoy's
// Host::HealthFlag: several may be set at once and Health derives from them.
type HealthFlags uint16

const (
	// FailedActiveHC: the active health checker failed the host (or has not
	// passed it yet: hosts of a health-checked cluster start with it).
	FailedActiveHC HealthFlags = 1 << iota
	// FailedOutlierCheck: outlier detection ejected the host.
	FailedOutlierCheck
	// FailedEDSHealth: the control plane reported UNHEALTHY, DRAINING or TIMEOUT.
	FailedEDSHealth
	// DegradedActiveHC: the health check response carried x-envoy-degraded.
	DegradedActiveHC
	// DegradedEDSHealth: the control plane reported DEGRADED.
	DegradedEDSHealth
	// PendingActiveHC: excluded until its first health check
	// (ignore_new_hosts_until_first_hc).
	PendingActiveHC
	// ExcludedImmediateHCFail: excluded after an immediate health check failure.
	ExcludedImmediateHCFail
)

// Health derives the coarse health from the flags: exclusion wins, then any
// failure, then any degradation.
func (f HealthFlags) Health() Health {
	switch {
	case f&(PendingActiveHC|ExcludedImmediateHCFail) != 0:
		return Excluded
	case f&(FailedActiveHC|FailedOutlierCheck|FailedEDSHealth) != 0:
		return Unhealthy
	case f&(DegradedActiveHC|DegradedEDSHealth) != 0:
		return Degraded
	}
	return Healthy
}

// Host is one upstream endpoint of a cluster. A Host inside a Snapshot is
// immutable; health changes produce a new Snapshot.
type Host struct {
	// ID is stable for the host's lifetime in its cluster; per-worker state
	// outside snapshots is keyed by it.
	ID HostID
	// Address is "ip:port" (the default ring-hash / Maglev key).
	Address string
	// Hostname is the endpoint's host name, if any.
	Hostname string
	// Weight is the endpoint load-balancing weight (>= 1).
	Weight uint32
	// Locality is where the host runs.
	Locality Locality
	// LocalityWeight is the EDS load_balancing_weight of the host's locality
	// entry (0 = unset); locality-weighted balancing reads it.
	LocalityWeight uint32
	// Priority is the host's priority level (0 is the highest).
	Priority uint32
	// Flags are the reasons behind the host's health.
	Flags HealthFlags
	// Metadata holds string metadata (for instance "hash_key", the
	// envoy.lb hash key used by ring hash and Maglev instead of Address).
	Metadata map[string]string
	// AddedAt is when the host joined or last passed its first health check,
	// in nanoseconds of the caller's clock; slow start measures from it.
	AddedAt int64
}

// Health returns the host's coarse health.
func (h *Host) Health() Health { return h.Flags.Health() }

// hashKey is the key ring hash and Maglev place the host by.
func (h *Host) hashKey(useHostname bool) string {
	if k := h.Metadata["hash_key"]; k != "" {
		return k
	}
	if useHostname && h.Hostname != "" {
		return h.Hostname
	}
	return h.Address
}

// LocalityHosts is one locality bucket of a host set: all its hosts and the
// healthy and degraded ones among them.
type LocalityHosts struct {
	Locality Locality
	// Weight is the EDS locality load_balancing_weight (0 = unset).
	Weight   uint32
	Hosts    []*Host
	Healthy  []*Host
	Degraded []*Host
	Excluded int
}

// HostSet is one priority level of a cluster, grouped by locality with the
// client's own locality first (when present) and the rest in lexicographic
// order, as Envoy lays it out.
type HostSet struct {
	Priority uint32
	Hosts    []*Host
	Healthy  []*Host
	Degraded []*Host
	Excluded []*Host
	// Localities are the per-locality buckets; bucket 0 is the local
	// locality iff HasLocalLocality.
	Localities       []LocalityHosts
	HasLocalLocality bool
	// OverprovisioningFactor in percent (140 = 1.4).
	OverprovisioningFactor uint32
	// WeightedPriorityHealth computes availability from host weights.
	WeightedPriorityHealth bool
}

// newHostSet classifies hosts (all of one priority) and groups them by
// locality relative to local. Two passes size every list exactly, which
// keeps rebuilds of large clusters cheap.
func newHostSet(priority uint32, hosts []*Host, local Locality, opf uint32, weighted bool) HostSet {
	hs := HostSet{Priority: priority, Hosts: hosts, OverprovisioningFactor: opf, WeightedPriorityHealth: weighted}
	bucket := make([]int32, len(hosts))
	type counts struct{ hosts, healthy, degraded int }
	var cnt []counts
	var index map[Locality]int32
	var nHealthy, nDegraded, nExcluded int
	for i, h := range hosts {
		b := int32(-1)
		if index == nil {
			// Few localities: a linear scan beats hashing three strings.
			for j := range hs.Localities {
				if hs.Localities[j].Locality == h.Locality {
					b = int32(j)
					break
				}
			}
		} else if j, ok := index[h.Locality]; ok {
			b = j
		}
		if b < 0 {
			b = int32(len(hs.Localities))
			hs.Localities = append(hs.Localities, LocalityHosts{Locality: h.Locality, Weight: h.LocalityWeight})
			cnt = append(cnt, counts{})
			if index != nil {
				index[h.Locality] = b
			} else if len(hs.Localities) > 16 {
				index = make(map[Locality]int32, 64)
				for j := range hs.Localities {
					index[hs.Localities[j].Locality] = int32(j)
				}
			}
		}
		bucket[i] = b
		cnt[b].hosts++
		switch h.Health() {
		case Healthy:
			cnt[b].healthy++
			nHealthy++
		case Degraded:
			cnt[b].degraded++
			nDegraded++
		case Excluded:
			hs.Localities[b].Excluded++
			nExcluded++
		}
	}
	hs.Healthy = make([]*Host, 0, nHealthy)
	hs.Degraded = make([]*Host, 0, nDegraded)
	hs.Excluded = make([]*Host, 0, nExcluded)
	for j := range hs.Localities {
		b := &hs.Localities[j]
		b.Hosts = make([]*Host, 0, cnt[j].hosts)
		b.Healthy = make([]*Host, 0, cnt[j].healthy)
		b.Degraded = make([]*Host, 0, cnt[j].degraded)
	}
	for i, h := range hosts {
		b := &hs.Localities[bucket[i]]
		b.Hosts = append(b.Hosts, h)
		switch h.Health() {
		case Healthy:
			hs.Healthy = append(hs.Healthy, h)
			b.Healthy = append(b.Healthy, h)
		case Degraded:
			hs.Degraded = append(hs.Degraded, h)
			b.Degraded = append(b.Degraded, h)
		case Excluded:
			hs.Excluded = append(hs.Excluded, h)
		}
	}
	sortLocalities(hs.Localities, local)
	hs.HasLocalLocality = len(hs.Localities) > 0 && hs.Localities[0].Locality == local
	return hs
}

// sortLocalities puts local first and the rest in lexicographic order.
func sortLocalities(buckets []LocalityHosts, local Locality) {
	slices.SortStableFunc(buckets, func(a, b LocalityHosts) int {
		al, bl := a.Locality == local, b.Locality == local
		switch {
		case al && !bl:
			return -1
		case bl && !al:
			return 1
		}
		return a.Locality.Compare(b.Locality)
	})
}
