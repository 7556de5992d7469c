package lb

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// HashFunction selects the hash that places ring entries (Envoy
// RingHash.HashFunction). It must match what the other proxies in a mesh use,
// or the same request hash lands on different hosts.
type HashFunction int

const (
	// HashXX is xxHash64 with seed 0, Envoy's default (XX_HASH).
	HashXX HashFunction = iota
	// HashMurmur2 is Envoy's MURMUR_HASH_2: libstdc++'s 64-bit
	// std::_Hash_bytes with seed 0xc70f6907, i.e. std::hash<std::string>.
	HashMurmur2
)

// Envoy's ring size defaults and the 8M limit its config validation enforces.
const (
	defaultMinRingSize = 1024
	defaultMaxRingSize = 8388608
)

// RingConfig holds the ring hash knobs; zero values mean Envoy's defaults
// (minimum 1024, maximum 8388608 entries, HashXX).
type RingConfig struct {
	MinimumRingSize uint64       // entries the ring has at least (before weight rounding)
	MaximumRingSize uint64       // cap on the scale, bounding memory; at most 8388608
	Hash            HashFunction // hash of "<key>_<n>" placing each entry
}

// ringEntry is one point of a ring: the position hash and the index of the
// host (in buildRing's input order) owning it.
type ringEntry struct {
	Hash uint64
	Host int
}

// hashRing is an immutable ketama ring built by buildRing; safe for concurrent
// Picks.
type hashRing struct {
	points []ringEntry // ascending by hash
	// index[k] is the first point whose hash has the top `bits` bits >= k,
	// so a lookup searches one small bucket instead of the whole ring.
	index     []uint32
	bits      uint
	size      int // Envoy's size gauge, ceil(scale)
	minHashes int
	maxHashes int
}

// buildRing builds Envoy's ketama ring. keys[i] is host i's hash key (the
// caller picks metadata hash_key, hostname or "ip:port"); weights[i] > 0 are
// relative weights, normalized here. Weights that already sum to 1 (within
// rounding) are used unchanged, so callers folding in locality shares get
// Envoy's normalized weights bit for bit. No keys gives an empty ring.
func buildRing(keys []string, weights []float64, cfg RingConfig) (*hashRing, error) {
	minSize, maxSize := cfg.MinimumRingSize, cfg.MaximumRingSize
	if minSize == 0 {
		minSize = defaultMinRingSize
	}
	if maxSize == 0 {
		maxSize = defaultMaxRingSize
	}
	switch {
	case minSize > defaultMaxRingSize:
		return nil, fmt.Errorf("lb: ring hash: minimum ring size %d exceeds the limit %d", minSize, defaultMaxRingSize)
	case maxSize > defaultMaxRingSize:
		return nil, fmt.Errorf("lb: ring hash: maximum ring size %d exceeds the limit %d", maxSize, defaultMaxRingSize)
	case minSize > maxSize:
		return nil, fmt.Errorf("lb: ring hash: minimum ring size %d > maximum ring size %d", minSize, maxSize)
	}
	if cfg.Hash != HashXX && cfg.Hash != HashMurmur2 {
		return nil, fmt.Errorf("lb: ring hash: unknown hash function %d", cfg.Hash)
	}
	w, err := normalizeWeights("ring hash", keys, weights)
	if err != nil {
		return nil, err
	}
	if len(w) == 0 {
		return &hashRing{}, nil
	}

	// Scale so the lightest host gets a whole number of entries (at least
	// minSize in total), capped at maxSize.
	minW := slices.Min(w)
	scale := math.Min(math.Ceil(minW*float64(minSize))/minW, float64(maxSize))
	size := int(math.Ceil(scale))
	// Rounding in the running sum below can add one entry beyond size.
	r := &hashRing{points: make([]ringEntry, 0, size+1), size: size, minHashes: math.MaxInt}

	// Running sums across hosts let fractional shares carry over to the next
	// host, exactly as Envoy does.
	var current, target float64
	var buf []byte
	for i, key := range keys {
		buf = append(append(buf[:0], key...), '_')
		prefix := len(buf)
		target += float64(scale * w[i]) // float64() forbids FMA fusion: Envoy rounds twice
		n := 0
		for ; current < target; n++ {
			buf = strconv.AppendUint(buf[:prefix], uint64(n), 10)
			var h uint64
			if cfg.Hash == HashMurmur2 {
				h = murmurHash2(buf, murmurSeed)
			} else {
				h = xxhash.Sum64(buf)
			}
			r.points = append(r.points, ringEntry{h, i})
			current++
		}
		r.minHashes = min(r.minHashes, n)
		r.maxHashes = max(r.maxHashes, n)
	}

	// Equal hashes are ordered by host index, i.e. insertion order (Envoy's
	// std::sort leaves them unspecified): a stable radix sort by hash gives
	// exactly that, faster than a comparison sort on large rings.
	radixSortByHash(r.points)
	r.buildIndex()
	return r, nil
}

// radixSortByHash sorts points by Hash, stably, in four 16-bit passes.
func radixSortByHash(points []ringEntry) {
	if len(points) < 256 {
		slices.SortStableFunc(points, func(a, b ringEntry) int { return cmp.Compare(a.Hash, b.Hash) })
		return
	}
	buf := make([]ringEntry, len(points))
	src, dst := points, buf
	var count [1 << 16]int
	for shift := uint(0); shift < 64; shift += 16 {
		clear(count[:])
		for _, p := range src {
			count[uint16(p.Hash>>shift)]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, p := range src {
			d := uint16(p.Hash >> shift)
			dst[count[d]] = p
			count[d]++
		}
		src, dst = dst, src
	}
	// Four passes end with the data back in points.
}

// buildIndex buckets the ring by the top bits of the hash, about one point
// per bucket.
func (r *hashRing) buildIndex() {
	r.bits = 1
	for r.bits < 24 && 1<<r.bits < len(r.points) {
		r.bits++
	}
	r.index = make([]uint32, 1<<r.bits+1)
	p := 0
	for k := range r.index {
		for p < len(r.points) && r.points[p].Hash>>(64-r.bits) < uint64(k) {
			p++
		}
		r.index[k] = uint32(p)
	}
}

// Pick returns the host owning the first ring entry whose hash is >= hash,
// wrapping to the first entry (ketama lookup). Retry attempt k > 0 moves k
// entries clockwise, which need not be a different host. It returns -1 for
// an empty or nil ring; negative attempts count as 0.
func (r *hashRing) Pick(hash uint64, attempt int) int {
	if r == nil || len(r.points) == 0 {
		return -1
	}
	n := len(r.points)
	// The first point with hash >= hash lies in [lo, hi]: earlier buckets
	// hold smaller hashes, later ones larger.
	k := hash >> (64 - r.bits)
	lo, hi := int(r.index[k]), int(r.index[k+1])
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if r.points[mid].Hash < hash {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == n {
		lo = 0
	}
	if attempt > 0 {
		lo = int((uint64(lo) + uint64(attempt)) % uint64(n))
	}
	return r.points[lo].Host
}

// Size is Envoy's ring_hash_lb.size gauge, ceil(scale). Rounding in the
// running weight sum can make the ring itself one entry longer or shorter
// (len(Entries())), as in Envoy; Pick wraps retries on the real length.
func (r *hashRing) Size() int { return r.size }

// Entries returns a copy of the ring in ascending hash order.
func (r *hashRing) Entries() []ringEntry {
	return slices.Clone(r.points)
}

// MinHashesPerHost is the fewest entries any host got (gauge
// ring_hash_lb.min_hashes_per_host); a low value warns of a skewed
// distribution. It is 0 for an empty ring.
func (r *hashRing) MinHashesPerHost() int { return r.minHashes }

// MaxHashesPerHost is the most entries any host got (gauge
// ring_hash_lb.max_hashes_per_host).
func (r *hashRing) MaxHashesPerHost() int { return r.maxHashes }

// normalizeWeights validates keys/weights for algo and returns weights
// divided by their sum, as Envoy's normalized host weights.
func normalizeWeights(algo string, keys []string, weights []float64) ([]float64, error) {
	if len(keys) != len(weights) {
		return nil, fmt.Errorf("lb: %s: %d keys but %d weights", algo, len(keys), len(weights))
	}
	if len(keys) > math.MaxInt32 {
		return nil, fmt.Errorf("lb: %s: %d hosts exceed the limit %d", algo, len(keys), math.MaxInt32)
	}
	var sum float64
	for i, w := range weights {
		if !(w > 0) || math.IsInf(w, 1) {
			return nil, fmt.Errorf("lb: %s: weight[%d] = %v must be > 0 and finite", algo, i, w)
		}
		sum += w
	}
	if math.IsInf(sum, 1) {
		return nil, fmt.Errorf("lb: %s: weights sum to +Inf", algo)
	}
	if math.Abs(sum-1) <= float64(len(weights))*0x1p-52 {
		sum = 1 // already normalized; dividing would only add rounding
	}
	out := make([]float64, len(weights))
	for i, w := range weights {
		if out[i] = w / sum; out[i] == 0 {
			return nil, fmt.Errorf("lb: %s: weight[%d] = %v is negligible next to the total %v", algo, i, w, sum)
		}
	}
	return out, nil
}
