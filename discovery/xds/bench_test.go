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
		b.Run(name, func(b *testing.B) { benchChurn(b, delta) })
	}
}

// churnChild is the sidecars' process, driven over its stdin and stdout:
// "gen N up|down" announces change N (answered "ready N"), and "done N"
// reports that all sidecars applied it.
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

func benchChurn(b *testing.B, delta bool) {
	srv := NewServer(Options{Logger: quiet})
	for _, n := range threeZones() {
		srv.UpsertNode(n)
	}
	for i := 0; i < benchServices; i++ {
		srv.UpsertService(service("default", fmt.Sprintf("svc%d", i), nil, "http:80"))
		srv.UpsertEndpointSlice(benchSlice(i, true))
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
	cmd.Env = append(os.Environ(), fmt.Sprintf("MESHLET_CHURN_SIDECARS=%s,%v", lis.Addr(), delta))
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
	child.expect(b, "done 0", 5*time.Minute) // every sidecar has the initial configuration
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
	var lat []time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		up := i%2 == 0
		fmt.Fprintf(in, "gen %d %v\n", i, up)
		child.expect(b, fmt.Sprintf("ready %d", i), 10*time.Second)
		t0 := time.Now()
		srv.UpsertEndpointSlice(benchSlice(0, up))
		child.expect(b, fmt.Sprintf("done %d", i), time.Minute)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	childCPU := procCPU(b, cmd.Process.Pid) - childCPU0
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Seconds() * 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(lat[len(lat)-1].Seconds()*1000, "max-ms")
	b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/change")
	b.ReportMetric(childCPU.Seconds()*1000/float64(b.N), "sidecars-cpu-ms/change")
	b.ReportMetric(float64(heapServer)/(1<<20), "server-heap-MiB")
	b.ReportMetric(float64(heapAll)/(1<<20), "heap-with-streams-MiB")
}

// TestChurnSidecars is BenchmarkChurn's sidecar process; it does nothing
// unless started by it (MESHLET_CHURN_SIDECARS=addr,delta).
func TestChurnSidecars(t *testing.T) {
	env := os.Getenv("MESHLET_CHURN_SIDECARS")
	if env == "" {
		t.Skip("helper process of BenchmarkChurn (runs only with MESHLET_CHURN_SIDECARS set)")
	}
	addr, deltaS, _ := strings.Cut(env, ",")
	delta := deltaS == "true"
	churned := ClusterName(ServiceHost(nn("default", "svc0"), DefaultClusterDomain), 80)
	var want atomic.Bool
	want.Store(true)
	var gen, done atomic.Int64
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
	for i := 0; i < benchSidecars; i++ {
		var seen atomic.Int64
		seen.Store(-1)
		c, err := adsclient.New(adsclient.Options{
			Conn: conns[i%benchConns], Node: &corev3.Node{Id: fmt.Sprintf("sc%d.default", i)}, Delta: delta, Logger: quiet,
			OnClusters: func(cs []config.Cluster) {
				h, found := churnHealthy(cs, churned)
				cur := gen.Load()
				if found && h == want.Load() && seen.Swap(cur) != cur && done.Add(1) == benchSidecars {
					say("done %d", cur)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		go c.Run(ctx)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var n int64
		var up bool
		if _, err := fmt.Sscanf(sc.Text(), "gen %d %t", &n, &up); err != nil {
			t.Fatalf("bad command %q: %v", sc.Text(), err)
		}
		done.Store(0)
		want.Store(up)
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
