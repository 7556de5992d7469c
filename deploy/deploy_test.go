package deploy

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// monitor is the part of a Prometheus Operator ServiceMonitor or
// PodMonitor the chart renders (its CRD types are not a dependency);
// decoding strictly into it catches a field the chart misspells.
type monitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			Any bool `json:"any"`
		} `json:"namespaceSelector"`
		Endpoints           []monitorEndpoint `json:"endpoints"`
		PodMetricsEndpoints []monitorEndpoint `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type monitorEndpoint struct {
	Port     string `json:"port"`
	Path     string `json:"path"`
	Interval string `json:"interval"`
}

// decodeManifest decodes every document of a rendered manifest strictly
// into its Kubernetes type (a typo in a field name fails here, before any
// cluster sees it); documents of comments only (helm's, the header) are
// skipped.
func decodeManifest(t *testing.T, data []byte) []any {
	t.Helper()
	targets := map[string]func() any{
		"Namespace": func() any { return &corev1.Namespace{} }, "ServiceAccount": func() any { return &corev1.ServiceAccount{} },
		"Service": func() any { return &corev1.Service{} }, "Deployment": func() any { return &appsv1.Deployment{} },
		"PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
		"ClusterRole":         func() any { return &rbacv1.ClusterRole{} }, "ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
		"Role": func() any { return &rbacv1.Role{} }, "RoleBinding": func() any { return &rbacv1.RoleBinding{} },
		"MutatingWebhookConfiguration": func() any { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
		"ServiceMonitor":               func() any { return &monitor{} }, "PodMonitor": func() any { return &monitor{} },
		"ConfigMap": func() any { return &corev1.ConfigMap{} },
	}
	var objs []any
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if head.Kind == "" {
			continue
		}
		mk, ok := targets[head.Kind]
		if !ok {
			t.Fatalf("document %d: unexpected kind %q", i, head.Kind)
		}
		obj := mk()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Errorf("document %d (%s): %v", i, head.Kind, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// Every document of meshlet.yaml decodes strictly into its Kubernetes
// type, and the webhook configuration has the settings the design
// requires. Applying them to a real API server is the e2e suite's job.
func TestManifestDecodesStrictly(t *testing.T) {
	kinds := map[string]int{}
	for _, obj := range decodeManifest(t, Manifest) {
		kinds[fmt.Sprintf("%T", obj)]++
		if mw, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
			for _, w := range mw.Webhooks {
				if *w.FailurePolicy != admissionregistrationv1.Fail || *w.SideEffects != admissionregistrationv1.SideEffectClassNone ||
					*w.TimeoutSeconds != 10 || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
					t.Errorf("webhook %s: failurePolicy %v sideEffects %v timeout %v reinvocation %v", w.Name, *w.FailurePolicy, *w.SideEffects, *w.TimeoutSeconds, *w.ReinvocationPolicy)
				}
				for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease", "meshlet-system"} {
					if !strings.Contains(w.NamespaceSelector.String(), ns) {
						t.Errorf("webhook %s does not exclude %s", w.Name, ns)
					}
				}
				if s := w.ClientConfig.Service; s == nil || s.Name != "meshlet-injector" || s.Namespace != "meshlet-system" || len(w.ClientConfig.CABundle) != 0 {
					t.Errorf("webhook %s: clientConfig %+v, want the meshlet-injector Service and no caBundle (the injector patches it)", w.Name, w.ClientConfig)
				}
			}
		}
		if d, ok := obj.(*appsv1.Deployment); ok {
			if *d.Spec.Replicas != 2 {
				t.Errorf("injector replicas %d, want 2", *d.Spec.Replicas)
			}
			if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable.IntValue() != 0 {
				t.Errorf("injector rollout %+v, want maxUnavailable 0 (failurePolicy Fail needs a backend throughout)", d.Spec.Strategy)
			}
		}
		if _, ok := obj.(*monitor); ok {
			t.Errorf("a Prometheus Operator object in the default manifest: monitoring is off by default")
		}
	}
	for _, k := range []string{"*v1.Namespace", "*v1.ServiceAccount", "*v1.Service", "*v1.Deployment", "*v1.PodDisruptionBudget",
		"*v1.ClusterRole", "*v1.ClusterRoleBinding", "*v1.Role", "*v1.RoleBinding", "*v1.MutatingWebhookConfiguration"} {
		if kinds[k] != 1 {
			t.Errorf("%d %s in the manifest, want 1", kinds[k], k)
		}
	}
}
