package lb

import (
	"fmt"
	"testing"
)

var benchSizes = []int{10, 100, 1000, 10000}

// benchInput is n hosts spread over 3 zones (two priorities' worth: 90 % P0,
// 10 % P1), a local cluster of 3 x 20 clients and the client in zone a.
// weighted gives hosts weights 1..4.
func benchInput(n int, weighted bool) BuildInput {
	zones := []string{"a", "b", "c"}
	in := BuildInput{Local: Locality{Region: "r1", Zone: "a"}, Seed: 7}
	for i := range n {
		h := &Host{ID: HostID(i), Address: fmt.Sprintf("10.%d.%d.%d:8080", i>>16, (i>>8)&255, i&255), Weight: 1,
			Locality: Locality{Region: "r1", Zone: zones[i%3]}, LocalityWeight: 1}
		if weighted {
			h.Weight = uint32(1 + i%4)
		}
		if i%10 == 9 {
			h.Priority = 1
		}
		in.Hosts = append(in.Hosts, h)
	}
	for i := range 60 {
		in.LocalCluster = append(in.LocalCluster, &Host{ID: HostID(i), Weight: 1, Locality: Locality{Region: "r1", Zone: zones[i%3]}})
	}
	return in
}

func benchSnapshot(tb testing.TB, pol Policy, n int, weighted bool) (*Snapshot, BuildInput) {
	cfg := DefaultClusterConfig()
	cfg.Policy = pol
	in := benchInput(n, weighted)
	s, err := NewSnapshot(cfg, in, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s, in
}

var benchPolicies = []struct {
	name     string
	pol      Policy
	weighted bool
}{
	{"round_robin", PolicyRoundRobin, false},
	{"round_robin_weighted", PolicyRoundRobin, true},
	{"least_request", PolicyLeastRequest, false},
	{"least_request_weighted", PolicyLeastRequest, true},
	{"random", PolicyRandom, false},
	{"ring_hash", PolicyRingHash, false},
	{"maglev", PolicyMaglev, false},
}

// BenchmarkPick measures one pick (priority, zone-aware locality choice,
// host policy) on a worker's Picker, per policy and cluster size; least
// request also starts and finishes requests (16 in flight) so its active
// counts move as in real traffic.
func BenchmarkPick(b *testing.B) {
	for _, bp := range benchPolicies {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/hosts=%d", bp.name, n), func(b *testing.B) {
				s, _ := benchSnapshot(b, bp.pol, n, bp.weighted)
				p := NewPicker(newPCG(1), nil)
				p.Pick(s, nil)
				if bp.pol == PolicyLeastRequest {
					// Least request with 16 requests in flight, so active
					// counts (and weighted weights) keep changing.
					var inflight [16]*Host
					i := 0
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						h := p.Pick(s, nil)
						if h == nil {
							b.Fatal("no host")
						}
						p.RequestStarted(h)
						if old := inflight[i]; old != nil {
							p.RequestFinished(old)
						}
						inflight[i] = h
						i = (i + 1) % len(inflight)
					}
					return
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if p.Pick(s, nil) == nil {
						b.Fatal("no host")
					}
				}
			})
		}
	}
}

// BenchmarkSnapshotBuild measures a full rebuild (classification, priority
// load, zone structures, per-policy structures) per policy and size.
func BenchmarkSnapshotBuild(b *testing.B) {
	for _, bp := range benchPolicies {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/hosts=%d", bp.name, n), func(b *testing.B) {
				cfg := DefaultClusterConfig()
				cfg.Policy = bp.pol
				in := benchInput(n, bp.weighted)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := NewSnapshot(cfg, in, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
