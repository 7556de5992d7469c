package xds

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	discoveryv1 "k8s.io/api/discovery/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery/adsclient"
	"github.com/meshlet-dev/meshlet/lb"
)

// Sizes of BenchmarkChurn: the 1,000 sidecar streams and 10,000
// endpoints.
const (
	benchServices  = 100
	benchPerSvc    = 100
	benchSidecars  = 1000
	benchConns     = 20 // sidecar streams share gRPC connections, 50 per connection
	benchChurnAddr = "10.1.0.1:8080"
)

// benchSlice is service i's EndpointSlice, its first endpoint ready or not.
func benchSlice(i int, firstReady bool) *discoveryv1.EndpointSlice {
	zones := []string{"n-a", "n-b", "n-c"}
	var eps []ep
	for j := 0; j < benchPerSvc; j++ {
		e := ep{addr: fmt.Sprintf("10.%d.%d.%d", 1+i/200, (i%200)+j/250, 1+j%250), pod: fmt.Sprintf("s%d-%d", i, j), node: zones[j%3]}
		if i == 0 && j == 0 && !firstReady {
			e.cond = "notready"
		}
		eps = append(eps, e)
	}
	return slice("default", fmt.Sprintf("svc%d-1", i), fmt.Sprintf("svc%d", i), v4, []string{"http:8080"}, eps...)
}

// benchRoute is the HTTPRoute of BenchmarkRouteChurn: svc0's port 80
// split between svc1 (weight 100) and svc2 (weight w).
func benchRoute(w int32) *gatewayv1.HTTPRoute {
	r := httpRoute("default", "svc0", 0, []gatewayv1.ParentReference{svcRef("", "svc0", 80)},
		rule(nil, to("", "svc1", 80, ptr(int32(100))), to("", "svc2", 80, ptr(w))))
	r.Generation = int64(w)
	return r
}

// benchWeight is svc2's weight at change i: never the same twice in a
// row, so each change is one a sidecar can tell from the last.
func benchWeight(i int) int32 { return int32(1 + i%97) }

// churnWeight returns the weight svc2 has in the route table of the
// churned cluster, found false while the sidecar has no such table.
func churnWeight(rs []config.Route, churned, backend string) (uint32, bool) {
	for _, r := range rs {
		if r.RouteConfig != churned || len(r.Rules) == 0 {
			continue
		}
		for _, b := range r.Rules[0].Backends {
			if b.Cluster == backend {
				return b.Weight, true
			}
		}
	}
	return 0, false
}

// churnHealthy reports whether the churned endpoint is healthy in cs.
func churnHealthy(cs []config.Cluster, name string) (healthy, found bool) {
	i, ok := slices.BinarySearchFunc(cs, name, func(c config.Cluster, n string) int {
		switch {
		case c.Name < n:
			return -1
		case c.Name > n:
			return 1
		}
		return 0
	})
	if !ok {
		return false, false
	}
	for _, e := range cs[i].Endpoints {
		if e.Address == benchChurnAddr {
			return e.Health == lb.EDSHealthy || e.Health == lb.EDSUnknown, true
		}
	}
	return false, true
}

// BenchmarkChurn: one ADS server (real gRPC on loopback, default debounce)
// holding 100 services x 100 endpoints in three zones, and 1,000 sidecar
// ADS clients (adsclient.Client, the sidecar's own) in a separate
// process (this test binary re-executed as TestChurnSidecars), so the
// benchmark process is the control plane alone. Each iteration flips one
// endpoint between ready and not ready and waits until every sidecar has
// applied the change (its OnClusters saw it; the ACK follows at once).
// Reported: the last sidecar's latency (p50 / p99 / max over the
// iterations), the control plane's CPU per change and its heap with no
// sidecar and with the 1,000 streams open, and the sidecars' CPU per
// change (1,000 clients together).
func BenchmarkChurn(b *testing.B) {
	for _, delta := range []bool{false, true} {
		name := "sotw"
		if delta {
			name = "delta"
		}
		b.Run(name, func(b *testing.B) { benchChurn(b, churnEndpoints, delta) })
	}
}

// BenchmarkRouteChurn is BenchmarkChurn with a route change: svc0's port
// carries an HTTPRoute, so each sidecar's svc0 cluster names its
// RouteConfiguration in its metadata and the sidecar (adsclient, delta)
// subscribes to it over RDS on the same stream. Each iteration changes
// the weight of one backend through UpsertHTTPRoute and waits until every
// sidecar has the new RouteConfiguration (its OnRoutes saw the weight).
// Reported besides BenchmarkChurn's figures: the latency of each
// sidecar (p50 / p99 over every sidecar's receipt of every change).
func BenchmarkRouteChurn(b *testing.B) {
	b.Run("delta", func(b *testing.B) { benchChurn(b, churnRoutes, true) })
}

// churnKind is what a churn benchmark changes.
type churnKind string

const (
	churnEndpoints churnKind = "endpoints" // one endpoint's readiness
	churnRoutes    churnKind = "routes"    // one HTTPRoute backend's weight
)

// churnChild is the sidecars' process, driven over its stdin and stdout:
// "gen N V" announces change N (V: the endpoint's readiness, 1 or 0, or
// the backend's weight), answered "ready N"; "done N T..." reports that
// all sidecars applied it, T the wall-clock times (Unix nanoseconds) at
// which each did.
type churnChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func (c *churnChild) expect(b *testing.B, prefix string, timeout time.Duration) string {
	b.Helper()
	got := make(chan string, 1)
	go func() {
		if c.out.Scan() {
			got <- c.out.Text()
		} else {
			got <- "EOF: " + fmt.Sprint(c.out.Err())
		}
	}()
	select {
	case line := <-got:
		if !strings.HasPrefix(line, prefix) {
			b.Fatalf("sidecar process said %q, want %q", line, prefix)
		}
		return line
	case <-time.After(timeout):
		b.Fatalf("sidecar process: no %q within %v", prefix, timeout)
	}
	return ""
}

// churnValue is what change i sets: the endpoint's readiness (ready on
// even changes, as at the start) or the backend's weight.
func churnValue(kind churnKind, i int) int32 {
	if kind == churnRoutes {
		return benchWeight(i)
	}
	return int32(1 - i%2)
}

func benchChurn(b *testing.B, kind churnKind, delta bool) {
	srv := NewServer(Options{Logger: quiet})
	for _, n := range threeZones() {
		srv.UpsertNode(n)
	}
	for i := 0; i < benchServices; i++ {
		srv.UpsertService(service("default", fmt.Sprintf("svc%d", i), nil, "http:80"))
		srv.UpsertEndpointSlice(benchSlice(i, true))
	}
	if kind == churnRoutes {
		srv.UpsertHTTPRoute(benchRoute(churnValue(kind, 0)))
	}
	srv.SetSynced()
	lis := listen(b, "127.0.0.1:0")
	g := grpc.NewServer()
	srv.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Run(ctx)
	go g.Serve(lis)
	defer g.Stop()
	heapServer := heapInuse()

	cmd := exec.Command(os.Args[0], "-test.run=^TestChurnSidecars$", "-test.v=false")
	cmd.Env = append(os.Environ(), fmt.Sprintf("MESHLET_CHURN_SIDECARS=%s,%v,%s", lis.Addr(), delta, kind))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	child := &churnChild{cmd: cmd, in: in, out: bufio.NewScanner(outPipe)}
	defer func() { in.Close(); _ = cmd.Wait() }()
	child.expect(b, "done 0 ", 5*time.Minute) // every sidecar has the initial configuration
	heapAll := heapInuse()
	if path := os.Getenv("MESHLET_CHURN_HEAP_PROFILE"); path != "" {
		// The control plane's heap with every stream open, for pprof.
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
	childCPU0 := procCPU(b, cmd.Process.Pid)
	cpu0 := cpuTime()
	var lat, each []time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		v := churnValue(kind, i)
		fmt.Fprintf(in, "gen %d %d\n", i, v)
		child.expect(b, fmt.Sprintf("ready %d", i), 10*time.Second)
		t0 := time.Now()
		if kind == churnRoutes {
			srv.UpsertHTTPRoute(benchRoute(v))
		} else {
			srv.UpsertEndpointSlice(benchSlice(0, v == 1))
		}
		line := child.expect(b, fmt.Sprintf("done %d ", i), time.Minute)
		lat = append(lat, time.Since(t0))
		for _, f := range strings.Fields(line)[2:] {
			at, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				b.Fatalf("sidecar process: bad time %q in %q", f, line[:min(len(line), 80)])
			}
			each = append(each, time.Duration(at-t0.UnixNano()))
		}
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	childCPU := procCPU(b, cmd.Process.Pid) - childCPU0
	q := func(ds []time.Duration, p float64) float64 {
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Seconds() * 1000
	}
	b.ReportMetric(q(lat, 0.5), "p50-ms")
	b.ReportMetric(q(lat, 0.99), "p99-ms")
	b.ReportMetric(lat[len(lat)-1].Seconds()*1000, "max-ms")
	b.ReportMetric(q(each, 0.5), "each-p50-ms")
	b.ReportMetric(q(each, 0.99), "each-p99-ms")
	b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/change")
	b.ReportMetric(childCPU.Seconds()*1000/float64(b.N), "sidecars-cpu-ms/change")
	b.ReportMetric(float64(heapServer)/(1<<20), "server-heap-MiB")
	b.ReportMetric(float64(heapAll)/(1<<20), "heap-with-streams-MiB")
}

// TestChurnSidecars is BenchmarkChurn's and BenchmarkRouteChurn's sidecar
// process; it does nothing unless started by one of them
// (MESHLET_CHURN_SIDECARS=addr,delta,kind).
func TestChurnSidecars(t *testing.T) {
	env := os.Getenv("MESHLET_CHURN_SIDECARS")
	if env == "" {
		t.Skip("helper process of BenchmarkChurn (runs only with MESHLET_CHURN_SIDECARS set)")
	}
	parts := strings.Split(env, ",")
	if len(parts) != 3 {
		t.Fatalf("MESHLET_CHURN_SIDECARS=%q: want addr,delta,kind", env)
	}
	addr, delta, kind := parts[0], parts[1] == "true", churnKind(parts[2])
	churned := ClusterName(ServiceHost(nn("default", "svc0"), DefaultClusterDomain), 80)
	backend := ClusterName(ServiceHost(nn("default", "svc2"), DefaultClusterDomain), 80)
	var want atomic.Int32
	want.Store(churnValue(kind, 0))
	var gen, done atomic.Int64
	arrived := make([]atomic.Int64, benchSidecars) // when each sidecar applied the current change
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var conns []*grpc.ClientConn
	for i := 0; i < benchConns; i++ {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// applied counts sidecar i once per change, at the first delivery that
	// has it; the last to apply it reports every sidecar's time.
	applied := func(i int, seen *atomic.Int64) {
		cur := gen.Load()
		if seen.Swap(cur) == cur {
			return
		}
		arrived[i].Store(time.Now().UnixNano())
		if done.Add(1) == benchSidecars {
			var line strings.Builder
			fmt.Fprintf(&line, "done %d", cur)
			for j := range arrived {
				fmt.Fprintf(&line, " %d", arrived[j].Load())
			}
			say("%s", line.String())
		}
	}
	for i := 0; i < benchSidecars; i++ {
		seen := new(atomic.Int64)
		seen.Store(-1)
		opts := adsclient.Options{Conn: conns[i%benchConns], Node: &corev3.Node{Id: fmt.Sprintf("sc%d.default", i)}, Delta: delta, Logger: quiet}
		if kind == churnRoutes {
			opts.OnRoutes = func(rs []config.Route) {
				if w, found := churnWeight(rs, churned, backend); found && int32(w) == want.Load() {
					applied(i, seen)
				}
			}
		} else {
			opts.OnClusters = func(cs []config.Cluster) {
				if h, found := churnHealthy(cs, churned); found && h == (want.Load() == 1) {
					applied(i, seen)
				}
			}
		}
		c, err := adsclient.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		go c.Run(ctx)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var n int64
		var v int32
		if _, err := fmt.Sscanf(sc.Text(), "gen %d %d", &n, &v); err != nil {
			t.Fatalf("bad command %q: %v", sc.Text(), err)
		}
		done.Store(0)
		want.Store(v)
		gen.Store(n)
		say("ready %d", n)
	}
}

// procCPU is a process's user + system CPU time from /proc.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// heapInuse is the live heap: two collections, since pooled buffers
// (gRPC's send buffers sit in a sync.Pool) survive the first in its victim
// cache.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
