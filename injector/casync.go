package injector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gomodules.xyz/jsonpatch/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// rootCertKey is the root-CA ConfigMap's key that pods mount.
const rootCertKey = "root-cert.pem"

// caSyncWorkers run syncs in parallel, so that the caBundle key does not
// wait behind every namespace's ConfigMap at startup.
const caSyncWorkers = 2

// caSyncKey is one item of the queue: the webhook configuration's caBundle,
// or one namespace's root-CA ConfigMap.
type caSyncKey struct {
	webhook   bool
	namespace string
}

// caSync keeps the mesh root published in client-go's controller shape.
// Informers on the Namespaces, the root-CA ConfigMaps and the webhook
// configuration (the last two filtered by name, so only they are cached)
// push keys onto a rate-limited workqueue; syncNamespace and syncCABundle
// read the caches and write only what differs, with the resourceVersion
// they read. Both are idempotent: a resync, a restart or a second replica
// doing the same work changes nothing, and a conflict requeues the key.
// In steady state it makes no API request besides its watches.
type caSync struct {
	client                 kubernetes.Interface
	rootPEM                string
	configMap, webhookName string
	namespaces             corelisters.NamespaceLister
	configMaps             corelisters.ConfigMapLister
	webhooks               admissionlisters.MutatingWebhookConfigurationLister
	synced                 []cache.InformerSynced
	queue                  workqueue.TypedRateLimitingInterface[caSyncKey]
	syncs                  *prometheus.CounterVec // by kind and result
	log                    *slog.Logger
}

// newCASync wires a caSync to the namespace informer of nsFactory and
// to informers of its own (started by the returned factories' Start).
func newCASync(client kubernetes.Interface, rootPEM []byte, opts Options, nsFactory informers.SharedInformerFactory,
	syncs *prometheus.CounterVec) (*caSync, []informers.SharedInformerFactory, error) {
	byName := func(name string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
	}
	cmFactory := informers.NewSharedInformerFactoryWithOptions(client, opts.Resync, byName(opts.RootCAConfigMap))
	whFactory := informers.NewSharedInformerFactoryWithOptions(client, opts.Resync, byName(opts.WebhookConfig))
	nsInf := nsFactory.Core().V1().Namespaces()
	cmInf := cmFactory.Core().V1().ConfigMaps()
	whInf := whFactory.Admissionregistration().V1().MutatingWebhookConfigurations()
	c := &caSync{
		client: client, rootPEM: string(rootPEM), configMap: opts.RootCAConfigMap, webhookName: opts.WebhookConfig,
		namespaces: nsInf.Lister(), configMaps: cmInf.Lister(), webhooks: whInf.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[caSyncKey](),
			workqueue.TypedRateLimitingQueueConfig[caSyncKey]{Name: "meshlet_root_ca"}),
		syncs: syncs, log: opts.Logger,
	}
	// A deleted namespace takes its ConfigMap with it: nothing to do.
	nsHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.enqueueNamespace(o) },
		UpdateFunc: func(_, o any) { c.enqueueNamespace(o) },
	}
	cmHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.enqueueNamespace(o) },
		UpdateFunc: func(_, o any) { c.enqueueNamespace(o) },
		DeleteFunc: func(o any) { c.enqueueNamespace(o) },
	}
	whKey := func(any) { c.queue.Add(caSyncKey{webhook: true}) }
	whHandler := cache.ResourceEventHandlerFuncs{AddFunc: whKey, UpdateFunc: func(_, o any) { whKey(o) }, DeleteFunc: whKey}
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{{nsInf.Informer(), nsHandler}, {cmInf.Informer(), cmHandler}, {whInf.Informer(), whHandler}} {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return nil, nil, fmt.Errorf("injector: root CA informer handler: %w", err)
		}
		c.synced = append(c.synced, reg.HasSynced)
	}
	return c, []informers.SharedInformerFactory{cmFactory, whFactory}, nil
}

// enqueueNamespace queues the namespace of a Namespace or ConfigMap (or
// of a deletion's last known state).
func (c *caSync) enqueueNamespace(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch o := obj.(type) {
	case *corev1.Namespace:
		c.queue.Add(caSyncKey{namespace: o.Name})
	case *corev1.ConfigMap:
		c.queue.Add(caSyncKey{namespace: o.Namespace})
	}
}

// Run waits for the caches (nothing is written from a partial view), then
// syncs queued keys until ctx ends.
func (c *caSync) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	for range caSyncWorkers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for c.next(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

// next syncs one key; a failure puts it back with a per-key backoff.
func (c *caSync) next(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	kind, err := "namespace", error(nil)
	if k.webhook {
		kind, err = "cabundle", c.syncCABundle(ctx)
	} else {
		err = c.syncNamespace(ctx, k.namespace)
	}
	result := "ok"
	switch {
	case err == nil:
		c.queue.Forget(k)
	case ctx.Err() != nil:
		return false
	case stale(err):
		// Another replica or an edit got there first; the cache will
		// show it, and the retry compares again.
		result = "conflict"
		c.log.Debug("root CA sync: stale cache, retrying", "kind", kind, "namespace", k.namespace, "err", err)
		c.queue.AddRateLimited(k)
	default:
		result = "error"
		c.log.Warn("root CA sync failed, retrying", "kind", kind, "namespace", k.namespace, "err", err)
		c.queue.AddRateLimited(k)
	}
	if c.syncs != nil {
		c.syncs.WithLabelValues(kind, result).Inc()
	}
	return true
}

// errStaleTest marks a JSON patch refused because its resourceVersion
// test failed.
var errStaleTest = errors.New("the resourceVersion test failed: the cache is behind")

// stale says whether err is a write refused because it was computed from
// an older object than the API server's: an update's resourceVersion
// conflict, a create of what exists, or the JSON patch's resourceVersion
// test failing.
func stale(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || errors.Is(err, errStaleTest)
}

// failedPatchTest says whether a JSON patch's error is a failed test
// operation: the API server answers it 422 with a generic message and no
// causes, where a validation failure lists its causes.
func failedPatchTest(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	return d == nil || len(d.Causes) == 0
}

// syncNamespace makes the root-CA ConfigMap of namespace ns hold the mesh
// root: created if missing, its key rewritten if edited, other keys kept.
func (c *caSync) syncNamespace(ctx context.Context, ns string) error {
	n, err := c.namespaces.Get(ns)
	if apierrors.IsNotFound(err) {
		return nil // deleted, with its ConfigMaps
	}
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	if n.DeletionTimestamp != nil {
		return nil // terminating: the API server refuses creates
	}
	cm, err := c.configMaps.ConfigMaps(ns).Get(c.configMap)
	if apierrors.IsNotFound(err) {
		_, err = c.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: c.configMap, Namespace: ns},
			Data:       map[string]string{rootCertKey: c.rootPEM}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create ConfigMap %s/%s: %w", ns, c.configMap, err)
		}
		c.log.Info("published the root CA", "namespace", ns, "configmap", c.configMap)
		return nil
	}
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s: %w", ns, c.configMap, err)
	}
	if cm.Data[rootCertKey] == c.rootPEM {
		return nil
	}
	want := cm.DeepCopy() // the cache's objects are shared: never edit them
	if want.Data == nil {
		want.Data = map[string]string{}
	}
	want.Data[rootCertKey] = c.rootPEM
	// Update carries the cached resourceVersion: a stale cache conflicts.
	if _, err := c.client.CoreV1().ConfigMaps(ns).Update(ctx, want, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update ConfigMap %s/%s (resourceVersion %s): %w", ns, c.configMap, cm.ResourceVersion, err)
	}
	c.log.Info("repaired the root CA", "namespace", ns, "configmap", c.configMap)
	return nil
}

// syncCABundle makes every webhook of the webhook configuration trust the
// mesh root (nothing while it is not installed).
func (c *caSync) syncCABundle(ctx context.Context) error {
	mwc, err := c.webhooks.Get(c.webhookName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("MutatingWebhookConfiguration %s: %w", c.webhookName, err)
	}
	patch, err := caBundlePatch(mwc, []byte(c.rootPEM))
	if err != nil || patch == nil {
		return err
	}
	_, err = c.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, c.webhookName, types.JSONPatchType, patch, metav1.PatchOptions{})
	if failedPatchTest(err) {
		err = fmt.Errorf("%w: %w", errStaleTest, err)
	}
	if err != nil {
		return fmt.Errorf("patch the caBundle of MutatingWebhookConfiguration %s (resourceVersion %s): %w", c.webhookName, mwc.ResourceVersion, err)
	}
	c.log.Info("patched caBundle", "webhook_configuration", c.webhookName)
	return nil
}

// caBundlePatch is the JSON patch that sets every webhook's caBundle of
// mwc to root, or nil if they all have it. A JSON patch of the changed
// caBundles, so the injector needs only the "patch" verb on its own
// webhook configuration (deploy/'s RBAC); its first operation tests the
// resourceVersion, which guards the index-based paths against a
// concurrent change.
func caBundlePatch(mwc *admissionregistrationv1.MutatingWebhookConfiguration, root []byte) ([]byte, error) {
	want := mwc.DeepCopy()
	changed := false
	for i := range want.Webhooks {
		if string(want.Webhooks[i].ClientConfig.CABundle) != string(root) {
			want.Webhooks[i].ClientConfig.CABundle = root
			changed = true
		}
	}
	if !changed {
		return nil, nil
	}
	before, err := json.Marshal(mwc)
	if err != nil {
		return nil, fmt.Errorf("caBundle patch of %s: %w", mwc.Name, err)
	}
	after, err := json.Marshal(want)
	if err != nil {
		return nil, fmt.Errorf("caBundle patch of %s: %w", mwc.Name, err)
	}
	ops, err := jsonpatch.CreatePatch(before, after)
	if err != nil {
		return nil, fmt.Errorf("caBundle patch of %s: %w", mwc.Name, err)
	}
	ops = append([]jsonpatch.Operation{{Operation: "test", Path: "/metadata/resourceVersion", Value: mwc.ResourceVersion}}, ops...)
	return json.Marshal(ops)
}
