package xds

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/mtls"
)

// sliceServiceIndex indexes EndpointSlices by their Service,
// <namespace>/<kubernetes.io/service-name>, so a Service's translation
// reads its own slices and not every slice of the cluster.
const sliceServiceIndex = "service"

func sliceServiceIndexFunc(obj any) ([]string, error) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || es.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{sliceService(es).String()}, nil
}

// sources are where the model reads the cluster: listers, of the
// informers' caches or of the server's own stores.
type sources struct {
	services corelisters.ServiceLister
	slices   cache.Indexer // with sliceServiceIndex
	nodes    corelisters.NodeLister
	pods     corelisters.PodLister
	// HTTPRoutes and GRPCRoutes, each with routeIndexers.
	routes, grpcRoutes cache.Indexer
	// PeerAuthentications and AuthorizationPolicies (security.istio.io),
	// with the namespace index.
	peerAuths, authzPolicies cache.Indexer
}

// ownStores are the stores a server without informers is fed through
// (UpsertService and the like): the same indexers an informer keeps.
type ownStores struct {
	services, slices, nodes, pods, routes, grpcRoutes, peerAuths, authzPolicies cache.Indexer
}

func newOwnStores() ownStores {
	ns := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	return ownStores{
		services: cache.NewIndexer(cache.MetaNamespaceKeyFunc, ns),
		slices: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
			sliceServiceIndex: sliceServiceIndexFunc}),
		nodes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		pods:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, ns),

		routes:     cache.NewIndexer(cache.MetaNamespaceKeyFunc, routeIndexers()),
		grpcRoutes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, routeIndexers()),

		peerAuths:     cache.NewIndexer(cache.MetaNamespaceKeyFunc, ns),
		authzPolicies: cache.NewIndexer(cache.MetaNamespaceKeyFunc, ns),
	}
}

func (o ownStores) sources() sources {
	return sources{services: corelisters.NewServiceLister(o.services), slices: o.slices,
		nodes: corelisters.NewNodeLister(o.nodes), pods: corelisters.NewPodLister(o.pods), routes: o.routes,
		grpcRoutes: o.grpcRoutes, peerAuths: o.peerAuths, authzPolicies: o.authzPolicies}
}

// useSources makes the server read src (RunInformers' listers) instead of
// its own stores.
func (s *Server) useSources(src sources) {
	s.mu.Lock()
	s.src = src
	s.mu.Unlock()
}

// setSource changes one of the sources (set edits them under the lock):
// a kind whose informer started after the others.
func (s *Server) setSource(set func(*sources)) {
	s.mu.Lock()
	set(&s.src)
	s.mu.Unlock()
}

// replace stores obj in store and returns what it replaces (nil: none).
func replace[T any](store cache.Indexer, obj T) T {
	old, _ := get[T](store, obj)
	_ = store.Update(obj) // the key functions cannot fail on these objects
	return old
}

// remove deletes the object of key from store and returns it (nil: none).
func remove[T any](store cache.Indexer, key string) T {
	var zero T
	o, ok, _ := store.GetByKey(key)
	if !ok {
		return zero
	}
	_ = store.Delete(o)
	return o.(T)
}

func get[T any](store cache.Indexer, obj any) (T, bool) {
	var zero T
	o, ok, _ := store.Get(obj)
	if !ok {
		return zero, false
	}
	return o.(T), true
}

// UpsertService adds or replaces a Service in the server's own store.
func (s *Server) UpsertService(svc *corev1.Service) {
	replace(s.own.services, svc)
	s.serviceChanged(types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name})
}

// DeleteService removes a Service from the server's own store.
func (s *Server) DeleteService(key types.NamespacedName) {
	remove[*corev1.Service](s.own.services, key.String())
	s.serviceChanged(key)
}

// UpsertEndpointSlice adds or replaces an EndpointSlice in the server's
// own store.
func (s *Server) UpsertEndpointSlice(es *discoveryv1.EndpointSlice) {
	s.sliceChanged(replace(s.own.slices, es), es)
}

// DeleteEndpointSlice removes an EndpointSlice from the server's own
// store.
func (s *Server) DeleteEndpointSlice(key types.NamespacedName) {
	s.sliceChanged(remove[*discoveryv1.EndpointSlice](s.own.slices, key.String()), nil)
}

// UpsertNode adds or replaces a Node in the server's own store; only its
// topology labels matter.
func (s *Server) UpsertNode(n *corev1.Node) {
	s.nodeChanged(replace(s.own.nodes, n), n)
}

// DeleteNode removes a Node from the server's own store.
func (s *Server) DeleteNode(name string) {
	s.nodeChanged(remove[*corev1.Node](s.own.nodes, name), nil)
}

// UpsertPod adds or replaces a Pod in the server's own store. What
// matters of it: its meshlet.io/status annotation (it runs a meshlet
// sidecar) with its service account (the SPIFFE ID its endpoints must
// present; "" is Kubernetes' "default"), and its node (the locality of a
// sidecar whose xDS node id is <pod>.<namespace>).
func (s *Server) UpsertPod(p *corev1.Pod) {
	s.podChanged(replace(s.own.pods, p), p)
}

// DeletePod removes a Pod from the server's own store.
func (s *Server) DeletePod(key types.NamespacedName) {
	s.podChanged(remove[*corev1.Pod](s.own.pods, key.String()), nil)
}

// serviceChanged marks a Service for translation, and the routes it is
// a parent or backend of.
func (s *Server) serviceChanged(key types.NamespacedName) {
	s.mu.Lock()
	s.dirty[key] = true
	s.routeSvcDirty[key] = true
	s.mu.Unlock()
	s.changed()
}

// sliceChanged marks the Services of an EndpointSlice before and after a
// change (nil: none), which differ when its service label changed.
func (s *Server) sliceChanged(old, cur *discoveryv1.EndpointSlice) {
	s.mu.Lock()
	for _, es := range []*discoveryv1.EndpointSlice{old, cur} {
		if es != nil {
			s.dirty[sliceService(es)] = true
		}
	}
	s.mu.Unlock()
	s.changed()
}

func sliceService(es *discoveryv1.EndpointSlice) types.NamespacedName {
	return types.NamespacedName{Namespace: es.Namespace, Name: es.Labels[discoveryv1.LabelServiceName]}
}

// nodeChanged retranslates everything when a Node comes, goes or changes
// its topology labels, and nothing on other changes (status updates).
func (s *Server) nodeChanged(old, cur *corev1.Node) {
	if old != nil && cur != nil && nodeLocality(old) == nodeLocality(cur) {
		return
	}
	s.mu.Lock()
	s.allDirty = true
	s.mu.Unlock()
	s.changed()
}

func nodeLocality(n *corev1.Node) lb.Locality {
	return lb.Locality{Region: n.Labels[lb.LabelRegion], Zone: n.Labels[lb.LabelZone], SubZone: n.Labels[lb.LabelSubZone]}
}

// podChanged retranslates the Services of a pod's namespace when whether
// it is meshed, or its identity, changed, or (while some
// PeerAuthentication says DISABLE) what selects its policies; and
// republishes the sidecar whose node id names the pod when its node or
// its policies' inputs changed.
func (s *Server) podChanged(old, cur *corev1.Pod) {
	p := cur
	if p == nil {
		p = old
	}
	if p == nil {
		return
	}
	oldID, oldMeshed := s.podIdentity(old)
	id, meshed := s.podIdentity(cur)
	plaintextMayChange := false
	if meshed && old != nil && cur != nil && !podPolicyInputsEqual(old, cur) {
		s.mu.Lock()
		plaintextMayChange = s.disableInUseLocked()
		s.mu.Unlock()
	}
	if oldMeshed != meshed || oldID != id || plaintextMayChange {
		if meshed && id == "" {
			// Still meshed: sidecars then accept any peer of their own
			// trust domain for it.
			s.log.Warn("meshed pod without a SPIFFE identity", "pod", p.Namespace+"/"+p.Name,
				"service_account", cur.Spec.ServiceAccountName)
		}
		s.mu.Lock()
		svcs, _ := s.src.services.Services(p.Namespace).List(labels.Everything())
		for _, svc := range svcs {
			s.dirty[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = true
		}
		s.mu.Unlock()
		s.changed()
	}
	if podNode(old) != podNode(cur) || !podPolicyInputsEqual(old, cur) {
		nodeID := p.Name + "." + p.Namespace
		s.mu.Lock()
		_, known := s.proxies[nodeID]
		s.mu.Unlock()
		if known {
			s.publish.Add(nodeID)
		}
	}
}

// podPolicyInputsEqual says whether what selects a pod's policies (its
// labels and meshlet.io/mtls-mode annotation) is the same in a and b.
func podPolicyInputsEqual(a, b *corev1.Pod) bool {
	if a == nil || b == nil {
		return a == b
	}
	return maps.Equal(a.Labels, b.Labels) && a.Annotations[MTLSModeAnnotation] == b.Annotations[MTLSModeAnnotation]
}

func podNode(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return p.Spec.NodeName
}

// podIdentity says whether a pod runs a meshlet sidecar (its
// meshlet.io/status annotation), and the SPIFFE ID its endpoints must
// present ("" when its names make none).
func (s *Server) podIdentity(p *corev1.Pod) (id string, meshed bool) {
	if p == nil {
		return "", false
	}
	if _, ok := p.Annotations[statusAnnotation]; !ok {
		return "", false
	}
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	wid, err := mtls.WorkloadID(s.opts.TrustDomain, p.Namespace, sa)
	if err != nil {
		return "", true
	}
	return wid.String(), true
}
