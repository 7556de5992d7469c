package lb

import (
	"fmt"
	"strings"
	"testing"
)

// hostsIn makes n hosts of one priority and zone; the first `down` fail
// their health check.
func hostsIn(ids *HostID, prio uint32, zone string, n, down int) []*Host {
	out := make([]*Host, n)
	for i := range out {
		out[i] = &Host{ID: *ids, Address: fmt.Sprintf("%s-p%d-%d:80", zone, prio, i), Weight: 1, Priority: prio, Locality: Locality{Region: "r1", Zone: zone}}
		if i < down {
			out[i].Flags = FailedActiveHC
		}
		*ids++
	}
	return out
}

func mustSnapshot(t testing.TB, cfg ClusterConfig, in BuildInput) *Snapshot {
	t.Helper()
	s, err := NewSnapshot(cfg, in, nil)
	if err != nil {
		t.Fatalf("NewSnapshot: %v", err)
	}
	return s
}

// share picks n times and returns the fraction of picks per key.
func share(t testing.TB, s *Snapshot, n int, key func(*Host) string) map[string]float64 {
	t.Helper()
	p := NewPicker(newPCG(42), nil)
	m := map[string]float64{}
	for range n {
		h := p.Pick(s, nil)
		if h == nil {
			t.Fatal("no host")
		}
		m[key(h)]++
	}
	for k := range m {
		m[k] /= float64(n)
	}
	return m
}

func byPriority(h *Host) string { return fmt.Sprint("P", h.Priority) }
func byZone(h *Host) string     { return h.Locality.Zone }

// The failover table (docs/design.md, "The failover story"): two data
// centres of 4 hosts, dc1 at P0 losing hosts one by one.
// The share that stays in dc1 is min(100, health x factor), analytically and
// over 100,000 picks.
func TestSeedFailoverTable(t *testing.T) {
	want := map[uint32][]float64{140: {100, 100, 70, 35, 0}, 100: {100, 75, 50, 25, 0}}
	for _, opf := range []uint32{140, 100} {
		for down := 0; down <= 4; down++ {
			t.Run(fmt.Sprintf("factor%d/down%d", opf, down), func(t *testing.T) {
				var ids HostID
				hosts := append(hostsIn(&ids, 0, "dc1", 4, down), hostsIn(&ids, 1, "dc2", 4, 0)...)
				s := mustSnapshot(t, DefaultClusterConfig(), BuildInput{Hosts: hosts, OverprovisioningFactor: opf})
				w := want[opf][down]
				if got := float64(s.Load().HealthyLoad[0]); got != w {
					t.Errorf("analytic P0 load = %v%%, want %v%%", got, w)
				}
				got := 100 * share(t, s, 100000, byPriority)["P0"]
				if !near(got, w, 2) {
					t.Errorf("simulated P0 share = %.2f%%, want %v%% ± 2", got, w)
				}
			})
		}
	}
}

// The residual example (docs/design.md, "Zone-aware routing"): local
// 40/40/20 % against upstream 25/50/25 %: residual routing keeps 62.5 % in
// the own zone, sends 25 % to B and 12.5 % to C.
func TestSeedResidualExample(t *testing.T) {
	var ids HostID
	up := append(append(hostsIn(&ids, 0, "a", 2, 0), hostsIn(&ids, 0, "b", 4, 0)...), hostsIn(&ids, 0, "c", 2, 0)...)
	var lid HostID
	local := append(append(hostsIn(&lid, 0, "a", 4, 0), hostsIn(&lid, 0, "b", 4, 0)...), hostsIn(&lid, 0, "c", 2, 0)...)
	s := mustSnapshot(t, DefaultClusterConfig(), BuildInput{Hosts: up, LocalCluster: local, Local: Locality{Region: "r1", Zone: "a"}})
	zr := s.ZoneRouting()
	if zr.State != LocalityResidual || zr.LocalPercentToRoute != 6250 || fmt.Sprint(zr.ResidualCumulative) != "[0 1000 1500]" {
		t.Fatalf("zone routing = %v lptr %d residual %v, want LocalityResidual 6250 [0 1000 1500]", zr.State, zr.LocalPercentToRoute, zr.ResidualCumulative)
	}
	got := share(t, s, 100000, byZone)
	for zone, w := range map[string]float64{"a": 62.5, "b": 25, "c": 12.5} {
		if !near(100*got[zone], w, 2) {
			t.Errorf("zone %s share = %.2f%%, want %v%% ± 2", zone, 100*got[zone], w)
		}
	}
}

func TestPriorityLoadEdges(t *testing.T) {
	pa := func(hosts, healthy uint64) PriorityAvailability {
		return PriorityAvailability{Hosts: hosts, Healthy: healthy, OverprovisioningFactor: 140}
	}
	// P0 empty: the rounding remainder goes to the first priority with
	// healthy availability (P1), not to P0.
	l := ComputePriorityLoad([]PriorityAvailability{pa(4, 0), pa(4, 1), pa(5, 1)}, 0)
	if fmt.Sprint(l.HealthyLoad) != "[0 56 44]" {
		t.Errorf("remainder: loads %v, want [0 56 44]", l.HealthyLoad)
	}
	// Exactly at the threshold is not panic; below is.
	l = ComputePriorityLoad([]PriorityAvailability{pa(2, 1), pa(1, 0)}, 50)
	if l.Panic[0] || !l.Panic[1] || l.TotalPanic {
		t.Errorf("panic flags %v total %v, want [false true] false", l.Panic, l.TotalPanic)
	}
	// No priorities at all.
	if l := ComputePriorityLoad(nil, 50); len(l.HealthyLoad) != 0 {
		t.Errorf("empty: %v", l.HealthyLoad)
	}
	if p, _ := ChoosePriority(7, nil, nil); p != 0 {
		t.Errorf("ChoosePriority with no loads = %d, want 0", p)
	}
}

func TestDegradedHostsTakeSpillOver(t *testing.T) {
	var ids HostID
	hosts := hostsIn(&ids, 0, "a", 4, 4)
	for _, h := range hosts[:2] {
		h.Flags = DegradedEDSHealth
	}
	s := mustSnapshot(t, DefaultClusterConfig(), BuildInput{Hosts: hosts})
	p := NewPicker(newPCG(1), nil)
	for range 100 {
		if h := p.Pick(s, nil); h == nil || h.Health() != Degraded {
			t.Fatalf("picked %v, want a degraded host", h)
		}
	}
}

func TestLeastRequestPrefersIdleHosts(t *testing.T) {
	var ids HostID
	hosts := hostsIn(&ids, 0, "a", 2, 0)
	cfg := DefaultClusterConfig()
	cfg.Policy = PolicyLeastRequest
	s := mustSnapshot(t, cfg, BuildInput{Hosts: hosts})
	p := NewPicker(newPCG(3), nil)
	for range 5 {
		p.RequestStarted(hosts[0])
	}
	n, idle := 40000, 0
	for range n {
		if p.Pick(s, nil) == hosts[1] {
			idle++
		}
	}
	// P2C over two hosts: the idle one wins unless both samples hit the busy one.
	if got := float64(idle) / float64(n); !near(got, 0.75, 0.02) {
		t.Errorf("idle host share %.3f, want 0.75", got)
	}
	p.RequestFinished(hosts[0])
	if p.Active(hosts[0]) != 4 {
		t.Errorf("active = %d, want 4", p.Active(hosts[0]))
	}
}

func TestPreviousHostsPredicate(t *testing.T) {
	var ids HostID
	hosts := hostsIn(&ids, 0, "a", 3, 0)
	for _, pol := range []Policy{PolicyRoundRobin, PolicyLeastRequest, PolicyRandom, PolicyRingHash, PolicyMaglev} {
		t.Run(pol.String(), func(t *testing.T) {
			cfg := DefaultClusterConfig()
			cfg.Policy = pol
			s := mustSnapshot(t, cfg, BuildInput{Hosts: hosts})
			p := NewPicker(newPCG(9), nil)
			repeats := 0
			for i := range 200 {
				ctx := &PickContext{Hash: uint64(i) * 0x9e3779b97f4a7c15, HasHash: true}
				first := p.Pick(s, ctx)
				ctx.Previous, ctx.SelectionRetries = []HostID{first.ID}, 5
				if again := p.Pick(s, ctx); again == first {
					repeats++
				}
			}
			// Hashing policies walk to the next ring / table entries, which
			// may belong to the same host ((1/3)^5 here); after the last
			// attempt Envoy accepts the host anyway.
			allowed := 0
			if pol == PolicyRingHash || pol == PolicyMaglev {
				allowed = 4
			}
			if repeats > allowed {
				t.Errorf("%d of 200 retries picked the previous host again, want <= %d", repeats, allowed)
			}
		})
	}
}

func TestLocalityWeightedThroughSnapshot(t *testing.T) {
	var ids HostID
	x := hostsIn(&ids, 0, "x", 10, 5) // 50 % healthy: effective 1 x 0.7
	y := hostsIn(&ids, 0, "y", 10, 0)
	for _, h := range x {
		h.LocalityWeight = 1
	}
	for _, h := range y {
		h.LocalityWeight = 2
	}
	cfg := DefaultClusterConfig()
	cfg.LocalityWeighted = true
	s := mustSnapshot(t, cfg, BuildInput{Hosts: append(x, y...)})
	got := share(t, s, 27000, byZone)
	if !near(got["x"], 0.7/2.7, 0.005) {
		t.Errorf("locality x share %.4f, want %.4f", got["x"], 0.7/2.7)
	}
}

func TestZoneRoutingOnlyP0AndNotInPanic(t *testing.T) {
	var ids, lid HostID
	up := append(append(hostsIn(&ids, 0, "a", 3, 0), hostsIn(&ids, 0, "b", 3, 0)...), hostsIn(&ids, 0, "c", 3, 0)...)
	local := append(append(hostsIn(&lid, 0, "a", 2, 2), hostsIn(&lid, 0, "b", 2, 2)...), hostsIn(&lid, 0, "c", 2, 2)...)
	stats := &Stats{}
	s := mustSnapshot(t, DefaultClusterConfig(), BuildInput{Hosts: up, LocalCluster: local, Local: Locality{Region: "r1", Zone: "a"}})
	if s.ZoneRouting().State != LocalityDirect || !s.LocalClusterInPanic() {
		t.Fatalf("state %v local panic %v, want LocalityDirect with the local cluster in panic", s.ZoneRouting().State, s.LocalClusterInPanic())
	}
	p := NewPicker(newPCG(5), stats)
	zones := map[string]int{}
	for range 3000 {
		zones[p.Pick(s, nil).Locality.Zone]++
	}
	if len(zones) != 3 || stats.LocalClusterNotOK.Load() != 3000 {
		t.Errorf("local cluster in panic: zones %v, lb_local_cluster_not_ok %d; want all zones and 3000", zones, stats.LocalClusterNotOK.Load())
	}
}

func TestRoutingEnabledPercent(t *testing.T) {
	var ids, lid HostID
	up := append(append(hostsIn(&ids, 0, "a", 3, 0), hostsIn(&ids, 0, "b", 3, 0)...), hostsIn(&ids, 0, "c", 3, 0)...)
	local := append(append(hostsIn(&lid, 0, "a", 2, 0), hostsIn(&lid, 0, "b", 2, 0)...), hostsIn(&lid, 0, "c", 2, 0)...)
	cfg := DefaultClusterConfig()
	cfg.ZoneAware.RoutingEnabledPercent = 40
	s := mustSnapshot(t, cfg, BuildInput{Hosts: up, LocalCluster: local, Local: Locality{Region: "r1", Zone: "a"}})
	// 40 % routed directly to a, 60 % spread over a/b/c: a gets 0.4 + 0.2.
	if got := share(t, s, 60000, byZone)["a"]; !near(got, 0.6, 0.01) {
		t.Errorf("own zone share %.3f, want 0.6", got)
	}
}

func TestFailoverPriorities(t *testing.T) {
	client := LocalityLabels(Locality{Region: "r1", Zone: "a"})
	eps := []map[string]string{
		LocalityLabels(Locality{Region: "r1", Zone: "a"}),
		LocalityLabels(Locality{Region: "r1", Zone: "b"}),
		LocalityLabels(Locality{Region: "r2", Zone: "a"}),
		{},
	}
	if got := fmt.Sprint(FailoverPriorities(client, eps, DefaultFailoverLabels)); got != "[0 1 2 2]" {
		t.Errorf("default labels: %s, want [0 1 2 2]", got)
	}
	// Nothing in the client's region: the levels close up.
	if got := fmt.Sprint(FailoverPriorities(client, eps[2:], DefaultFailoverLabels)); got != "[0 0]" {
		t.Errorf("compacted: %s, want [0 0]", got)
	}
	// A custom order: zone only.
	if got := fmt.Sprint(FailoverPriorities(client, eps, []string{LabelZone})); got != "[0 1 0 1]" {
		t.Errorf("zone only: %s, want [0 1 0 1]", got)
	}
	// A label the client lacks matches nothing.
	if got := fmt.Sprint(FailoverPriorities(map[string]string{}, eps[:1], DefaultFailoverLabels)); got != "[0]" {
		t.Errorf("client without labels: %s, want [0] (one compacted level)", got)
	}
}

func TestClusterKeepsIdentityAndFlags(t *testing.T) {
	c, err := NewCluster(DefaultClusterConfig(), ClusterOptions{ActiveHealthChecked: true}, newPCG(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := []Endpoint{{Address: "10.0.0.1:80"}, {Address: "10.0.0.2:80", Health: EDSDegraded}}
	if err := c.SetEndpoints(eps, 0, 0); err != nil {
		t.Fatal(err)
	}
	h1 := c.Host("10.0.0.1:80")
	if h1.Health() != Unhealthy {
		t.Errorf("new host of a health-checked cluster is %v, want unhealthy until its first check", h1.Health())
	}
	s1, _ := c.Snapshot(0)
	if !c.SetFlags("10.0.0.1:80", FailedActiveHC, false) || c.SetFlags("10.0.0.1:80", FailedActiveHC, false) {
		t.Error("SetFlags must report a change exactly once")
	}
	if h1.Flags&FailedActiveHC == 0 {
		t.Error("SetFlags mutated a host an older snapshot holds")
	}
	s2, _ := c.Snapshot(0)
	if s2 == s1 || len(s2.HostSets()[0].Healthy) != 1 {
		t.Errorf("rebuild after a flag change: same %v, healthy %d", s2 == s1, len(s2.HostSets()[0].Healthy))
	}
	if s3, _ := c.Snapshot(0); s3 != s2 {
		t.Error("Snapshot rebuilt without a change")
	}
	// An update keeps ids and health-check flags; EDS health follows the update.
	eps[1].Health = EDSHealthy
	if err := c.SetEndpoints(append(eps, Endpoint{Address: "10.0.0.3:80"}), 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := c.Host("10.0.0.1:80"); got.ID != h1.ID || got.Health() != Healthy {
		t.Errorf("after update: id %d health %v, want id %d healthy", got.ID, got.Health(), h1.ID)
	}
	if c.Host("10.0.0.2:80").Flags != FailedActiveHC {
		t.Errorf("EDS degraded cleared but active-HC failure must stay: flags %b", c.Host("10.0.0.2:80").Flags)
	}
	// Bad input is refused and changes nothing.
	for _, bad := range [][]Endpoint{{{Address: ""}}, {{Address: "x:1"}, {Address: "x:1"}}, {{Address: "y:1", Priority: 500}}} {
		if err := c.SetEndpoints(bad, 0, 0); err == nil {
			t.Errorf("SetEndpoints(%v) accepted", bad)
		}
	}
	if len(c.Hosts()) != 3 {
		t.Errorf("hosts after refused updates: %d, want 3", len(c.Hosts()))
	}
}

func TestSnapshotRejectsBadInput(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(*ClusterConfig)
		in   BuildInput
		want string
	}{
		{"weight", nil, BuildInput{Hosts: []*Host{{Address: "a:1"}}}, `host "a:1": load_balancing_weight 0`},
		{"dup", nil, BuildInput{Hosts: []*Host{{Address: "a:1", Weight: 1}, {Address: "b:1", Weight: 1}}}, "duplicate host id"},
		{"prio", nil, BuildInput{Hosts: []*Host{{Address: "a:1", Weight: 1, Priority: 1000}}}, "priority 1000"},
		{"nil", nil, BuildInput{Hosts: []*Host{nil}}, "hosts[0]: nil host"},
		{"panic", func(c *ClusterConfig) { c.PanicThreshold = 101 }, BuildInput{}, "healthy_panic_threshold"},
		{"choice", func(c *ClusterConfig) { c.Policy = PolicyLeastRequest; c.LeastRequest.ChoiceCount = 1 }, BuildInput{}, "choice_count"},
		{"maglev", func(c *ClusterConfig) { c.Policy = PolicyMaglev; c.MaglevTableSize = 65536 }, BuildInput{}, "table_size"},
	}
	for _, tc := range cases {
		cfg := DefaultClusterConfig()
		if tc.cfg != nil {
			tc.cfg(&cfg)
		}
		_, err := NewSnapshot(cfg, tc.in, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	if _, err := ParsePolicy("weighted"); err == nil {
		t.Error("ParsePolicy accepted an unknown name")
	}
	if p, err := ParsePolicy("least-request"); err != nil || p != PolicyLeastRequest {
		t.Errorf("ParsePolicy(least-request) = %v, %v", p, err)
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	for _, pol := range []Policy{PolicyRoundRobin, PolicyLeastRequest, PolicyRandom, PolicyRingHash, PolicyMaglev} {
		for _, weighted := range []bool{false, true} {
			s, _ := benchSnapshot(t, pol, 300, weighted)
			p := NewPicker(newPCG(1), nil)
			p.Pick(s, nil) // the first pick after a snapshot change copies schedulers
			if a := testing.AllocsPerRun(1000, func() { p.Pick(s, nil) }); a != 0 {
				t.Errorf("%v weighted=%v: %v allocations per pick, want 0", pol, weighted, a)
			}
		}
	}
}
