package dataplane

import (
	"testing"
	"time"
)

// BenchmarkStreamIdleArmStop is what the stream idle timeout adds to each
// HTTP/1 request on the request's goroutine: one arm and one stop on the
// worker's clock.
func BenchmarkStreamIdleArmStop(b *testing.B) {
	w := &worker{}
	si := &streamIdle{w: w, s: &httpScratch{}}
	b.ReportAllocs()
	for b.Loop() {
		si.arm(5 * time.Minute)
		si.stop()
	}
}
