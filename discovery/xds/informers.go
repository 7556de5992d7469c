package xds

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
)

// statusAnnotation is the injector's mark on a meshed pod (webhook's
// StatusAnnotation; repeated here so the control plane's discovery does not
// depend on the webhook package).
const statusAnnotation = "meshlet.io/status"

// RunInformers feeds s from the API server: shared informers on Services,
// EndpointSlices, Nodes and Pods (pods only for their meshlet.io/status
// annotation, service account and node, so the informer keeps nothing
// else of them). s reads the informers' listers, and their events only
// mark what changed. Once every cache has synced it calls s.SetSynced, so
// sidecars never get an empty mesh. It returns when ctx ends, or with an
// error if the caches never sync. It watches no routes; see
// RunInformersWithRoutes.
func RunInformers(ctx context.Context, client kubernetes.Interface, s *Server, resync time.Duration) error {
	return RunInformersWithRoutes(ctx, client, nil, s, resync)
}

// routeGroupVersion is where HTTPRoutes and GRPCRoutes are served.
var routeGroupVersion = gatewayv1.SchemeGroupVersion.String()

// RunInformersWithRoutes is RunInformers that also watches Gateway API
// HTTPRoutes and GRPCRoutes (gateway.networking.k8s.io/v1) through gw,
// translating those with Service parents into RouteConfigurations, and
// writes their status (MeshControllerName's entries). A nil gw watches
// none. A kind the API server does not serve (its CRD is not installed,
// or not at v1: an informer would retry its list for ever and never
// sync) is logged once and left out until discovery serves it
// (Options.RecheckKinds); its informer then starts without a restart.
func RunInformersWithRoutes(ctx context.Context, client kubernetes.Interface, gw gatewayclient.Interface, s *Server, resync time.Duration) error {
	return RunAllInformers(ctx, Clients{Kube: client, Gateway: gw}, s, resync)
}

// Clients are the API clients RunAllInformers watches through.
type Clients struct {
	// Kube is required.
	Kube kubernetes.Interface
	// Gateway, when set, adds HTTPRoutes and GRPCRoutes
	// (RunInformersWithRoutes).
	Gateway gatewayclient.Interface
	// Istio, when set, adds PeerAuthentications and AuthorizationPolicies
	// (security.istio.io/v1), whose status (PolicyConditionType) it
	// writes; a kind not served is logged once and started once served,
	// as routes are.
	Istio istioclient.Interface
}

// RunAllInformers is RunInformersWithRoutes that also watches Istio's
// security policies through c.Istio.
func RunAllInformers(ctx context.Context, c Clients, s *Server, resync time.Duration) error {
	client, gw := c.Kube, c.Gateway
	f := informers.NewSharedInformerFactory(client, resync)
	svc := f.Core().V1().Services()
	eps := f.Discovery().V1().EndpointSlices()
	nodes := f.Core().V1().Nodes()
	pods := f.Core().V1().Pods()
	// Keep only what discovery reads of a pod: its name, labels, two
	// annotations, service account and node.
	if err := pods.Informer().SetTransform(func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		slim := &corev1.Pod{}
		slim.Namespace, slim.Name, slim.ResourceVersion = p.Namespace, p.Name, p.ResourceVersion
		slim.Spec.ServiceAccountName, slim.Spec.NodeName = p.Spec.ServiceAccountName, p.Spec.NodeName
		slim.Labels = p.Labels // policy selectors
		for _, k := range []string{statusAnnotation, MTLSModeAnnotation} {
			if v, ok := p.Annotations[k]; ok {
				if slim.Annotations == nil {
					slim.Annotations = map[string]string{}
				}
				slim.Annotations[k] = v
			}
		}
		return slim, nil
	}); err != nil {
		return fmt.Errorf("xds: pod informer: %w", err)
	}
	if err := eps.Informer().AddIndexers(cache.Indexers{sliceServiceIndex: sliceServiceIndexFunc}); err != nil {
		return fmt.Errorf("xds: endpointslice index: %w", err)
	}
	// The optional kinds' stores stay empty until their informers run:
	// at the start for a kind served then, else once its CRD is installed
	// (optionalGroup.watchLate).
	routes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, routeIndexers())
	grpcRoutes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, routeIndexers())
	peerAuths := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	authzPolicies := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var status *routeStatusWriter
	if gw != nil {
		status = newRouteStatusWriter(gw, routes, grpcRoutes, svc.Lister(), s.opts.ClusterDomain, s.log)
	}
	var pstatus *policyStatusWriter
	if c.Istio != nil {
		pstatus = newPolicyStatusWriter(c.Istio, peerAuths, authzPolicies, s.log)
	}
	s.useSources(sources{services: svc.Lister(), slices: eps.Informer().GetIndexer(), nodes: nodes.Lister(), pods: pods.Lister(),
		routes: routes, grpcRoutes: grpcRoutes, peerAuths: peerAuths, authzPolicies: authzPolicies})
	// Each handler gets the object before and after a change (nil when
	// added or deleted), as the Upsert and Delete methods do.
	handlers := []informerHandler{
		{svc.Informer(), func(old, cur any) {
			if v := cmp.Or(as[*corev1.Service](cur), as[*corev1.Service](old)); v != nil {
				key := types.NamespacedName{Namespace: v.Namespace, Name: v.Name}
				s.serviceChanged(key)
				if status != nil {
					status.serviceEvent(key)
				}
			}
		}},
		{eps.Informer(), func(old, cur any) {
			s.sliceChanged(as[*discoveryv1.EndpointSlice](old), as[*discoveryv1.EndpointSlice](cur))
		}},
		{nodes.Informer(), func(old, cur any) { s.nodeChanged(as[*corev1.Node](old), as[*corev1.Node](cur)) }},
		{pods.Informer(), func(old, cur any) { s.podChanged(as[*corev1.Pod](old), as[*corev1.Pod](cur)) }},
	}
	if err := addHandlers(handlers); err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("xds: informer cache for %v never synced", typ)
		}
	}
	var late []*optionalGroup
	if gw != nil {
		g := s.routeGroup(gw, resync, status)
		missing, err := g.startServed(ctx)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			late = append(late, g)
		}
	}
	if c.Istio != nil {
		g := s.policyGroup(c.Istio, resync, pstatus)
		missing, err := g.startServed(ctx)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			late = append(late, g)
		}
	}
	s.SetSynced()
	for _, g := range late {
		go g.watchLate(ctx)
	}
	if pstatus != nil {
		go pstatus.run(ctx)
	}
	if status != nil {
		status.run(ctx) // until ctx ends
	}
	<-ctx.Done()
	return nil
}

// informerHandler is a change function for an informer's events: the
// object before and after (nil when added or deleted).
type informerHandler struct {
	inf    cache.SharedIndexInformer
	change func(old, cur any)
}

// addHandlers registers each handler's change function for its informer's
// adds, updates and deletes.
func addHandlers(handlers []informerHandler) error {
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { h.change(nil, o) },
			UpdateFunc: func(old, cur any) { h.change(old, cur) },
			DeleteFunc: func(o any) {
				if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				h.change(o, nil)
			},
		}); err != nil {
			return fmt.Errorf("xds: informer handler: %w", err)
		}
	}
	return nil
}

// optionalKind is a custom resource kind watched only while the API
// server serves it (an informer of a kind not served would retry its
// list for ever and never sync).
type optionalKind struct {
	resource, what string
}

// optionalGroup is the optional kinds of one API group version and how
// to start informers for some of them.
type optionalGroup struct {
	log          *slog.Logger
	recheck      time.Duration
	groupVersion string
	disco        discovery.DiscoveryInterface
	kinds        []optionalKind
	// missing says what is lost while a kind is not served.
	missing string
	// start runs informers for the kinds named (by resource) from a
	// factory of their own until ctx ends, returns once they have synced,
	// and only then hands their caches to the server and the status
	// writer, so that no rebuild sees a cache half-listed.
	start func(ctx context.Context, resources []string) error
	// left are the kinds not started yet.
	left []optionalKind
}

// startServed starts the kinds served now and returns those that are
// not, each logged once.
func (g *optionalGroup) startServed(ctx context.Context) ([]optionalKind, error) {
	served, err := resourcesServed(ctx, g.disco, g.groupVersion)
	if err != nil {
		return nil, err
	}
	var now []string
	g.left = nil
	for _, k := range g.kinds {
		if served[k.resource] {
			now = append(now, k.resource)
			continue
		}
		g.log.Warn(k.what+" not served: "+g.missing+" until its CRD is installed", "group_version", g.groupVersion, "recheck", g.recheck)
		g.left = append(g.left, k)
	}
	if len(now) > 0 {
		if err := g.start(ctx, now); err != nil {
			return nil, err
		}
	}
	return g.left, nil
}

// watchLate asks discovery every recheck until each kind left
// is served, and starts its informer then.
func (g *optionalGroup) watchLate(ctx context.Context) {
	t := time.NewTicker(g.recheck)
	defer t.Stop()
	var lastErr string
	for len(g.left) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		list, err := g.disco.ServerResourcesForGroupVersion(g.groupVersion)
		if err != nil {
			// NotFound: still not installed. Others (RBAC, the API
			// server) are logged when they change, and asked again.
			if msg := err.Error(); !apierrors.IsNotFound(err) && msg != lastErr {
				g.log.Warn("discovery of kinds not served yet", "group_version", g.groupVersion, "error", err)
				lastErr = msg
			}
			continue
		}
		lastErr = ""
		served := map[string]bool{}
		for _, r := range list.APIResources {
			served[r.Name] = true
		}
		var now []string
		var still []optionalKind
		for _, k := range g.left {
			if served[k.resource] {
				now = append(now, k.resource)
			} else {
				still = append(still, k)
			}
		}
		if len(now) == 0 {
			continue
		}
		if err := g.start(ctx, now); err != nil {
			if ctx.Err() == nil {
				g.log.Warn("start informers of kinds installed after the start; trying again", "group_version", g.groupVersion, "resources", now, "error", err)
			}
			continue
		}
		g.log.Info("watching kinds installed after the start", "group_version", g.groupVersion, "resources", now)
		g.left = still
	}
}

// routeGroup is Gateway API's HTTPRoutes and GRPCRoutes: translated into
// RouteConfigurations, their status written by status.
func (s *Server) routeGroup(gw gatewayclient.Interface, resync time.Duration, status *routeStatusWriter) *optionalGroup {
	return &optionalGroup{log: s.log, recheck: s.opts.RecheckKinds, groupVersion: routeGroupVersion, disco: gw.Discovery(), missing: "no routes",
		kinds: []optionalKind{{"httproutes", "HTTPRoutes"}, {"grpcroutes", "GRPCRoutes"}},
		start: func(ctx context.Context, resources []string) error {
			gf := gatewayinformers.NewSharedInformerFactory(gw, resync)
			infs := map[string]cache.SharedIndexInformer{}
			for _, r := range resources {
				var inf cache.SharedIndexInformer
				switch r {
				case "httproutes":
					inf = gf.Gateway().V1().HTTPRoutes().Informer()
				case "grpcroutes":
					inf = gf.Gateway().V1().GRPCRoutes().Informer()
				}
				if err := inf.SetTransform(dropManagedFields); err != nil {
					return fmt.Errorf("xds: %s informer: %w", r, err)
				}
				idx := routeIndexers()
				delete(idx, cache.NamespaceIndex) // the informer has it
				if err := inf.AddIndexers(idx); err != nil {
					return fmt.Errorf("xds: %s index: %w", r, err)
				}
				if err := addHandlers([]informerHandler{{inf, func(old, cur any) {
					s.routeChanged(old, cur)
					status.routeChanged(old, cur)
				}}}); err != nil {
					return err
				}
				infs[r] = inf
			}
			if err := startFactory(ctx, gf); err != nil {
				return err
			}
			// Both kinds' caches in one swap: a rebuild between two would
			// see HTTPRoutes without the GRPCRoutes that displace them.
			s.setSource(func(src *sources) {
				if inf, ok := infs["httproutes"]; ok {
					src.routes = inf.GetIndexer()
				}
				if inf, ok := infs["grpcroutes"]; ok {
					src.grpcRoutes = inf.GetIndexer()
				}
			})
			for r, inf := range infs {
				kind := httpRouteKind
				if r == "grpcroutes" {
					kind = grpcRouteKind
				}
				status.setStore(kind, inf.GetIndexer())
				// The adds seen while listing were translated against
				// the empty cache; translate them again.
				for _, o := range inf.GetIndexer().List() {
					s.routeChanged(nil, o)
				}
			}
			return nil
		}}
}

// policyGroup is Istio's PeerAuthentications and AuthorizationPolicies:
// translated per workload, their status written by pstatus.
func (s *Server) policyGroup(ic istioclient.Interface, resync time.Duration, pstatus *policyStatusWriter) *optionalGroup {
	return &optionalGroup{log: s.log, recheck: s.opts.RecheckKinds, groupVersion: securityGroupVersion, disco: ic.Discovery(), missing: "none applied",
		kinds: []optionalKind{{"peerauthentications", "PeerAuthentications"}, {"authorizationpolicies", "AuthorizationPolicies"}},
		start: func(ctx context.Context, resources []string) error {
			isf := istioinformers.NewSharedInformerFactory(ic, resync)
			infs := map[string]cache.SharedIndexInformer{}
			for _, r := range resources {
				var inf cache.SharedIndexInformer
				switch r {
				case "peerauthentications":
					inf = isf.Security().V1().PeerAuthentications().Informer()
				case "authorizationpolicies":
					inf = isf.Security().V1().AuthorizationPolicies().Informer()
				}
				if err := inf.SetTransform(dropManagedFields); err != nil {
					return fmt.Errorf("xds: %s informer: %w", r, err)
				}
				if err := addHandlers([]informerHandler{{inf, func(old, cur any) {
					if specUnchanged(old, cur) {
						return // our own status write, or another's
					}
					if r == "peerauthentications" {
						s.peerAuthChanged(as[*securityv1.PeerAuthentication](old), as[*securityv1.PeerAuthentication](cur))
					} else {
						s.policyChanged()
					}
					pstatus.changed(cur)
				}}}); err != nil {
					return err
				}
				infs[r] = inf
			}
			if err := startFactory(ctx, isf); err != nil {
				return err
			}
			s.setSource(func(src *sources) { // both in one swap, as routes
				if inf, ok := infs["authorizationpolicies"]; ok {
					src.authzPolicies = inf.GetIndexer()
				}
				if inf, ok := infs["peerauthentications"]; ok {
					src.peerAuths = inf.GetIndexer()
				}
			})
			for r, inf := range infs {
				pstatus.setStore(r == "authorizationpolicies", inf.GetIndexer())
			}
			// Translated again with the caches in (every Service: a
			// PeerAuthentication may set ports to DISABLE).
			s.mu.Lock()
			s.allDirty = true
			s.mu.Unlock()
			s.policyChanged()
			return nil
		}}
}

// informerFactory is what startFactory needs of a typed informer factory.
type informerFactory interface {
	Start(stop <-chan struct{})
	WaitForCacheSync(stop <-chan struct{}) map[reflect.Type]bool
	Shutdown()
}

// startFactory starts a factory's informers until ctx ends (then shut
// down) and waits for their caches.
func startFactory(ctx context.Context, f informerFactory) error {
	f.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		f.Shutdown()
	}()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("xds: informer cache for %v never synced", typ)
		}
	}
	return nil
}

// dropManagedFields is the route informers' transform: managed fields
// are never read, and large.
func dropManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// securityGroupVersion is where Istio's PeerAuthentications and
// AuthorizationPolicies are served.
const securityGroupVersion = "security.istio.io/v1"

// resourcesServed asks the API server's discovery which resources it
// serves in groupVersion: NotFound (the group or version is unknown)
// means none. Other errors are retried every second until ctx ends, since
// the other informers need the API server as much.
func resourcesServed(ctx context.Context, d discovery.DiscoveryInterface, groupVersion string) (map[string]bool, error) {
	served := map[string]bool{}
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := d.ServerResourcesForGroupVersion(groupVersion)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, nil
		}
		for _, r := range list.APIResources {
			served[r.Name] = true
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("xds: discovery of %s: %w", groupVersion, err)
	}
	return served, nil
}

// as is o as a T, or T's zero value (nil) when o is nil or not a T.
func as[T any](o any) T {
	v, _ := o.(T)
	return v
}

// specUnchanged says whether an update kept a policy's spec
// (its generation counts spec changes), as a status write does: nothing
// to translate again or to write.
func specUnchanged(old, cur any) bool {
	o, ok1 := old.(metav1.Object)
	c, ok2 := cur.(metav1.Object)
	if !ok1 || !ok2 || o == nil || c == nil {
		return false
	}
	return o.GetGeneration() != 0 && o.GetGeneration() == c.GetGeneration() && o.GetDeletionTimestamp().Equal(c.GetDeletionTimestamp())
}
