package xds

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// routeReasonConflicted is the Accepted reason GEP-1294 gives a route
// that another route kind displaces on a Service port (Gateway API has
// no constant for it yet).
const routeReasonConflicted gatewayv1.RouteConditionReason = "Conflicted"

// claimsFunc lists, by port, the routes of another kind that displace a
// route from parent's ports (nil for a GRPCRoute: nothing displaces it).
type claimsFunc func(parent types.NamespacedName) map[int32][]string

// routeParentStatuses computes meshlet's status.parents entries of a
// route of either kind, one per Service parentRef (other parents are
// other controllers'), with every condition's lastTransitionTime now:
//
//   - Accepted: False/NoMatchingParent when the Service, or the port its
//     port or sectionName names, does not exist; False/UnsupportedValue
//     when no rule can be carried out (or there is none);
//     False/Conflicted for an HTTPRoute when GRPCRoutes of its namespace
//     hold every port it attaches to (GEP-1294); else True/Accepted,
//     naming in its message the ports GRPCRoutes hold, if any;
//   - ResolvedRefs: False with the first problem's reason (InvalidKind,
//     BackendNotFound) and every problem in the message, else
//     True/ResolvedRefs;
//   - PartiallyInvalid: True/UnsupportedValue, "Dropped Rule ...", only
//     when the route is accepted and some rules (not all) are left out,
//     as the spec says.
func routeParentStatuses(mr *meshRoute, lookup serviceLookup, claims claimsFunc, now metav1.Time) []gatewayv1.RouteParentStatus {
	var dropped, refProblems []string
	var refReason gatewayv1.RouteConditionReason
	for i, rr := range mr.rules {
		if rr.dropped != "" {
			dropped = append(dropped, fmt.Sprintf("%d (%s)", i, rr.dropped))
		}
		if rr.fail500 != "" {
			refProblems = append(refProblems, fmt.Sprintf("rule %d: %s", i, rr.fail500))
			refReason = cmpOr(refReason, gatewayv1.RouteReasonInvalidKind)
		}
		for _, b := range rr.backends {
			if b.reason != "" {
				refProblems = append(refProblems, fmt.Sprintf("rule %d: %s", i, b.message))
				refReason = cmpOr(refReason, b.reason)
			}
		}
	}
	resolved := metav1.Condition{Type: string(gatewayv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue,
		Reason: string(gatewayv1.RouteReasonResolvedRefs), Message: "All references resolved"}
	if len(refProblems) > 0 {
		resolved.Status, resolved.Reason, resolved.Message = metav1.ConditionFalse, string(refReason), strings.Join(refProblems, "; ")
	}
	var out []gatewayv1.RouteParentStatus
	for _, ref := range mr.parents {
		if !isServiceParent(ref) {
			continue
		}
		accepted := metav1.Condition{Type: string(gatewayv1.RouteConditionAccepted), Status: metav1.ConditionTrue,
			Reason: string(gatewayv1.RouteReasonAccepted), Message: "Accepted"}
		pr := resolveParent(mr.key.Namespace, ref, lookup)
		partial := false
		switch {
		case pr.reason != "":
			accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, string(pr.reason), pr.message
		case len(mr.rules) == 0:
			accepted.Status, accepted.Reason = metav1.ConditionFalse, string(gatewayv1.RouteReasonUnsupportedValue)
			accepted.Message = "The route has no rules"
		case len(dropped) == len(mr.rules):
			accepted.Status, accepted.Reason = metav1.ConditionFalse, string(gatewayv1.RouteReasonUnsupportedValue)
			accepted.Message = "No rule can be carried out: " + strings.Join(dropped, "; ")
		default:
			partial = len(dropped) > 0
			if held, all := claimedPorts(pr, claims); all {
				accepted.Status, accepted.Reason = metav1.ConditionFalse, string(routeReasonConflicted)
				accepted.Message = fmt.Sprintf("Service %s: %s; a GRPCRoute wins over an HTTPRoute on a Service port (GEP-1294)", pr.svc, held)
				partial = false
			} else if held != "" {
				accepted.Message = fmt.Sprintf("Accepted, except on Service %s: %s; a GRPCRoute wins over an HTTPRoute on a Service port (GEP-1294)", pr.svc, held)
			}
		}
		conds := []metav1.Condition{accepted, resolved}
		if partial {
			conds = append(conds, metav1.Condition{Type: string(gatewayv1.RouteConditionPartiallyInvalid), Status: metav1.ConditionTrue,
				Reason: string(gatewayv1.RouteReasonUnsupportedValue), Message: "Dropped Rule " + strings.Join(dropped, "; ")})
		}
		for i := range conds {
			conds[i].ObservedGeneration, conds[i].LastTransitionTime = mr.generation, now
		}
		out = append(out, gatewayv1.RouteParentStatus{ParentRef: ref, ControllerName: MeshControllerName, Conditions: conds})
	}
	return out
}

// claimedPorts describes the ports of a resolved parent that routes of
// another kind hold ("" none), and says whether they hold all of them.
func claimedPorts(pr parentResult, claims claimsFunc) (string, bool) {
	if claims == nil {
		return "", false
	}
	held := claims(pr.svc)
	var parts []string
	for _, sp := range pr.ports {
		if names := held[sp.Port]; len(names) > 0 {
			parts = append(parts, fmt.Sprintf("port %d is held by %s", sp.Port, strings.Join(names, ", ")))
		}
	}
	return strings.Join(parts, ", "), len(parts) > 0 && len(parts) == len(pr.ports)
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// ownedConditions are the condition types meshlet sets in its entries;
// others found there are left alone.
var ownedConditions = []string{string(gatewayv1.RouteConditionAccepted), string(gatewayv1.RouteConditionResolvedRefs),
	string(gatewayv1.RouteConditionPartiallyInvalid)}

// mergeRouteStatus merges meshlet's entries into a route's status (of a
// route at generation): other controllers' entries stay as they are, in
// place; an entry of ours for the same parentRef keeps its place and the
// lastTransitionTime of every condition whose status did not change;
// ours for parentRefs no longer there go; new ones are appended. It
// returns the new status and whether it differs. It changes nothing when
// one of our conditions was observed at a later generation than the
// route read (a stale cache: the newer route is on its way).
func mergeRouteStatus(cur gatewayv1.RouteStatus, generation int64, ours []gatewayv1.RouteParentStatus) (gatewayv1.RouteStatus, bool) {
	for _, p := range cur.Parents {
		if p.ControllerName != MeshControllerName {
			continue
		}
		for _, c := range p.Conditions {
			if c.ObservedGeneration > generation {
				return cur, false
			}
		}
	}
	used := make([]bool, len(ours))
	next := gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{}}
	for _, p := range cur.Parents {
		if p.ControllerName != MeshControllerName {
			next.Parents = append(next.Parents, p)
			continue
		}
		i := indexParent(ours, used, p.ParentRef)
		if i < 0 {
			continue // a parentRef no longer in the spec
		}
		used[i] = true
		merged := p.DeepCopy()
		for _, c := range ours[i].Conditions {
			meta.SetStatusCondition(&merged.Conditions, c)
		}
		for _, t := range ownedConditions {
			if meta.FindStatusCondition(ours[i].Conditions, t) == nil {
				meta.RemoveStatusCondition(&merged.Conditions, t)
			}
		}
		next.Parents = append(next.Parents, *merged)
	}
	for i, p := range ours {
		if !used[i] {
			next.Parents = append(next.Parents, p)
		}
	}
	if len(cur.Parents) == 0 && len(next.Parents) == 0 {
		return cur, false // nil and empty alike: nothing to write
	}
	return next, !equality.Semantic.DeepEqual(cur, next)
}

// indexParent finds the unused entry of ours for ref, or -1.
func indexParent(ours []gatewayv1.RouteParentStatus, used []bool, ref gatewayv1.ParentReference) int {
	for i, p := range ours {
		if !used[i] && reflect.DeepEqual(p.ParentRef, ref) {
			return i
		}
	}
	return -1
}

// routeStatusWorkers write route statuses in parallel.
const routeStatusWorkers = 2

// routeStatusWriter keeps the status of HTTPRoutes and GRPCRoutes with
// Service parents current, in client-go's controller shape: route and
// Service events queue route keys on a rate-limited workqueue, and a sync
// reads the caches, computes the status and writes it only when it
// differs, with the resourceVersion it read. On a conflict it reads the
// route again from the API server and recomputes, so that replicas of
// the control plane, which compute the same status, never fight: the
// second finds nothing to write. Conditions keep their
// lastTransitionTime while their status holds, so a recomputation alone
// changes nothing.
type routeStatusWriter struct {
	client gatewayclient.Interface
	// stores are by routeKind, with routeIndexers; a kind's is replaced
	// (setStore) when its CRD is installed after the start.
	storeMu  sync.RWMutex
	stores   [2]cache.Indexer
	services corelisters.ServiceLister
	domain   string
	queue    workqueue.TypedRateLimitingInterface[routeKey]
	log      *slog.Logger
	now      func() time.Time
	// writes counts status updates sent (for tests and logs).
	writes func()
}

func newRouteStatusWriter(client gatewayclient.Interface, httpRoutes, grpcRoutes cache.Indexer, services corelisters.ServiceLister,
	domain string, log *slog.Logger) *routeStatusWriter {
	return &routeStatusWriter{client: client, stores: [2]cache.Indexer{httpRouteKind: httpRoutes, grpcRouteKind: grpcRoutes},
		services: services, domain: domain, log: log, now: time.Now,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[routeKey](),
			workqueue.TypedRateLimitingQueueConfig[routeKey]{Name: "meshlet_route_status"}),
		writes: func() {}}
}

// store is the cache of one kind of route.
func (w *routeStatusWriter) store(kind routeKind) cache.Indexer {
	w.storeMu.RLock()
	defer w.storeMu.RUnlock()
	return w.stores[kind]
}

// setStore replaces a kind's cache (its informer started late) and
// queues every route in it.
func (w *routeStatusWriter) setStore(kind routeKind, idx cache.Indexer) {
	w.storeMu.Lock()
	w.stores[kind] = idx
	w.storeMu.Unlock()
	for _, o := range idx.List() {
		w.routeChanged(nil, o)
	}
}

// routeChanged queues a route after a change (cur nil: deleted, nothing
// to write), and for a GRPCRoute the HTTPRoutes on its parents before
// and after, which it may displace or stop displacing.
func (w *routeStatusWriter) routeChanged(old, cur any) {
	if k, ok := routeKeyOf(cur); ok {
		w.queue.Add(k)
	}
	for _, o := range []any{old, cur} {
		if k, ok := routeKeyOf(o); !ok || k.kind != grpcRouteKind {
			continue
		}
		parents, _ := routeRefs(o)
		for _, p := range parents {
			w.queueIndexed(httpRouteKind, routeParentIndex, p)
		}
	}
}

// serviceEvent queues the routes a Service is a parent or backend of.
func (w *routeStatusWriter) serviceEvent(key types.NamespacedName) {
	for _, kind := range []routeKind{httpRouteKind, grpcRouteKind} {
		for _, idx := range []string{routeParentIndex, routeBackendIndex} {
			w.queueIndexed(kind, idx, key)
		}
	}
}

func (w *routeStatusWriter) queueIndexed(kind routeKind, index string, key types.NamespacedName) {
	objs, _ := w.store(kind).ByIndex(index, key.String())
	for _, o := range objs {
		if k, ok := routeKeyOf(o); ok {
			w.queue.Add(k)
		}
	}
}

// run syncs queued routes until ctx ends; the caches must have synced.
func (w *routeStatusWriter) run(ctx context.Context) {
	defer w.queue.ShutDown()
	for range routeStatusWorkers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for w.next(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

// next syncs one route; a failure puts it back with a per-key backoff.
func (w *routeStatusWriter) next(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("route status", "route", key.String(), "error", err)
			w.queue.AddRateLimited(key)
		}
		return true
	}
	w.queue.Forget(key)
	return true
}

func (w *routeStatusWriter) lookup(key types.NamespacedName) *corev1.Service {
	svc, err := w.services.Services(key.Namespace).Get(key.Name)
	if err != nil {
		return nil
	}
	return svc
}

// claims are what displaces a route of kind in namespace ns from its
// parents' ports: the GRPCRoutes of ns, for an HTTPRoute.
func (w *routeStatusWriter) claims(kind routeKind, ns string) claimsFunc {
	if kind != httpRouteKind {
		return nil
	}
	return func(parent types.NamespacedName) map[int32][]string {
		return grpcClaims(w.store(grpcRouteKind), parent, ns, w.lookup, w.domain)
	}
}

// sync writes the status of one route if it differs from what it should
// be: from the cache first, from the API server after a conflict.
func (w *routeStatusWriter) sync(ctx context.Context, key routeKey) error {
	o, ok, err := w.store(key.kind).GetByKey(key.NamespacedName.String())
	if err != nil || !ok {
		return err // deleted: nothing to write
	}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		mr := analyzeRoute(o, w.lookup, w.domain)
		if mr == nil {
			return fmt.Errorf("xds: %s: the store holds a %T", key, o)
		}
		ours := routeParentStatuses(mr, w.lookup, w.claims(key.kind, key.Namespace), metav1.NewTime(w.now().Truncate(time.Second)))
		st, changed := mergeRouteStatus(mr.status, mr.generation, ours)
		if !changed {
			return nil
		}
		w.writes()
		err := w.updateStatus(ctx, o, st)
		if apierrors.IsConflict(err) {
			fresh, gerr := w.get(ctx, key)
			switch {
			case apierrors.IsNotFound(gerr):
				return nil
			case gerr != nil:
				return fmt.Errorf("xds: %s: read after conflict: %w", key, gerr)
			}
			o = fresh
			return err // RetryOnConflict tries again
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("xds: %s: update status: %w", key, err)
		}
		return nil
	})
}

// updateStatus writes st as the status of route o (read from the cache
// or the API server: it is copied, never changed).
func (w *routeStatusWriter) updateStatus(ctx context.Context, o any, st gatewayv1.RouteStatus) error {
	switch r := o.(type) {
	case *gatewayv1.HTTPRoute:
		cp := r.DeepCopy()
		cp.Status.RouteStatus = st
		_, err := w.client.GatewayV1().HTTPRoutes(r.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
		return err
	case *gatewayv1.GRPCRoute:
		cp := r.DeepCopy()
		cp.Status.RouteStatus = st
		_, err := w.client.GatewayV1().GRPCRoutes(r.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
		return err
	}
	return fmt.Errorf("xds: update status of a %T: not a route", o)
}

// get reads a route from the API server.
func (w *routeStatusWriter) get(ctx context.Context, key routeKey) (any, error) {
	if key.kind == grpcRouteKind {
		return w.client.GatewayV1().GRPCRoutes(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	}
	return w.client.GatewayV1().HTTPRoutes(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
}
