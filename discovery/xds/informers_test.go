package xds

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
)

// runRouteInformers runs RunInformersWithRoutes and the server on fake
// clients holding shop's Services and routes, the gateway client serving
// the resources named (httproutes, grpcroutes). It returns the server,
// the gateway client and how many times the missing HTTPRoute CRD was
// logged.
func runRouteInformers(t *testing.T, served []string, routes ...runtime.Object) (*Server, *gatewayfake.Clientset, *atomic.Int64) {
	t.Helper()
	gw := gatewayfake.NewSimpleClientset(routes...)
	if len(served) > 0 {
		list := &metav1.APIResourceList{GroupVersion: "gateway.networking.k8s.io/v1"}
		for _, r := range served {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: r, Namespaced: true})
		}
		gw.Resources = []*metav1.APIResourceList{list}
	}
	s, missing := runInformersOn(t, gw)
	return s, gw, missing
}

// runInformersOn runs RunInformersWithRoutes and the server on a fake
// kube client holding shop's Services and on gw, until the first synced
// rebuild; it returns the server and how many times the missing
// HTTPRoute CRD was logged. Kinds not served are asked for again every
// 20 ms.
func runInformersOn(t *testing.T, gw *gatewayfake.Clientset) (*Server, *atomic.Int64) {
	t.Helper()
	var objs []runtime.Object
	for _, s := range shop() {
		objs = append(objs, s)
	}
	kube := k8sfake.NewClientset(objs...)
	var missing atomic.Int64
	log := slog.New(countingHandler{quiet.Handler(), "HTTPRoutes not served: no routes until its CRD is installed", &missing})
	s := NewServer(Options{Logger: log, Debounce: 10 * time.Millisecond, RecheckKinds: 20 * time.Millisecond})
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
	return s, &missing
}

func hasRoutes(s *Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routeResults[nn("shop", "echo")] != nil
}

// producerRoutes are the clusters with producer routes of shop/echo.
func producerRoutes(s *Server) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.routeResults[nn("shop", "echo")].forNamespace("")))
}

// TestInformersWithoutRouteCRD: an API server without the HTTPRoute CRD
// (discovery answers NotFound) is logged once; the mesh still syncs,
// with no routes.
func TestInformersWithoutRouteCRD(t *testing.T) {
	route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, rule(nil, to("", "v1", 80, nil)))
	s, _, missing := runRouteInformers(t, nil, route)
	eq(t, missing.Load(), int64(1))
	eq(t, hasRoutes(s), false)
	eq(t, s.ServiceError(nn("shop", "echo")), nil)
	s.mu.Lock()
	n := len(s.results)
	s.mu.Unlock()
	eq(t, n, 3)
}

// TestInformersWithRoutes: HTTPRoutes and GRPCRoutes from the informers
// are translated before the first snapshot, their status is written, and
// a route change through the API reaches the model.
func TestInformersWithRoutes(t *testing.T) {
	route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, rule(nil, to("", "v1", 80, nil)))
	grpc := grpcRoute("shop", "g", 0, []gatewayv1.ParentReference{svcRef("", "echo", 8080)}, grule(nil, gto("", "v1", 80, nil)))
	s, gw, missing := runRouteInformers(t, []string{"httproutes", "grpcroutes"}, route, grpc)
	eq(t, missing.Load(), int64(0))
	eq(t, producerRoutes(s), []string{echo8080, echo80}) // in the first synced rebuild (sorted)
	routes, grpcs := gw.GatewayV1().HTTPRoutes("shop"), gw.GatewayV1().GRPCRoutes("shop")
	waitFor(t, "the routes' status", func() bool {
		r, err := routes.Get(context.Background(), "r", metav1.GetOptions{})
		g, gerr := grpcs.Get(context.Background(), "g", metav1.GetOptions{})
		return err == nil && gerr == nil && len(r.Status.Parents) == 1 && len(g.Status.Parents) == 1 &&
			meta.IsStatusConditionTrue(r.Status.Parents[0].Conditions, string(gatewayv1.RouteConditionAccepted)) &&
			meta.IsStatusConditionTrue(g.Status.Parents[0].Conditions, string(gatewayv1.RouteConditionAccepted))
	})
	if err := grpcs.Delete(context.Background(), "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the GRPCRoute's deletion", func() bool { return slices.Equal(producerRoutes(s), []string{echo80}) })
	if err := routes.Delete(context.Background(), "r", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the route's deletion", func() bool { return !hasRoutes(s) })
}

// TestInformersWithoutGRPCRouteCRD: an API server serving HTTPRoutes but
// not GRPCRoutes (an older Gateway API, whose GRPCRoute is not at v1)
// translates the HTTPRoutes; the GRPCRoute informer is never started, so
// the caches sync.
func TestInformersWithoutGRPCRouteCRD(t *testing.T) {
	route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, rule(nil, to("", "v1", 80, nil)))
	grpc := grpcRoute("shop", "g", 0, []gatewayv1.ParentReference{svcRef("", "echo", 8080)}, grule(nil, gto("", "v1", 80, nil)))
	s, _, missing := runRouteInformers(t, []string{"httproutes"}, route, grpc)
	eq(t, missing.Load(), int64(0))
	eq(t, producerRoutes(s), []string{echo80})
}

// installable is a fake discovery whose group version answers NotFound
// until installed is set, as an API server does before a CRD is created,
// then lists resources.
func installable(f *k8stesting.Fake, groupVersion string, resources ...string) *atomic.Bool {
	list := &metav1.APIResourceList{GroupVersion: groupVersion}
	for _, r := range resources {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: r, Namespaced: true})
	}
	f.Resources = []*metav1.APIResourceList{list}
	var installed atomic.Bool
	f.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		if installed.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: groupVersion}, "")
	})
	return &installed
}

// TestInformersStartRoutesInstalledLater: route CRDs installed after the
// control plane started are watched once discovery serves them, without
// a restart: the routes already there are translated and their status
// written, and a later change reaches the model. (Istio's policies, whose
// fake clientset streams no watch-list bookmarks, are checked the same
// way against a real API server: e2e TestKindsInstalledLater.)
func TestInformersStartRoutesInstalledLater(t *testing.T) {
	route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, rule(nil, to("", "v1", 80, nil)))
	gw := gatewayfake.NewSimpleClientset(route)
	installed := installable(&gw.Fake, routeGroupVersion, "httproutes", "grpcroutes")
	s, missing := runInformersOn(t, gw)
	eq(t, missing.Load(), int64(1))
	eq(t, hasRoutes(s), false)

	installed.Store(true)
	waitFor(t, "the route translated once its CRD is served", func() bool { return hasRoutes(s) })
	eq(t, producerRoutes(s), []string{echo80})
	routes := gw.GatewayV1().HTTPRoutes("shop")
	waitFor(t, "the route's status", func() bool {
		r, err := routes.Get(context.Background(), "r", metav1.GetOptions{})
		return err == nil && len(r.Status.Parents) == 1 && meta.IsStatusConditionTrue(r.Status.Parents[0].Conditions, string(gatewayv1.RouteConditionAccepted))
	})
	if err := routes.Delete(context.Background(), "r", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the route's deletion, seen by the late informer", func() bool { return !hasRoutes(s) })
}
