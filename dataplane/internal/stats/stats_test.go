package stats

import (
	"testing"
	"time"
)

func TestCountCode(t *testing.T) {
	var s Cluster
	for _, code := range []int{100, 200, 204, 302, 404, 503, 0, 999} {
		s.CountCode(code)
	}
	// 0 counts as 1xx and 999 as 5xx: a status out of range lands in
	// the nearest class rather than outside the array.
	want := map[Counter]uint64{UpstreamRq1xx: 2, UpstreamRq2xx: 2, UpstreamRq3xx: 1, UpstreamRq4xx: 1, UpstreamRq5xx: 2}
	for c, n := range want {
		if got := s.Get(c); got != n {
			t.Errorf("%s = %d, want %d", CounterNames[c], got, n)
		}
	}
}

func TestObserveBuckets(t *testing.T) {
	var r Request
	r.Observe(300 * time.Microsecond) // first bucket (0.5 ms)
	r.Observe(7 * time.Millisecond)   // the 10 ms bucket
	r.Observe(2 * time.Hour)          // past the last bucket: counted, in none
	if r.Count.Load() != 3 {
		t.Fatalf("count %d, want 3", r.Count.Load())
	}
	var inBuckets uint64
	for i := range r.Buckets {
		inBuckets += r.Buckets[i].Load()
	}
	if r.Buckets[0].Load() != 1 || r.Buckets[3].Load() != 1 || inBuckets != 2 {
		t.Errorf("buckets %v: want one in 0.5 ms, one in 10 ms, none other", &r.Buckets)
	}
	if want := uint64((300*time.Microsecond + 7*time.Millisecond + 2*time.Hour).Microseconds()); r.SumUs.Load() != want {
		t.Errorf("sum %d µs, want %d", r.SumUs.Load(), want)
	}
}

func TestNamesComplete(t *testing.T) {
	for i, n := range CounterNames {
		if n == "" {
			t.Errorf("counter %d has no name", i)
		}
	}
	for i, n := range GaugeNames {
		if n == "" {
			t.Errorf("gauge %d has no name", i)
		}
	}
}
