package cli

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// memReleaseDelay is how long after the last configuration change the
// sidecar returns freed memory to the kernel.
const memReleaseDelay = time.Second

// memReleaser returns the heap's free memory to the kernel
// (debug.FreeOSMemory): after configuration loads, whose garbage (YAML,
// JSON and protobuf decoding, the translation) dwarfs the live
// configuration, and when the sidecar goes quiet after a busy spell. The
// Go runtime would otherwise keep it for minutes. Kicks within delay of
// each other release once.
type memReleaser struct {
	delay   time.Duration
	release func()
	mu      sync.Mutex
	t       *time.Timer
}

// releaseMemory is the process's releaser.
var releaseMemory = &memReleaser{delay: memReleaseDelay, release: debug.FreeOSMemory}

// kick releases once delay has passed without another kick.
func (m *memReleaser) kick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.t == nil {
		m.t = time.AfterFunc(m.delay, m.release)
		return
	}
	m.t.Reset(m.delay)
}

// Quiet-after-busy release: traffic grows the heap (the garbage
// collector's target is twice the live heap, connection buffers), and the
// Go runtime returns what it no longer needs only slowly. When the
// sidecar goes quiet after a busy spell, the releaser runs at once, so a
// sidecar at rest (most of a mesh's, most of the time) holds what it holds
// after start-up.
const (
	// idleCheckEvery is how often the allocation counter is read.
	idleCheckEvery = time.Second
	// idleAllocBytes: an interval that allocated less is quiet (an idle
	// sidecar's health checks and a Prometheus scrape allocate less; a
	// steady 160 proxied requests a second allocate more).
	idleAllocBytes = 32 << 10
	// busyAllocBytes: what must have been allocated since the last
	// release for a quiet interval to be worth a release (a forced
	// garbage collection): about 10,000 requests.
	busyAllocBytes = 2 << 20
	// minReleaseGap keeps bursty traffic from releasing more often.
	minReleaseGap = 10 * time.Second
)

// idleDetector decides from successive readings of the process's total
// allocated bytes when a busy spell has ended.
type idleDetector struct {
	last, sinceRelease uint64
	lastRelease        time.Time
	started            bool
}

// observe takes the allocation total at now and reports whether to
// release memory now.
func (d *idleDetector) observe(total uint64, now time.Time) bool {
	if !d.started {
		d.last, d.started = total, true
		return false
	}
	delta := total - d.last
	d.last = total
	d.sinceRelease += delta
	if delta >= idleAllocBytes || d.sinceRelease < busyAllocBytes || now.Sub(d.lastRelease) < minReleaseGap {
		return false
	}
	d.sinceRelease, d.lastRelease = 0, now
	return true
}

// allocatedBytes is the process's cumulative heap allocation.
func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// watchIdle releases whenever the process goes quiet after a busy spell
// (idleDetector), until ctx ends.
func (m *memReleaser) watchIdle(ctx context.Context) {
	var d idleDetector
	t := time.NewTicker(idleCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if d.observe(allocatedBytes(), now) {
				m.release()
			}
		}
	}
}
