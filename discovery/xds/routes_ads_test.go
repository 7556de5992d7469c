package xds

import (
	"context"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// deltaClient is a bare delta ADS stream, as a sidecar opens it.
type deltaClient struct {
	stream grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
	resps  chan *discoveryv3.DeltaDiscoveryResponse
}

func startDeltaClient(t *testing.T, addr, nodeID string) *deltaClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &deltaClient{stream: stream, resps: make(chan *discoveryv3.DeltaDiscoveryResponse, 16)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(c.resps)
				return
			}
			c.resps <- r
		}
	}()
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: nodeID}, TypeUrl: resource.ClusterType})
	return c
}

func (c *deltaClient) send(t *testing.T, req *discoveryv3.DeltaDiscoveryRequest) {
	t.Helper()
	if err := c.stream.Send(req); err != nil {
		t.Fatal(err)
	}
}

// next returns the next response of typeURL, ACKing it (responses of
// other types are ACKed and skipped).
func (c *deltaClient) next(t *testing.T, typeURL string) *discoveryv3.DeltaDiscoveryResponse {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case r, ok := <-c.resps:
			if !ok {
				t.Fatal("stream ended")
			}
			c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
			if r.GetTypeUrl() == typeURL {
				return r
			}
		case <-timeout:
			t.Fatalf("no %s response", typeURL)
		}
	}
}

// routeConfigs unmarshals a response's RouteConfigurations by name.
func routeConfigs(t *testing.T, r *discoveryv3.DeltaDiscoveryResponse) map[string]*routev3.RouteConfiguration {
	t.Helper()
	out := map[string]*routev3.RouteConfiguration{}
	for _, res := range r.GetResources() {
		var rc routev3.RouteConfiguration
		if err := res.GetResource().UnmarshalTo(&rc); err != nil {
			t.Fatal(err)
		}
		out[res.GetName()] = &rc
	}
	return out
}

// echoRoute is an HTTPRoute on the echo Service's port 80 to v1.
func echoRoute() *gatewayv1.HTTPRoute {
	return httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, rule(nil, to("", "v1", 80, nil)))
}

// startShop starts a control plane (10 ms debounce) with the shop's
// Services and routes.
func startShop(t *testing.T, routes ...*gatewayv1.HTTPRoute) *controlPlane {
	t.Helper()
	return startControlPlane(t, "127.0.0.1:0", Options{Debounce: 10 * time.Millisecond}, func(s *Server) {
		for _, svc := range shop() {
			s.UpsertService(svc)
		}
		for _, r := range routes {
			s.UpsertHTTPRoute(r)
		}
	})
}

// TestRoutesOverADS: over a real delta ADS stream, a sidecar finds the
// RouteConfiguration's name in its cluster's metadata, subscribes to it
// and receives it; a change of the route pushes that RouteConfiguration
// again, and no cluster; so does a GRPCRoute taking the port.
func TestRoutesOverADS(t *testing.T) {
	route := echoRoute()
	cp := startShop(t, route)
	c := startDeltaClient(t, cp.addr, "client-0.web")
	cds := c.next(t, resource.ClusterType)
	names := map[string]string{}
	for _, res := range cds.GetResources() {
		var cl clusterv3.Cluster
		if err := res.GetResource().UnmarshalTo(&cl); err != nil {
			t.Fatal(err)
		}
		names[cl.GetName()] = routeConfigOf(&cl)
	}
	eq(t, names, map[string]string{echo80: echo80, echo8080: "", v1c: "", v2c: ""})

	c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResourceNamesSubscribe: []string{names[echo80]}})
	rcs := routeConfigs(t, c.next(t, resource.RouteType))
	rs := routesOf(t, rcs[echo80])
	eq(t, [2]string{rs[0].GetName(), rs[0].GetRoute().GetCluster()}, [2]string{"shop/r/0", v1c})

	changed := route.DeepCopy()
	changed.Spec.Rules[0].BackendRefs = []gatewayv1.HTTPBackendRef{to("", "v2", 80, nil)}
	cp.srv.UpsertHTTPRoute(changed)
	update := c.next(t, resource.RouteType)
	rcs = routeConfigs(t, update)
	eq(t, len(rcs), 1)
	eq(t, routesOf(t, rcs[echo80])[0].GetRoute().GetCluster(), v2c)
	select {
	case r := <-c.resps:
		t.Fatalf("a route change also sent %s %v", r.GetTypeUrl(), r.GetResources())
	case <-time.After(200 * time.Millisecond):
	}

	// A GRPCRoute on the same port displaces the HTTPRoute (GEP-1294):
	// the same RouteConfiguration is pushed again, with its rules.
	cp.srv.UpsertGRPCRoute(grpcRoute("shop", "g", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)},
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "shop.Cart", "")}, gto("", "v1", 80, nil))))
	rs = routesOf(t, routeConfigs(t, c.next(t, resource.RouteType))[echo80])
	eq(t, [3]string{rs[0].GetName(), rs[0].GetMatch().GetPrefix(), rs[0].GetRoute().GetCluster()}, [3]string{"shop/g/0", "/shop.Cart/", v1c})
	eq(t, len(rs), 1)
}
