package xds

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshlet-dev/meshlet/discovery/syncz"
)

// typeSync is the state of one type of the one stream Syncz reports.
func typeSync(s *Server, typ string) (syncz.TypeSync, *syncz.NACK) {
	for _, p := range s.Syncz() {
		for _, ts := range p.Types {
			if ts.Type == typ {
				return ts, p.LastNACK
			}
		}
	}
	return syncz.TypeSync{}, nil
}

// A sidecar's stream as /debug/syncz sees it: acknowledged versions are
// SYNCED, a response not yet acknowledged STALE, a rejected one NACKED
// with the sidecar's message.
func TestSyncz(t *testing.T) {
	route := echoRoute()
	cp := startShop(t, route)
	c := startDeltaClient(t, cp.addr, "client-0.web")
	cds := c.next(t, resource.ClusterType)
	waitFor(t, "cds SYNCED", func() bool {
		ts, _ := typeSync(cp.srv, "cds")
		return ts.Status == syncz.Synced && ts.Acked == cds.GetSystemVersionInfo() && ts.Acked != ""
	})
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResourceNamesSubscribe: []string{echo80}})
	c.next(t, resource.RouteType)
	waitFor(t, "rds SYNCED", func() bool { ts, _ := typeSync(cp.srv, "rds"); return ts.Status == syncz.Synced })

	// A route change: its response, held unacknowledged, is STALE.
	changed := route.DeepCopy()
	changed.Spec.Rules[0].BackendRefs = []gatewayv1.HTTPBackendRef{to("", "v2", 80, nil)}
	cp.srv.UpsertHTTPRoute(changed)
	var rds *discoveryv3.DeltaDiscoveryResponse
	for rds == nil {
		select {
		case r := <-c.resps:
			if r.GetTypeUrl() == resource.RouteType {
				rds = r
			}
		case <-time.After(waitTimeout):
			t.Fatal("no rds response to the route change")
		}
	}
	waitFor(t, "rds STALE", func() bool {
		ts, _ := typeSync(cp.srv, "rds")
		return ts.Status == syncz.Stale && ts.Nonce == rds.GetNonce()
	})

	// Rejected: NACKED, with the message and the version.
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResponseNonce: rds.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: "routes[0]: refused by the test"}})
	var nack *syncz.NACK
	waitFor(t, "rds NACKED", func() bool {
		var ts syncz.TypeSync
		ts, nack = typeSync(cp.srv, "rds")
		return ts.Status == syncz.NACKed
	})
	if nack == nil || nack.Type != "rds" || nack.Message != "routes[0]: refused by the test" || nack.Version != rds.GetSystemVersionInfo() {
		t.Errorf("last NACK %+v, want rds's version %s with the sidecar's message", nack, rds.GetSystemVersionInfo())
	}
	if ts, _ := typeSync(cp.srv, "cds"); ts.Status != syncz.Synced {
		t.Errorf("cds %s after an rds NACK, want SYNCED", ts.Status)
	}

	// The JSON istiod's /debug/syncz gives, which meshletctl reads.
	rec := httptest.NewRecorder()
	cp.srv.SynczHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/syncz", nil))
	var got []syncz.ProxySync
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("syncz: %v\n%s", err, rec.Body)
	}
	if len(got) != 1 || got[0].Proxy != "client-0.web" || !got[0].Delta || got[0].LastNACK == nil || len(got[0].Types) < 2 {
		t.Errorf("syncz: %s", rec.Body)
	}
}

// rawADS is a state-of-the-world ADS stream to addr, without a client's
// bookkeeping: the test sends each request itself. It ends with the test.
func rawADS(t *testing.T, addr string) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// State of the world: every request after a response carries its nonce,
// so a subscription change after a NACK (still the old version) must not
// read as an ACK of the rejected one.
func TestSynczSotW(t *testing.T) {
	cp := startShop(t)
	stream := rawADS(t, cp.addr)
	send := func(req *discoveryv3.DiscoveryRequest) {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "client-0.web"}, TypeUrl: resource.ClusterType})
	cds, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "cds STALE before its ACK", func() bool { ts, _ := typeSync(cp.srv, "cds"); return ts.Status == syncz.Stale })
	// The sidecar rejects it: NACKED.
	send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: cds.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: "clusters[0]: refused by the test"}})
	waitFor(t, "cds NACKED", func() bool { ts, _ := typeSync(cp.srv, "cds"); return ts.Status == syncz.NACKed })
	// A later request with the same nonce, no error and the old version
	// (a subscription change) leaves it NACKED.
	send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: cds.GetNonce(), ResourceNames: []string{"x"}})
	send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"y"}})
	waitFor(t, "the eds subscription seen", func() bool { ts, _ := typeSync(cp.srv, "eds"); return ts.Type == "eds" })
	if ts, _ := typeSync(cp.srv, "cds"); ts.Status != syncz.NACKed || ts.Acked != "" {
		t.Errorf("cds %s acked %q after a subscription change, want NACKED with nothing acknowledged", ts.Status, ts.Acked)
	}
	// An ACK restates the version sent: SYNCED.
	send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: cds.GetNonce(), VersionInfo: cds.GetVersionInfo()})
	waitFor(t, "cds SYNCED", func() bool {
		ts, _ := typeSync(cp.srv, "cds")
		return ts.Status == syncz.Synced && ts.Acked == cds.GetVersionInfo()
	})
}

// A peer that asks for any number of made-up resource types (a flood on
// one stream) keeps at most maxStreamTypes of them in its state, and a
// sidecar alongside is served and in sync all the while.
func TestSynczTypeFlood(t *testing.T) {
	cp := startShop(t, echoRoute())
	stream := rawADS(t, cp.addr)
	for i := range 500 {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: fmt.Sprintf("type.googleapis.com/flood.T%d", i), ResponseNonce: fmt.Sprint(i)}
		if i == 0 {
			req.Node = &corev3.Node{Id: "flood-0.web"}
		}
		if err := stream.Send(req); err != nil {
			break // the server may end the stream: either way it is bounded
		}
	}
	waitFor(t, "the flooding stream's state", func() bool {
		for _, p := range cp.srv.Syncz() {
			if p.Proxy == "flood-0.web" {
				return len(p.Types) == maxStreamTypes
			}
		}
		return false
	})
	// The sidecar alongside, the flooding stream still open.
	legit := startDeltaClient(t, cp.addr, "client-0.web")
	legit.next(t, resource.ClusterType)
	waitFor(t, "the legitimate sidecar's cds SYNCED", func() bool {
		for _, p := range cp.srv.Syncz() {
			if p.Proxy == "client-0.web" {
				for _, ts := range p.Types {
					if ts.Type == "cds" && ts.Status == syncz.Synced {
						return true
					}
				}
			}
		}
		return false
	})
	for _, p := range cp.srv.Syncz() {
		if p.Proxy == "flood-0.web" && len(p.Types) > maxStreamTypes {
			t.Errorf("the flooding stream holds %d types, want at most %d", len(p.Types), maxStreamTypes)
		}
	}
}
