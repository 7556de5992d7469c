package xds

import (
	"context"
	"strings"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshlet-dev/meshlet/config"
)

// nack is a rejection a test server saw.
type nack struct {
	typeURL, version, message string
}

// rawServer is a plain go-control-plane ADS server whose snapshots a test
// sets directly, so it can push resources meshlet's Server never makes.
type rawServer struct {
	cache cachev3.SnapshotCache
	addr  string
	mu    sync.Mutex
	nacks []nack
}

func startRawServer(t *testing.T) *rawServer {
	t.Helper()
	rs := &rawServer{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	record := func(typeURL, version, msg string) {
		rs.mu.Lock()
		rs.nacks = append(rs.nacks, nack{typeURL, version, msg})
		rs.mu.Unlock()
	}
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			if d := req.GetErrorDetail(); d != nil {
				record(req.GetTypeUrl(), req.GetVersionInfo(), d.GetMessage())
			}
			return nil
		},
		StreamDeltaRequestFunc: func(_ int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			if d := req.GetErrorDetail(); d != nil {
				record(req.GetTypeUrl(), "", d.GetMessage())
			}
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	lis := listen(t, "127.0.0.1:0")
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, rs.cache, cb))
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); cancel() })
	rs.addr = lis.Addr().String()
	return rs
}

func (rs *rawServer) set(t *testing.T, node, version string, c *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) {
	t.Helper()
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{
		resource.ClusterType: {c}, resource.EndpointType: {cla},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Consistent(); err != nil {
		t.Fatal(err)
	}
	if err := rs.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// waitNACK waits for a rejection of typeURL whose message has part.
func (rs *rawServer) waitNACK(t *testing.T, typeURL, part string) nack {
	t.Helper()
	var found nack
	waitFor(t, "a NACK of "+typeURL+" naming "+part, func() bool {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		for _, n := range rs.nacks {
			if n.typeURL == typeURL && strings.Contains(n.message, part) {
				found = n
				return true
			}
		}
		return false
	})
	return found
}

// TestNACK: a resource that fails translation is NACKed with the reason
// and the previous good configuration stays; a good one is taken again.
func TestNACK(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, delta bool) {
		rs := startRawServer(t)
		good := translateOne(t, ServiceInput{
			Service: service("default", "echo", nil, "http:80"),
			Slices: []*discoveryv1.EndpointSlice{slice("default", "echo-1", "echo", v4, []string{"http:8080"},
				ep{addr: "10.0.1.1", node: "n-a"}, ep{addr: "10.0.1.2", node: "n-b"})},
			Nodes: threeZones(),
		})
		rs.set(t, "n1", "1", good.Cluster, good.LoadAssignment)
		a := startSidecar(t, rs.addr, "n1", delta, nil)
		a.waitReady(t)
		want := a.c.Clusters()
		eq(t, len(want), 1)
		eq(t, len(want[0].Endpoints), 2)
		updates := a.updateCount()

		// An endpoint port out of range: EDS is NACKed.
		badCLA := proto.Clone(good.LoadAssignment).(*endpointv3.ClusterLoadAssignment)
		badCLA.Endpoints[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress().PortSpecifier =
			&corev3.SocketAddress_PortValue{PortValue: 70000}
		rs.set(t, "n1", "2", good.Cluster, badCLA)
		n := rs.waitNACK(t, resource.EndpointType, "endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value: 70000 out of range")
		if !delta && n.version != "1" {
			t.Fatalf("NACK carries version %q, want the last accepted, 1", n.version)
		}
		if !strings.Contains(n.message, `load assignment "outbound|80||echo.default.svc.cluster.local"`) {
			t.Fatalf("NACK %q does not name the load assignment", n.message)
		}
		eq(t, a.c.Clusters(), want)
		eq(t, a.updateCount(), updates)
		if st := a.c.Stats(); st.NACKs < 1 || !strings.Contains(st.LastNACK, "70000") {
			t.Fatalf("stats %+v", st)
		}

		// An unsupported cluster policy: CDS is NACKed.
		badCluster := proto.Clone(good.Cluster).(*clusterv3.Cluster)
		badCluster.LbPolicy = clusterv3.Cluster_CLUSTER_PROVIDED
		rs.set(t, "n1", "3", badCluster, good.LoadAssignment)
		rs.waitNACK(t, resource.ClusterType, `cluster "outbound|80||echo.default.svc.cluster.local": lb_policy: CLUSTER_PROVIDED not supported`)
		eq(t, a.c.Clusters(), want)
		eq(t, a.updateCount(), updates)

		// A good version is taken.
		next := translateOne(t, ServiceInput{
			Service: service("default", "echo", nil, "http:80"),
			Slices: []*discoveryv1.EndpointSlice{slice("default", "echo-1", "echo", v4, []string{"http:8080"},
				ep{addr: "10.0.1.1", node: "n-a"}, ep{addr: "10.0.1.2", node: "n-b"}, ep{addr: "10.0.1.3", node: "n-c"})},
			Nodes: threeZones(),
		})
		rs.set(t, "n1", "4", next.Cluster, next.LoadAssignment)
		a.waitClusters(t, "the good version", func(cs map[string]config.Cluster) bool {
			return len(cs["outbound|80||echo.default.svc.cluster.local"].Endpoints) == 3
		})
	})
}

// TestServerParksNACK: meshlet's Server does not resend a rejected
// state-of-the-world version; the next change is delivered.
func TestServerParksNACK(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, delta bool) {
		cp := startControlPlane(t, "127.0.0.1:0", Options{}, mesh)
		a := startSidecar(t, cp.addr, "web-a.default", delta, nil)
		a.waitReady(t)
		want := a.c.Clusters()

		// Push, behind the server's back, a snapshot the sidecar rejects.
		cp.srv.mu.Lock()
		cur, err := cp.srv.cache.GetSnapshot("web-a.default")
		if err != nil {
			t.Fatal(err)
		}
		var cds, eds []hashed
		for name, c := range cur.GetResources(resource.ClusterType) {
			cds = append(cds, hashResource(name, c))
		}
		for name, r := range cur.GetResources(resource.EndpointType) {
			cla := proto.Clone(r).(*endpointv3.ClusterLoadAssignment)
			cla.Policy = &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(0)}
			eds = append(eds, hashResource(name, cla))
		}
		err = cp.srv.cache.SetSnapshot(context.Background(), "web-a.default", newSnapshot(cds, eds, nil, nil))
		cp.srv.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the NACK", func() bool { return cp.srv.Stats().NACKs >= 1 })
		if !strings.Contains(a.c.Stats().LastNACK, "policy.overprovisioning_factor: 0 must be > 0") {
			t.Fatalf("last NACK %q", a.c.Stats().LastNACK)
		}
		eq(t, a.c.Clusters(), want)

		// A real change gets through. A resend of the rejected version,
		// the server's answer to the NACK, would reach the sidecar on the
		// same stream before this change, and the sidecar counts a NACK
		// as it receives a response: once the change is in, the counts
		// are final.
		cp.srv.UpsertEndpointSlice(slice("default", "echo-2", "echo", v4, []string{"http:8080"}, ep{addr: "10.0.4.1", node: "n-c"}))
		a.waitClusters(t, "the change", func(cs map[string]config.Cluster) bool {
			return len(cs[echoCluster].Endpoints) == 4
		})
		eq(t, a.c.Stats().NACKs, 1)
		eq(t, cp.srv.Stats().NACKs, 1)
	})
}
