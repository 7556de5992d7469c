package xds

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
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
// error if the caches never sync. It watches no HTTPRoutes; see
// RunInformersWithRoutes.
func RunInformers(ctx context.Context, client kubernetes.Interface, s *Server, resync time.Duration) error {
	return RunInformersWithRoutes(ctx, client, nil, s, resync)
}

// httpRouteGroupVersion is where HTTPRoutes are served.
var httpRouteGroupVersion = gatewayv1.SchemeGroupVersion.String()

// RunInformersWithRoutes is RunInformers that also watches Gateway API
// HTTPRoutes (gateway.networking.k8s.io/v1) through gw, translating those
// with Service parents into RouteConfigurations, and writes their status
// (MeshControllerName's entries). A nil gw watches none. When the API
// server does not serve HTTPRoutes (the CRD is not installed: its
// discovery answers NotFound, and an informer would retry its list for
// ever and never sync), it logs that once and serves no routes;
// installing the CRD later takes a restart.
func RunInformersWithRoutes(ctx context.Context, client kubernetes.Interface, gw gatewayclient.Interface, s *Server, resync time.Duration) error {
	f := informers.NewSharedInformerFactory(client, resync)
	svc := f.Core().V1().Services()
	eps := f.Discovery().V1().EndpointSlices()
	nodes := f.Core().V1().Nodes()
	pods := f.Core().V1().Pods()
	// Keep only what discovery reads of a pod: its name, annotation,
	// service account and node.
	if err := pods.Informer().SetTransform(func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		slim := &corev1.Pod{}
		slim.Namespace, slim.Name, slim.ResourceVersion = p.Namespace, p.Name, p.ResourceVersion
		slim.Spec.ServiceAccountName, slim.Spec.NodeName = p.Spec.ServiceAccountName, p.Spec.NodeName
		if v, ok := p.Annotations[statusAnnotation]; ok {
			slim.Annotations = map[string]string{statusAnnotation: v}
		}
		return slim, nil
	}); err != nil {
		return fmt.Errorf("xds: pod informer: %w", err)
	}
	if err := eps.Informer().AddIndexers(cache.Indexers{sliceServiceIndex: sliceServiceIndexFunc}); err != nil {
		return fmt.Errorf("xds: endpointslice index: %w", err)
	}
	var gf gatewayinformers.SharedInformerFactory
	var routeInf cache.SharedIndexInformer
	var status *routeStatusWriter
	routes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, routeIndexers()) // stays empty without HTTPRoutes
	if gw != nil {
		served, err := httpRoutesServed(ctx, gw)
		if err != nil {
			return err
		}
		if !served {
			s.log.Warn("HTTPRoutes not served (Gateway API CRDs not installed?): no routes", "group_version", httpRouteGroupVersion)
		} else {
			gf = gatewayinformers.NewSharedInformerFactory(gw, resync)
			routeInf = gf.Gateway().V1().HTTPRoutes().Informer()
			if err := routeInf.SetTransform(func(obj any) (any, error) {
				if r, ok := obj.(*gatewayv1.HTTPRoute); ok {
					r.ManagedFields = nil // never read, and large
				}
				return obj, nil
			}); err != nil {
				return fmt.Errorf("xds: httproute informer: %w", err)
			}
			idx := routeIndexers()
			delete(idx, cache.NamespaceIndex) // the informer has it
			if err := routeInf.AddIndexers(idx); err != nil {
				return fmt.Errorf("xds: httproute index: %w", err)
			}
			routes = routeInf.GetIndexer()
			status = newRouteStatusWriter(gw, routes, svc.Lister(), s.opts.ClusterDomain, s.log)
		}
	}
	s.useSources(sources{services: svc.Lister(), slices: eps.Informer().GetIndexer(), nodes: nodes.Lister(), pods: pods.Lister(),
		routes: routes})
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
	if routeInf != nil {
		handlers = append(handlers, struct {
			inf    cache.SharedIndexInformer
			change func(old, cur any)
		}{routeInf, func(old, cur any) {
			s.routeChanged(as[*gatewayv1.HTTPRoute](old), as[*gatewayv1.HTTPRoute](cur))
			if cur != nil {
				status.routeEvent(cur)
			}
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
	if gf != nil {
		gf.Start(ctx.Done())
		defer gf.Shutdown()
		maps.Copy(synced, gf.WaitForCacheSync(ctx.Done()))
	}
	for typ, ok := range synced {
		if !ok {
			return fmt.Errorf("xds: informer cache for %v never synced", typ)
		}
	}
	s.SetSynced()
	if status != nil {
		status.run(ctx) // until ctx ends
	}
	<-ctx.Done()
	return nil
}

// httpRoutesServed asks the API server's discovery whether it serves
// httproutes in gateway.networking.k8s.io/v1: NotFound (the group or
// version is unknown) or a list without them means no. Other errors are
// retried every second until ctx ends, since the other informers need
// the API server as much.
func httpRoutesServed(ctx context.Context, gw gatewayclient.Interface) (bool, error) {
	var served bool
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := gw.Discovery().ServerResourcesForGroupVersion(httpRouteGroupVersion)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, nil
		}
		served = slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "httproutes" })
		return true, nil
	})
	if err != nil {
		return false, fmt.Errorf("xds: discovery of %s: %w", httpRouteGroupVersion, err)
	}
	return served, nil
}

// as is o as a T, or T's zero value (nil) when o is nil or not a T.
func as[T any](o any) T {
	v, _ := o.(T)
	return v
}
