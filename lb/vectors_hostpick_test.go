package lb

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// Runners for the per-host and per-locality choice categories: locality
// weights, round robin and its EDF scheduler, slow start, least request.
func init() {
	vectorRunners["locality_weighted"] = runLocalityWeightedVector
	vectorRunners["round_robin_edf"] = runRoundRobinVector
	vectorRunners["slow_start"] = runSlowStartVector
	vectorRunners["least_request"] = runLeastRequestVector
}

// ---- locality weighted ----

func runLocalityWeightedVector(t *testing.T, v vector) {
	var in struct {
		Hosts    []uint64 `json:"hosts"`
		Healthy  []uint64 `json:"healthy"`
		Degraded []uint64 `json:"degraded"`
		Excluded []uint64 `json:"excluded"`
		Weights  []uint32 `json:"locality_weights"`
		OPF      uint32   `json:"overprovisioning_factor"`
		Seed     uint64   `json:"seed"`
		Picks    int      `json:"picks"`
	}
	var want struct {
		EffectiveWeights         []float64 `json:"effective_weights"`
		DegradedEffectiveWeights []float64 `json:"degraded_effective_weights"`
		Fractions                []float64 `json:"traffic_fraction_exact"`
		DocPercent               []float64 `json:"doc_percent"`
		PickSequence             []int     `json:"pick_sequence"`
		PickCounts               []int     `json:"pick_counts"`
	}
	decodeVector(t, v, &in, &want)
	n := len(in.Hosts)
	if len(in.Healthy) != n || len(in.Weights) != n {
		t.Fatalf("hosts, healthy and locality_weights differ in length")
	}
	for name, l := range map[string][]uint64{"degraded": in.Degraded, "excluded": in.Excluded} {
		if l != nil && len(l) != n {
			t.Fatalf("%s has %d entries for %d localities", name, len(l), n)
		}
	}
	at := func(l []uint64, i int) uint64 {
		if l == nil {
			return 0
		}
		return l[i]
	}
	if in.OPF == 0 {
		in.OPF = DefaultOverprovisioningFactor
	}
	// Real hosts per locality (healthy, degraded, excluded, then
	// unhealthy), grouped by the same code a snapshot uses.
	var hosts []*Host
	var id HostID
	zone := func(i int) Locality { return Locality{Zone: fmt.Sprintf("z%03d", i)} }
	index := map[Locality]int{}
	for i := range in.Hosts {
		index[zone(i)] = i
		healthy, degraded, excl := in.Healthy[i], at(in.Degraded, i), at(in.Excluded, i)
		if healthy+degraded+excl > in.Hosts[i] {
			t.Fatalf("locality %d: healthy+degraded+excluded %d > hosts %d", i, healthy+degraded+excl, in.Hosts[i])
		}
		for j := uint64(0); j < in.Hosts[i]; j++ {
			var f HealthFlags
			switch {
			case j < healthy:
			case j < healthy+degraded:
				f = DegradedEDSHealth
			case j < healthy+degraded+excl:
				f = PendingActiveHC | FailedActiveHC
			default:
				f = FailedActiveHC
			}
			hosts = append(hosts, &Host{ID: id, Address: fmt.Sprintf("10.%d.0.%d:80", i, j), Weight: 1, Locality: zone(i), LocalityWeight: in.Weights[i], Flags: f})
			id++
		}
	}
	hs := newHostSet(0, hosts, Locality{}, in.OPF, false)
	// effective maps the host set's buckets back to the vector's
	// localities; one without hosts has no bucket and weight 0.
	effective := func(class Availability) []float64 {
		ws := make([]float64, n)
		if bw := localityWeights(&hs, class); bw != nil {
			for b, w := range bw {
				ws[index[hs.Localities[b].Locality]] = w
			}
		}
		return ws
	}
	ws := effective(AvailHealthy)
	for name, c := range map[string]struct {
		got, want []float64
	}{"effective_weights": {ws, want.EffectiveWeights}, "degraded_effective_weights": {effective(AvailDegraded), want.DegradedEffectiveWeights}} {
		if c.want != nil && len(c.want) != n {
			t.Fatalf("%s has %d entries for %d localities", name, len(c.want), n)
		}
		for i, w := range c.want {
			if !near(c.got[i], w, 0.0011) {
				t.Errorf("%s[%d] = %.4f, want %.4f", name, i, c.got[i], w)
			}
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
	picks := max(in.Picks, len(want.PickSequence))
	check := func(via string, pick func() int) {
		counts := make([]int, n)
		var seq []int
		for range picks {
			i := pick()
			if i < 0 {
				t.Fatalf("%s: no locality chosen", via)
			}
			seq = append(seq, i)
			counts[i]++
		}
		if want.PickSequence != nil && !slices.Equal(seq[:len(want.PickSequence)], want.PickSequence) {
			t.Errorf("%s: pick_sequence = %v, want %v", via, seq[:len(want.PickSequence)], want.PickSequence)
		}
		if want.PickCounts != nil && !slices.Equal(counts, want.PickCounts) {
			t.Errorf("%s: pick_counts over %d picks = %v, want %v", via, picks, counts, want.PickCounts)
		}
	}
	// The scheduler alone, created with the seed's emulated picks...
	e := NewEDF(n, func(i int) float64 { return ws[i] }, in.Seed)
	check("scheduler", func() int { return e.Pick(func(i int) float64 { return ws[i] }) })
	// ...and as a worker picks through a snapshot built with that seed.
	// Panic is off so that the locality step always runs, as in Envoy's
	// scheduler tests; each pick draws only the priority hash.
	cfg := DefaultClusterConfig()
	cfg.LocalityWeighted = true
	cfg.PanicThreshold = 0
	s, err := NewSnapshot(cfg, BuildInput{Hosts: hosts, OverprovisioningFactor: in.OPF, Seed: in.Seed}, nil)
	if err != nil {
		t.Fatalf("NewSnapshot: %v", err)
	}
	p := NewPicker(&seqRandom{}, nil)
	check("snapshot", func() int {
		h := p.Pick(s, nil)
		if h == nil {
			return -1
		}
		return index[h.Locality]
	})
}

// ---- round robin ----

// rrPhase is a stretch of picks after the weights changed in place, with no
// rebuild: the scheduler re-inserts each picked host with its weight at that
// moment, so a change shows one pick after it happens.
type rrPhase struct {
	Weights          []float64 `json:"weights"`
	EffectiveWeights []float64 `json:"effective_weights"`
	Picks            int       `json:"picks"`
}

type rrVectorInput struct {
	Weights          []float64 `json:"weights"`
	EffectiveWeights []float64 `json:"effective_weights"`
	Seed             uint64    `json:"seed"`
	Phases           []rrPhase `json:"phases"`
	Hosts            int       `json:"hosts"`
	Healthy          int       `json:"healthy"`
	PanicThreshold   *float64  `json:"panic_threshold_percent"`
}

type rrVectorExpected struct {
	PickSequence  []int   `json:"pick_sequence"`
	PickSequences [][]int `json:"pick_sequences"`
	FirstPicks    []int   `json:"first_picks"`
	HostSource    string  `json:"host_source"`
	StatPerPick   string  `json:"stat_per_pick"`
	FailOnPanic   *struct {
		HostReturned bool `json:"host_returned"`
	} `json:"fail_traffic_on_panic"`
	Panic0NoHealthy *struct {
		HostReturned   bool    `json:"host_returned"`
		LbHealthyPanic *uint64 `json:"lb_healthy_panic"`
	} `json:"panic_threshold_0_no_healthy"`
}

func runRoundRobinVector(t *testing.T, v vector) {
	var in rrVectorInput
	var want rrVectorExpected
	decodeVector(t, v, &in, &want)
	if in.Weights != nil && in.EffectiveWeights != nil {
		t.Fatal("give weights or effective_weights, not both")
	}
	ws := in.Weights
	if ws == nil {
		ws = in.EffectiveWeights
	}
	// Each shape has its own expectations; one checked by no path must
	// not pass silently.
	if ws == nil && in.Phases == nil {
		if want.PickSequence != nil || want.PickSequences != nil {
			t.Fatal("pick_sequence(s) need weights or effective_weights")
		}
	} else if in.Hosts != 0 || in.Healthy != 0 || in.PanicThreshold != nil || want.FirstPicks != nil || want.HostSource != "" ||
		want.StatPerPick != "" || want.FailOnPanic != nil || want.Panic0NoHealthy != nil {
		t.Fatal("hosts, healthy, panic_threshold_percent and their expectations do not combine with weights")
	}
	switch {
	case in.Phases != nil:
		runRoundRobinPhases(t, ws, in.Seed, in.Phases, want)
	case in.Weights != nil:
		// Weighted round robin through a snapshot and a worker's picker.
		// Envoy's one LB seed both starts the cursor of equal-weight round
		// robin and emulates the EDF's initial picks; meshlet splits it
		// between the worker picker (cursor) and the snapshot (EDF, which
		// the picker would offset by its own seed), so the seed goes to the
		// part that uses it.
		hosts := make([]*Host, len(in.Weights))
		equal := true
		for i, w := range in.Weights {
			if w != math.Trunc(w) || w < 1 || w > math.MaxUint32 {
				t.Fatalf("weights[%d] = %v: a host weight is an integer >= 1", i, w)
			}
			hosts[i] = &Host{ID: HostID(i), Address: fmt.Sprintf("10.0.0.%d:80", i), Weight: uint32(w)}
			equal = equal && w == in.Weights[0]
		}
		s, err := NewSnapshot(DefaultClusterConfig(), BuildInput{Hosts: hosts, Seed: in.Seed}, nil)
		if err != nil {
			t.Fatal(err)
		}
		pickerSeed := uint64(0)
		if equal {
			pickerSeed = in.Seed
		}
		p := NewPicker(&seqRandom{queue: []uint64{pickerSeed}}, nil)
		var seq []int
		for range want.PickSequence {
			seq = append(seq, int(p.Pick(s, nil).ID))
		}
		if want.PickSequence == nil || !slices.Equal(seq, want.PickSequence) {
			t.Errorf("pick_sequence = %v, want %v", seq, want.PickSequence)
		}
	case in.EffectiveWeights != nil:
		e := NewEDF(len(ws), func(i int) float64 { return ws[i] }, in.Seed)
		var seq []int
		for range want.PickSequence {
			seq = append(seq, e.Pick(func(i int) float64 { return ws[i] }))
		}
		if want.PickSequence == nil || !slices.Equal(seq, want.PickSequence) {
			t.Errorf("pick_sequence = %v, want %v", seq, want.PickSequence)
		}
	case in.Hosts > 0:
		runRoundRobinPanicVector(t, in.Hosts, in.Healthy, in.Seed, deref(in.PanicThreshold, DefaultPanicThreshold), want)
	default:
		t.Fatal("vector has neither weights, effective_weights nor hosts")
	}
}

// runRoundRobinPhases drives the scheduler through weight changes that come
// without a rebuild (Envoy's RoundRobinLoadBalancerTest.Weighted changes
// host weights between picks): a phase's weights replace the current ones
// and the scheduler reads them at each re-insertion.
func runRoundRobinPhases(t *testing.T, initial []float64, seed uint64, phases []rrPhase, want rrVectorExpected) {
	t.Helper()
	if want.PickSequence != nil || len(want.PickSequences) != len(phases) {
		t.Fatalf("phases want pick_sequences, one per phase (%d phases, %d sequences)", len(phases), len(want.PickSequences))
	}
	cur := slices.Clone(initial)
	weight := func(i int) float64 { return cur[i] }
	e := NewEDF(len(cur), weight, seed)
	for ph, phase := range phases {
		next := phase.Weights
		if next == nil {
			next = phase.EffectiveWeights
		} else if phase.EffectiveWeights != nil {
			t.Fatalf("phase %d: give weights or effective_weights, not both", ph)
		}
		if next != nil {
			if len(next) != len(cur) {
				t.Fatalf("phase %d: %d weights for %d hosts", ph, len(next), len(cur))
			}
			copy(cur, next)
		}
		var seq []int
		for range phase.Picks {
			seq = append(seq, e.Pick(weight))
		}
		if !slices.Equal(seq, want.PickSequences[ph]) {
			t.Errorf("phase %d (weights %v): pick sequence %v, want %v", ph, cur, seq, want.PickSequences[ph])
		}
	}
}

// runRoundRobinPanicVector checks equal-weight round robin over hosts of
// which the first nHealthy are healthy; seed starts the cursor.
func runRoundRobinPanicVector(t *testing.T, nHosts, nHealthy int, seed uint64, threshold float64, want rrVectorExpected) {
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
	if nHealthy < 0 || nHealthy > nHosts {
		t.Fatalf("healthy %d not in [0, hosts %d]", nHealthy, nHosts)
	}
	p := NewPicker(&seqRandom{queue: []uint64{seed}}, nil)
	var seq []int
	for range max(len(want.FirstPicks), nHosts) {
		h := p.Pick(s, nil)
		if h == nil {
			t.Fatalf("pick %d: no host", len(seq))
		}
		seq = append(seq, int(h.ID))
	}
	if want.FirstPicks != nil && !slices.Equal(seq[:len(want.FirstPicks)], want.FirstPicks) {
		t.Errorf("first_picks = %v, want %v", seq[:len(want.FirstPicks)], want.FirstPicks)
	}
	if want.HostSource != "" {
		// One round over the source reaches each of its hosts once.
		var source []int
		switch want.HostSource {
		case "all hosts":
			source = make([]int, nHosts)
		case "healthy hosts":
			source = make([]int, nHealthy)
		default:
			t.Fatalf("host_source %q unknown (want \"all hosts\" or \"healthy hosts\")", want.HostSource)
		}
		for i := range source {
			source[i] = i
		}
		round := slices.Sorted(slices.Values(seq[:len(source)]))
		if !slices.Equal(round, source) {
			t.Errorf("host_source %s: %d picks reached %v, want each of %v once", want.HostSource, len(source), round, source)
		}
	}
	if want.StatPerPick != "" {
		if g, ok := p.Stats().Map()[want.StatPerPick]; !ok || g != uint64(len(seq)) {
			t.Errorf("%s = %d (exists %v) after %d picks, want one per pick", want.StatPerPick, g, ok, len(seq))
		}
	}
	if f := want.FailOnPanic; f != nil {
		c := cfg
		c.ZoneAware.FailTrafficOnPanic = true
		s, _ := NewSnapshot(c, BuildInput{Hosts: mk(nHealthy)}, nil)
		if h := NewPicker(&seqRandom{}, nil).Pick(s, nil); (h != nil) != f.HostReturned {
			t.Errorf("fail_traffic_on_panic: host %v, want host_returned %v", h, f.HostReturned)
		}
	}
	if p0 := want.Panic0NoHealthy; p0 != nil {
		c := cfg
		c.PanicThreshold = 0
		s, _ := NewSnapshot(c, BuildInput{Hosts: mk(0)}, nil)
		pk := NewPicker(&seqRandom{}, nil)
		if h := pk.Pick(s, nil); (h != nil) != p0.HostReturned {
			t.Errorf("panic_threshold_0_no_healthy: host %v, want host_returned %v", h, p0.HostReturned)
		}
		if w := p0.LbHealthyPanic; w != nil && pk.Stats().HealthyPanic.Load() != *w {
			t.Errorf("panic_threshold_0_no_healthy: lb_healthy_panic = %d, want %d", pk.Stats().HealthyPanic.Load(), *w)
		}
	}
}

func runSlowStartVector(t *testing.T, v vector) {
	var in struct {
		Cases []struct {
			// Absent aggression and min_weight_percent take Envoy's
			// defaults, 1.0 and 10 %.
			Aggression       *float64 `json:"aggression"`
			MinWeightPercent *float64 `json:"min_weight_percent"`
			T                float64  `json:"t_s"`
			Window           float64  `json:"window_s"`
		} `json:"cases"`
	}
	var want struct {
		Factors []float64 `json:"factors"`
	}
	decodeVector(t, v, &in, &want)
	if len(in.Cases) == 0 || len(in.Cases) != len(want.Factors) {
		t.Fatalf("%d cases, %d factors", len(in.Cases), len(want.Factors))
	}
	def := DefaultClusterConfig().SlowStart
	for i, c := range in.Cases {
		aggr, minPct := deref(c.Aggression, def.Aggression), deref(c.MinWeightPercent, def.MinWeightPercent)
		got := SlowStartFactor(seconds(c.T), seconds(c.Window), aggr, minPct)
		if !near(got, want.Factors[i], 0.00051) {
			t.Errorf("cases[%d] (t %vs, window %vs, aggression %v, min_weight_percent %v): factor %.4f, want %.4f",
				i, c.T, c.Window, aggr, minPct, got, want.Factors[i])
		}
	}
}

// lrCase is one least_request case: a formula input (weight, active, bias)
// or a host set's active requests, optionally with the pick's LB random
// draws (the priority hash first, then the draws of the selection).
type lrCase struct {
	Active         *uint64  `json:"active"`
	Bias           *float64 `json:"bias"`
	Weight         *float64 `json:"weight"`
	ActiveRequests []uint32 `json:"active_requests"`
	Draws          []uint64 `json:"lb_random_draws"`
}

func runLeastRequestVector(t *testing.T, v vector) {
	var in struct {
		Cases []lrCase `json:"cases"`
		Bias  *float64 `json:"active_request_bias"`
		// SelectionMethod is N_CHOICES or FULL_SCAN. Absent, a case with
		// draws is N_CHOICES (Envoy's default) and one without is
		// FULL_SCAN, the only method whose outcome a vector can state
		// without draws.
		SelectionMethod *string  `json:"selection_method"`
		ChoiceCount     *uint32  `json:"choice_count"`
		Weights         []uint32 `json:"weights"`
		Phases          []struct {
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
	bias := deref(in.Bias, DefaultClusterConfig().LeastRequest.ActiveRequestBias)
	checked := false
	if want.EffectiveWeights != nil {
		checked = true
		if len(want.EffectiveWeights) != len(in.Cases) {
			t.Fatalf("%d effective_weights for %d cases", len(want.EffectiveWeights), len(in.Cases))
		}
		for i, c := range in.Cases {
			got := LeastRequestWeight(deref(c.Weight, 1), deref(c.Active, 0), deref(c.Bias, bias))
			if !near(got, want.EffectiveWeights[i], 0.00051) {
				t.Errorf("cases[%d]: effective weight %.4f, want %.4f", i, got, want.EffectiveWeights[i])
			}
		}
	}
	if want.Results != nil {
		checked = true
		if len(want.Results) != len(in.Cases) {
			t.Fatalf("%d results for %d cases", len(want.Results), len(in.Cases))
		}
		for i, c := range in.Cases {
			runLeastRequestCase(t, i, c, in.SelectionMethod, in.ChoiceCount, want.Results[i].Chosen, want.Results[i].Uniformly,
				want.Results[i].EachFraction, want.Results[i].Tolerance)
		}
	}
	if want.PickSequences != nil {
		checked = true
		if len(want.PickSequences) != len(in.Phases) {
			t.Fatalf("%d pick_sequences for %d phases", len(want.PickSequences), len(in.Phases))
		}
		hosts := make([]*Host, len(in.Weights))
		for j, w := range in.Weights {
			hosts[j] = &Host{ID: HostID(j), Address: fmt.Sprintf("10.0.0.%d:80", j), Weight: w}
		}
		cfg := DefaultClusterConfig()
		cfg.Policy = PolicyLeastRequest
		cfg.LeastRequest.ActiveRequestBias = bias
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
			if !slices.Equal(seq, want.PickSequences[ph]) {
				t.Errorf("phase %d: pick sequence %v, want %v", ph, seq, want.PickSequences[ph])
			}
		}
	}
	if !checked {
		t.Fatal("vector has no expected field this runner knows")
	}
}

// runLeastRequestCase picks among equal-weight hosts with c's active
// requests: once with c's draws, when it gives them, where the chosen host
// is exact; otherwise 10^5 times, where chosen means always and
// chosen_uniformly_among means evenly within tolerance.
func runLeastRequestCase(t *testing.T, i int, c lrCase, method *string, choices *uint32, chosen *int, uniformly []int, each, tol float64) {
	t.Helper()
	if len(c.ActiveRequests) == 0 {
		t.Fatalf("cases[%d]: active_requests missing", i)
	}
	hosts := make([]*Host, len(c.ActiveRequests))
	for j := range hosts {
		hosts[j] = &Host{ID: HostID(j), Address: fmt.Sprintf("10.0.0.%d:80", j), Weight: 1}
	}
	cfg := DefaultClusterConfig()
	cfg.Policy = PolicyLeastRequest
	switch m := deref(method, ""); {
	case m == "FULL_SCAN" || (m == "" && c.Draws == nil):
		cfg.LeastRequest.FullScan = true
	case m == "N_CHOICES" || m == "":
	default:
		t.Fatalf("selection_method %q unknown (want N_CHOICES or FULL_SCAN)", m)
	}
	if choices != nil {
		cfg.LeastRequest.ChoiceCount = *choices
	}
	s, err := NewSnapshot(cfg, BuildInput{Hosts: hosts}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rnd Random = newPCG(uint64(i))
	dq := &drawQueue{t: t, what: fmt.Sprintf("cases[%d]", i), draws: append([]uint64{0}, c.Draws...)}
	if c.Draws != nil {
		rnd = dq // the picker's round-robin seed (0) first
	}
	p := NewPicker(rnd, nil)
	for j, a := range c.ActiveRequests {
		for range a {
			p.RequestStarted(hosts[j])
		}
	}
	if c.Draws != nil {
		if uniformly != nil || chosen == nil {
			t.Fatalf("cases[%d]: a case with lb_random_draws wants an exact chosen host", i)
		}
		h := p.Pick(s, nil)
		if h == nil || int(h.ID) != *chosen {
			t.Errorf("cases[%d] (active %v, draws %v): chosen %v, want host %d", i, c.ActiveRequests, c.Draws, h, *chosen)
		}
		if n := dq.unused(); n > 0 {
			t.Errorf("cases[%d]: %d of the lb_random_draws %v were not drawn", i, n, c.Draws)
		}
		return
	}
	const n = 100000
	counts := make([]float64, len(hosts))
	for range n {
		counts[p.Pick(s, nil).ID]++
	}
	if chosen != nil && counts[*chosen] != n {
		t.Errorf("cases[%d]: host %d chosen %v of %d picks, want always (counts %v)", i, *chosen, counts[*chosen], n, counts)
	}
	var among float64
	for _, j := range uniformly {
		among += counts[j]
		if got := counts[j] / n; !near(got, each, max(tol, 0.005)) {
			t.Errorf("cases[%d]: host %d fraction %.4f, want %.4f ± %.3f", i, j, got, each, tol)
		}
	}
	if uniformly != nil && among != n {
		t.Errorf("cases[%d]: %v of %d picks outside %v", i, n-among, n, uniformly)
	}
	if chosen == nil && uniformly == nil {
		t.Fatalf("cases[%d]: result has neither chosen nor chosen_uniformly_among", i)
	}
}
