package cli

import (
	"testing"
	"time"
)

// TestIdleDetector: a release comes with the first quiet second after a
// busy spell, not during it, not for a quiet sidecar, and not again
// within minReleaseGap.
func TestIdleDetector(t *testing.T) {
	var d idleDetector
	t0 := time.Unix(1000, 0)
	total := uint64(0)
	step := func(sec int, alloc uint64) bool {
		total += alloc
		return d.observe(total, t0.Add(time.Duration(sec)*time.Second))
	}
	if step(0, 0) {
		t.Fatal("released on the first reading")
	}
	// Quiet from the start: health checks and scrapes only.
	for s := 1; s <= 20; s++ {
		if step(s, 20<<10) {
			t.Fatalf("second %d: released a sidecar that was never busy", s)
		}
	}
	// Busy: 5 MB a second for 10 s, no release while it lasts.
	for s := 21; s <= 30; s++ {
		if step(s, 5<<20) {
			t.Fatalf("second %d: released during traffic", s)
		}
	}
	if !step(31, 10<<10) {
		t.Fatal("no release in the first quiet second after a busy spell")
	}
	if step(32, 10<<10) {
		t.Fatal("released twice for one spell")
	}
	// Another spell at once: not within minReleaseGap of the last release.
	for s := 33; s <= 39; s++ {
		step(s, 6<<20)
	}
	if step(40, 0) {
		t.Fatal("released within minReleaseGap of the last release")
	}
	if !step(42, 0) {
		t.Fatal("no release once minReleaseGap had passed")
	}
	// A slow trickle adds up to a release only after busyAllocBytes.
	var n int
	for s := 60; s < 60+busyAllocBytes/(24<<10)+1; s++ {
		if step(s, 24<<10) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("a trickle of %d bytes released %d times, want 1", busyAllocBytes+24<<10, n)
	}
	// Steady traffic of 300 requests a second (about 210 bytes each) is
	// never quiet, however long it lasts.
	for s := 300; s < 400; s++ {
		if step(s, 300*210) {
			t.Fatalf("second %d: released during a steady 300 req/s", s)
		}
	}
}
