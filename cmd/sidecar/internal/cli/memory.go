package cli

import (
	"runtime/debug"
	"sync"
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
	delay   time.Duration
	release func()
	mu      sync.Mutex
	t       *time.Timer
}

func (m *memReleaser) kick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.t == nil {
		m.t = time.AfterFunc(m.delay, m.release)
		return
	}
	m.t.Reset(m.delay)
}

// releaseMemory is the process's releaser.
var releaseMemory = &memReleaser{delay: memReleaseDelay, release: debug.FreeOSMemory}
