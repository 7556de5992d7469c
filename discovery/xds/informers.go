package xds

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"time"

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
// sync) is logged once and left out; installing the CRD later takes a
// restart.
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
	// writes; a kind not served is logged once and left out, as routes
	// are.
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
	var gf gatewayinformers.SharedInformerFactory
	var routeInfs []cache.SharedIndexInformer
	var status *routeStatusWriter
	// The stores stay empty for kinds not served.
	routes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, routeIndexers())
	grpcRoutes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, routeIndexers())
	if gw != nil {
		served, err := routesServed(ctx, gw)
		if err != nil {
			return err
		}
		gf = gatewayinformers.NewSharedInformerFactory(gw, resync)
		for _, k := range []struct {
			resource, what string
			informer       func() cache.SharedIndexInformer
			store          *cache.Indexer
		}{
			{"httproutes", "HTTPRoutes", func() cache.SharedIndexInformer { return gf.Gateway().V1().HTTPRoutes().Informer() }, &routes},
			{"grpcroutes", "GRPCRoutes", func() cache.SharedIndexInformer { return gf.Gateway().V1().GRPCRoutes().Informer() }, &grpcRoutes},
		} {
			if !served[k.resource] {
				s.log.Warn(k.what+" not served (Gateway API CRDs not installed?): no routes", "group_version", routeGroupVersion)
				continue
			}
			inf := k.informer()
			if err := inf.SetTransform(dropManagedFields); err != nil {
				return fmt.Errorf("xds: %s informer: %w", k.resource, err)
			}
			idx := routeIndexers()
			delete(idx, cache.NamespaceIndex) // the informer has it
			if err := inf.AddIndexers(idx); err != nil {
				return fmt.Errorf("xds: %s index: %w", k.resource, err)
			}
			*k.store = inf.GetIndexer()
			routeInfs = append(routeInfs, inf)
		}
		if len(routeInfs) > 0 {
			status = newRouteStatusWriter(gw, routes, grpcRoutes, svc.Lister(), s.opts.ClusterDomain, s.log)
		}
	}
	peerAuths := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	authzPolicies := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var isf istioinformers.SharedInformerFactory
	var policyInfs []cache.SharedIndexInformer
	var pstatus *policyStatusWriter
	if c.Istio != nil {
		served, err := resourcesServed(ctx, c.Istio.Discovery(), securityGroupVersion)
		if err != nil {
			return err
		}
		isf = istioinformers.NewSharedInformerFactory(c.Istio, resync)
		for _, k := range []struct {
			resource, what string
			informer       func() cache.SharedIndexInformer
			store          *cache.Indexer
		}{
			{"peerauthentications", "PeerAuthentications", func() cache.SharedIndexInformer { return isf.Security().V1().PeerAuthentications().Informer() }, &peerAuths},
			{"authorizationpolicies", "AuthorizationPolicies", func() cache.SharedIndexInformer { return isf.Security().V1().AuthorizationPolicies().Informer() }, &authzPolicies},
		} {
			if !served[k.resource] {
				s.log.Warn(k.what+" not served (Istio's security CRDs not installed?): none applied", "group_version", securityGroupVersion)
				continue
			}
			inf := k.informer()
			if err := inf.SetTransform(dropManagedFields); err != nil {
				return fmt.Errorf("xds: %s informer: %w", k.resource, err)
			}
			*k.store = inf.GetIndexer()
			policyInfs = append(policyInfs, inf)
		}
		if len(policyInfs) > 0 {
			pstatus = newPolicyStatusWriter(c.Istio, peerAuths, authzPolicies, s.log)
		}
	}
	s.useSources(sources{services: svc.Lister(), slices: eps.Informer().GetIndexer(), nodes: nodes.Lister(), pods: pods.Lister(),
		routes: routes, grpcRoutes: grpcRoutes, peerAuths: peerAuths, authzPolicies: authzPolicies})
	// Each handler gets the object before and after a change (nil when
	// added or deleted), as the Upsert and Delete methods do.
	handlers := []struct {
		inf    cache.SharedIndexInformer
		change func(old, cur any)
	}{
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
	for _, inf := range routeInfs {
		handlers = append(handlers, struct {
			inf    cache.SharedIndexInformer
			change func(old, cur any)
		}{inf, func(old, cur any) {
			s.routeChanged(old, cur)
			status.routeChanged(old, cur)
		}})
	}
	for _, inf := range policyInfs {
		handlers = append(handlers, struct {
			inf    cache.SharedIndexInformer
			change func(old, cur any)
		}{inf, func(old, cur any) {
			if specUnchanged(old, cur) {
				return // our own status write, or another's
			}
			s.policyChanged()
			pstatus.changed(cur)
		}})
	}
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
	f.Start(ctx.Done())
	defer f.Shutdown()
	synced := f.WaitForCacheSync(ctx.Done())
	if len(routeInfs) > 0 {
		gf.Start(ctx.Done())
		defer gf.Shutdown()
		maps.Copy(synced, gf.WaitForCacheSync(ctx.Done()))
	}
	if len(policyInfs) > 0 {
		isf.Start(ctx.Done())
		defer isf.Shutdown()
		maps.Copy(synced, isf.WaitForCacheSync(ctx.Done()))
	}
	for typ, ok := range synced {
		if !ok {
			return fmt.Errorf("xds: informer cache for %v never synced", typ)
		}
	}
	s.SetSynced()
	if pstatus != nil {
		go pstatus.run(ctx)
	}
	if status != nil {
		status.run(ctx) // until ctx ends
	}
	<-ctx.Done()
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

// routesServed asks the API server's discovery which resources it serves
// in gateway.networking.k8s.io/v1: NotFound (the group or version is
// unknown) means none. Other errors are retried every second until ctx
// ends, since the other informers need the API server as much.
func routesServed(ctx context.Context, gw gatewayclient.Interface) (map[string]bool, error) {
	return resourcesServed(ctx, gw.Discovery(), routeGroupVersion)
}

// securityGroupVersion is where Istio's PeerAuthentications and
// AuthorizationPolicies are served.
const securityGroupVersion = "security.istio.io/v1"

// resourcesServed asks the API server's discovery which resources it
// serves in groupVersion, as routesServed.
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
