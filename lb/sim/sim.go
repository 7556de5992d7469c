// Package sim runs load-balancing scenarios through the lb engine: it reads
// a scenario (hosts per zone and priority with their health, the local
// cluster's distribution, the policy and knobs, a number of requests),
// makes that many picks and reports where traffic went, per priority, zone
// and host, with the zone routing state and Envoy's counters. It backs
// `sidecar lb simulate`.
package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/meshlet-dev/meshlet/lb"
	"sigs.k8s.io/yaml"
)

// Scenario is the YAML/JSON input of a simulation.
type Scenario struct {
	// Name is a title for the report.
	Name string `json:"name"`
	// Policy is an Envoy lb_policy name (default ROUND_ROBIN).
	Policy string `json:"policy"`
	// Requests is the number of picks (default 100000, at most 10^8).
	Requests int `json:"requests"`
	// Seed makes the run reproducible (default 1).
	Seed uint64 `json:"seed"`
	// OverprovisioningFactor in percent (default 140).
	OverprovisioningFactor uint32 `json:"overprovisioning_factor"`
	// PanicThreshold in percent (default 50).
	PanicThreshold *float64 `json:"panic_threshold"`
	// WeightedPriorityHealth computes availability from host weights.
	WeightedPriorityHealth bool `json:"weighted_priority_health"`
	// LocalityWeighted turns on locality-weighted balancing (and zone-aware off).
	LocalityWeighted bool `json:"locality_weighted"`
	// ZoneAware are the zone-aware knobs; they apply when LocalCluster is set.
	ZoneAware *ZoneAware `json:"zone_aware"`
	// Client is the locality of the sidecar doing the picks.
	Client lb.Locality `json:"client"`
	// LocalCluster is how many clients run in each zone.
	LocalCluster []LocalZone `json:"local_cluster"`
	// Priorities lists the upstream hosts by priority and locality.
	Priorities []Priority `json:"priorities"`
	// Endpoints lists upstream hosts without priorities; Failover assigns
	// them priorities relative to Client.
	Endpoints []Group `json:"endpoints"`
	// Failover turns on locality failover for Endpoints.
	Failover *Failover `json:"failover"`
}

// ZoneAware mirrors Envoy's ZoneAwareLbConfig.
type ZoneAware struct {
	RoutingEnabled        *uint32 `json:"routing_enabled"`
	MinClusterSize        *uint64 `json:"min_cluster_size"`
	ForceLocalZoneMinSize uint64  `json:"force_local_zone_min_size"`
	FailTrafficOnPanic    bool    `json:"fail_traffic_on_panic"`
	// LocalityBasis is HEALTHY_HOSTS_NUM (default) or HEALTHY_HOSTS_WEIGHT.
	LocalityBasis string `json:"locality_basis"`
}

// LocalZone is a number of clients in one locality.
type LocalZone struct {
	lb.Locality `json:",inline"`
	Hosts       int `json:"hosts"`
}

// Priority is one priority level of hosts.
type Priority struct {
	Priority   uint32  `json:"priority"`
	Localities []Group `json:"localities"`
}

// Group is a set of hosts in one locality, by health.
type Group struct {
	lb.Locality `json:",inline"`
	Healthy     int `json:"healthy"`
	Degraded    int `json:"degraded"`
	Unhealthy   int `json:"unhealthy"`
	Excluded    int `json:"excluded"`
	// Weight is each host's weight (default 1).
	Weight uint32 `json:"weight"`
	// LocalityWeight is the EDS locality weight (locality-weighted LB).
	LocalityWeight uint32 `json:"locality_weight"`
}

// Failover configures locality failover by label order.
type Failover struct {
	// Labels in order of importance (default region, zone).
	Labels []string `json:"labels"`
}

const maxRequests = 100_000_000
const maxHosts = 1_000_000

// Parse reads a scenario from YAML or JSON, rejecting unknown fields and
// naming the field that is wrong.
func Parse(data []byte) (*Scenario, error) {
	var s Scenario
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("sim: parse scenario: %w", err)
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Scenario) validate() error {
	if s.Requests < 0 || s.Requests > maxRequests {
		return fmt.Errorf("sim: requests: %d not in [0, %d]", s.Requests, maxRequests)
	}
	if len(s.Priorities) > 0 && len(s.Endpoints) > 0 {
		return fmt.Errorf("sim: priorities and endpoints: give one of them")
	}
	if len(s.Endpoints) > 0 && s.Failover == nil {
		return fmt.Errorf("sim: endpoints: need failover to assign priorities (or use priorities)")
	}
	total := 0
	check := func(where string, g Group) error {
		for name, n := range map[string]int{"healthy": g.Healthy, "degraded": g.Degraded, "unhealthy": g.Unhealthy, "excluded": g.Excluded} {
			if n < 0 {
				return fmt.Errorf("sim: %s.%s: %d must be >= 0", where, name, n)
			}
		}
		total += g.Healthy + g.Degraded + g.Unhealthy + g.Excluded
		if total > maxHosts {
			return fmt.Errorf("sim: %s: more than %d hosts in all", where, maxHosts)
		}
		return nil
	}
	for i, p := range s.Priorities {
		if p.Priority > lb.MaxPriority {
			return fmt.Errorf("sim: priorities[%d].priority: %d > %d", i, p.Priority, lb.MaxPriority)
		}
		for j, g := range p.Localities {
			if err := check(fmt.Sprintf("priorities[%d].localities[%d]", i, j), g); err != nil {
				return err
			}
		}
	}
	for i, g := range s.Endpoints {
		if err := check(fmt.Sprintf("endpoints[%d]", i), g); err != nil {
			return err
		}
	}
	for i, z := range s.LocalCluster {
		if z.Hosts < 0 || z.Hosts > maxHosts {
			return fmt.Errorf("sim: local_cluster[%d].hosts: %d not in [0, %d]", i, z.Hosts, maxHosts)
		}
	}
	return nil
}

// config turns the scenario's knobs into the engine's config.
func (s *Scenario) config() (lb.ClusterConfig, error) {
	cfg := lb.DefaultClusterConfig()
	if s.Policy != "" {
		p, err := lb.ParsePolicy(s.Policy)
		if err != nil {
			return cfg, fmt.Errorf("sim: policy: %w", err)
		}
		cfg.Policy = p
	}
	if s.PanicThreshold != nil {
		cfg.PanicThreshold = *s.PanicThreshold
	}
	cfg.LocalityWeighted = s.LocalityWeighted
	if z := s.ZoneAware; z != nil {
		if z.RoutingEnabled != nil {
			cfg.ZoneAware.RoutingEnabledPercent = *z.RoutingEnabled
		}
		if z.MinClusterSize != nil {
			cfg.ZoneAware.MinClusterSize = *z.MinClusterSize
		}
		cfg.ZoneAware.ForceLocalZoneMinSize = z.ForceLocalZoneMinSize
		cfg.ZoneAware.FailTrafficOnPanic = z.FailTrafficOnPanic
		switch strings.ToUpper(z.LocalityBasis) {
		case "", "HEALTHY_HOSTS_NUM":
		case "HEALTHY_HOSTS_WEIGHT":
			cfg.ZoneAware.Basis = lb.BasisHealthyHostsWeight
		default:
			return cfg, fmt.Errorf("sim: zone_aware.locality_basis: unknown %q", z.LocalityBasis)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("sim: %w", err)
	}
	return cfg, nil
}

// hosts realises the scenario's host groups.
func (s *Scenario) hosts() []*lb.Host {
	var out []*lb.Host
	var id lb.HostID
	add := func(prio uint32, g Group) {
		w := max(g.Weight, 1)
		health := []struct {
			n     int
			flags lb.HealthFlags
			tag   string
		}{{g.Healthy, 0, "h"}, {g.Degraded, lb.DegradedEDSHealth, "d"}, {g.Unhealthy, lb.FailedActiveHC, "u"}, {g.Excluded, lb.PendingActiveHC | lb.FailedActiveHC, "x"}}
		for _, hg := range health {
			for i := range hg.n {
				name := strings.Trim(g.Region+"-"+g.Zone+"-"+g.SubZone, "-")
				out = append(out, &lb.Host{ID: id, Address: fmt.Sprintf("%s-p%d-%s%d", name, prio, hg.tag, i), Weight: w,
					Locality: g.Locality, LocalityWeight: g.LocalityWeight, Priority: prio, Flags: hg.flags})
				id++
			}
		}
	}
	for _, p := range s.Priorities {
		for _, g := range p.Localities {
			add(p.Priority, g)
		}
	}
	if len(s.Endpoints) > 0 {
		labels := lb.DefaultFailoverLabels
		if len(s.Failover.Labels) > 0 {
			labels = s.Failover.Labels
		}
		eps := make([]map[string]string, len(s.Endpoints))
		for i, g := range s.Endpoints {
			eps[i] = lb.LocalityLabels(g.Locality)
		}
		prios := lb.FailoverPriorities(lb.LocalityLabels(s.Client), eps, labels)
		for i, g := range s.Endpoints {
			add(prios[i], g)
		}
	}
	return out
}

// Result is what a simulation reports.
type Result struct {
	Name        string            `json:"name,omitempty"`
	Policy      string            `json:"policy"`
	Requests    int               `json:"requests"`
	NoHost      int               `json:"no_host"`
	ZoneRouting ZoneRoutingReport `json:"zone_routing"`
	Priorities  []PriorityReport  `json:"priorities"`
	Zones       []ZoneReport      `json:"zones"`
	Hosts       []HostReport      `json:"hosts"`
	Counters    map[string]uint64 `json:"counters"`
}

// ZoneRoutingReport is P0's zone-aware state.
type ZoneRoutingReport struct {
	Enabled             bool     `json:"enabled"`
	State               string   `json:"state"`
	LocalPercentToRoute uint64   `json:"local_percent_to_route"`
	ResidualCumulative  []uint64 `json:"residual_capacity_cumulative"`
	LocalClusterInPanic bool     `json:"local_cluster_in_panic"`
}

// PriorityReport is one priority's availability, load and share of picks.
type PriorityReport struct {
	Priority             int     `json:"priority"`
	Hosts                int     `json:"hosts"`
	Healthy              int     `json:"healthy"`
	Degraded             int     `json:"degraded"`
	Health               uint32  `json:"health"`
	DegradedAvailability uint32  `json:"degraded_availability"`
	HealthyLoad          uint32  `json:"healthy_load"`
	DegradedLoad         uint32  `json:"degraded_load"`
	Panic                bool    `json:"panic"`
	Picks                int     `json:"picks"`
	Share                float64 `json:"share"`
}

// ZoneReport is one locality of one priority.
type ZoneReport struct {
	Priority int     `json:"priority"`
	Locality string  `json:"locality"`
	Hosts    int     `json:"hosts"`
	Healthy  int     `json:"healthy"`
	Picks    int     `json:"picks"`
	Share    float64 `json:"share"`
}

// HostReport is one host.
type HostReport struct {
	Address  string  `json:"address"`
	Priority int     `json:"priority"`
	Locality string  `json:"locality"`
	Health   string  `json:"health"`
	Weight   uint32  `json:"weight"`
	Picks    int     `json:"picks"`
	Share    float64 `json:"share"`
}

type pcg struct{ *rand.PCG }

// Run builds the cluster's snapshot and makes the scenario's picks.
func Run(s *Scenario) (*Result, error) {
	cfg, err := s.config()
	if err != nil {
		return nil, err
	}
	requests := s.Requests
	if requests == 0 {
		requests = 100000
	}
	seed := s.Seed
	if seed == 0 {
		seed = 1
	}
	rnd := pcg{rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1)}
	in := lb.BuildInput{Hosts: s.hosts(), Local: s.Client, OverprovisioningFactor: s.OverprovisioningFactor,
		WeightedPriorityHealth: s.WeightedPriorityHealth, Seed: rnd.Uint64()}
	for i := range s.Priorities {
		in.Priorities = max(in.Priorities, int(s.Priorities[i].Priority)+1)
	}
	if len(s.LocalCluster) > 0 {
		in.LocalCluster = []*lb.Host{}
		for _, z := range s.LocalCluster {
			for range z.Hosts {
				in.LocalCluster = append(in.LocalCluster, &lb.Host{ID: lb.HostID(len(in.LocalCluster)), Weight: 1, Locality: z.Locality})
			}
		}
	}
	stats := &lb.Stats{}
	snap, err := lb.NewSnapshot(cfg, in, stats)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	picker := lb.NewPicker(rnd, stats)
	picks := make(map[*lb.Host]int, len(in.Hosts))
	res := &Result{Name: s.Name, Policy: cfg.Policy.String(), Requests: requests}
	for range requests {
		if h := picker.Pick(snap, nil); h != nil {
			picks[h]++
		} else {
			res.NoHost++
		}
	}
	res.Counters = stats.Map()
	zr := snap.ZoneRouting()
	res.ZoneRouting = ZoneRoutingReport{Enabled: in.LocalCluster != nil, State: zr.State.String(), LocalPercentToRoute: zr.LocalPercentToRoute,
		ResidualCumulative: zr.ResidualCumulative, LocalClusterInPanic: snap.LocalClusterInPanic()}
	share := func(n int) float64 { return float64(n) / float64(requests) }
	load := snap.Load()
	for p, hs := range snap.HostSets() {
		pr := PriorityReport{Priority: p, Hosts: len(hs.Hosts), Healthy: len(hs.Healthy), Degraded: len(hs.Degraded),
			Health: load.Health[p], DegradedAvailability: load.DegradedAvailability[p], HealthyLoad: load.HealthyLoad[p],
			DegradedLoad: load.DegradedLoad[p], Panic: load.Panic[p]}
		for _, b := range hs.Localities {
			zr := ZoneReport{Priority: p, Locality: b.Locality.String(), Hosts: len(b.Hosts), Healthy: len(b.Healthy)}
			for _, h := range b.Hosts {
				zr.Picks += picks[h]
				res.Hosts = append(res.Hosts, HostReport{Address: h.Address, Priority: p, Locality: b.Locality.String(),
					Health: h.Health().String(), Weight: h.Weight, Picks: picks[h], Share: share(picks[h])})
			}
			zr.Share = share(zr.Picks)
			pr.Picks += zr.Picks
			res.Zones = append(res.Zones, zr)
		}
		pr.Share = share(pr.Picks)
		res.Priorities = append(res.Priorities, pr)
	}
	return res, nil
}

// Table renders the result for people.
func (r *Result) Table() string {
	var b strings.Builder
	title := r.Name
	if title == "" {
		title = "scenario"
	}
	fmt.Fprintf(&b, "%s: %s, %d requests, %d without a host\n", title, r.Policy, r.Requests, r.NoHost)
	zr := r.ZoneRouting
	if zr.Enabled {
		fmt.Fprintf(&b, "zone routing (P0): %s, local_percent_to_route %d/10000, residual %v, local cluster in panic: %v\n",
			zr.State, zr.LocalPercentToRoute, zr.ResidualCumulative, zr.LocalClusterInPanic)
	} else {
		b.WriteString("zone routing: off (no local cluster)\n")
	}
	b.WriteString("\npriority  hosts  healthy  degraded  health  load(h/d)  panic     picks    share\n")
	for _, p := range r.Priorities {
		fmt.Fprintf(&b, "P%-8d %5d  %7d  %8d  %6d  %4d/%-4d  %-5v  %8d  %6.2f%%\n", p.Priority, p.Hosts, p.Healthy, p.Degraded,
			p.Health, p.HealthyLoad, p.DegradedLoad, p.Panic, p.Picks, 100*p.Share)
	}
	b.WriteString("\npriority  locality                      hosts  healthy     picks    share\n")
	for _, z := range r.Zones {
		fmt.Fprintf(&b, "P%-8d %-29s %5d  %7d  %8d  %6.2f%%\n", z.Priority, z.Locality, z.Hosts, z.Healthy, z.Picks, 100*z.Share)
	}
	b.WriteString("\nhost                                 priority  health     weight     picks    share\n")
	for _, h := range r.Hosts {
		fmt.Fprintf(&b, "%-36s P%-8d %-9s  %6d  %8d  %6.2f%%\n", h.Address, h.Priority, h.Health, h.Weight, h.Picks, 100*h.Share)
	}
	b.WriteString("\ncounters\n")
	names := make([]string, 0, len(r.Counters))
	for n := range r.Counters {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-32s %d\n", n, r.Counters[n])
	}
	return b.String()
}
