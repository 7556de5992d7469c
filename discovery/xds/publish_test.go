package xds

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
)

// heldCache is the server's real snapshot cache with a gate in front of
// one node's SetSnapshot: once armed, that node's next publish reports
// that it started and waits for release before it goes through. It
// stands for a publish that takes long; everything else, and the held
// publish itself once released, is the real cache.
type heldCache struct {
	cachev3.SnapshotCache
	node    string
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (c *heldCache) SetSnapshot(ctx context.Context, node string, snap cachev3.ResourceSnapshot) error {
	if node == c.node && c.armed.CompareAndSwap(true, false) {
		c.entered <- struct{}{}
		select {
		case <-c.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.SnapshotCache.SetSnapshot(ctx, node, snap)
}

func (c *heldCache) releaseNow() { c.once.Do(func() { close(c.release) }) }

// TestPublishOutsideTheModelLock: snapshots are set after the model lock
// is released, by workers that publish sidecars independently. While one
// sidecar's publish is held, the model takes changes (the calls return),
// rebuilds, and another sidecar on a real gRPC stream receives them; the
// held sidecar keeps its old state, and once released it gets the latest
// state, nothing lost.
func TestPublishOutsideTheModelLock(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, delta bool) {
		var held *heldCache
		cp := startControlPlane(t, "127.0.0.1:0", Options{}, func(s *Server) {
			mesh(s)
			held = &heldCache{SnapshotCache: s.cache, node: "web-a.default", entered: make(chan struct{}, 1), release: make(chan struct{})}
			s.cache = held
		})
		t.Cleanup(held.releaseNow) // before the server stops, also on failure
		a := startSidecar(t, cp.addr, "web-a.default", delta, nil)
		b := startSidecar(t, cp.addr, "other-b.default", delta, &corev3.Locality{Region: "r1", Zone: "b"})
		a.waitReady(t)
		b.waitReady(t)
		before := a.c.Clusters()

		held.armed.Store(true)
		cp.srv.UpsertEndpointSlice(slice("default", "echo-1", "echo", v4, []string{"http:8080"},
			ep{addr: "10.0.1.1", pod: "echo-a", node: "n-a"},
			ep{addr: "10.0.1.2", pod: "echo-b", node: "n-b", cond: "notready"},
			ep{addr: "10.0.1.3", pod: "echo-c", node: "n-c"}))
		select {
		case <-held.entered:
		case <-time.After(waitTimeout):
			t.Fatal("web-a's publish never started")
		}

		// web-a's publish is under way. A second change goes into the
		// model and is rebuilt meanwhile.
		updated := make(chan struct{})
		go func() {
			defer close(updated)
			cp.srv.UpsertEndpointSlice(slice("default", "echo-2", "echo", v4, []string{"http:8080"}, ep{addr: "10.0.4.1", node: "n-c"}))
			cp.srv.Stats()
		}()
		select {
		case <-updated:
		case <-time.After(waitTimeout):
			t.Fatal("a model update waited for a publish")
		}
		both := func(cs map[string]config.Cluster) bool {
			eps := endpointsOf(cs[echoCluster])
			_, added := eps["10.0.4.1:8080"]
			return added && eps["10.0.1.2:8080"].Health == lb.EDSUnhealthy
		}
		b.waitClusters(t, "both changes at other-b while web-a's publish is held", both)
		eq(t, a.c.Clusters(), before)

		held.releaseNow()
		a.waitClusters(t, "both changes at web-a once released", both)
	})
}
