package xds

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
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
// error if the caches never sync.
func RunInformers(ctx context.Context, client kubernetes.Interface, s *Server, resync time.Duration) error {
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
	s.useSources(sources{services: svc.Lister(), slices: eps.Informer().GetIndexer(), nodes: nodes.Lister(), pods: pods.Lister()})
	// Each handler gets the object before and after a change (nil when
	// added or deleted), as the Upsert and Delete methods do.
	handlers := []struct {
		inf    cache.SharedIndexInformer
		change func(old, cur any)
	}{
		{svc.Informer(), func(old, cur any) {
			if v := cmp.Or(as[*corev1.Service](cur), as[*corev1.Service](old)); v != nil {
				s.serviceChanged(types.NamespacedName{Namespace: v.Namespace, Name: v.Name})
			}
		}},
		{eps.Informer(), func(old, cur any) {
			s.sliceChanged(as[*discoveryv1.EndpointSlice](old), as[*discoveryv1.EndpointSlice](cur))
		}},
		{nodes.Informer(), func(old, cur any) { s.nodeChanged(as[*corev1.Node](old), as[*corev1.Node](cur)) }},
		{pods.Informer(), func(old, cur any) { s.podChanged(as[*corev1.Pod](old), as[*corev1.Pod](cur)) }},
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
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("xds: informer cache for %v never synced", typ)
		}
	}
	s.SetSynced()
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// as is o as a T, or T's zero value (nil) when o is nil or not a T.
func as[T any](o any) T {
	v, _ := o.(T)
	return v
}
