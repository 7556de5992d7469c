package lb

import "fmt"

// EDSHealth is the health the control plane reports for an endpoint
// (Envoy's core.HealthStatus).
type EDSHealth uint8

// The EDS health values, in core.HealthStatus order. Unknown and Healthy
// count as healthy; Unhealthy, Draining and Timeout fail the host; Degraded
// makes it degraded (used only when no healthy host is left).
const (
	// EDSUnknown counts as healthy.
	EDSUnknown EDSHealth = iota
	// EDSHealthy is healthy.
	EDSHealthy
	// EDSUnhealthy fails the host.
	EDSUnhealthy
	// EDSDraining fails the host (no new requests).
	EDSDraining
	// EDSTimeout fails the host.
	EDSTimeout
	// EDSDegraded marks the host degraded.
	EDSDegraded
)

// flags maps an EDS status to the host flags it sets.
func (e EDSHealth) flags() HealthFlags {
	switch e {
	case EDSUnhealthy, EDSDraining, EDSTimeout:
		return FailedEDSHealth
	case EDSDegraded:
		return DegradedEDSHealth
	}
	return 0
}

// Endpoint is a host as discovery (EDS or a static config) delivers it.
type Endpoint struct {
	Address        string
	Hostname       string
	Weight         uint32 // 0 means 1
	Locality       Locality
	LocalityWeight uint32
	Priority       uint32
	Health         EDSHealth
	Metadata       map[string]string
}

// ClusterOptions are a Cluster's build settings besides the balancing config.
type ClusterOptions struct {
	// Local is the client's own locality.
	Local Locality
	// OverprovisioningFactor in percent; 0 means 140.
	OverprovisioningFactor uint32
	WeightedPriorityHealth bool
	// ActiveHealthChecked: new hosts start failed until their first
	// successful check, as in Envoy.
	ActiveHealthChecked bool
	// IgnoreNewHostsUntilFirstHC also excludes them until that check.
	IgnoreNewHostsUntilFirstHC bool
}

// Cluster is the main loop's mutable view of one cluster: its endpoints with
// stable ids, the health flags health checking and outlier detection set,
// and the local cluster. Snapshot rebuilds the immutable Snapshot workers
// pick from when anything changed. Not safe for concurrent use.
type Cluster struct {
	cfg    ClusterConfig
	opts   ClusterOptions
	rnd    Random
	stats  *Stats
	byAddr map[string]*Host
	order  []string // addresses in delivery order
	local  []*Host
	nextID HostID
	free   []HostID
	snap   *Snapshot
	dirty  bool
	prios  int
}

// NewCluster returns an empty cluster; rnd seeds schedulers at each rebuild
// and stats (may be nil) receives regeneration counters.
func NewCluster(cfg ClusterConfig, opts ClusterOptions, rnd Random, stats *Stats) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Cluster{cfg: cfg, opts: opts, rnd: rnd, stats: stats, byAddr: map[string]*Host{}, dirty: true}, nil
}

// SetEndpoints replaces the endpoint list. Hosts keep their id and their
// health-check and outlier flags across updates; new hosts of a
// health-checked cluster start failed. now stamps new hosts for slow start.
// priorities is the number of declared priority levels (0: derived).
func (c *Cluster) SetEndpoints(eps []Endpoint, priorities int, now int64) error {
	seen := make(map[string]bool, len(eps))
	for i, ep := range eps {
		switch {
		case ep.Address == "":
			return fmt.Errorf("lb: endpoints[%d]: empty address", i)
		case seen[ep.Address]:
			return fmt.Errorf("lb: endpoints[%d]: duplicate address %q", i, ep.Address)
		case ep.Priority > MaxPriority:
			return fmt.Errorf("lb: endpoint %q: priority %d > %d", ep.Address, ep.Priority, MaxPriority)
		}
		seen[ep.Address] = true
	}
	next := make(map[string]*Host, len(eps))
	order := make([]string, 0, len(eps))
	for _, ep := range eps {
		w := max(ep.Weight, 1)
		old := c.byAddr[ep.Address]
		keep := HealthFlags(0)
		h := &Host{Address: ep.Address, Hostname: ep.Hostname, Weight: w, Locality: ep.Locality,
			LocalityWeight: ep.LocalityWeight, Priority: ep.Priority, Metadata: ep.Metadata, AddedAt: now}
		if old != nil {
			h.ID, h.AddedAt = old.ID, old.AddedAt
			keep = old.Flags &^ (FailedEDSHealth | DegradedEDSHealth)
		} else {
			h.ID = c.allocID()
			if c.opts.ActiveHealthChecked {
				keep = FailedActiveHC
				if c.opts.IgnoreNewHostsUntilFirstHC {
					keep |= PendingActiveHC
				}
			}
		}
		h.Flags = keep | ep.Health.flags()
		if old != nil && sameHost(old, h) {
			h = old // unchanged: snapshots may keep sharing it
		}
		next[ep.Address] = h
		order = append(order, ep.Address)
	}
	for addr, h := range c.byAddr {
		if next[addr] == nil {
			c.free = append(c.free, h.ID)
		}
	}
	c.byAddr, c.order, c.prios, c.dirty = next, order, priorities, true
	return nil
}

func sameHost(a, b *Host) bool {
	return a.ID == b.ID && a.Address == b.Address && a.Hostname == b.Hostname && a.Weight == b.Weight &&
		a.Locality == b.Locality && a.LocalityWeight == b.LocalityWeight && a.Priority == b.Priority &&
		a.Flags == b.Flags && a.AddedAt == b.AddedAt && sameMetadata(a.Metadata, b.Metadata)
}

func sameMetadata(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func (c *Cluster) allocID() HostID {
	if n := len(c.free); n > 0 {
		id := c.free[n-1]
		c.free = c.free[:n-1]
		return id
	}
	c.nextID++
	return c.nextID - 1
}

// SetLocalCluster sets the local cluster (the clients and their
// localities) that zone-aware routing compares against; nil turns it off.
func (c *Cluster) SetLocalCluster(eps []Endpoint) {
	c.local = nil
	if eps != nil {
		c.local = make([]*Host, 0, len(eps))
	}
	for i, ep := range eps {
		c.local = append(c.local, &Host{ID: HostID(i), Address: ep.Address, Weight: max(ep.Weight, 1), Locality: ep.Locality, Flags: ep.Health.flags()})
	}
	c.dirty = true
}

// Host returns the current host with that address, or nil.
func (c *Cluster) Host(addr string) *Host { return c.byAddr[addr] }

// Hosts returns the current hosts in delivery order.
func (c *Cluster) Hosts() []*Host {
	out := make([]*Host, len(c.order))
	for i, a := range c.order {
		out[i] = c.byAddr[a]
	}
	return out
}

// SetFlags sets (on) or clears flags of the host with that address and
// reports whether anything changed. Snapshots already built keep the old
// host: the host is replaced, never mutated.
func (c *Cluster) SetFlags(addr string, flags HealthFlags, on bool) bool {
	h := c.byAddr[addr]
	if h == nil {
		return false
	}
	nf := h.Flags &^ flags
	if on {
		nf = h.Flags | flags
	}
	if nf == h.Flags {
		return false
	}
	cp := *h
	cp.Flags = nf
	c.byAddr[addr] = &cp
	c.dirty = true
	return true
}

// Snapshot returns the current snapshot, rebuilding it if anything changed
// since the last call. now is the caller's clock (slow start). On error the
// previous snapshot is kept and returned with the error.
func (c *Cluster) Snapshot(now int64) (*Snapshot, error) {
	if c.snap != nil && !c.dirty && (c.snap.SlowStartUntil == 0 || now >= c.snap.SlowStartUntil) {
		return c.snap, nil
	}
	s, err := NewSnapshot(c.cfg, BuildInput{
		Hosts: c.Hosts(), Local: c.opts.Local, LocalCluster: c.local, Priorities: c.prios,
		OverprovisioningFactor: c.opts.OverprovisioningFactor, WeightedPriorityHealth: c.opts.WeightedPriorityHealth,
		Seed: c.rnd.Uint64(), Now: now,
	}, c.stats)
	if err != nil {
		return c.snap, fmt.Errorf("lb: rebuild snapshot: %w", err)
	}
	c.snap, c.dirty = s, false
	return s, nil
}
