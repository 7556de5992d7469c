package xds

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshlet-dev/meshlet/dataplane/config"
	"github.com/meshlet-dev/meshlet/discovery"
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
// holding 100 services x 100 endpoints in three zones, 1,000 sidecar ADS
// clients (discovery.ADSClient, the sidecar's own) connected. Each
// iteration flips one endpoint between ready and not ready and waits until
// every sidecar has applied the change (its OnClusters saw it; the ACK
// follows at once). Reported: the last sidecar's latency (p50 / p99 / max
// over the iterations), process CPU per change, and heap before and after
// the sidecars connected. The sidecars run in the benchmark's process, so
// CPU and the second heap figure include them.
func BenchmarkChurn(b *testing.B) {
	for _, delta := range []bool{false, true} {
		name := "sotw"
		if delta {
			name = "delta"
		}
		b.Run(name, func(b *testing.B) { benchChurn(b, delta) })
	}
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

	churned := ClusterName(ServiceHost(nn("default", "svc0"), DefaultClusterDomain), 80)
	var want atomic.Bool
	want.Store(true)
	var gen, done atomic.Int64
	allDone := make(chan time.Time, 1)
	var conns []*grpc.ClientConn
	for i := 0; i < benchConns; i++ {
		c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i := 0; i < benchSidecars; i++ {
		var seen atomic.Int64
		seen.Store(-1)
		c, err := discovery.NewADSClient(discovery.ADSOptions{
			Conn: conns[i%benchConns], Node: &corev3.Node{Id: fmt.Sprintf("sc%d.default", i)}, Delta: delta, Logger: quiet,
			OnClusters: func(cs []config.Cluster) {
				h, found := churnHealthy(cs, churned)
				cur := gen.Load()
				if found && h == want.Load() && seen.Swap(cur) != cur && done.Add(1) == benchSidecars {
					allDone <- time.Now()
				}
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		go c.Run(ctx)
	}
	select {
	case <-allDone:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d sidecars got the initial configuration", done.Load(), benchSidecars)
	}
	runtime.GC()
	heapAll := heapInuse()
	cpu0 := cpuTime()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		up := i%2 == 1
		done.Store(0)
		want.Store(up)
		gen.Add(1)
		t0 := time.Now()
		srv.UpsertEndpointSlice(benchSlice(0, up))
		select {
		case t1 := <-allDone:
			lat = append(lat, t1.Sub(t0))
		case <-time.After(time.Minute):
			b.Fatalf("change %d: only %d of %d sidecars applied it within a minute", i, done.Load(), benchSidecars)
		}
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Seconds() * 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(lat[len(lat)-1].Seconds()*1000, "max-ms")
	b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/change")
	b.ReportMetric(float64(heapServer)/(1<<20), "server-heap-MiB")
	b.ReportMetric(float64(heapAll)/(1<<20), "heap-with-sidecars-MiB")
}

func heapInuse() uint64 {
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
