//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshlet-dev/meshlet/deploy"
	"github.com/meshlet-dev/meshlet/webhook"
)

var metaGet = metav1.GetOptions{}

// startWebhook serves the real injector handler over HTTPS on 127.0.0.1
// and returns its URL and a function that stops it; namespaces are looked
// up in the API server.
func startWebhook(t *testing.T, c *Cluster) (string, func()) {
	t.Helper()
	certFile, keyFile := c.ServingCert(t, "webhook")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	in := &webhook.Injector{Config: webhook.DefaultConfig(), Namespaces: func(ns string) (map[string]string, bool) {
		n, err := c.Client.CoreV1().Namespaces().Get(context.Background(), ns, metaGet)
		if err != nil {
			return nil, false
		}
		return n.Labels, true
	}}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/inject", in)
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "https://" + l.Addr().String() + "/inject", func() { srv.Close() }
}

func injected(p *corev1.Pod) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == webhook.ProxyContainer {
			return true
		}
	}
	for _, c := range p.Spec.Containers {
		if c.Name == webhook.ProxyContainer {
			return true
		}
	}
	return false
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1",
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstrPort(8080)}}}}}}}
}

// TestInjectionAgainstARealAPIServer: deploy/ applies cleanly; with the
// webhook registered through clientConfig.url, a pod in a labelled
// namespace is stored with the sidecar (also a Deployment's pods and a
// server-side dry run), an unlabelled namespace's pod is not, and a pod
// opting out is not. With the webhook down (failurePolicy: Fail), creating a
// pod in the labelled namespace fails with a message naming the webhook,
// while other namespaces are unaffected.
func TestInjectionAgainstARealAPIServer(t *testing.T) {
	c := StartCluster(t)
	ctx := context.Background()
	c.Kubectl(t, string(deploy.Manifest), "apply", "-f", "-")
	url, stopWebhook := startWebhook(t, c)
	// The manifest's webhooks call the in-cluster Service; nothing routes
	// cluster IPs here, so point them at the test's server.
	patch := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig","value":{"url":%q,"caBundle":%q}},{"op":"replace","path":"/webhooks/1/clientConfig","value":{"url":%q,"caBundle":%q}}]`,
		url, base64.StdEncoding.EncodeToString(c.CAPEM()), url, base64.StdEncoding.EncodeToString(c.CAPEM()))
	c.Kubectl(t, "", "patch", "mutatingwebhookconfiguration", "meshlet-injector", "--type=json", "-p", patch)

	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{webhook.NamespaceLabel: "enabled"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
	} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitDefaultSA(t, ns.Name)
	}
	// The webhook configuration reaches the admission plugin
	// asynchronously: retry the first create until it is mutated.
	var stored *corev1.Pod
	for deadline := time.Now().Add(60 * time.Second); ; {
		p, err := c.Client.CoreV1().Pods("shop").Create(ctx, testPod("web-1"), metav1.CreateOptions{})
		if err == nil && injected(p) {
			stored = p
			break
		}
		if err == nil {
			zero := int64(0)
			c.Client.CoreV1().Pods("shop").Delete(ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod in a labelled namespace never injected (last error %v)", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	proxy := stored.Spec.InitContainers[0]
	if proxy.Name != webhook.ProxyContainer || proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("stored sidecar %+v: want a native sidecar first among init containers", proxy.Name)
	}
	if stored.Annotations[webhook.StatusAnnotation] == "" {
		t.Error("no status annotation")
	}
	if g := stored.Spec.Containers[0].ReadinessProbe.HTTPGet; g == nil || !strings.HasPrefix(g.Path, "/app-health/web/") {
		t.Errorf("app probe not rewritten: %+v", stored.Spec.Containers[0].ReadinessProbe)
	}

	// Re-admission changes nothing: the stored (injected) pod sent through
	// admission again (a server-side dry run of a create) comes back equal.
	again := stored.DeepCopy()
	again.ObjectMeta = metav1.ObjectMeta{Name: "web-1-again", Namespace: "shop", Labels: stored.Labels, Annotations: stored.Annotations}
	again.Spec.NodeName = ""
	readmitted, err := c.Client.CoreV1().Pods("shop").Create(ctx, again, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("re-admission: %v", err)
	}
	if !reflect.DeepEqual(readmitted.Spec.InitContainers, stored.Spec.InitContainers) || !reflect.DeepEqual(readmitted.Spec.Containers, stored.Spec.Containers) ||
		!reflect.DeepEqual(readmitted.Spec.Volumes, stored.Spec.Volumes) || readmitted.Annotations[webhook.StatusAnnotation] != stored.Annotations[webhook.StatusAnnotation] {
		t.Errorf("re-admission changed the pod:\nstored init %v\nagain  init %v", stored.Spec.InitContainers, readmitted.Spec.InitContainers)
	}

	plain, err := c.Client.CoreV1().Pods("plain").Create(ctx, testPod("web-1"), metav1.CreateOptions{})
	if err != nil || injected(plain) {
		t.Errorf("unlabelled namespace: injected=%v err=%v", plain != nil && injected(plain), err)
	}
	optOut := testPod("opt-out")
	optOut.Labels[webhook.PodLabel] = "false"
	if p, err := c.Client.CoreV1().Pods("shop").Create(ctx, optOut, metav1.CreateOptions{}); err != nil || injected(p) {
		t.Errorf("opted-out pod: err %v", err)
	}
	// A server-side dry run shows the sidecar too.
	out := c.Kubectl(t, `apiVersion: v1
kind: Pod
metadata: {name: dry, namespace: shop}
spec: {containers: [{name: web, image: web:1}]}
`, "create", "--dry-run=server", "-o", "yaml", "-f", "-")
	if !strings.Contains(out, webhook.ProxyContainer) {
		t.Errorf("server-side dry run not injected:\n%s", out)
	}
	// A Deployment's pods (made by the real controllers) are injected.
	c.Kubectl(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: dep}}
  template:
    metadata: {labels: {app: dep}}
    spec: {containers: [{name: web, image: web:1}]}
`, "apply", "-f", "-")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		pods, err := c.Client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=dep"})
		if err == nil && len(pods.Items) == 2 && injected(&pods.Items[0]) && injected(&pods.Items[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deployment pods not created and injected: %v %v\n%s", len(pods.Items), err, c.Log("kube-controller-manager"))
		}
	}
	// An injector outage: meshed namespaces refuse new pods rather than
	// start them unmeshed; the rest of the cluster does not notice.
	stopWebhook()
	_, err = c.Client.CoreV1().Pods("shop").Create(ctx, testPod("during-outage"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "`) || !strings.Contains(err.Error(), "meshlet") {
		t.Errorf("pod in a labelled namespace during an injector outage: err %v, want the webhook named", err)
	} else {
		t.Logf("during the outage: %v", err)
	}
	if _, err := c.Client.CoreV1().Pods("plain").Create(ctx, testPod("during-outage"), metav1.CreateOptions{}); err != nil {
		t.Errorf("pod in an unlabelled namespace during the outage: %v", err)
	}
}

func intstrPort(p int32) intstr.IntOrString { return intstr.FromInt32(p) }
