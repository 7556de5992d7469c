package lb

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// DefaultMaglevTableSize is Envoy's default Maglev table size; it is prime,
// as every table size must be for the permutations to cover the table.
const DefaultMaglevTableSize = 65537

// maxMaglevTableSize is the largest table size Envoy's config accepts.
const maxMaglevTableSize = 5000011

// maglevLookup is an immutable Maglev lookup table built by buildMaglev; safe for
// concurrent Picks.
type maglevLookup struct {
	table      []uint32 // table[i] is the input index of entry i's host
	minEntries int
	maxEntries int
}

// maglevEntry is one host while the table is built.
type maglevEntry struct {
	host   uint32  // input index
	slot   uint64  // next permutation slot: (offset + skip*next) % M
	skip   uint64  // permutation step, in [1, M-1]
	weight float64 // normalized weight
	target float64 // weight "spent" so far, in steps of the largest weight
	count  int     // table entries placed
}

// buildMaglev builds Envoy's weighted Maglev table. keys[i] is host i's hash
// key and weights[i] > 0 its relative weight (normalized here, as in
// buildRing). tableSize 0 means DefaultMaglevTableSize; it must be prime and
// at most 5000011. No keys gives an empty table.
func buildMaglev(keys []string, weights []float64, tableSize uint64) (*maglevLookup, error) {
	if tableSize == 0 {
		tableSize = DefaultMaglevTableSize
	}
	if tableSize > maxMaglevTableSize {
		return nil, fmt.Errorf("lb: maglev: table size %d exceeds the limit %d", tableSize, maxMaglevTableSize)
	}
	if !maglevPrime(tableSize) {
		return nil, fmt.Errorf("lb: maglev: table size %d is not prime", tableSize)
	}
	w, err := normalizeWeights("maglev", keys, weights)
	if err != nil {
		return nil, err
	}
	if len(w) == 0 {
		return &maglevLookup{}, nil
	}
	size := tableSize

	// Envoy fills the table in key order so the result does not depend on
	// the order hosts arrive in; equal keys keep input order.
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(keys[a], keys[b]), cmp.Compare(a, b)) })
	entries := make([]maglevEntry, len(order))
	maxW := slices.Max(w)
	for i, h := range order {
		entries[i] = maglevEntry{
			host:   uint32(h),
			slot:   xxhash.Sum64String(keys[h]) % size,
			skip:   maglevSkip(keys[h], size),
			weight: w[h],
		}
	}

	m := &maglevLookup{table: make([]uint32, size)}
	// Probing tests an occupancy bitmap (8 KiB for 65537 slots, in L1)
	// rather than the table itself; the fill is dominated by those probes.
	used := make([]uint64, (size+63)/64)
	place := func(e *maglevEntry) {
		for used[e.slot/64]&(1<<(e.slot%64)) != 0 {
			e.slot += e.skip
			if e.slot >= size {
				e.slot -= size
			}
		}
		used[e.slot/64] |= 1 << (e.slot % 64)
		m.table[e.slot] = e.host
		e.count++
	}
	// Envoy sweeps all entries once per iteration, letting an entry place one
	// slot when iteration*weight has caught up with its target. Visiting
	// entries in (due iteration, key order) from a min-heap gives the same
	// placement order without the O(hosts) sweep per iteration that makes
	// skewed weights slow. A heap item is due<<32 | entry index. The heaviest
	// entry places every iteration, so the table is full by iteration M and
	// later due iterations are dropped.
	if slices.Min(w) == maxW {
		// Equal weights: every entry places once per iteration, in key
		// order, so the sweep is a plain cycle.
		for filled, i := uint64(0), 0; filled < size; filled, i = filled+1, (i+1)%len(entries) {
			place(&entries[i])
		}
		m.setEntryCounts(entries)
		return m, nil
	}
	heap := make([]uint64, len(entries)) // all due at 1: key order is a valid heap
	for i := range heap {
		heap[i] = 1<<32 | uint64(i)
	}
	for filled := uint64(0); filled < size && len(heap) > 0; filled++ {
		e := &entries[uint32(heap[0])]
		place(e)
		e.target += maxW
		if due := nextDue(e.target, e.weight, heap[0]>>32); due <= size {
			heap[0] = due<<32 | heap[0]&math.MaxUint32
		} else {
			heap[0] = heap[len(heap)-1]
			heap = heap[:len(heap)-1]
		}
		siftDown(heap)
	}

	m.setEntryCounts(entries)
	return m, nil
}

func (m *maglevLookup) setEntryCounts(entries []maglevEntry) {
	m.minEntries, m.maxEntries = math.MaxInt, 0
	for _, e := range entries {
		m.minEntries = min(m.minEntries, e.count)
		m.maxEntries = max(m.maxEntries, e.count)
	}
}

// maglevSkip is the permutation step of key for table size m: xxHash64 seed 1,
// mapped into [1, m-1] so every step is coprime with the prime m.
func maglevSkip(key string, m uint64) uint64 {
	d := xxhash.NewWithSeed(1)
	d.WriteString(key)
	return d.Sum64()%(m-1) + 1
}

// nextDue is the first iteration after it in which Envoy's eligibility test
// iteration*weight >= target passes. The division estimate is corrected
// against the exact float64 test, which is monotonic in the iteration; it
// returns math.MaxUint64 when that iteration is beyond any table size.
func nextDue(target, weight float64, it uint64) uint64 {
	q := math.Ceil(target / weight)
	if !(q <= maxMaglevTableSize) { // also catches +Inf
		return math.MaxUint64
	}
	x := max(uint64(q), it+1)
	for x > it+1 && float64(x-1)*weight >= target {
		x--
	}
	for float64(x)*weight < target {
		x++
	}
	return x
}

// siftDown restores the min-heap property of h after h[0] changed.
func siftDown(h []uint64) {
	i := 0
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1] < h[c] {
			c++
		}
		if h[i] <= h[c] {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// maglevPrime reports whether n is prime, by trial division (n <= 5000011).
func maglevPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// Pick returns table[hash % M]. On retry attempt k > 0 the hash is first
// XORed with 2^64-k (Envoy's ~0 - k + 1), flipping most bits so retries
// spread over other entries. It returns -1 for an empty or nil table;
// negative attempts count as 0.
func (m *maglevLookup) Pick(hash uint64, attempt int) int {
	if m == nil || len(m.table) == 0 {
		return -1
	}
	if attempt > 0 {
		hash ^= -uint64(attempt)
	}
	return int(m.table[hash%uint64(len(m.table))])
}

// TableSize is the number of table entries: the prime M, or 0 when the table
// has no hosts.
func (m *maglevLookup) TableSize() int { return len(m.table) }

// HostAt returns the input index of the host at table entry i, or -1 when i
// is out of range.
func (m *maglevLookup) HostAt(i int) int {
	if i < 0 || i >= len(m.table) {
		return -1
	}
	return int(m.table[i])
}

// MinEntriesPerHost is the fewest entries any host got (gauge
// maglev_lb.min_entries_per_host); 0 when hosts outnumber the entries or the
// table is empty.
func (m *maglevLookup) MinEntriesPerHost() int { return m.minEntries }

// MaxEntriesPerHost is the most entries any host got (gauge
// maglev_lb.max_entries_per_host).
func (m *maglevLookup) MaxEntriesPerHost() int { return m.maxEntries }
