//go:build e2e

package e2e

import (
	"context"
	"io"
	"net"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/meshlet-dev/meshlet/deploy"
)

// apiRelay forwards TCP from ControlPlaneIP:6443 to the API server (which
// listens on loopback only), for pods: it stands in for kube-proxy's route
// to the kubernetes Service, which this cluster does not run. TLS passes
// through (the API server's certificate names ControlPlaneIP).
func apiRelay(t *testing.T, c *Cluster) string {
	t.Helper()
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ControlPlaneIP, "6443"))
	if err != nil {
		t.Fatalf("API relay: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return l.Addr().String()
}

// startInjectorPod runs the control plane as deploy/ ships it: deploy/'s
// manifest applied, the injector Deployment's pod on a node, with in-cluster
// config (the ServiceAccount token and cluster CA the kubelet mounts); the
// API server calls its webhook through the Service's endpoints, and it
// patches the webhook configuration's caBundle itself. Changes to the
// Deployment, all for this machine: the locally built image (never
// pulled), one replica, KUBERNETES_SERVICE_HOST pointing at apiRelay (no
// kube-proxy), the control plane advertised to sidecars at its pod IP (no
// cluster DNS), the sidecar image and one worker. It returns the pod once
// Ready with the caBundle in.
func startInjectorPod(t *testing.T, c *Cluster) corev1.Pod {
	t.Helper()
	relay := apiRelay(t, c)
	ctx := context.Background()
	c.Kubectl(t, string(deploy.Manifest), "apply", "-f", "-")
	host, port, _ := net.SplitHostPort(relay)
	// The deployment controller writes the Deployment too: retry on a
	// conflict with a fresh copy.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := c.Client.AppsV1().Deployments("meshlet-system").Get(ctx, "meshlet-injector", metav1.GetOptions{})
		if err != nil {
			return err
		}
		one := int32(1)
		d.Spec.Replicas = &one
		ctr := &d.Spec.Template.Spec.Containers[0]
		ctr.Image, ctr.ImagePullPolicy = InjectorImage, corev1.PullNever
		ctr.Env = append(ctr.Env,
			corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: port})
		ctr.Args = append(ctr.Args, "-image", SidecarImage, "-image-pull-policy", "Never", "-concurrency", "1",
			"-control-plane", "$(POD_IP):15012", "-extra-hosts", "$(POD_IP)")
		_, err = c.Client.AppsV1().Deployments("meshlet-system").Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("set up deploy/'s injector Deployment for this machine: %v", err)
	}
	// The injector pod Ready (its /ready: CA loaded, webhook serving).
	var inj corev1.Pod
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		list, err := c.Client.CoreV1().Pods("meshlet-system").List(ctx, metav1.ListOptions{LabelSelector: "app=meshlet-injector"})
		ready := false
		if err == nil {
			for _, p := range list.Items {
				if p.Spec.Containers[0].Image != InjectorImage || p.DeletionTimestamp != nil {
					continue
				}
				inj = p
				for _, cond := range p.Status.Conditions {
					ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
				}
			}
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the injector pod is not Ready after 120 s: %s %+v\nlog:\n%s", inj.Name, inj.Status.ContainerStatuses, c.podLog(t, inj, "injector"))
		}
	}
	t.Logf("injector pod %s on %s: %s", inj.Name, inj.Spec.NodeName, inj.Status.PodIP)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		mwc, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshlet-injector", metaGet)
		if err == nil && len(mwc.Webhooks[0].ClientConfig.CABundle) > 0 {
			if mwc.Webhooks[0].ClientConfig.Service == nil || mwc.Webhooks[0].ClientConfig.URL != nil {
				t.Fatalf("the webhook is not called through its Service: %+v", mwc.Webhooks[0].ClientConfig)
			}
			return inj
		}
		if time.Now().After(deadline) {
			t.Fatalf("the injector pod never patched the caBundle:\n%s", c.podLog(t, inj, "injector"))
		}
	}
}

// checkControlPlane fails unless pod p's sidecar dials the injector pod.
func checkControlPlane(t *testing.T, p corev1.Pod, inj corev1.Pod) {
	t.Helper()
	want := net.JoinHostPort(inj.Status.PodIP, "15012")
	for _, ctr := range p.Spec.InitContainers {
		for _, e := range ctr.Env {
			if e.Name == "MESHLET_CONTROL_PLANE" && e.Value != want {
				t.Errorf("pod %s: the sidecar dials %s, want the injector pod's %s", p.Name, e.Value, want)
			}
		}
	}
}
