//go:build e2e

package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet-dev/meshlet/webhook"
)

// startInjectorPod runs the control plane as users install it: the Helm
// chart (deploy/helm/meshlet) installed with the real helm
// (installControlPlane), the injector Deployment's pod on a node, with
// in-cluster config (the ServiceAccount token and cluster CA the kubelet
// mounts); the API server calls its webhook at the Service's ClusterIP,
// and it patches the webhook configuration's caBundle itself. The pod
// reaches the API server at the kubernetes Service (the
// KUBERNETES_SERVICE_HOST the kubelet sets, translated by kube-proxy), and
// sidecars dial the control plane at the name the injector gives them by
// default, meshlet-injector.meshlet-system.svc, resolved by cluster DNS.
// Values set for this machine: the images built from this tree (pulled by
// digest from the suite's registry), one replica and one sidecar worker. It returns the pod once Ready with
// the caBundle in and its Service routing.
func startInjectorPod(t *testing.T, c *Cluster, values ...string) corev1.Pod {
	t.Helper()
	return installControlPlane(t, c, 1, values...)[0]
}

// installControlPlane is `helm install meshlet deploy/helm/meshlet` with
// the images of this machine and replicas injectors; it waits until that
// many injector pods are Ready, the caBundle is in and the Service
// routes, and returns the pods.
func installControlPlane(t *testing.T, c *Cluster, replicas int, values ...string) []corev1.Pod {
	t.Helper()
	ctx := context.Background()
	c.Helm(t, append([]string{"install", "meshlet", chartPath(t), fmt.Sprintf("--set=injector.replicas=%d", replicas), "--set=mesh.concurrency=1"},
		append(imageValues(c.Images.Injector, c.Images.Sidecar), values...)...)...)
	// The injector pods Ready (their /ready: CA loaded, webhook serving).
	var pods []corev1.Pod
	var inj corev1.Pod
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		list, err := c.Client.CoreV1().Pods("meshlet-system").List(ctx, metav1.ListOptions{LabelSelector: "app=meshlet-injector"})
		pods = pods[:0]
		if err == nil {
			for _, p := range list.Items {
				if p.Spec.Containers[0].Image != c.Images.Injector || p.DeletionTimestamp != nil {
					continue
				}
				inj = p
				if podReady(p) {
					pods = append(pods, p)
				}
			}
		}
		if len(pods) >= replicas {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d injector pods Ready after 120 s: %s %+v\nlog:\n%s", len(pods), replicas, inj.Name, inj.Status.ContainerStatuses, c.podLog(t, inj, "injector"))
		}
	}
	inj = pods[0]
	t.Logf("injector pod %s on %s: %s", inj.Name, inj.Spec.NodeName, inj.Status.PodIP)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		mwc, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshlet-injector", metaGet)
		if err == nil && len(mwc.Webhooks[0].ClientConfig.CABundle) > 0 {
			if mwc.Webhooks[0].ClientConfig.Service == nil || mwc.Webhooks[0].ClientConfig.URL != nil {
				t.Fatalf("the webhook is not called through its Service: %+v", mwc.Webhooks[0].ClientConfig)
			}
			// The API server calls the webhook at the Service's ClusterIP,
			// which kube-proxy refuses until it has the pod's endpoint:
			// wait for the webhook to answer a TLS handshake there, as
			// the API server will, and for the SDS/xDS port to route.
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
				t.Fatalf("the webhook's caBundle holds no certificate: %q", mwc.Webhooks[0].ClientConfig.CABundle)
			}
			c.waitServiceRoutes(t, "meshlet-system", "meshlet-injector", 443, roots, 60*time.Second)
			c.waitServiceRoutes(t, "meshlet-system", "meshlet-injector", 15012, nil, 60*time.Second)
			return pods
		}
		if time.Now().After(deadline) {
			t.Fatalf("the injector pod never patched the caBundle:\n%s", c.podLog(t, inj, "injector"))
		}
	}
}

// checkControlPlane fails unless pod p's sidecar was told to dial the
// control plane's Service by name and did: the host's conntrack has a
// connection from the pod to the Service's ClusterIP (the address cluster
// DNS gave it) that kube-proxy translated to the injector pod.
func checkControlPlane(t *testing.T, c *Cluster, p corev1.Pod, inj corev1.Pod) {
	t.Helper()
	for _, ctr := range p.Spec.InitContainers {
		for _, e := range ctr.Env {
			if want := webhook.DefaultConfig().ControlPlane; e.Name == "MESHLET_CONTROL_PLANE" && e.Value != want {
				t.Errorf("pod %s: the sidecar dials %s, want the injector's default %s", p.Name, e.Value, want)
			}
		}
	}
	svc, err := c.Client.CoreV1().Services("meshlet-system").Get(context.Background(), "meshlet-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entries := conntrackEntries(t, p.Status.PodIP, svc.Spec.ClusterIP, 15012)
	for _, e := range entries {
		// The reply direction comes from the injector pod.
		if strings.Contains(e, "src="+inj.Status.PodIP+" ") {
			t.Logf("pod %s reached the control plane through kube-proxy: %s", p.Name, strings.Join(strings.Fields(e), " "))
			return
		}
	}
	t.Errorf("pod %s: no connection from %s to the control plane's ClusterIP %s:15012 translated to the injector pod %s: %q",
		p.Name, p.Status.PodIP, svc.Spec.ClusterIP, inj.Status.PodIP, entries)
}
