package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery"
	"github.com/meshlet-dev/meshlet/discovery/adsclient"
	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
	"github.com/meshlet-dev/meshlet/lb"
)

// waitTimeout is generous: the machine is shared with other builds.
const waitTimeout = 60 * time.Second

var quiet = testLogger()

// testLogger discards logs unless MESHLET_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("MESHLET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// controlPlane is a Server on a loopback gRPC listener.
type controlPlane struct {
	srv  *Server
	addr string
	stop func()
}

// listen listens on addr, retrying while a previous server's port is
// still being released.
func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		lis, err := net.Listen("tcp", addr)
		if err == nil {
			return lis
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startControlPlane runs a Server whose model setup fills, on addr
// ("127.0.0.1:0" for any port).
func startControlPlane(t *testing.T, addr string, opts Options, setup func(*Server)) *controlPlane {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	srv := NewServer(opts)
	if setup != nil {
		setup(srv)
	}
	srv.SetSynced()
	lis := listen(t, addr)
	g := grpc.NewServer()
	srv.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = srv.Run(ctx) }()
	go func() { _ = g.Serve(lis) }()
	var once sync.Once
	cp := &controlPlane{srv: srv, addr: lis.Addr().String(), stop: func() {
		once.Do(func() {
			g.Stop()
			cancel()
			<-ran
		})
	}}
	t.Cleanup(cp.stop)
	return cp
}

// sidecar is an ADS client on its own connection.
type sidecar struct {
	c       *adsclient.Client
	mu      sync.Mutex
	updates int // OnClusters calls
	stop    func()
	// streamsEnded counts the client's "stream ended; reconnecting" log
	// records: one per stream lost and per failed reconnection attempt.
	streamsEnded atomic.Int64
}

// countingHandler counts the records whose message is msg, then hands
// every record to next.
type countingHandler struct {
	next slog.Handler
	msg  string
	n    *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.next.WithAttrs(as), h.msg, h.n}
}

func (h countingHandler) WithGroup(g string) slog.Handler {
	return countingHandler{h.next.WithGroup(g), h.msg, h.n}
}

func startSidecar(t *testing.T, addr, nodeID string, delta bool, locality *corev3.Locality, dial ...grpc.DialOption) *sidecar {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	s := &sidecar{}
	s.c, err = adsclient.New(adsclient.Options{
		Conn:  conn,
		Node:  &corev3.Node{Id: nodeID, Locality: locality},
		Delta: delta,
		OnClusters: func([]config.Cluster) {
			s.mu.Lock()
			s.updates++
			s.mu.Unlock()
		},
		InitialBackoff: 50 * time.Millisecond,
		MaxBackoff:     500 * time.Millisecond,
		Logger:         slog.New(countingHandler{quiet.Handler(), "ads stream ended; reconnecting", &s.streamsEnded}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = s.c.Run(ctx) }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cancel()
			<-ran
			conn.Close()
		})
	}
	t.Cleanup(s.stop)
	return s
}

func (s *sidecar) updateCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updates
}

func (s *sidecar) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-s.c.Ready():
	case <-time.After(waitTimeout):
		t.Fatalf("sidecar not ready: %+v", s.c.Stats())
	}
}

// waitFor polls until cond holds for the delivered clusters.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *sidecar) waitClusters(t *testing.T, what string, cond func(map[string]config.Cluster) bool) map[string]config.Cluster {
	t.Helper()
	var last map[string]config.Cluster
	deadline := time.Now().Add(waitTimeout)
	for {
		last = byName(s.c.Clusters())
		if cond(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; clusters: %s", what, describe(last))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func byName(cs []config.Cluster) map[string]config.Cluster {
	m := make(map[string]config.Cluster, len(cs))
	for _, c := range cs {
		m[c.Name] = c
	}
	return m
}

func describe(cs map[string]config.Cluster) string {
	s := ""
	for _, name := range slices.Sorted(maps.Keys(cs)) {
		s += "\n  " + name + ":"
		for _, e := range cs[name].Endpoints {
			s += fmt.Sprintf(" %s(%s p%d %v %s)", e.Address, e.Locality, e.Priority, e.Health, e.Metadata[discovery.MeshedMetadataKey])
		}
	}
	return s
}

// endpointsOf returns a cluster's endpoints by address.
func endpointsOf(c config.Cluster) map[string]lb.Endpoint {
	m := map[string]lb.Endpoint{}
	for _, e := range c.Endpoints {
		m[e.Address] = e
	}
	return m
}

const (
	echoCluster = "outbound|80||echo.default.svc.cluster.local"
	webCluster  = "outbound|8080||web.default.svc.cluster.local"
)

// mesh fills a server with three zones, echo (what the sidecars call,
// with failover by region then zone) and web (the first sidecar's own
// service).
func mesh(s *Server) {
	for _, n := range threeZones() {
		s.UpsertNode(n)
	}
	s.UpsertService(service("default", "echo", map[string]string{AnnotationFailoverLabels: lb.LabelRegion + "," + lb.LabelZone}, "http:80"))
	s.UpsertEndpointSlice(slice("default", "echo-1", "echo", v4, []string{"http:8080"},
		ep{addr: "10.0.1.1", pod: "echo-a", node: "n-a"},
		ep{addr: "10.0.1.2", pod: "echo-b", node: "n-b"},
		ep{addr: "10.0.1.3", pod: "echo-c", node: "n-c"}))
	web := service("default", "web", nil, "http:8080")
	web.Spec.ClusterIP, web.Spec.ClusterIPs = "10.96.0.11", []string{"10.96.0.11"}
	s.UpsertService(web)
	s.UpsertEndpointSlice(slice("default", "web-1", "web", v4, []string{"http:8080"},
		ep{addr: "10.0.2.1", pod: "web-a", node: "n-a"}, ep{addr: "10.0.2.2", pod: "web-b", node: "n-b"}))
	s.UpsertPod(pod("default", "echo-a", "echo", "", true))
	s.UpsertPod(pod("default", "web-a", "", "", true))
	s.SetProxy("web-a.default", ProxyInfo{LocalService: nn("default", "web"), Locality: &lb.Locality{Region: "r1", Zone: "a"}})
}

func forBothProtocols(t *testing.T, f func(t *testing.T, delta bool)) {
	for _, delta := range []bool{false, true} {
		name := "sotw"
		if delta {
			name = "delta"
		}
		t.Run(name, func(t *testing.T) { f(t, delta) })
	}
}

// TestEndToEnd: a sidecar sees the clusters, localities, priorities,
// health and meshed markers; endpoint changes reach it.
func TestEndToEnd(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, delta bool) {
		cp := startControlPlane(t, "127.0.0.1:0", Options{}, mesh)
		a := startSidecar(t, cp.addr, "web-a.default", delta, nil)
		// A second sidecar that the control plane knows nothing about
		// reports its own locality.
		b := startSidecar(t, cp.addr, "other-b.default", delta, &corev3.Locality{Region: "r1", Zone: "b"})
		a.waitReady(t)
		b.waitReady(t)

		cs := byName(a.c.Clusters())
		eq(t, slices.Sorted(maps.Keys(cs)), []string{meshmeta.LocalClusterName, webCluster, echoCluster})
		echo := endpointsOf(cs[echoCluster])
		eq(t, len(echo), 3)
		r1 := func(z string) lb.Locality { return lb.Locality{Region: "r1", Zone: z} }
		// Sidecar a is in r1/a: its zone first, then the rest of the region.
		for addr, want := range map[string]struct {
			loc    lb.Locality
			prio   uint32
			meshed string
		}{
			"10.0.1.1:8080": {r1("a"), 0, "true"},
			"10.0.1.2:8080": {r1("b"), 1, ""},
			"10.0.1.3:8080": {r1("c"), 1, ""},
		} {
			e := echo[addr]
			eq(t, [3]any{e.Locality, e.Priority, e.Metadata[discovery.MeshedMetadataKey]}, [3]any{want.loc, want.prio, want.meshed})
			eq(t, e.Health, lb.EDSHealthy)
		}
		eq(t, cs[echoCluster].Priorities, 2)
		// Its local cluster is web's endpoints, at priority 0.
		local := endpointsOf(cs[meshmeta.LocalClusterName])
		eq(t, len(local), 2)
		eq(t, local["10.0.2.1:8080"].Locality, r1("a"))
		eq(t, local["10.0.2.2:8080"].Priority, uint32(0))
		// Routes by cluster IP.
		routes := map[string]string{}
		for _, r := range a.c.Routes() {
			routes[r.Destination] = r.Cluster
		}
		eq(t, routes, map[string]string{"10.96.0.10:80": echoCluster, "10.96.0.11:8080": webCluster})

		// Sidecar b is in zone b and has no local cluster.
		bs := byName(b.c.Clusters())
		if _, ok := bs[meshmeta.LocalClusterName]; ok {
			t.Fatal("sidecar b got a local cluster")
		}
		beps := endpointsOf(bs[echoCluster])
		eq(t, [3]uint32{beps["10.0.1.1:8080"].Priority, beps["10.0.1.2:8080"].Priority, beps["10.0.1.3:8080"].Priority}, [3]uint32{1, 0, 1})

		// An endpoint becomes not ready.
		cp.srv.UpsertEndpointSlice(slice("default", "echo-1", "echo", v4, []string{"http:8080"},
			ep{addr: "10.0.1.1", pod: "echo-a", node: "n-a"},
			ep{addr: "10.0.1.2", pod: "echo-b", node: "n-b", cond: "notready"},
			ep{addr: "10.0.1.3", pod: "echo-c", node: "n-c"}))
		a.waitClusters(t, "10.0.1.2 unhealthy", func(cs map[string]config.Cluster) bool {
			return endpointsOf(cs[echoCluster])["10.0.1.2:8080"].Health == lb.EDSUnhealthy
		})
		// Zone c is scaled down, and a pod in zone a terminates.
		cp.srv.UpsertEndpointSlice(slice("default", "echo-1", "echo", v4, []string{"http:8080"},
			ep{addr: "10.0.1.1", pod: "echo-a", node: "n-a", cond: "terminating-serving"},
			ep{addr: "10.0.1.2", pod: "echo-b", node: "n-b", cond: "notready"}))
		cs = a.waitClusters(t, "zone c gone", func(cs map[string]config.Cluster) bool {
			return len(cs[echoCluster].Endpoints) == 2
		})
		eq(t, endpointsOf(cs[echoCluster])["10.0.1.1:8080"].Health, lb.EDSDraining)
		b.waitClusters(t, "zone c gone for b", func(cs map[string]config.Cluster) bool {
			return len(cs[echoCluster].Endpoints) == 2
		})

		// Failover turned off: every endpoint at P0 (the assignment
		// itself did not change).
		cp.srv.UpsertService(service("default", "echo", nil, "http:80"))
		a.waitClusters(t, "failover off", func(cs map[string]config.Cluster) bool {
			return cs[echoCluster].Priorities == 1
		})

		// The service goes away.
		cp.srv.DeleteService(nn("default", "echo"))
		a.waitClusters(t, "echo removed", func(cs map[string]config.Cluster) bool {
			_, ok := cs[echoCluster]
			return !ok && len(cs) == 2
		})
		eq(t, len(a.c.Routes()), 1)
	})
}

// TestDebounce: a burst of 50 changes becomes few versions, and the last
// state wins.
func TestDebounce(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, delta bool) {
		cp := startControlPlane(t, "127.0.0.1:0", Options{}, mesh)
		a := startSidecar(t, cp.addr, "web-a.default", delta, nil)
		a.waitReady(t)
		updates, st := a.updateCount(), cp.srv.Stats()

		var eps []ep
		for i := range 50 {
			eps = append(eps, ep{addr: fmt.Sprintf("10.0.3.%d", i+1), node: "n-b"})
			cp.srv.UpsertEndpointSlice(slice("default", "echo-2", "echo", v4, []string{"http:8080"}, eps...))
		}
		a.waitClusters(t, "53 echo endpoints", func(cs map[string]config.Cluster) bool {
			return len(cs[echoCluster].Endpoints) == 53
		})
		// A late push of the burst would reach the sidecar before a later
		// change: count up to that marker's delivery, less the marker's
		// own rebuild, snapshot and delivery.
		marked := cp.srv.Stats().Changes
		cp.srv.UpsertEndpointSlice(slice("default", "echo-3", "echo", v4, []string{"http:8080"}, ep{addr: "10.0.5.1", node: "n-b"}))
		eq(t, cp.srv.Stats().Changes, marked+1)
		a.waitClusters(t, "the marker endpoint", func(cs map[string]config.Cluster) bool {
			return len(cs[echoCluster].Endpoints) == 54
		})
		got := a.updateCount() - updates - 1
		st2 := cp.srv.Stats()
		st2.Rebuilds, st2.Snapshots = st2.Rebuilds-1, st2.Snapshots-1
		t.Logf("50 changes: %d rebuilds, %d snapshots, %d deliveries", st2.Rebuilds-st.Rebuilds, st2.Snapshots-st.Snapshots, got)
		if got < 1 || got > 10 {
			t.Fatalf("%d deliveries for a burst of 50 changes, want a few", got)
		}
		if n := st2.Snapshots - st.Snapshots; n > 10 {
			t.Fatalf("%d snapshots for a burst of 50 changes, want a few", n)
		}
		eq(t, len(a.c.Clusters()), 3)
	})
}

// TestServerRestart: while the control plane is away the sidecar keeps its
// configuration; a new one is picked up on reconnection.
func TestServerRestart(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, delta bool) {
		cp := startControlPlane(t, "127.0.0.1:0", Options{}, mesh)
		a := startSidecar(t, cp.addr, "web-a.default", delta, nil)
		a.waitReady(t)
		before, updates := a.c.Clusters(), a.updateCount()

		ended := a.streamsEnded.Load()
		cp.stop()
		waitFor(t, "the sidecar to notice", func() bool { return !a.c.Stats().Connected })
		// The stream's end, then two failed reconnection attempts.
		waitFor(t, "reconnection attempts", func() bool { return a.streamsEnded.Load() >= ended+3 })
		eq(t, a.c.Clusters(), before)
		eq(t, a.updateCount(), updates)

		// The new control plane has one more endpoint.
		startControlPlane(t, cp.addr, Options{}, func(s *Server) {
			mesh(s)
			s.UpsertEndpointSlice(slice("default", "echo-2", "echo", v4, []string{"http:8080"}, ep{addr: "10.0.4.1", node: "n-c"}))
		})
		cs := a.waitClusters(t, "the new endpoint", func(cs map[string]config.Cluster) bool {
			_, ok := endpointsOf(cs[echoCluster])["10.0.4.1:8080"]
			return ok
		})
		eq(t, len(cs[echoCluster].Endpoints), 4)
		eq(t, len(cs), 3)
		waitFor(t, "connected", func() bool { return a.c.Stats().Connected })
		if n := a.c.Stats().Streams; n < 2 {
			t.Fatalf("%d streams, want a second one after the restart", n)
		}
	})
}

// tokenCreds sends a bearer token over an insecure test connection.
type tokenCreds string

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(c)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return false }

func TestAuthenticator(t *testing.T) {
	auth := AuthenticatorFunc(func(ctx context.Context) (string, string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("authorization"); len(v) == 1 && v[0] == "Bearer web-token" {
			return "default", "web", nil
		}
		return "", "", errors.New("no valid ServiceAccount token")
	})
	forBothProtocols(t, func(t *testing.T, delta bool) {
		cp := startControlPlane(t, "127.0.0.1:0", Options{Authenticator: auth}, func(s *Server) {
			mesh(s)
			s.SetProxy("intruder.other", ProxyInfo{LocalService: nn("other", "db")})
		})
		anon := startSidecar(t, cp.addr, "anon.default", delta, nil)
		waitFor(t, "two refused streams", func() bool { return cp.srv.Stats().Unauthenticated >= 2 })
		select {
		case <-anon.c.Ready():
			t.Fatal("unauthenticated sidecar became ready")
		default:
		}
		eq(t, anon.c.Clusters(), []config.Cluster(nil))

		// A token for namespace default, used by a node of namespace other.
		intruder := startSidecar(t, cp.addr, "intruder.other", delta, nil, grpc.WithPerRPCCredentials(tokenCreds("web-token")))
		waitFor(t, "two denied streams", func() bool { return cp.srv.Stats().Denied >= 2 })
		eq(t, intruder.c.Clusters(), []config.Cluster(nil))

		a := startSidecar(t, cp.addr, "web-a.default", delta, nil, grpc.WithPerRPCCredentials(tokenCreds("web-token")))
		a.waitReady(t)
		eq(t, len(a.c.Clusters()), 3)
	})
}

// TestNotSynced: before SetSynced, sidecars wait instead of receiving an
// empty mesh.
func TestNotSynced(t *testing.T) {
	srv := NewServer(Options{Logger: quiet})
	mesh(srv)
	lis := listen(t, "127.0.0.1:0")
	g := grpc.NewServer()
	srv.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = srv.Run(ctx) }()
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); cancel(); <-ran })

	a := startSidecar(t, lis.Addr().String(), "web-a.default", false, nil)
	// The sidecar's first request was handled (its stream counted on its
	// proxy), and so was the debounce period of the model's changes:
	// neither published a snapshot.
	waitFor(t, "the sidecar's request", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		p := srv.proxies["web-a.default"]
		return p != nil && p.streams == 1
	})
	waitFor(t, "the debounced changes", func() bool { return srv.Stats().Debounced >= 1 })
	eq(t, srv.Stats().Snapshots, 0)
	eq(t, srv.Stats().Rebuilds, 0)
	select {
	case <-a.c.Ready():
		t.Fatal("ready before the control plane synced")
	default:
	}
	srv.SetSynced()
	a.waitReady(t)
	eq(t, len(a.c.Clusters()), 3)
}

// TestServiceLeftOut: a Service with a bad annotation is logged and left
// out; the others are served.
func TestServiceLeftOut(t *testing.T) {
	cp := startControlPlane(t, "127.0.0.1:0", Options{}, func(s *Server) {
		mesh(s)
		s.UpsertService(service("default", "bad", map[string]string{AnnotationLBPolicy: "fastest"}, "http:80"))
	})
	a := startSidecar(t, cp.addr, "web-a.default", false, nil)
	a.waitReady(t)
	eq(t, len(a.c.Clusters()), 3)
	wantErr(t, cp.srv.ServiceError(nn("default", "bad")), "xds: service default/bad: annotation meshlet.io/lb-policy")
	eq(t, cp.srv.Stats().ServiceErrors, 1)

	// Fixing the annotation brings it in.
	cp.srv.UpsertService(service("default", "bad", map[string]string{AnnotationLBPolicy: "random"}, "http:80"))
	a.waitClusters(t, "the fixed service", func(cs map[string]config.Cluster) bool { return len(cs) == 4 })
	eq(t, cp.srv.ServiceError(nn("default", "bad")), nil)
}

// TestNodeRelabel: relabelling a Node moves its endpoints.
func TestNodeRelabel(t *testing.T) {
	cp := startControlPlane(t, "127.0.0.1:0", Options{}, mesh)
	a := startSidecar(t, cp.addr, "web-a.default", true, nil)
	a.waitReady(t)
	cp.srv.UpsertNode(node("n-c", "r1", "a", ""))
	cs := a.waitClusters(t, "10.0.1.3 in zone a", func(cs map[string]config.Cluster) bool {
		return endpointsOf(cs[echoCluster])["10.0.1.3:8080"].Locality.Zone == "a"
	})
	eq(t, endpointsOf(cs[echoCluster])["10.0.1.3:8080"].Priority, uint32(0))
	// Unchanged labels (a Node status update) schedule no rebuild: the
	// upsert, done when it returns, counts no change.
	changes := cp.srv.Stats().Changes
	n := node("n-c", "r1", "a", "")
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	cp.srv.UpsertNode(n)
	eq(t, cp.srv.Stats().Changes, changes)
	// A label change does.
	cp.srv.UpsertNode(node("n-c", "r1", "b", ""))
	eq(t, cp.srv.Stats().Changes, changes+1)
}

// TestLocalityFromPodNode: a sidecar whose node id names a pod gets the
// priorities of the zone of that pod's node, whatever locality it reports
// (the injected sidecar reports none); the pod's node learnt after the
// stream opened still applies.
func TestLocalityFromPodNode(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, delta bool) {
		cp := startControlPlane(t, "127.0.0.1:0", Options{}, mesh)
		c := startSidecar(t, cp.addr, "client-c.default", delta, &corev3.Locality{Region: "r1", Zone: "a"})
		c.waitReady(t)
		prios := func(cs map[string]config.Cluster) [3]uint32 {
			e := endpointsOf(cs[echoCluster])
			return [3]uint32{e["10.0.1.1:8080"].Priority, e["10.0.1.2:8080"].Priority, e["10.0.1.3:8080"].Priority}
		}
		// Unknown pod: the reported zone a.
		c.waitClusters(t, "reported zone a", func(cs map[string]config.Cluster) bool { return prios(cs) == [3]uint32{0, 1, 1} })
		// The pod runs on n-c (zone c).
		cp.srv.UpsertPod(pod("default", "client-c", "", "n-c", false))
		c.waitClusters(t, "zone c from the pod's node", func(cs map[string]config.Cluster) bool { return prios(cs) == [3]uint32{1, 1, 0} })
		// Forgotten (pod deleted): back to what it reports.
		cp.srv.DeletePod(nn("default", "client-c"))
		c.waitClusters(t, "reported zone a again", func(cs map[string]config.Cluster) bool { return prios(cs) == [3]uint32{0, 1, 1} })
	})
}
