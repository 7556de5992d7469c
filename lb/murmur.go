package lb

import "encoding/binary"

// murmurSeed is the seed libstdc++ passes to std::_Hash_bytes for
// std::hash<std::string>; Envoy's MURMUR_HASH_2 uses it so rings match hosts
// hashed with std::hash on Linux.
const murmurSeed = 0xc70f6907

// murmurHash2 is libstdc++'s 64-bit std::_Hash_bytes (a MurmurHash64A
// variant): whole 8-byte little-endian words, then the tail bytes folded in
// as one little-endian word, then two shift-mix finalisation steps.
func murmurHash2(b []byte, seed uint64) uint64 {
	const mul = 0xc6a4a7935bd1e995
	shiftMix := func(v uint64) uint64 { return v ^ v>>47 }
	h := seed ^ uint64(len(b))*mul
	for len(b) >= 8 {
		h ^= shiftMix(binary.LittleEndian.Uint64(b)*mul) * mul
		h *= mul
		b = b[8:]
	}
	if len(b) > 0 {
		var tail uint64
		for i := len(b) - 1; i >= 0; i-- {
			tail = tail<<8 | uint64(b[i])
		}
		h ^= tail
		h *= mul
	}
	return shiftMix(shiftMix(h) * mul)
}
