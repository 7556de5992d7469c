package xds

import (
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
// annotation and service account, so the informer keeps nothing else of
// them). Once every cache
// has synced it calls s.SetSynced, so sidecars never get an empty mesh. It
// returns when ctx ends, or with an error if the caches never sync.
func RunInformers(ctx context.Context, client kubernetes.Interface, s *Server, resync time.Duration) error {
	f := informers.NewSharedInformerFactory(client, resync)
	svc := f.Core().V1().Services().Informer()
	eps := f.Discovery().V1().EndpointSlices().Informer()
	nodes := f.Core().V1().Nodes().Informer()
	pods := f.Core().V1().Pods().Informer()
	// Keep only what discovery reads of a pod: its name, annotation,
	// service account and node.
	if err := pods.SetTransform(func(obj any) (any, error) {
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
	key := func(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	handlers := []struct {
		inf    cache.SharedIndexInformer
		upsert func(any)
		remove func(any)
	}{
		{svc, func(o any) { s.UpsertService(o.(*corev1.Service)) },
			func(o any) { v := o.(*corev1.Service); s.DeleteService(key(v.Namespace, v.Name)) }},
		{eps, func(o any) { s.UpsertEndpointSlice(o.(*discoveryv1.EndpointSlice)) },
			func(o any) { v := o.(*discoveryv1.EndpointSlice); s.DeleteEndpointSlice(key(v.Namespace, v.Name)) }},
		{nodes, func(o any) { s.UpsertNode(o.(*corev1.Node)) }, func(o any) { s.DeleteNode(o.(*corev1.Node).Name) }},
		{pods, func(o any) {
			p := o.(*corev1.Pod)
			_, meshed := p.Annotations[statusAnnotation]
			s.SetPodMeshed(key(p.Namespace, p.Name), meshed, p.Spec.ServiceAccountName)
			s.SetPodNode(key(p.Namespace, p.Name), p.Spec.NodeName)
		}, func(o any) {
			p := o.(*corev1.Pod)
			s.SetPodMeshed(key(p.Namespace, p.Name), false, "")
			s.SetPodNode(key(p.Namespace, p.Name), "")
		}},
	}
	for _, h := range handlers {
		h := h
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    h.upsert,
			UpdateFunc: func(_, o any) { h.upsert(o) },
			DeleteFunc: func(o any) {
				if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				h.remove(o)
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
