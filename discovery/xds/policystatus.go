package xds

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// PolicyConditionType is the condition meshlet writes in the status of
// PeerAuthentications and AuthorizationPolicies, named as istiod names its
// own per data plane (ZtunnelAccepted, WaypointAccepted), so the two
// never overwrite each other.
const PolicyConditionType = "MeshletAccepted"

// condition is meshlet's condition of a policy.
type condition struct{ status, reason, message string }

// authorizationPolicyCondition is the condition a policy's spec earns.
func authorizationPolicyCondition(p *securityv1.AuthorizationPolicy) condition {
	ip := istioPolicy{Ref: policyRef{p.Namespace, p.Name}, Spec: &p.Spec}
	idx, err := policyAction(ip.Spec)
	if err == nil {
		_, _, err = translatePolicy(ip, idx)
	}
	if err != nil {
		return condition{"False", "Invalid", err.Error() + "; the workloads it selects allow nothing"}
	}
	for _, r := range p.Spec.GetTargetRefs() {
		if !serviceRef(r.GetGroup(), r.GetKind()) {
			return condition{"True", "PartiallyAccepted", fmt.Sprintf("targetRefs kind %s/%s is not a Service: ignored by meshlet sidecars", r.GetGroup(), r.GetKind())}
		}
	}
	return condition{"True", "Accepted", "enforced by the meshlet sidecars of the workloads it selects"}
}

func peerAuthenticationCondition(p *securityv1.PeerAuthentication) condition {
	if len(p.Spec.GetPortLevelMtls()) > 0 && len(p.Spec.GetSelector().GetMatchLabels()) == 0 {
		return condition{"True", "PartiallyAccepted", "portLevelMtls needs a selector: ignored (as Istio ignores it)"}
	}
	return condition{"True", "Accepted", "applied by the meshlet sidecars of the workloads it selects"}
}

// policyKey names a policy for the status queue.
type policyKey struct {
	authz bool // AuthorizationPolicy, else PeerAuthentication
	types.NamespacedName
}

// policyStatusWriter writes PolicyConditionType, only when it differs
// from what is there, with the resourceVersion read, so replicas never
// fight.
type policyStatusWriter struct {
	client istioclient.Interface
	// The caches, replaced (setStore) when a CRD is installed after the
	// start.
	storeMu           sync.RWMutex
	peerAuths, authzs cache.Indexer
	queue             workqueue.TypedRateLimitingInterface[policyKey]
	log               *slog.Logger
	now               func() time.Time
}

func newPolicyStatusWriter(client istioclient.Interface, peerAuths, authzs cache.Indexer, log *slog.Logger) *policyStatusWriter {
	return &policyStatusWriter{client: client, peerAuths: peerAuths, authzs: authzs, log: log, now: time.Now,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[policyKey](),
			workqueue.TypedRateLimitingQueueConfig[policyKey]{Name: "meshlet_policy_status"})}
}

// store is the cache of AuthorizationPolicies (authz) or
// PeerAuthentications.
func (w *policyStatusWriter) store(authz bool) cache.Indexer {
	w.storeMu.RLock()
	defer w.storeMu.RUnlock()
	if authz {
		return w.authzs
	}
	return w.peerAuths
}

// setStore replaces a kind's cache (its informer started late) and
// queues every policy in it.
func (w *policyStatusWriter) setStore(authz bool, idx cache.Indexer) {
	w.storeMu.Lock()
	if authz {
		w.authzs = idx
	} else {
		w.peerAuths = idx
	}
	w.storeMu.Unlock()
	for _, o := range idx.List() {
		w.changed(o)
	}
}

// changed queues a policy after a change (nil: deleted, nothing to write).
func (w *policyStatusWriter) changed(cur any) {
	switch p := cur.(type) {
	case *securityv1.AuthorizationPolicy:
		w.queue.Add(policyKey{true, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	case *securityv1.PeerAuthentication:
		w.queue.Add(policyKey{false, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	}
}

func (w *policyStatusWriter) run(ctx context.Context) {
	defer w.queue.ShutDown()
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for w.next(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (w *policyStatusWriter) next(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("policy status", "policy", key.String(), "authorization", key.authz, "error", err)
			w.queue.AddRateLimited(key)
		}
		return true
	}
	w.queue.Forget(key)
	return true
}

func (w *policyStatusWriter) sync(ctx context.Context, key policyKey) error {
	store := w.store(key.authz)
	o, ok, err := store.GetByKey(key.String())
	if err != nil || !ok {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var err error
		switch p := o.(type) {
		case *securityv1.AuthorizationPolicy:
			st, changed := w.merge(&p.Status, p.Generation, authorizationPolicyCondition(p))
			if !changed {
				return nil
			}
			cp := p.DeepCopy()
			setStatus(&cp.Status, st)
			_, err = w.client.SecurityV1().AuthorizationPolicies(p.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				if fresh, gerr := w.client.SecurityV1().AuthorizationPolicies(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); gerr == nil {
					o = fresh
				}
			}
		case *securityv1.PeerAuthentication:
			st, changed := w.merge(&p.Status, p.Generation, peerAuthenticationCondition(p))
			if !changed {
				return nil
			}
			cp := p.DeepCopy()
			setStatus(&cp.Status, st)
			_, err = w.client.SecurityV1().PeerAuthentications(p.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				if fresh, gerr := w.client.SecurityV1().PeerAuthentications(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); gerr == nil {
					o = fresh
				}
			}
		default:
			return fmt.Errorf("xds: %s: the store holds a %T", key, o)
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// merge returns cur with meshlet's condition set (the others kept), and
// whether that changed anything.
func (w *policyStatusWriter) merge(cur *metav1alpha1.IstioStatus, generation int64, cond condition) (*metav1alpha1.IstioStatus, bool) {
	status, reason, message := cond.status, cond.reason, cond.message
	out := &metav1alpha1.IstioStatus{ObservedGeneration: cur.GetObservedGeneration(), ValidationMessages: cur.GetValidationMessages()}
	found := false
	for _, c := range cur.GetConditions() {
		if c.GetType() != PolicyConditionType {
			out.Conditions = append(out.Conditions, c)
			continue
		}
		found = true
		if c.GetStatus() == status && c.GetReason() == reason && c.GetMessage() == message && c.GetObservedGeneration() == generation {
			return cur, false
		}
		nc := &metav1alpha1.IstioCondition{Type: PolicyConditionType, Status: status, Reason: reason, Message: message,
			ObservedGeneration: generation, LastTransitionTime: c.GetLastTransitionTime()}
		if c.GetStatus() != status || nc.LastTransitionTime == nil {
			nc.LastTransitionTime = timestamppb.New(w.now().Truncate(time.Second))
		}
		out.Conditions = append(out.Conditions, nc)
	}
	if !found {
		out.Conditions = append(out.Conditions, &metav1alpha1.IstioCondition{Type: PolicyConditionType, Status: status, Reason: reason,
			Message: message, ObservedGeneration: generation, LastTransitionTime: timestamppb.New(w.now().Truncate(time.Second))})
	}
	return out, true
}

// setStatus copies st into dst (the status is a protobuf message, copied
// by its fields and never by value).
func setStatus(dst, st *metav1alpha1.IstioStatus) {
	dst.Conditions, dst.ValidationMessages, dst.ObservedGeneration = st.Conditions, st.ValidationMessages, st.ObservedGeneration
}
