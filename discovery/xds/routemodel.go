package xds

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The HTTPRoute indexes: by the Services a route names as parents, and
// by those it names as backends, so that a change of one Service
// retranslates only the routes it can change.
const (
	routeParentIndex  = "parent"
	routeBackendIndex = "backend"
)

// routeIndexers are the indexes every HTTPRoute store keeps.
func routeIndexers() cache.Indexers {
	return cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		routeParentIndex: func(obj any) ([]string, error) {
			r, ok := obj.(*gatewayv1.HTTPRoute)
			if !ok {
				return nil, nil
			}
			return keyStrings(routeParents(r)), nil
		},
		routeBackendIndex: func(obj any) ([]string, error) {
			r, ok := obj.(*gatewayv1.HTTPRoute)
			if !ok {
				return nil, nil
			}
			return keyStrings(routeBackends(r)), nil
		},
	}
}

func keyStrings(keys []types.NamespacedName) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.String()
	}
	return out
}

// routeParents are the Services a route names as parents, once each.
func routeParents(r *gatewayv1.HTTPRoute) []types.NamespacedName {
	var out []types.NamespacedName
	for _, ref := range r.Spec.ParentRefs {
		if k := parentService(r.Namespace, ref); isServiceParent(ref) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// routeBackends are the Services a route names as backends, once each
// (whatever their kind: a Service of that name coming or going changes
// nothing for a non-Service ref, and costs a retranslation at most).
func routeBackends(r *gatewayv1.HTTPRoute) []types.NamespacedName {
	var out []types.NamespacedName
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			k := types.NamespacedName{Namespace: r.Namespace, Name: string(b.Name)}
			if b.Namespace != nil && *b.Namespace != "" {
				k.Namespace = string(*b.Namespace)
			}
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// UpsertHTTPRoute adds or replaces an HTTPRoute in the server's own store.
func (s *Server) UpsertHTTPRoute(r *gatewayv1.HTTPRoute) {
	s.routeChanged(replace(s.own.routes, r), r)
}

// DeleteHTTPRoute removes an HTTPRoute from the server's own store.
func (s *Server) DeleteHTTPRoute(key types.NamespacedName) {
	s.routeChanged(remove[*gatewayv1.HTTPRoute](s.own.routes, key.String()), nil)
}

// routeChanged marks the parents of a route before and after a change
// (nil: none) for route translation.
func (s *Server) routeChanged(old, cur *gatewayv1.HTTPRoute) {
	s.mu.Lock()
	for _, r := range []*gatewayv1.HTTPRoute{old, cur} {
		if r != nil {
			for _, p := range routeParents(r) {
				s.routeDirty[p] = true
			}
		}
	}
	s.mu.Unlock()
	s.changed()
}

// parentRoutes are the RouteConfigurations of one parent Service's
// ports, by cluster name: the producer routes', and per client namespace
// with consumer routes for the Service, theirs, which replace the
// producer routes of the Service for that namespace's sidecars (GEP-1294:
// requests from a namespace with consumer routes use those).
type parentRoutes struct {
	producer  map[string]hashed
	consumers map[string]map[string]hashed
}

// forNamespace is what sidecars of client namespace ns ("": one without
// consumer routes) get.
func (p *parentRoutes) forNamespace(ns string) map[string]hashed {
	if p == nil {
		return nil
	}
	if c, ok := p.consumers[ns]; ok && ns != "" {
		return c
	}
	return p.producer
}

// lookupService reads a Service from the listers.
func (s *Server) lookupService(key types.NamespacedName) *corev1.Service {
	svc, err := s.src.services.Services(key.Namespace).Get(key.Name)
	if err != nil {
		return nil
	}
	return svc
}

// translateRoutesLocked retranslates the routes of the parents marked
// since the last pass: those of changed routes, of changed Services, and
// of the routes naming a changed Service as a backend. It runs after the
// Services' translation, whose clusters it reads. It reports whether
// anything was retranslated.
func (s *Server) translateRoutesLocked() bool {
	if len(s.routeDirty) == 0 && len(s.routeSvcDirty) == 0 {
		return false
	}
	parents := s.routeDirty
	for k := range s.routeSvcDirty {
		parents[k] = true
		objs, _ := s.src.routes.ByIndex(routeBackendIndex, k.String())
		for _, o := range objs {
			for _, p := range routeParents(o.(*gatewayv1.HTTPRoute)) {
				parents[p] = true
			}
		}
	}
	s.routeDirty, s.routeSvcDirty = map[types.NamespacedName]bool{}, map[types.NamespacedName]bool{}
	for p := range parents {
		if pr := s.translateParentLocked(p); pr != nil {
			s.routeResults[p] = pr
		} else {
			delete(s.routeResults, p)
		}
	}
	s.consumerNS = map[string]bool{}
	for _, pr := range s.routeResults {
		for ns := range pr.consumers {
			s.consumerNS[ns] = true
		}
	}
	return true
}

// translateParentLocked builds the RouteConfigurations of the routes
// attached to a Service's ports (nil: none attached). Only ports the
// Service's translation made a cluster of can carry routes.
func (s *Server) translateParentLocked(parent types.NamespacedName) *parentRoutes {
	t := s.results[parent]
	if t == nil || t.err != nil || len(t.clusters) == 0 {
		return nil
	}
	objs, err := s.src.routes.ByIndex(routeParentIndex, parent.String())
	if err != nil || len(objs) == 0 {
		return nil
	}
	byPort := map[int32]ServiceCluster{}
	for _, sc := range t.clusters {
		byPort[sc.Port] = sc
	}
	// attached[audience][cluster]: audience "" for producer routes, else
	// the consumer route's namespace.
	attached := map[string]map[string][]attachedRoute{}
	for _, o := range objs {
		route := o.(*gatewayv1.HTTPRoute)
		rules := analyzeRules(route, s.lookupService, s.opts.ClusterDomain)
		if !slices.ContainsFunc(rules, func(r ruleResult) bool { return r.dropped == "" }) {
			continue // not accepted: no rule meshlet can carry out
		}
		audience := ""
		if route.Namespace != parent.Namespace {
			audience = route.Namespace
		}
		ports := map[int32]bool{}
		for _, ref := range route.Spec.ParentRefs {
			if !isServiceParent(ref) || parentService(route.Namespace, ref) != parent {
				continue
			}
			for _, sp := range resolveParent(route.Namespace, ref, s.lookupService).ports {
				ports[sp.Port] = true
			}
		}
		for port := range ports {
			sc, ok := byPort[port]
			if !ok {
				continue
			}
			if attached[audience] == nil {
				attached[audience] = map[string][]attachedRoute{}
			}
			name := sc.Cluster.GetName()
			attached[audience][name] = append(attached[audience][name], attachedRoute{route: route, rules: rules})
		}
	}
	if len(attached) == 0 {
		return nil
	}
	byCluster := map[string]ServiceCluster{}
	for _, sc := range t.clusters {
		byCluster[sc.Cluster.GetName()] = sc
	}
	pr := &parentRoutes{}
	for _, audience := range slices.Sorted(maps.Keys(attached)) {
		rcs := map[string]hashed{}
		for name, routes := range attached[audience] {
			rc := buildRouteConfiguration(newParentPort(byCluster[name]), routes)
			rcs[name] = hashResource(rc.GetName(), rc)
		}
		if audience == "" {
			pr.producer = rcs
			continue
		}
		if pr.consumers == nil {
			pr.consumers = map[string]map[string]hashed{}
		}
		pr.consumers[audience] = rcs
	}
	return pr
}

// consumerNamespaceLocked is the client namespace a sidecar's group is
// keyed by: its namespace (its Service's, else the one its node id
// <pod>.<namespace> names) when that namespace has consumer routes, else
// "", so that namespaces without them share groups.
func (s *Server) consumerNamespaceLocked(nodeID string, p *proxyState) string {
	ns := p.info.LocalService.Namespace
	if ns == "" {
		if pod, ok := podOfNode(nodeID); ok {
			ns = pod.Namespace
		}
	}
	if s.consumerNS[ns] {
		return ns
	}
	return ""
}
