package cli

import (
	"errors"
	"log/slog"
	"runtime/debug"
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
