package deploy

import (
	"bytes"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// Every document decodes strictly into its Kubernetes type (a typo in a
// field name fails here, before any cluster sees it), and the webhook
// configuration has the settings the design requires. Applying them to a
// real API server is the e2e suite's job.
func TestManifestDecodesStrictly(t *testing.T) {
	targets := map[string]func() any{
		"Namespace": func() any { return &corev1.Namespace{} }, "ServiceAccount": func() any { return &corev1.ServiceAccount{} },
		"Service": func() any { return &corev1.Service{} }, "Deployment": func() any { return &appsv1.Deployment{} },
		"PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
		"ClusterRole":         func() any { return &rbacv1.ClusterRole{} }, "ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
		"Role": func() any { return &rbacv1.Role{} }, "RoleBinding": func() any { return &rbacv1.RoleBinding{} },
		"MutatingWebhookConfiguration": func() any { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
	}
	kinds := map[string]int{}
	for i, doc := range bytes.Split(Manifest, []byte("\n---\n")) {
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		mk, ok := targets[head.Kind]
		if !ok {
			t.Fatalf("document %d: unexpected kind %q", i, head.Kind)
		}
		obj := mk()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Errorf("document %d (%s): %v", i, head.Kind, err)
		}
		kinds[head.Kind]++
		if mw, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
			for _, w := range mw.Webhooks {
				if *w.FailurePolicy != admissionregistrationv1.Fail || *w.SideEffects != admissionregistrationv1.SideEffectClassNone ||
					*w.TimeoutSeconds != 10 || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
					t.Errorf("webhook %s: failurePolicy %v sideEffects %v timeout %v reinvocation %v", w.Name, *w.FailurePolicy, *w.SideEffects, *w.TimeoutSeconds, *w.ReinvocationPolicy)
				}
				if !strings.Contains(w.NamespaceSelector.String(), "kube-system") {
					t.Errorf("webhook %s does not exclude system namespaces", w.Name)
				}
			}
		}
		if d, ok := obj.(*appsv1.Deployment); ok && *d.Spec.Replicas != 2 {
			t.Errorf("injector replicas %d, want 2", *d.Spec.Replicas)
		}
	}
	for k := range targets {
		if kinds[k] == 0 {
			t.Errorf("no %s in the manifest", k)
		}
	}
}
