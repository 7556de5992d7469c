package lb

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestMurmurHash2 pins murmurHash2 to libstdc++. The wants were produced with
// g++ 12.2.0 (Debian 12.2.0-14, x86-64) by printing
// std::_Hash_bytes(s, strlen(s), 0xc70f6907) for each s, which equalled
// std::hash<std::string>{}(s) for every input. Lengths 0..17 cover every tail
// length with zero, one and two whole words; the last cases put bytes >= 0x80
// in the head and in the tail (libstdc++ reads them unsigned).
func TestMurmurHash2(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
	}{
		{"", 6142509188972423790},
		{"a", 4993892634952068459},
		{"ab", 5498234120169091963},
		{"abc", 3663726644998027833},
		{"abcd", 16030370620903852840},
		{"abcde", 811036730794841393},
		{"abcdef", 2505003294258116183},
		{"abcdefg", 16063891478991045295},
		{"abcdefgh", 8664279048047335611},
		{"abcdefghi", 13036955925923793583},
		{"abcdefghij", 18042067762304121004},
		{"abcdefghijk", 3672398144843267301},
		{"abcdefghijkl", 1644275292992619976},
		{"abcdefghijklm", 12344169945577616208},
		{"abcdefghijklmn", 227984298387337396},
		{"abcdefghijklmno", 14639152421998547408},
		{"abcdefghijklmnop", 9002761040096737846},
		{"abcdefghijklmnopq", 16399385603263873375},
		{"127.0.0.1:90_0", 5656417760668758976},
		{"127.0.0.1:90_1", 7593076544525390372},
		{"127.0.0.1:95_11", 4013201219142856593},
		{"hello world", 5577293430985752569},
		{"\xff\x80\x01\xfe high bytes", 10100708182061660626},
		{"abcdefgh\xff\xfe\x80", 2862370519666638039},
		{"\x80", 1380401044529781250},
	}
	for _, tc := range tests {
		if got := murmurHash2([]byte(tc.in), murmurSeed); got != tc.want {
			t.Errorf("murmurHash2(%q): got %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestRingMurmur2 checks a whole MURMUR_HASH_2 ring. The want is the sorted
// list of std::hash<std::string>{}("127.0.0.1:9<h>_<j>") for h in 0..5 and
// j in 0..1, printed by a g++ 12.2.0 program (libstdc++, x86-64).
func TestRingMurmur2(t *testing.T) {
	want := []RingEntry{
		{638856625572010988, 3}, {5413191615583542422, 2}, {5656417760668758976, 0},
		{6651420464618931386, 1}, {6953129654562287644, 4}, {7593076544525390372, 0},
		{7599313976242176092, 2}, {11970690789659040136, 5}, {14984711491620340756, 3},
		{15630895813300259860, 1}, {16159184795512634688, 5}, {17847371850246043524, 4},
	}
	r, err := BuildRing(testKeys(6, "127.0.0.1:9%d"), ones(6), RingConfig{MinimumRingSize: 12, Hash: HashMurmur2})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Entries(); !slices.Equal(got, want) {
		t.Errorf("ring:\n got %v\nwant %v", got, want)
	}
}

func testKeys(n int, format string) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf(format, i)
	}
	return keys
}

func ones(n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

// hostCounts counts ring entries per host.
func hostCounts(r *Ring, n int) []int {
	c := make([]int, n)
	for _, e := range r.Entries() {
		c[e.Host]++
	}
	return c
}

func TestRingEntryCounts(t *testing.T) {
	tests := []struct {
		name       string
		weights    []float64
		cfg        RingConfig
		size       int   // Size(), Envoy's gauge
		counts     []int // entries per host
		minH, maxH int
	}{
		// The lightest host gets ceil(w_min*1024) entries, the rest in proportion.
		{"defaults equal", ones(3), RingConfig{}, 1026, []int{342, 342, 342}, 342, 342},
		{"1:2:3:4", []float64{1, 2, 3, 4}, RingConfig{}, 1030, []int{103, 206, 309, 412}, 103, 412},
		// Hosts beyond the minimum ring size get one entry each.
		{"many hosts", ones(2000), RingConfig{}, 2000, slices.Repeat([]int{1}, 2000), 1, 1},
		// The maximum caps the scale; fractional shares carry to the next host.
		{"capped", []float64{1, 1000}, RingConfig{MinimumRingSize: 100, MaximumRingSize: 100}, 100, []int{1, 99}, 1, 99},
		{"capped 1.5 each", ones(4), RingConfig{MinimumRingSize: 6, MaximumRingSize: 6}, 6, []int{2, 1, 2, 1}, 1, 2},
		// Rounding in the running sum makes 249 entries where Envoy's gauge
		// reports ceil(scale) = 248 (counts from a float64 Python model).
		{"gauge differs", []float64{95, 85, 73, 5, 48, 54, 52, 37, 85, 97, 86, 3, 12, 12}, RingConfig{MinimumRingSize: 40},
			248, []int{32, 28, 25, 1, 16, 18, 18, 12, 29, 32, 29, 1, 4, 4}, 1, 32},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := BuildRing(testKeys(len(tc.weights), "10.0.0.%d:80"), tc.weights, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Size() != tc.size {
				t.Errorf("Size: got %d, want %d", r.Size(), tc.size)
			}
			if got := hostCounts(r, len(tc.weights)); !slices.Equal(got, tc.counts) {
				t.Errorf("entries per host: got %v, want %v", got, tc.counts)
			}
			if r.MinHashesPerHost() != tc.minH || r.MaxHashesPerHost() != tc.maxH {
				t.Errorf("min/max hashes per host: got %d/%d, want %d/%d", r.MinHashesPerHost(), r.MaxHashesPerHost(), tc.minH, tc.maxH)
			}
			if !slices.IsSortedFunc(r.Entries(), func(a, b RingEntry) int { return cmp.Compare(a.Hash, b.Hash) }) {
				t.Errorf("entries not sorted by hash")
			}
		})
	}
}

// TestRingWeightShare checks that the hash space each host owns (the arcs
// ending at its entries) follows its weight within 10%.
func TestRingWeightShare(t *testing.T) {
	weights := []float64{1, 2, 3, 4, 5, 1, 1, 8}
	var total float64
	for _, w := range weights {
		total += w
	}
	r, err := BuildRing(testKeys(len(weights), "host-%d"), weights, RingConfig{MinimumRingSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	share := make([]float64, len(weights))
	e := r.Entries()
	for i, p := range e {
		prev := e[(i+len(e)-1)%len(e)].Hash
		share[p.Host] += float64(p.Hash-prev) / math.Pow(2, 64) // wraps correctly for i == 0
	}
	for i, w := range weights {
		if want := w / total; math.Abs(share[i]-want) > 0.1*want {
			t.Errorf("host %d: owns %.4f of the hash space, want %.4f ±10%%", i, share[i], want)
		}
	}
}

// TestRingPick compares Pick with a linear scan for the first entry with
// hash >= h (wrapping), at entry hashes, their neighbours and the extremes.
func TestRingPick(t *testing.T) {
	r, err := BuildRing(testKeys(5, "h%d"), []float64{1, 2, 1, 3, 1}, RingConfig{MinimumRingSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	e := r.Entries()
	want := func(h uint64, attempt int) int {
		i := slices.IndexFunc(e, func(p RingEntry) bool { return p.Hash >= h })
		if i < 0 {
			i = 0
		}
		return e[(i+attempt)%len(e)].Host
	}
	hashes := []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1}
	for _, p := range e {
		hashes = append(hashes, p.Hash-1, p.Hash, p.Hash+1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		hashes = append(hashes, rng.Uint64())
	}
	for _, h := range hashes {
		for _, attempt := range []int{0, 1, 2, len(e), len(e) + 3} {
			if got, w := r.Pick(h, attempt), want(h, attempt); got != w {
				t.Errorf("Pick(%d, %d): got %d, want %d", h, attempt, got, w)
			}
		}
	}
	if got, w := r.Pick(12345, -1), r.Pick(12345, 0); got != w {
		t.Errorf("Pick with attempt -1: got %d, want attempt 0's %d", got, w)
	}
}

// TestRingRetryMovesHost checks that a retry usually lands on another host:
// with 10 equal hosts the next entry belongs to a different host ~90% of
// the time.
func TestRingRetryMovesHost(t *testing.T) {
	r, err := BuildRing(testKeys(10, "10.1.0.%d:443"), ones(10), RingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 10000
	moved := 0
	for range n {
		h := rng.Uint64()
		if r.Pick(h, 1) != r.Pick(h, 0) {
			moved++
		}
	}
	if moved < n*8/10 {
		t.Errorf("attempt 1 changed host for %d of %d hashes, want >= 80%%", moved, n)
	}
}

func TestRingErrors(t *testing.T) {
	keys := testKeys(4, "k%d")
	tests := []struct {
		name    string
		keys    []string
		weights []float64
		cfg     RingConfig
		want    string
	}{
		{"lengths", keys, ones(3), RingConfig{}, "lb: ring hash: 4 keys but 3 weights"},
		{"zero weight", keys, []float64{1, 1, 1, 0}, RingConfig{}, "lb: ring hash: weight[3] = 0 must be > 0"},
		{"negative weight", keys, []float64{-1, 1, 1, 1}, RingConfig{}, "weight[0] = -1 must be > 0"},
		{"NaN weight", keys, []float64{1, math.NaN(), 1, 1}, RingConfig{}, "weight[1] = NaN"},
		{"Inf weight", keys, []float64{1, 1, math.Inf(1), 1}, RingConfig{}, "weight[2] = +Inf"},
		{"sum overflows", keys[:2], []float64{math.MaxFloat64, math.MaxFloat64}, RingConfig{}, "weights sum to +Inf"},
		{"negligible weight", keys[:2], []float64{1e300, 1e-300}, RingConfig{}, "weight[1] = 1e-300 is negligible"},
		{"min > max", keys, ones(4), RingConfig{MinimumRingSize: 2048, MaximumRingSize: 1024}, "minimum ring size 2048 > maximum ring size 1024"},
		{"min > default max", keys, ones(4), RingConfig{MinimumRingSize: 1 << 24}, "minimum ring size 16777216 exceeds the limit 8388608"},
		{"max too big", keys, ones(4), RingConfig{MaximumRingSize: 1 << 24}, "maximum ring size 16777216 exceeds the limit"},
		{"max below default min", keys, ones(4), RingConfig{MaximumRingSize: 100}, "minimum ring size 1024 > maximum ring size 100"},
		{"hash function", keys, ones(4), RingConfig{Hash: 7}, "unknown hash function 7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := BuildRing(tc.keys, tc.weights, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("BuildRing error: got %v, want one containing %q", err, tc.want)
			}
			if r != nil {
				t.Errorf("BuildRing returned a ring with the error")
			}
		})
	}
}

func TestRingEmpty(t *testing.T) {
	for _, r := range []*Ring{nil, mustRing(t, nil, nil), mustRing(t, []string{}, []float64{})} {
		if got := r.Pick(42, 0); got != -1 {
			t.Errorf("Pick on empty ring: got %d, want -1", got)
		}
		if r == nil {
			continue
		}
		if r.Size() != 0 || len(r.Entries()) != 0 || r.MinHashesPerHost() != 0 || r.MaxHashesPerHost() != 0 {
			t.Errorf("empty ring: size %d, %d entries, min/max %d/%d; want all 0",
				r.Size(), len(r.Entries()), r.MinHashesPerHost(), r.MaxHashesPerHost())
		}
	}
}

func mustRing(t testing.TB, keys []string, weights []float64) *Ring {
	t.Helper()
	r, err := BuildRing(keys, weights, RingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRingNormalizedWeights checks that weights already summing to 1 are
// used as given, and that other weights are divided by their sum.
func TestRingNormalizedWeights(t *testing.T) {
	for _, in := range [][]float64{{0.1, 0.2, 0.7}, {0.25, 0.25, 0.5}, {1.0 / 3, 1.0 / 3, 1.0 / 3}} {
		got, err := normalizeWeights("test", make([]string, len(in)), in)
		if err != nil || !slices.Equal(got, in) {
			t.Errorf("normalizeWeights(%v): got %v, %v; want the input unchanged", in, got, err)
		}
	}
	got, err := normalizeWeights("test", make([]string, 3), []float64{1, 1, 2})
	if want := []float64{0.25, 0.25, 0.5}; err != nil || !slices.Equal(got, want) {
		t.Errorf("normalizeWeights(1, 1, 2): got %v, %v; want %v", got, err, want)
	}
}

func TestRingPickAllocs(t *testing.T) {
	r := mustRing(t, testKeys(100, "10.0.%d.1:80"), ones(100))
	if n := testing.AllocsPerRun(100, func() { r.Pick(123456789, 1) }); n != 0 {
		t.Errorf("Pick allocates %v times, want 0", n)
	}
}

func BenchmarkRingBuild10000(b *testing.B) {
	keys, weights := testKeys(10000, "10.%d.0.1:8080"), ones(10000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildRing(keys, weights, RingConfig{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRingPick(b *testing.B) {
	r := mustRing(b, testKeys(10000, "10.%d.0.1:8080"), ones(10000))
	rng := rand.New(rand.NewPCG(5, 6))
	hashes := make([]uint64, 1024)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Pick(hashes[i&1023], 0)
		i++
	}
}

// The radix sort behind large rings must equal a stable comparison sort,
// duplicates in input order included.
func TestRadixSortByHashIsStable(t *testing.T) {
	rnd := newPCG(11)
	for _, n := range []int{0, 1, 255, 256, 1000, 70000} {
		pts := make([]RingEntry, n)
		for i := range pts {
			h := rnd.Uint64()
			if i%7 == 3 && i > 0 {
				h = pts[i-1].Hash // duplicate hashes keep host order
			}
			pts[i] = RingEntry{Hash: h, Host: i}
		}
		want := slices.Clone(pts)
		slices.SortStableFunc(want, func(a, b RingEntry) int { return cmp.Compare(a.Hash, b.Hash) })
		radixSortByHash(pts)
		if !slices.Equal(pts, want) {
			t.Fatalf("n=%d: radix sort differs from a stable sort", n)
		}
	}
}
