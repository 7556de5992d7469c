package lb

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// refMaglev is a direct transcription of the spec's pseudocode (one sweep over
// all entries per iteration, permutation recomputed from next), used to check
// BuildMaglev's heap-driven fill.
func refMaglev(t *testing.T, keys []string, weights []float64, m uint64) []int {
	t.Helper()
	w, err := normalizeWeights("ref", keys, weights)
	if err != nil {
		t.Fatal(err)
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })
	maxW := slices.Max(w)
	offset, skip, next := make([]uint64, len(keys)), make([]uint64, len(keys)), make([]uint64, len(keys))
	target := make([]float64, len(keys))
	for i, h := range order {
		offset[i] = xxhash.Sum64String(keys[h]) % m
		d := xxhash.NewWithSeed(1)
		d.WriteString(keys[h])
		skip[i] = d.Sum64()%(m-1) + 1
	}
	table := slices.Repeat([]int{-1}, int(m))
	filled := uint64(0)
	for it := uint32(1); filled < m; it++ {
		for i := 0; i < len(order) && filled < m; i++ {
			if float64(it)*w[order[i]] < target[i] {
				continue
			}
			target[i] += maxW
			c := (offset[i] + skip[i]*next[i]) % m
			for table[c] >= 0 {
				next[i]++
				c = (offset[i] + skip[i]*next[i]) % m
			}
			table[c] = order[i]
			next[i]++
			filled++
		}
	}
	return table
}

func maglevTable(m *Maglev) []int {
	out := make([]int, m.TableSize())
	for i := range out {
		out[i] = m.HostAt(i)
	}
	return out
}

func mustMaglev(t testing.TB, keys []string, weights []float64, size uint64) *Maglev {
	t.Helper()
	m, err := BuildMaglev(keys, weights, size)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMaglevMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	randomWeights := func(n int, spread float64) []float64 {
		w := make([]float64, n)
		for i := range w {
			w[i] = math.Floor(1 + rng.Float64()*spread)
		}
		return w
	}
	shuffled := testKeys(40, "10.0.0.%d:80")
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	tests := []struct {
		name    string
		keys    []string
		weights []float64
		size    uint64
	}{
		{"equal small", testKeys(6, "127.0.0.1:9%d"), ones(6), 7},
		{"equal default", testKeys(100, "host-%d"), ones(100), 0},
		{"weighted", testKeys(50, "10.0.%d.1:443"), randomWeights(50, 10), 65537},
		{"skewed", testKeys(50, "10.0.%d.1:443"), append(ones(49), 10000), 65537},
		{"fractional", testKeys(30, "svc-%d"), []float64{0.5, 1.0 / 3, 0.25, 0.2, 1.0 / 7, 0.1, 3, 2.5, 1e-3, 7, 0.5, 1.0 / 3, 0.25, 0.2, 1.0 / 7, 0.1, 3, 2.5, 1e-3, 7, 0.5, 1.0 / 3, 0.25, 0.2, 1.0 / 7, 0.1, 3, 2.5, 1e-3, 7}, 10007},
		{"unsorted input", shuffled, randomWeights(40, 5), 1009},
		{"duplicate keys", []string{"b", "a", "b", "c", "a"}, []float64{1, 2, 3, 4, 5}, 101},
		{"more hosts than slots", testKeys(20, "x%d"), ones(20), 13},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mustMaglev(t, tc.keys, tc.weights, tc.size)
			size := cmp.Or(tc.size, DefaultMaglevTableSize)
			want := refMaglev(t, tc.keys, tc.weights, size)
			got := maglevTable(m)
			if len(got) != len(want) {
				t.Fatalf("table size: got %d, want %d", len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("entry %d: got host %d, reference has %d", i, got[i], want[i])
					break
				}
			}
			counts := make([]int, len(tc.keys))
			for _, h := range want {
				counts[h]++
			}
			if m.MinEntriesPerHost() != slices.Min(counts) || m.MaxEntriesPerHost() != slices.Max(counts) {
				t.Errorf("min/max entries: got %d/%d, want %d/%d", m.MinEntriesPerHost(), m.MaxEntriesPerHost(), slices.Min(counts), slices.Max(counts))
			}
		})
	}
}

func TestMaglevEntryCounts(t *testing.T) {
	tests := []struct {
		name    string
		weights []float64
		size    uint64
		counts  []int
	}{
		{"1:2", []float64{1, 2}, 65537, []int{21846, 43691}},
		{"2:1", []float64{2, 1}, 65537, []int{43691, 21846}},
		{"equal", ones(3), 7, []int{3, 2, 2}},
		{"more hosts than slots", ones(9), 7, []int{1, 1, 1, 1, 1, 1, 1, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mustMaglev(t, testKeys(len(tc.weights), "10.0.0.%d:80"), tc.weights, tc.size)
			counts := make([]int, len(tc.weights))
			for _, h := range maglevTable(m) {
				counts[h]++
			}
			if !slices.Equal(counts, tc.counts) {
				t.Errorf("entries per host: got %v, want %v", counts, tc.counts)
			}
			if m.MinEntriesPerHost() != slices.Min(tc.counts) || m.MaxEntriesPerHost() != slices.Max(tc.counts) {
				t.Errorf("min/max entries: got %d/%d, want %d/%d", m.MinEntriesPerHost(), m.MaxEntriesPerHost(), slices.Min(tc.counts), slices.Max(tc.counts))
			}
		})
	}
}

// TestMaglevInputOrder checks that the table depends on the keys, not on the
// order hosts are passed in: indices follow the caller's order.
func TestMaglevInputOrder(t *testing.T) {
	keys := testKeys(30, "10.2.0.%d:80")
	weights := make([]float64, len(keys))
	for i := range weights {
		weights[i] = float64(i%4 + 1)
	}
	a := mustMaglev(t, keys, weights, 1009)
	perm := rand.New(rand.NewPCG(9, 10)).Perm(len(keys)) // position j holds host perm[j]
	pk, pw := make([]string, len(keys)), make([]float64, len(keys))
	for j, h := range perm {
		pk[j], pw[j] = keys[h], weights[h]
	}
	b := mustMaglev(t, pk, pw, 1009)
	for i := range a.TableSize() {
		if got, want := perm[b.HostAt(i)], a.HostAt(i); got != want {
			t.Fatalf("entry %d: permuted input gives host %d, want %d", i, got, want)
		}
	}
}

func TestMaglevPick(t *testing.T) {
	m := mustMaglev(t, testKeys(10, "10.3.0.%d:80"), ones(10), 0)
	rng := rand.New(rand.NewPCG(11, 12))
	const n = 10000
	moved := 0
	for range n {
		h := rng.Uint64()
		if got, want := m.Pick(h, 0), m.HostAt(int(h%DefaultMaglevTableSize)); got != want {
			t.Fatalf("Pick(%d, 0): got %d, want table[h %% M] = %d", h, got, want)
		}
		for _, k := range []int{1, 2, 5} {
			mutated := h ^ (math.MaxUint64 - uint64(k) + 1)
			if got, want := m.Pick(h, k), m.HostAt(int(mutated%DefaultMaglevTableSize)); got != want {
				t.Fatalf("Pick(%d, %d): got %d, want %d", h, k, got, want)
			}
		}
		if m.Pick(h, 1) != m.Pick(h, 0) {
			moved++
		}
	}
	if moved < n*8/10 {
		t.Errorf("attempt 1 changed host for %d of %d hashes, want >= 80%%", moved, n)
	}
	if got, want := m.Pick(77, -3), m.Pick(77, 0); got != want {
		t.Errorf("Pick with attempt -3: got %d, want attempt 0's %d", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { m.Pick(987654321, 1) }); n != 0 {
		t.Errorf("Pick allocates %v times, want 0", n)
	}
}

func TestMaglevErrors(t *testing.T) {
	keys := testKeys(4, "k%d")
	tests := []struct {
		name    string
		keys    []string
		weights []float64
		size    uint64
		want    string
	}{
		{"not prime", keys, ones(4), 65536, "lb: maglev: table size 65536 is not prime"},
		{"one", keys, ones(4), 1, "table size 1 is not prime"},
		{"square", keys, ones(4), 49, "table size 49 is not prime"},
		{"too big", keys, ones(4), 10000019, "lb: maglev: table size 10000019 exceeds the limit 5000011"},
		{"lengths", keys, ones(5), 0, "lb: maglev: 4 keys but 5 weights"},
		{"zero weight", keys, []float64{1, 0, 1, 1}, 0, "lb: maglev: weight[1] = 0 must be > 0"},
		{"NaN weight", keys, []float64{1, 1, 1, math.NaN()}, 0, "weight[3] = NaN"},
		{"non-prime even when empty", nil, nil, 100, "table size 100 is not prime"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := BuildMaglev(tc.keys, tc.weights, tc.size)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("BuildMaglev error: got %v, want one containing %q", err, tc.want)
			}
			if m != nil {
				t.Errorf("BuildMaglev returned a table with the error")
			}
		})
	}
	for _, size := range []uint64{2, 3, 7, 65537, 5000011} {
		if _, err := BuildMaglev(keys, ones(4), size); err != nil {
			t.Errorf("BuildMaglev with prime size %d: %v", size, err)
		}
	}
}

func TestMaglevEmpty(t *testing.T) {
	for _, m := range []*Maglev{nil, mustMaglev(t, nil, nil, 0), mustMaglev(t, []string{}, []float64{}, 7)} {
		if got := m.Pick(42, 1); got != -1 {
			t.Errorf("Pick on empty table: got %d, want -1", got)
		}
		if m == nil {
			continue
		}
		if m.TableSize() != 0 || m.HostAt(0) != -1 || m.MinEntriesPerHost() != 0 || m.MaxEntriesPerHost() != 0 {
			t.Errorf("empty table: size %d, HostAt(0) %d, min/max %d/%d; want 0, -1, 0/0",
				m.TableSize(), m.HostAt(0), m.MinEntriesPerHost(), m.MaxEntriesPerHost())
		}
	}
	m := mustMaglev(t, []string{"a"}, ones(1), 7)
	for _, i := range []int{-1, 7, math.MaxInt} {
		if got := m.HostAt(i); got != -1 {
			t.Errorf("HostAt(%d): got %d, want -1", i, got)
		}
	}
}

func benchmarkMaglevBuild(b *testing.B, n int, weights []float64) {
	keys := testKeys(n, "10.%d.0.1:8080")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildMaglev(keys, weights, DefaultMaglevTableSize); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMaglevBuild1000(b *testing.B)  { benchmarkMaglevBuild(b, 1000, ones(1000)) }
func BenchmarkMaglevBuild10000(b *testing.B) { benchmarkMaglevBuild(b, 10000, ones(10000)) }

// One host 10^6 times heavier: Envoy's per-iteration sweep would visit all
// 10,000 hosts in each of ~65,000 iterations.
func BenchmarkMaglevBuild10000Skewed(b *testing.B) {
	benchmarkMaglevBuild(b, 10000, append(ones(9999), 1e6))
}

func BenchmarkMaglevPick(b *testing.B) {
	m := mustMaglev(b, testKeys(1000, "10.%d.0.1:8080"), ones(1000), 0)
	b.ReportAllocs()
	var h uint64
	for b.Loop() {
		h += 0x9e3779b97f4a7c15
		m.Pick(h, 0)
	}
}
