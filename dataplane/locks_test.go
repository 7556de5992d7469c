package dataplane

import (
	"net/http"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshlet-dev/meshlet/lb"
)

// TestNoLockSharedBetweenWorkers runs concurrent load through two workers
// with mutex profiling on, then reads every contended lock's stack (sync
// mutexes and channels): every lock meshlet's code holds on the request
// path must belong to one worker (worker.mu, its queues and pools, taken by
// that worker's connection goroutines) or to one connection or request,
// never be shared by workers. Contention inside the standard library's
// process-wide pools is logged (it goes away with a hand-written HTTP/1.1
// path, see the data-plane issue).
func TestNoLockSharedBetweenWorkers(t *testing.T) {
	a := upstream(t, "127.0.0.11", named("a"))
	b := upstream(t, "127.0.0.12", named("b"))
	cl := testCluster("echo", endpoint(a, "a"), endpoint(b, "a"))
	od := lb.DefaultOutlierConfig() // so every request reports its result
	cl.Outlier = &od
	s, _ := startServer(t, testConfig(noRetry, cl))
	prev := runtime.SetMutexProfileFraction(1)
	defer runtime.SetMutexProfileFraction(prev)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{}}
			for range 200 {
				get(t, client, s, "/")
			}
		}()
	}
	wg.Wait()
	p := pprof.Lookup("mutex")
	var buf strings.Builder
	if err := p.WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	workerSites, other, stdlib := 0, []string{}, []string{}
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		var fns []string
		for _, line := range strings.Split(rec, "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" {
				fns = append(fns, f[2])
			}
		}
		// Only program locks count: sync mutexes and channels. The Go
		// runtime's own locks (heap, scheduler) are not the program's.
		kind := ""
		if len(fns) > 0 && (strings.HasPrefix(fns[0], "sync.(*Mutex)") || strings.HasPrefix(fns[0], "sync.(*RWMutex)")) {
			kind = "mutex"
		}
		for _, fn := range fns[:min(len(fns), 4)] {
			if kind == "" && (strings.HasPrefix(fn, "runtime.chansend") || strings.HasPrefix(fn, "runtime.chanrecv") ||
				strings.HasPrefix(fn, "runtime.selectgo") || strings.HasPrefix(fn, "runtime.closechan")) {
				kind = "channel"
			}
		}
		if kind == "" || slices.ContainsFunc(fns, testCode) {
			continue
		}
		// The owner is the innermost frame outside sync, runtime and
		// internal packages: the code that held the contended lock.
		owner := ""
		for _, fn := range fns {
			if !strings.HasPrefix(fn, "sync.") && !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "internal/") {
				owner = fn
				break
			}
		}
		// A context's lock belongs to the request whose context it is
		// (meshlet derives none from a shared parent on the request path):
		// attribute it to the meshlet frame that created the context.
		if strings.HasPrefix(owner, "context.") {
			for _, fn := range fns {
				if strings.HasPrefix(fn, "github.com/meshlet-dev/meshlet/") {
					owner = fn
					break
				}
			}
		}
		switch {
		case workerLocal(owner):
			workerSites++
		case offRequestPath(owner):
		case !strings.HasPrefix(owner, "github.com/meshlet-dev/meshlet/"):
			// The standard library's own process-wide pools and
			// once-initialised tables (net/http's textproto reader pool,
			// canonical header table): not meshlet's; reported, not failed.
			stdlib = append(stdlib, kind+" in "+owner)
		default:
			other = append(other, kind+" in "+owner)
		}
	}
	if len(stdlib) > 0 {
		t.Logf("contended standard-library locks (net/http internals): %v", stdlib)
	}
	if len(other) > 0 {
		t.Errorf("contended locks outside the workers' own mutexes on the request path: %v", other)
	}
	t.Logf("contended dataplane lock sites: %d, all worker-local", workerSites)
}

// workerLocal owners belong to one worker (its mutex, its connection pools)
// or to one connection or request.
func workerLocal(fn string) bool {
	for _, p := range []string{
		"github.com/meshlet-dev/meshlet/dataplane.(*worker)", "github.com/meshlet-dev/meshlet/dataplane.lockedRandom",
		"github.com/meshlet-dev/meshlet/dataplane.(*bufferPool)", "github.com/meshlet-dev/meshlet/dataplane.(*worker).report",
		// one worker's HTTP/1.1 pool for one cluster (worker.transport),
		// one worker's clock (worker.clock)
		"github.com/meshlet-dev/meshlet/dataplane/internal/clock.(*Clock)",
		"github.com/meshlet-dev/meshlet/dataplane.(*h1Pool)",
		// one downstream connection, one request's disconnect watch, one
		// worker's fast HTTP/1 server (its connection set: Serve, Drain)
		"github.com/meshlet-dev/meshlet/dataplane/internal/h1server.(*Conn)", "github.com/meshlet-dev/meshlet/dataplane/internal/h1server.(*dcWatch)",
		"github.com/meshlet-dev/meshlet/dataplane/internal/h1server.(*Server).Serve", "github.com/meshlet-dev/meshlet/dataplane/internal/h1server.(*Server).Drain",
		// per-worker log buffers: contention among one worker's goroutines (and the log writer's swap, offRequestPath)
		"github.com/meshlet-dev/meshlet/dataplane/internal/logsink.(*Logger).Write",
		"net/http.(*Transport)", "net/http.(*persistConn)", "net/http.(*conn)", "net/http.(*response)", "net/http.(*connReader)",
		"net/http.(*body)", "net/http.(*http2", "golang.org/x/net/http2.", "net/http/httputil.(*maxLatencyWriter)",
	} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// offRequestPath owners run in the data plane's own goroutines.
func offRequestPath(fn string) bool {
	fn = strings.TrimPrefix(fn, "github.com/meshlet-dev/meshlet/dataplane")
	for _, p := range []string{".(*Server).relayEvents", ".(*Server).mainLoop", ".(*Server).outlierTicker", "/internal/logsink.(*Logger).Flush", "/internal/logsink.(*Logger).run", ".(*healthChecker)", ".(*httpProber)"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// testCode frames are the test's own clients, upstreams and log buffer.
func testCode(fn string) bool {
	fn, ok := strings.CutPrefix(fn, "github.com/meshlet-dev/meshlet/dataplane.")
	return ok && (strings.HasPrefix(fn, "Test") || strings.HasPrefix(fn, "get") || strings.HasPrefix(fn, "upstream") ||
		strings.HasPrefix(fn, "(*logBuffer)") || strings.HasPrefix(fn, "named") || strings.HasPrefix(fn, "proxyURL"))
}
