package lb

import (
	"encoding/json"
	"slices"
	"sort"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func init() {
	vectorRunners["ring_hash"] = runRingHashVector
	vectorRunners["maglev"] = runMaglevVector
}

// hashPick is one expected lookup: the host chosen for hash on attempt.
type hashPick struct {
	Hash      uint64 `json:"hash"`
	Attempt   int    `json:"attempt"`
	HostIndex int    `json:"host_index"`
}

// requireKnownFields fails the vector when raw has a field the runner does
// not understand: an input it would ignore or an expectation it would skip
// must not pass silently.
func requireKnownFields(t *testing.T, v vector, part string, raw json.RawMessage, known ...string) {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatalf("vector %s: decode %s: %v", v.ID, part, err)
	}
	var unknown []string
	for k := range fields {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Fatalf("vector %s: unsupported %s fields %v", v.ID, part, unknown)
	}
}

// vectorWeights returns the vector's weights, all 1 when it gives none.
func vectorWeights(keys []string, weights []float64) []float64 {
	if weights != nil {
		return weights
	}
	w := make([]float64, len(keys))
	for i := range w {
		w[i] = 1
	}
	return w
}

func checkInt(t *testing.T, id, field string, got int, want *int) {
	t.Helper()
	if want != nil && got != *want {
		t.Errorf("vector %s: %s: got %d, want %d", id, field, got, *want)
	}
}

func checkPicks(t *testing.T, id string, picks []hashPick, pick func(uint64, int) int) {
	t.Helper()
	for _, p := range picks {
		if got := pick(p.Hash, p.Attempt); got != p.HostIndex {
			t.Errorf("vector %s: picks: hash %d attempt %d: got host %d, want %d", id, p.Hash, p.Attempt, got, p.HostIndex)
		}
	}
}

func runRingHashVector(t *testing.T, v vector) {
	var in struct {
		HashFunction    string    `json:"hash_function"`
		HashKeys        []string  `json:"hash_keys"`
		Weights         []float64 `json:"weights"`
		MinimumRingSize uint64    `json:"minimum_ring_size"`
		MaximumRingSize uint64    `json:"maximum_ring_size"`
	}
	var exp struct {
		Ring []struct {
			Hash      uint64 `json:"hash"`
			HostIndex int    `json:"host_index"`
		} `json:"ring"`
		Size             *int       `json:"size"`
		MinHashesPerHost *int       `json:"min_hashes_per_host"`
		MaxHashesPerHost *int       `json:"max_hashes_per_host"`
		Picks            []hashPick `json:"picks"`
	}
	requireKnownFields(t, v, "input", v.Input, "hash_function", "hash_keys", "weights", "minimum_ring_size", "maximum_ring_size")
	requireKnownFields(t, v, "expected", v.Expected, "ring", "size", "min_hashes_per_host", "max_hashes_per_host", "picks")
	decodeVector(t, v, &in, &exp)

	cfg := RingConfig{MinimumRingSize: in.MinimumRingSize, MaximumRingSize: in.MaximumRingSize}
	switch in.HashFunction {
	case "", "DEFAULT_HASH", "XX_HASH":
		cfg.Hash = HashXX
	case "MURMUR_HASH_2":
		cfg.Hash = HashMurmur2
	default:
		t.Fatalf("vector %s: unknown hash_function %q", v.ID, in.HashFunction)
	}
	r, err := BuildRing(in.HashKeys, vectorWeights(in.HashKeys, in.Weights), cfg)
	if err != nil {
		t.Fatalf("vector %s: BuildRing: %v", v.ID, err)
	}
	if exp.Ring != nil {
		got := r.Entries()
		if len(got) != len(exp.Ring) {
			t.Errorf("vector %s: ring: got %d entries, want %d", v.ID, len(got), len(exp.Ring))
		}
		for i := range min(len(got), len(exp.Ring)) {
			if want := exp.Ring[i]; got[i].Hash != want.Hash || got[i].Host != want.HostIndex {
				t.Errorf("vector %s: ring[%d]: got {hash %d host %d}, want {hash %d host %d}",
					v.ID, i, got[i].Hash, got[i].Host, want.Hash, want.HostIndex)
			}
		}
	}
	checkInt(t, v.ID, "size", r.Size(), exp.Size)
	checkInt(t, v.ID, "min_hashes_per_host", r.MinHashesPerHost(), exp.MinHashesPerHost)
	checkInt(t, v.ID, "max_hashes_per_host", r.MaxHashesPerHost(), exp.MaxHashesPerHost)
	checkPicks(t, v.ID, exp.Picks, r.Pick)
}

func runMaglevVector(t *testing.T, v vector) {
	var in struct {
		HashKeys  []string  `json:"hash_keys"`
		Weights   []float64 `json:"weights"`
		TableSize uint64    `json:"table_size"`
	}
	var exp struct {
		TableHostIndices  []int    `json:"table_host_indices"`
		Offsets           []uint64 `json:"xxhash64_seed0_offsets"`
		Skips             []uint64 `json:"xxhash64_seed1_skips"`
		MinEntriesPerHost *int     `json:"min_entries_per_host"`
		MaxEntriesPerHost *int     `json:"max_entries_per_host"`
		// EntriesPerHost counts each input key's table entries; it states
		// the fill at sizes (the default 65537) too large to list.
		EntriesPerHost []int      `json:"entries_per_host"`
		Picks          []hashPick `json:"picks"`
	}
	requireKnownFields(t, v, "input", v.Input, "hash_keys", "weights", "table_size")
	requireKnownFields(t, v, "expected", v.Expected, "table_host_indices", "xxhash64_seed0_offsets",
		"xxhash64_seed1_skips", "min_entries_per_host", "max_entries_per_host", "entries_per_host", "picks")
	decodeVector(t, v, &in, &exp)

	m, err := BuildMaglev(in.HashKeys, vectorWeights(in.HashKeys, in.Weights), in.TableSize)
	if err != nil {
		t.Fatalf("vector %s: BuildMaglev: %v", v.ID, err)
	}
	size := uint64(m.TableSize())
	if exp.TableHostIndices != nil {
		if m.TableSize() != len(exp.TableHostIndices) {
			t.Errorf("vector %s: table_host_indices: got %d entries, want %d", v.ID, m.TableSize(), len(exp.TableHostIndices))
		}
		for i := range min(m.TableSize(), len(exp.TableHostIndices)) {
			if got, want := m.HostAt(i), exp.TableHostIndices[i]; got != want {
				t.Errorf("vector %s: table_host_indices[%d]: got %d, want %d", v.ID, i, got, want)
			}
		}
	}
	// Offsets and skips are listed per input key; recomputing them checks the
	// hash inputs (key bytes, seeds) independently of the table fill.
	if size > 1 {
		for name, want := range map[string][]uint64{"xxhash64_seed0_offsets": exp.Offsets, "xxhash64_seed1_skips": exp.Skips} {
			if want != nil && len(want) != len(in.HashKeys) {
				t.Errorf("vector %s: %s: %d values for %d keys", v.ID, name, len(want), len(in.HashKeys))
				continue
			}
			for i, w := range want {
				got := xxhash.Sum64String(in.HashKeys[i]) % size
				if name == "xxhash64_seed1_skips" {
					d := xxhash.NewWithSeed(1)
					d.WriteString(in.HashKeys[i])
					got = d.Sum64()%(size-1) + 1
				}
				if got != w {
					t.Errorf("vector %s: %s[%d] (key %q): got %d, want %d", v.ID, name, i, in.HashKeys[i], got, w)
				}
			}
		}
	} else if exp.Offsets != nil || exp.Skips != nil {
		t.Errorf("vector %s: offsets/skips expected but the table is empty", v.ID)
	}
	if exp.EntriesPerHost != nil {
		if len(exp.EntriesPerHost) != len(in.HashKeys) {
			t.Fatalf("vector %s: entries_per_host: %d values for %d keys", v.ID, len(exp.EntriesPerHost), len(in.HashKeys))
		}
		got := make([]int, len(in.HashKeys))
		for i := range m.TableSize() {
			got[m.HostAt(i)]++
		}
		if !slices.Equal(got, exp.EntriesPerHost) {
			t.Errorf("vector %s: entries_per_host (table size %d): got %v, want %v", v.ID, size, got, exp.EntriesPerHost)
		}
	}
	checkInt(t, v.ID, "min_entries_per_host", m.MinEntriesPerHost(), exp.MinEntriesPerHost)
	checkInt(t, v.ID, "max_entries_per_host", m.MaxEntriesPerHost(), exp.MaxEntriesPerHost)
	checkPicks(t, v.ID, exp.Picks, m.Pick)
}
