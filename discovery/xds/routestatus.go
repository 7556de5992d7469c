package xds

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
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

// routeParentStatuses computes meshlet's status.parents entries of a
// route, one per Service parentRef (other parents are other
// controllers'), with every condition's lastTransitionTime now:
//
//   - Accepted: False/NoMatchingParent when the Service, or the port its
//     port or sectionName names, does not exist; False/UnsupportedValue
//     when no rule can be carried out (or there is none); else
//     True/Accepted;
//   - ResolvedRefs: False with the first problem's reason (InvalidKind,
//     BackendNotFound) and every problem in the message, else
//     True/ResolvedRefs;
//   - PartiallyInvalid: True/UnsupportedValue, "Dropped Rule ...", only
//     when some rules (not all) are left out, as the spec says.
func routeParentStatuses(route *gatewayv1.HTTPRoute, lookup serviceLookup, domain string, now metav1.Time) []gatewayv1.RouteParentStatus {
	rules := analyzeRules(route, lookup, domain)
	var dropped, refProblems []string
	var refReason gatewayv1.RouteConditionReason
	for i, rr := range rules {
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
	for _, ref := range route.Spec.ParentRefs {
		if !isServiceParent(ref) {
			continue
		}
		accepted := metav1.Condition{Type: string(gatewayv1.RouteConditionAccepted), Status: metav1.ConditionTrue,
			Reason: string(gatewayv1.RouteReasonAccepted), Message: "Accepted"}
		pr := resolveParent(route.Namespace, ref, lookup)
		partial := false
		switch {
		case pr.reason != "":
			accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, string(pr.reason), pr.message
		case len(rules) == 0:
			accepted.Status, accepted.Reason = metav1.ConditionFalse, string(gatewayv1.RouteReasonUnsupportedValue)
			accepted.Message = "The route has no rules"
		case len(dropped) == len(rules):
			accepted.Status, accepted.Reason = metav1.ConditionFalse, string(gatewayv1.RouteReasonUnsupportedValue)
			accepted.Message = "No rule can be carried out: " + strings.Join(dropped, "; ")
		default:
			partial = len(dropped) > 0
		}
		conds := []metav1.Condition{accepted, resolved}
		if partial {
			conds = append(conds, metav1.Condition{Type: string(gatewayv1.RouteConditionPartiallyInvalid), Status: metav1.ConditionTrue,
				Reason: string(gatewayv1.RouteReasonUnsupportedValue), Message: "Dropped Rule " + strings.Join(dropped, "; ")})
		}
		for i := range conds {
			conds[i].ObservedGeneration, conds[i].LastTransitionTime = route.Generation, now
		}
		out = append(out, gatewayv1.RouteParentStatus{ParentRef: ref, ControllerName: MeshControllerName, Conditions: conds})
	}
	return out
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

// mergeRouteStatus merges meshlet's entries into a route's status: other
// controllers' entries stay as they are, in place; an entry of ours for
// the same parentRef keeps its place and the lastTransitionTime of every
// condition whose status did not change; ours for parentRefs no longer
// there go; new ones are appended. It returns the new status and whether
// it differs. It changes nothing when one of our conditions was observed
// at a later generation than the route read (a stale cache: the newer
// route is on its way).
func mergeRouteStatus(route *gatewayv1.HTTPRoute, ours []gatewayv1.RouteParentStatus) (gatewayv1.HTTPRouteStatus, bool) {
	cur := route.Status
	for _, p := range cur.Parents {
		if p.ControllerName != MeshControllerName {
			continue
		}
		for _, c := range p.Conditions {
			if c.ObservedGeneration > route.Generation {
				return cur, false
			}
		}
	}
	used := make([]bool, len(ours))
	next := gatewayv1.HTTPRouteStatus{RouteStatus: gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{}}}
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

// routeStatusWriter keeps the status of HTTPRoutes with Service parents
// current, in client-go's controller shape: route and Service events
// queue route keys on a rate-limited workqueue, and a sync reads the
// caches, computes the status and writes it only when it differs, with
// the resourceVersion it read. On a conflict it reads the route again
// from the API server and recomputes, so that replicas of the control
// plane, which compute the same status, never fight: the second finds
// nothing to write. Conditions keep their lastTransitionTime while their
// status holds, so a recomputation alone changes nothing.
type routeStatusWriter struct {
	client   gatewayclient.Interface
	routes   cache.Indexer // with routeIndexers
	services corelisters.ServiceLister
	domain   string
	queue    workqueue.TypedRateLimitingInterface[types.NamespacedName]
	log      *slog.Logger
	now      func() time.Time
	// writes counts status updates sent (for tests and logs).
	writes func()
}

func newRouteStatusWriter(client gatewayclient.Interface, routes cache.Indexer, services corelisters.ServiceLister, domain string, log *slog.Logger) *routeStatusWriter {
	return &routeStatusWriter{client: client, routes: routes, services: services, domain: domain, log: log, now: time.Now,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "meshlet_route_status"}),
		writes: func() {}}
}

// routeEvent queues a route (or a deletion's last known state: nothing
// to write then).
func (w *routeStatusWriter) routeEvent(obj any) {
	if r, ok := obj.(*gatewayv1.HTTPRoute); ok {
		w.queue.Add(types.NamespacedName{Namespace: r.Namespace, Name: r.Name})
	}
}

// serviceEvent queues the routes a Service is a parent or backend of.
func (w *routeStatusWriter) serviceEvent(key types.NamespacedName) {
	for _, idx := range []string{routeParentIndex, routeBackendIndex} {
		objs, _ := w.routes.ByIndex(idx, key.String())
		for _, o := range objs {
			w.routeEvent(o)
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
			w.log.Warn("httproute status", "route", key.String(), "error", err)
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

// sync writes the status of one route if it differs from what it should
// be: from the cache first, from the API server after a conflict.
func (w *routeStatusWriter) sync(ctx context.Context, key types.NamespacedName) error {
	o, ok, err := w.routes.GetByKey(key.String())
	if err != nil || !ok {
		return err // deleted: nothing to write
	}
	route := o.(*gatewayv1.HTTPRoute)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		ours := routeParentStatuses(route, w.lookup, w.domain, metav1.NewTime(w.now().Truncate(time.Second)))
		st, changed := mergeRouteStatus(route, ours)
		if !changed {
			return nil
		}
		cp := route.DeepCopy()
		cp.Status = st
		w.writes()
		_, err := w.client.GatewayV1().HTTPRoutes(key.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			fresh, gerr := w.client.GatewayV1().HTTPRoutes(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(gerr):
				return nil
			case gerr != nil:
				return fmt.Errorf("xds: httproute %s: read after conflict: %w", key, gerr)
			}
			route = fresh
			return err // RetryOnConflict tries again
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("xds: httproute %s: update status: %w", key, err)
		}
		return nil
	})
}
