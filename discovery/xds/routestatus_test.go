package xds

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
)

// statusRig is a status writer over caches a test fills, writing to a
// fake clientset.
type statusRig struct {
	w                  *routeStatusWriter
	client             *gatewayfake.Clientset
	routes, grpcRoutes cache.Indexer
	services           cache.Indexer
	now                time.Time
}

// newStatusRig holds svcs and routes (HTTPRoutes and GRPCRoutes) in its
// caches and in the API server.
func newStatusRig(t *testing.T, svcs []*corev1.Service, routes ...runtime.Object) *statusRig {
	t.Helper()
	var objs []runtime.Object
	for _, o := range routes {
		objs = append(objs, o.DeepCopyObject())
	}
	r := &statusRig{client: gatewayfake.NewSimpleClientset(objs...), now: t0.Add(time.Hour),
		routes:     cache.NewIndexer(cache.MetaNamespaceKeyFunc, routeIndexers()),
		grpcRoutes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, routeIndexers()),
		services:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
	for _, s := range svcs {
		_ = r.services.Add(s)
	}
	for _, o := range routes {
		r.cache(o)
	}
	r.w = newRouteStatusWriter(r.client, r.routes, r.grpcRoutes, corelisters.NewServiceLister(r.services), "", quiet)
	r.w.now = func() time.Time { return r.now }
	return r
}

// cache puts a copy of a route in its kind's cache, as the watch would.
func (r *statusRig) cache(o runtime.Object) {
	store := r.routes
	if _, ok := o.(*gatewayv1.GRPCRoute); ok {
		store = r.grpcRoutes
	}
	_ = store.Update(o.DeepCopyObject())
}

// sync syncs the HTTPRoute ns/name and returns the status updates it sent.
func (r *statusRig) sync(t *testing.T, key string) int {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	return r.syncKey(t, routeKey{httpRouteKind, nn(ns, name)})
}

func (r *statusRig) syncKey(t *testing.T, key routeKey) int {
	t.Helper()
	before := r.updates()
	if err := r.w.sync(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	return r.updates() - before
}

func (r *statusRig) updates() int {
	n := 0
	for _, a := range r.client.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// stored is the route as the API server has it; refresh puts it in the
// cache too, as the watch would.
func (r *statusRig) stored(t *testing.T, key string) *gatewayv1.HTTPRoute {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	got, err := r.client.GatewayV1().HTTPRoutes(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (r *statusRig) refresh(t *testing.T, key string) *gatewayv1.HTTPRoute {
	t.Helper()
	got := r.stored(t, key)
	_ = r.routes.Update(got.DeepCopy())
	return got
}

// cond summarizes a condition as type=status/reason.
func cond(p gatewayv1.RouteParentStatus, typ gatewayv1.RouteConditionType) string {
	c := meta.FindStatusCondition(p.Conditions, string(typ))
	if c == nil {
		return "none"
	}
	return string(c.Status) + "/" + c.Reason
}

// TestRouteStatus: one entry per Service parent with Accepted and
// ResolvedRefs (and PartiallyInvalid when a rule is dropped); other
// controllers' entries kept in place; ours for a parentRef gone removed;
// no write when nothing changed; lastTransitionTime kept while a
// condition's status holds.
func TestRouteStatus(t *testing.T) {
	gw := gatewayv1.ParentReference{Name: "ingress"} // a Gateway: not ours
	mirror := rule(nil, to("", "v1", 80, nil))
	mirror.Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: to("", "v2", 80, nil).BackendObjectReference}}}
	route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{gw, svcRef("", "echo", 80), svcRef("", "missing", 0), svcRef("", "echo", 9999)},
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/a")}, to("", "v1", 80, nil), to("", "gone", 80, nil)),
		mirror)
	route.Generation = 3
	other := gatewayv1.RouteParentStatus{ParentRef: gw, ControllerName: "example.com/gateway",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 2,
			LastTransitionTime: metav1.NewTime(t0)}}}
	stale := gatewayv1.RouteParentStatus{ParentRef: svcRef("", "old", 0), ControllerName: MeshControllerName,
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: metav1.NewTime(t0)}}}
	route.Status.Parents = []gatewayv1.RouteParentStatus{stale, other}
	rig := newStatusRig(t, shop(), route)

	eq(t, rig.sync(t, "shop/r"), 1)
	got := rig.refresh(t, "shop/r")
	ps := got.Status.Parents
	if len(ps) != 4 {
		t.Fatalf("%d parent entries, want 4: %+v", len(ps), ps)
	}
	eq(t, ps[0], other) // untouched, in place; the stale entry of ours is gone
	for i, want := range []struct {
		ref                         gatewayv1.ParentReference
		accepted, resolved, partial string
	}{
		{svcRef("", "echo", 80), "True/Accepted", "False/BackendNotFound", "True/UnsupportedValue"},
		{svcRef("", "missing", 0), "False/NoMatchingParent", "False/BackendNotFound", "none"},
		{svcRef("", "echo", 9999), "False/NoMatchingParent", "False/BackendNotFound", "none"},
	} {
		p := ps[i+1]
		eq(t, [5]any{p.ParentRef, p.ControllerName, cond(p, gatewayv1.RouteConditionAccepted), cond(p, gatewayv1.RouteConditionResolvedRefs),
			cond(p, gatewayv1.RouteConditionPartiallyInvalid)},
			[5]any{want.ref, MeshControllerName, want.accepted, want.resolved, want.partial})
		for _, c := range p.Conditions {
			eq(t, [2]any{c.ObservedGeneration, c.LastTransitionTime.Time}, [2]any{int64(3), rig.now})
		}
	}
	for part, in := range map[string]string{
		"shop/gone: Service not found":   meta.FindStatusCondition(ps[1].Conditions, "ResolvedRefs").Message,
		"Dropped Rule 1":                 meta.FindStatusCondition(ps[1].Conditions, "PartiallyInvalid").Message,
		"Service shop/missing not found": meta.FindStatusCondition(ps[2].Conditions, "Accepted").Message,
		"no TCP port with port 9999":     meta.FindStatusCondition(ps[3].Conditions, "Accepted").Message,
	} {
		if !strings.Contains(in, part) {
			t.Errorf("message %q lacks %q", in, part)
		}
	}

	// Nothing changed: nothing written, also later.
	rig.now = rig.now.Add(time.Hour)
	eq(t, rig.sync(t, "shop/r"), 0)

	// The missing parent appears: its Accepted flips (new time), its
	// ResolvedRefs holds (time kept).
	_ = rig.services.Add(service("shop", "missing", nil, "http:80"))
	eq(t, rig.sync(t, "shop/r"), 1)
	p := rig.refresh(t, "shop/r").Status.Parents[2]
	eq(t, cond(p, gatewayv1.RouteConditionAccepted), "True/Accepted")
	eq(t, meta.FindStatusCondition(p.Conditions, "Accepted").LastTransitionTime.Time, rig.now)
	eq(t, meta.FindStatusCondition(p.Conditions, "ResolvedRefs").LastTransitionTime.Time, t0.Add(time.Hour))

	// A condition observed at a later generation than the cache's route:
	// the cache is stale, so nothing is written.
	cached := rig.refresh(t, "shop/r")
	cached.Generation = 2
	_ = rig.routes.Update(cached)
	_ = rig.services.Delete(service("shop", "missing", nil))
	eq(t, rig.sync(t, "shop/r"), 0)
}

// TestRouteStatusReplicas: two control-plane replicas compute the same
// status. The one that writes second (its cache behind the first's
// write) meets a conflict, reads the route again and finds nothing to
// write; once its cache catches up, it sends nothing at all.
func TestRouteStatusReplicas(t *testing.T) {
	route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 0)}, rule(nil, to("", "v1", 80, nil)))
	a := newStatusRig(t, shop(), route)
	eq(t, a.sync(t, "shop/r"), 1)
	written := a.stored(t, "shop/r")

	// Replica b shares the API server (its tracker holds a's write) but
	// its cache still has the route without status.
	b := newStatusRig(t, shop(), route)
	if err := b.client.Tracker().Update(schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"},
		written.DeepCopy(), "shop"); err != nil {
		t.Fatal(err)
	}
	b.now = a.now.Add(time.Minute) // a later clock: its times would differ
	conflicts := 0
	b.client.PrependReactor("update", "httproutes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "status" {
			return false, nil, nil
		}
		conflicts++
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "gateway.networking.k8s.io", Resource: "httproutes"}, "r",
			errors.New("the object has been modified"))
	})
	eq(t, b.sync(t, "shop/r"), 1)
	eq(t, conflicts, 1) // one attempt, then the re-read found nothing to do
	eq(t, b.stored(t, "shop/r").Status, written.Status)
	b.refresh(t, "shop/r")
	eq(t, b.sync(t, "shop/r"), 0)
}

// TestMergeRouteStatusEmpty: a route without Service parents and without
// entries of ours needs no write.
func TestMergeRouteStatusEmpty(t *testing.T) {
	route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{{Name: "ingress"}}, rule(nil, to("", "v1", 80, nil)))
	lookup := func(types.NamespacedName) *corev1.Service { return nil }
	ours := routeParentStatuses(analyzeRoute(route, lookup, ""), lookup, nil, metav1.NewTime(t0))
	eq(t, len(ours), 0)
	if _, changed := mergeRouteStatus(route.Status.RouteStatus, route.Generation, ours); changed {
		t.Fatal("a status change for a route meshlet has no part in")
	}
}

// TestRouteParentConditions: a route none of whose rules can be carried
// out is not accepted (and not PartiallyInvalid); a backend of another
// kind is InvalidKind; a backend in another namespace resolves without a
// ReferenceGrant (GEP-1294).
func TestRouteParentConditions(t *testing.T) {
	svcs := map[types.NamespacedName]*corev1.Service{}
	for _, s := range append(shop(), service("billing", "pay", nil, "http:80")) {
		svcs[nn(s.Namespace, s.Name)] = s
	}
	lookup := func(k types.NamespacedName) *corev1.Service { return svcs[k] }
	mirror := rule(nil, to("", "v1", 80, nil))
	mirror.Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterCORS}}
	kind := to("", "v1", 80, nil)
	kind.Group, kind.Kind = ptr(gatewayv1.Group("multicluster.x-k8s.io")), ptr(gatewayv1.Kind("ServiceImport"))
	for _, tc := range []struct {
		name                        string
		rules                       []gatewayv1.HTTPRouteRule
		accepted, resolved, partial string
	}{
		{"every rule dropped", []gatewayv1.HTTPRouteRule{mirror}, "False/UnsupportedValue", "True/ResolvedRefs", "none"},
		{"no rules", nil, "False/UnsupportedValue", "True/ResolvedRefs", "none"},
		{"another kind", []gatewayv1.HTTPRouteRule{rule(nil, kind)}, "True/Accepted", "False/InvalidKind", "none"},
		{"another namespace", []gatewayv1.HTTPRouteRule{rule(nil, to("billing", "pay", 80, nil))}, "True/Accepted", "True/ResolvedRefs", "none"},
	} {
		route := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 0)}, tc.rules...)
		ps := routeParentStatuses(analyzeRoute(route, lookup, ""), lookup, nil, metav1.NewTime(t0))
		if len(ps) != 1 {
			t.Fatalf("%s: %d entries", tc.name, len(ps))
		}
		got := [3]string{cond(ps[0], gatewayv1.RouteConditionAccepted), cond(ps[0], gatewayv1.RouteConditionResolvedRefs),
			cond(ps[0], gatewayv1.RouteConditionPartiallyInvalid)}
		if want := [3]string{tc.accepted, tc.resolved, tc.partial}; got != want {
			t.Errorf("%s: %v, want %v", tc.name, got, want)
		}
	}
}

func (r *statusRig) storedGRPC(t *testing.T, key string) *gatewayv1.GRPCRoute {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	got, err := r.client.GatewayV1().GRPCRoutes(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// queued drains the writer's queue.
func (r *statusRig) queued() []string {
	var out []string
	for r.w.queue.Len() > 0 {
		k, _ := r.w.queue.Get()
		r.w.queue.Done(k)
		out = append(out, k.String())
	}
	return out
}

// TestGRPCRouteStatus: a GRPCRoute's entries, as an HTTPRoute's; an
// HTTPRoute of the same namespace gives way to it on the ports it holds:
// Accepted False/Conflicted where it holds all the parentRef's ports
// (and no PartiallyInvalid then), Accepted True naming the ports held
// where some are left; a GRPCRoute of another namespace (another
// audience) holds nothing for it. The GRPCRoute's deletion queues the
// HTTPRoute, which is accepted again.
func TestGRPCRouteStatus(t *testing.T) {
	mirror := grule(nil, gto("", "v1", 80, nil))
	mirror.Filters = []gatewayv1.GRPCRouteFilter{{Type: gatewayv1.GRPCRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: to("", "v2", 80, nil).BackendObjectReference}}}
	api := grpcRoute("shop", "api", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)},
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "a.S", "")}, gto("", "v1", 80, nil), gto("", "gone", 80, nil)),
		mirror)
	cons := grpcRoute("web", "g", 0, []gatewayv1.ParentReference{svcRef("shop", "echo", 8080)}, grule(nil, gto("shop", "v1", 80, nil)))
	dropped := rule(nil, to("", "v1", 80, nil))
	dropped.Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterCORS}}
	web := httpRoute("shop", "web", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80), svcRef("", "echo", 0)},
		rule(nil, to("", "v1", 80, nil)), dropped)
	rig := newStatusRig(t, shop(), api, cons, web)

	eq(t, rig.syncKey(t, routeKey{grpcRouteKind, nn("shop", "api")}), 1)
	stored := rig.storedGRPC(t, "shop/api")
	rig.cache(stored)
	ps := stored.Status.Parents
	eq(t, len(ps), 1)
	eq(t, [4]any{ps[0].ControllerName, cond(ps[0], gatewayv1.RouteConditionAccepted), cond(ps[0], gatewayv1.RouteConditionResolvedRefs),
		cond(ps[0], gatewayv1.RouteConditionPartiallyInvalid)},
		[4]any{MeshControllerName, "True/Accepted", "False/BackendNotFound", "True/UnsupportedValue"})
	if msg := meta.FindStatusCondition(ps[0].Conditions, "PartiallyInvalid").Message; !strings.HasPrefix(msg, "Dropped Rule 1 (filter 0: type RequestMirror") {
		t.Errorf("PartiallyInvalid message %q", msg)
	}
	eq(t, rig.syncKey(t, routeKey{grpcRouteKind, nn("shop", "api")}), 0)

	eq(t, rig.sync(t, "shop/web"), 1)
	ps = rig.stored(t, "shop/web").Status.Parents
	eq(t, len(ps), 2)
	eq(t, [2]string{cond(ps[0], gatewayv1.RouteConditionAccepted), cond(ps[0], gatewayv1.RouteConditionPartiallyInvalid)},
		[2]string{"False/Conflicted", "none"})
	eq(t, [2]string{cond(ps[1], gatewayv1.RouteConditionAccepted), cond(ps[1], gatewayv1.RouteConditionPartiallyInvalid)},
		[2]string{"True/Accepted", "True/UnsupportedValue"})
	for i, want := range []string{"Service shop/echo: port 80 is held by GRPCRoute shop/api;",
		"Accepted, except on Service shop/echo: port 80 is held by GRPCRoute shop/api;"} {
		msg := meta.FindStatusCondition(ps[i].Conditions, "Accepted").Message
		if !strings.HasPrefix(msg, want) || strings.Contains(msg, "8080") {
			t.Errorf("entry %d: Accepted message %q, want it to start %q and leave 8080 (web's GRPCRoute) out", i, msg, want)
		}
	}

	// The GRPCRoute goes: its deletion queues the HTTPRoute on its
	// parent, which is accepted on every port again.
	rig.queued()
	rig.w.routeChanged(api, nil)
	eq(t, rig.queued(), []string{"HTTPRoute shop/web"})
	_ = rig.grpcRoutes.Delete(api)
	eq(t, rig.sync(t, "shop/web"), 1)
	ps = rig.stored(t, "shop/web").Status.Parents
	for i := range ps {
		c := meta.FindStatusCondition(ps[i].Conditions, "Accepted")
		eq(t, [2]string{cond(ps[i], gatewayv1.RouteConditionAccepted), c.Message}, [2]string{"True/Accepted", "Accepted"})
	}
	// A Service event queues the routes of both kinds on it.
	rig.w.serviceEvent(nn("shop", "echo"))
	got := rig.queued()
	slices.Sort(got)
	eq(t, got, []string{"GRPCRoute web/g", "HTTPRoute shop/web"})
}
