package xds

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The route indexes, of HTTPRoutes and GRPCRoutes alike: by the
// Services a route names as parents, and by those it names as backends,
// so that a change of one Service retranslates only the routes it can
// change.
const (
	routeParentIndex  = "parent"
	routeBackendIndex = "backend"
)

// routeIndexers are the indexes every route store keeps.
func routeIndexers() cache.Indexers {
	return cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		routeParentIndex: func(obj any) ([]string, error) {
			parents, _ := routeRefs(obj)
			return keyStrings(parents), nil
		},
		routeBackendIndex: func(obj any) ([]string, error) {
			_, backends := routeRefs(obj)
			return keyStrings(backends), nil
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

// routeRefs are the Services an HTTPRoute or GRPCRoute names as parents
// and as backends, once each (backends whatever their kind: a Service of
// that name coming or going changes nothing for a non-Service ref, and
// costs a retranslation at most); none for anything else.
func routeRefs(obj any) (parents, backends []types.NamespacedName) {
	var ns string
	var refs []gatewayv1.ParentReference
	var bs []gatewayv1.BackendRef
	switch r := obj.(type) {
	case *gatewayv1.HTTPRoute:
		if r == nil {
			return nil, nil
		}
		ns, refs = r.Namespace, r.Spec.ParentRefs
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				bs = append(bs, b.BackendRef)
			}
		}
	case *gatewayv1.GRPCRoute:
		if r == nil {
			return nil, nil
		}
		ns, refs = r.Namespace, r.Spec.ParentRefs
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				bs = append(bs, b.BackendRef)
			}
		}
	default:
		return nil, nil
	}
	for _, ref := range refs {
		if k := parentService(ns, ref); isServiceParent(ref) && !slices.Contains(parents, k) {
			parents = append(parents, k)
		}
	}
	for _, b := range bs {
		k := types.NamespacedName{Namespace: ns, Name: string(b.Name)}
		if b.Namespace != nil && *b.Namespace != "" {
			k.Namespace = string(*b.Namespace)
		}
		if !slices.Contains(backends, k) {
			backends = append(backends, k)
		}
	}
	return parents, backends
}

// routeKey names a route of either kind.
type routeKey struct {
	kind routeKind
	types.NamespacedName
}

func (k routeKey) String() string { return k.kind.String() + " " + k.NamespacedName.String() }

// routeKeyOf is the key of an HTTPRoute or GRPCRoute; false for anything
// else.
func routeKeyOf(obj any) (routeKey, bool) {
	switch r := obj.(type) {
	case *gatewayv1.HTTPRoute:
		if r != nil {
			return routeKey{httpRouteKind, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}}, true
		}
	case *gatewayv1.GRPCRoute:
		if r != nil {
			return routeKey{grpcRouteKind, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}}, true
		}
	}
	return routeKey{}, false
}

// UpsertHTTPRoute adds or replaces an HTTPRoute in the server's own store.
func (s *Server) UpsertHTTPRoute(r *gatewayv1.HTTPRoute) {
	s.routeChanged(replace(s.own.routes, r), r)
}

// DeleteHTTPRoute removes an HTTPRoute from the server's own store.
func (s *Server) DeleteHTTPRoute(key types.NamespacedName) {
	s.routeChanged(remove[*gatewayv1.HTTPRoute](s.own.routes, key.String()), nil)
}

// UpsertGRPCRoute adds or replaces a GRPCRoute in the server's own store.
func (s *Server) UpsertGRPCRoute(r *gatewayv1.GRPCRoute) {
	s.routeChanged(replace(s.own.grpcRoutes, r), r)
}

// DeleteGRPCRoute removes a GRPCRoute from the server's own store.
func (s *Server) DeleteGRPCRoute(key types.NamespacedName) {
	s.routeChanged(remove[*gatewayv1.GRPCRoute](s.own.grpcRoutes, key.String()), nil)
}

// routeChanged marks the parents of a route of either kind before and
// after a change (nil: none) for route translation.
func (s *Server) routeChanged(old, cur any) {
	s.mu.Lock()
	for _, r := range []any{old, cur} {
		parents, _ := routeRefs(r)
		for _, p := range parents {
			s.routeDirty[p] = true
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
		for _, store := range []cache.Indexer{s.src.routes, s.src.grpcRoutes} {
			objs, _ := store.ByIndex(routeBackendIndex, k.String())
			for _, o := range objs {
				ps, _ := routeRefs(o)
				for _, p := range ps {
					parents[p] = true
				}
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
	var objs []any
	for _, store := range []cache.Indexer{s.src.routes, s.src.grpcRoutes} {
		o, _ := store.ByIndex(routeParentIndex, parent.String())
		objs = append(objs, o...)
	}
	if len(objs) == 0 {
		return nil
	}
	byPort := map[int32]ServiceCluster{}
	for _, sc := range t.clusters {
		byPort[sc.Port] = sc
	}
	// attached[audience][cluster]: audience "" for producer routes, else
	// the consumer route's namespace.
	attached := map[string]map[string][]*meshRoute{}
	for _, o := range objs {
		mr := analyzeRoute(o, s.lookupService, s.opts.ClusterDomain)
		if mr == nil {
			continue
		}
		audience := ""
		if mr.key.Namespace != parent.Namespace {
			audience = mr.key.Namespace
		}
		for _, port := range mr.attachedPorts(parent, s.lookupService) {
			sc, ok := byPort[port]
			if !ok {
				continue
			}
			if attached[audience] == nil {
				attached[audience] = map[string][]*meshRoute{}
			}
			name := sc.Cluster.GetName()
			attached[audience][name] = append(attached[audience][name], mr)
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
			rc := buildRouteConfiguration(newParentPort(byCluster[name]), oneKind(routes))
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

// oneKind keeps the routes of the one kind that applies to a Service
// port: GEP-1294 has only one route kind apply to a Service and port,
// GRPCRoute before HTTPRoute, and the GRPCRoute spec forbids merging the
// two. The HTTPRoutes left out say so in their status (Conflicted).
func oneKind(routes []*meshRoute) []*meshRoute {
	if !slices.ContainsFunc(routes, func(mr *meshRoute) bool { return mr.kind == grpcRouteKind }) {
		return routes
	}
	return slices.DeleteFunc(slices.Clone(routes), func(mr *meshRoute) bool { return mr.kind != grpcRouteKind })
}

// grpcClaims lists, by port, the GRPCRoutes of namespace ns in store
// (with routeIndexers) attached to parent's ports: an HTTPRoute of the
// same namespace (the same audience: producer routes are in the
// Service's namespace, a consumer's in its own) gives way to them there.
func grpcClaims(store cache.Indexer, parent types.NamespacedName, ns string, lookup serviceLookup, domain string) map[int32][]string {
	objs, _ := store.ByIndex(routeParentIndex, parent.String())
	var claims map[int32][]string
	for _, o := range objs {
		mr := analyzeRoute(o, lookup, domain)
		if mr == nil || mr.kind != grpcRouteKind || mr.key.Namespace != ns {
			continue
		}
		for _, port := range mr.attachedPorts(parent, lookup) {
			if claims == nil {
				claims = map[int32][]string{}
			}
			claims[port] = append(claims[port], routeKey{mr.kind, mr.key}.String())
		}
	}
	for _, names := range claims {
		slices.Sort(names)
	}
	return claims
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
