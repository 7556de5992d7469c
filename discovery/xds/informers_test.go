package xds

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
)

// runRouteInformers runs RunInformersWithRoutes and the server on fake
// clients holding shop's Services and route, the gateway client serving
// HTTPRoutes or not. It returns the server, the gateway client and how
// many times the missing CRD was logged.
func runRouteInformers(t *testing.T, served bool, route *gatewayv1.HTTPRoute) (*Server, *gatewayfake.Clientset, *atomic.Int64) {
	t.Helper()
	var objs []runtime.Object
	for _, s := range shop() {
		objs = append(objs, s)
	}
	kube := k8sfake.NewClientset(objs...)
	gw := gatewayfake.NewSimpleClientset(route)
	if served {
		gw.Resources = []*metav1.APIResourceList{{GroupVersion: "gateway.networking.k8s.io/v1",
			APIResources: []metav1.APIResource{{Name: "httproutes", Kind: "HTTPRoute", Namespaced: true}}}}
	}
	var missing atomic.Int64
	log := slog.New(countingHandler{quiet.Handler(), "HTTPRoutes not served (Gateway API CRDs not installed?): no routes", &missing})
	s := NewServer(Options{Logger: log, Debounce: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- s.Run(ctx) }()
	go func() { done <- RunInformersWithRoutes(ctx, kube, gw, s, 0) }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
	})
	waitFor(t, "a synced rebuild", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.synced
	})
	return s, gw, &missing
}

func hasRoutes(s *Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routeResults[nn("shop", "echo")] != nil
}

// TestInformersWithoutRouteCRD: an API server without the HTTPRoute CRD
// (discovery answers NotFound) is logged once; the mesh still syncs,
// with no routes.
func TestInformersWithoutRouteCRD(t *testing.T) {
	route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, rule(nil, to("", "v1", 80, nil)))
	s, _, missing := runRouteInformers(t, false, route)
	eq(t, missing.Load(), int64(1))
	eq(t, hasRoutes(s), false)
	eq(t, s.ServiceError(nn("shop", "echo")), nil)
	s.mu.Lock()
	n := len(s.results)
	s.mu.Unlock()
	eq(t, n, 3)
}

// TestInformersWithRoutes: HTTPRoutes from the informer are translated
// before the first snapshot, their status is written, and a route
// change through the API reaches the model.
func TestInformersWithRoutes(t *testing.T) {
	route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, rule(nil, to("", "v1", 80, nil)))
	s, gw, missing := runRouteInformers(t, true, route)
	eq(t, missing.Load(), int64(0))
	eq(t, hasRoutes(s), true) // in the first synced rebuild
	routes := gw.GatewayV1().HTTPRoutes("shop")
	waitFor(t, "the route's status", func() bool {
		r, err := routes.Get(context.Background(), "r", metav1.GetOptions{})
		return err == nil && len(r.Status.Parents) == 1 &&
			meta.IsStatusConditionTrue(r.Status.Parents[0].Conditions, string(gatewayv1.RouteConditionAccepted))
	})
	if err := routes.Delete(context.Background(), "r", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the route's deletion", func() bool { return !hasRoutes(s) })
}
