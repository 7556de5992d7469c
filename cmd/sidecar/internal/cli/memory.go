package cli

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"syscall"
	"time"
)

// memReleaseDelay is how long after the last configuration change the
// sidecar returns freed memory to the kernel.
const memReleaseDelay = time.Second

// memReleaser returns the garbage of configuration loads (YAML, JSON and
// protobuf decoding, the translation) to the kernel once changes settle:
// it dwarfs the live configuration, and the Go runtime would otherwise keep
// it mapped for minutes. Kicks within memReleaseDelay of each other run it
// once.
type memReleaser struct {
	delay time.Duration
	// release returns false to stop releasing the binary's pages.
	release func(log *slog.Logger, binaryPages bool) bool
	mu      sync.Mutex
	t       *time.Timer
	log     *slog.Logger
	binary  bool // also release the executable's pages (releaseImagePages)
}

// configure names the logger the releases report to and whether they
// release the executable's pages too.
func (m *memReleaser) configure(log *slog.Logger, binaryPages bool) {
	m.mu.Lock()
	m.log, m.binary = log, binaryPages
	m.mu.Unlock()
}

func (m *memReleaser) kick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.t == nil {
		m.t = time.AfterFunc(m.delay, m.run)
		return
	}
	m.t.Reset(m.delay)
}

func (m *memReleaser) run() {
	m.mu.Lock()
	log, binary := m.log, m.binary
	m.mu.Unlock()
	if log == nil {
		log = slog.Default()
	}
	if !m.release(log, binary) {
		m.mu.Lock()
		m.binary = false
		m.mu.Unlock()
	}
}

// releaseMemory is the process's releaser.
var releaseMemory = &memReleaser{delay: memReleaseDelay, release: releaseAll}

// releaseAll returns the heap's free memory to the kernel, then (with
// binaryPages) drops the executable's pages that start-up and the
// configuration load touched (releaseImagePages): what the request path
// needs is mapped again on its first use.
func releaseAll(log *slog.Logger, binaryPages bool) bool {
	debug.FreeOSMemory()
	if !binaryPages {
		return false
	}
	n, err := releaseImagePages()
	switch {
	case errors.Is(err, syscall.EINVAL):
		// Locked memory (mlockall) cannot be released: stop trying.
		log.Info("memory release: the binary's pages are locked; not releasing them", "err", err)
		return false
	case err != nil:
		log.Warn("memory release: binary pages", "err", err)
	default:
		log.Debug("memory released", "binary_pages_bytes", n)
	}
	return true
}

// Quiet-after-busy release: traffic grows the heap (the garbage
// collector's target is twice the live heap, connection buffers, the
// binary's request-path pages), and the Go runtime returns what it no
// longer needs only slowly. When the sidecar goes quiet after a busy
// spell, the releaser runs at once, so a sidecar at rest (most of a
// mesh's, most of the time) holds what it holds after start-up.
const (
	// idleCheckEvery is how often the allocation counter is read.
	idleCheckEvery = time.Second
	// idleAllocBytes: an interval that allocated less is quiet (an idle
	// sidecar allocates about 5 KB a second; a second with a Prometheus
	// scrape, about 140 KB, is not quiet, the next is; a proxied HTTP/1
	// request allocates about 210 bytes, so 160 requests a second are
	// not quiet).
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

// watchIdle runs the releaser whenever the process goes quiet after a busy
// spell (idleDetector), until ctx ends.
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
				m.run()
			}
		}
	}
}
