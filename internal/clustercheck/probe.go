package clustercheck

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet-dev/meshlet/internal/preflight"
	"github.com/meshlet-dev/meshlet/webhook"
)

// WebhookReach creates a Pod with dryRun=All in namespace ns, labelled
// meshlet.io/inject=true: the API server sends it through the admission
// webhooks and persists nothing, so the answer shows whether the
// injector is reachable and injects. The pod's image is never pulled.
func WebhookReach(ctx context.Context, client kubernetes.Interface, ns string) preflight.Result {
	r := preflight.Result{Check: "webhook: a dry-run pod in " + ns + " is injected"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "meshlet-check-", Labels: map[string]string{webhook.PodLabel: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "meshlet-check.invalid/app:never-pulled",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
	}
	start := time.Now()
	got, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		r.Status, r.Detail = preflight.Fail, "dry-run create: "+err.Error()
		return r
	}
	for _, c := range append(got.Spec.InitContainers, got.Spec.Containers...) {
		if c.Name == webhook.ProxyContainer {
			r.Status, r.Detail = preflight.OK, fmt.Sprintf("injected %s (%s) in %s", c.Name, c.Image, time.Since(start).Round(time.Millisecond))
			return r
		}
	}
	r.Status, r.Detail = preflight.Fail, "admitted without the sidecar: the webhook was not called (namespace excluded, or the webhook configuration missing) or it declined"
	return r
}

// ProbeOptions configure NodeProbes.
type ProbeOptions struct {
	// Namespace is where the probe pods run (the control plane's: not
	// injected, and the caller may create pods there).
	Namespace string
	// Image is the sidecar image; its `sidecar check` runs on each node.
	Image string
	// PullPolicy of the probe pods' image.
	PullPolicy corev1.PullPolicy
	// Timeout bounds the wait for each probe pod to finish.
	Timeout time.Duration
}

// NodeProbes runs the sidecar image's own check (`sidecar check`: the
// kernel release, cgroup v2, the eBPF programs loaded as the sidecar
// loads them) in a short-lived pod on each node, with the sidecar's
// capabilities, and reports each node's outcome with its output. The
// pods are deleted afterwards.
func NodeProbes(ctx context.Context, client kubernetes.Interface, o ProbeOptions) []preflight.Result {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []preflight.Result{{Check: "node probes", Status: preflight.Fail, Detail: "list nodes: " + err.Error()}}
	}
	type probe struct {
		node, pod string
		err       error
	}
	var probes []probe
	for _, n := range nodes.Items {
		p, err := client.CoreV1().Pods(o.Namespace).Create(ctx, probePod(n.Name, o), metav1.CreateOptions{})
		pr := probe{node: n.Name, err: err}
		if err == nil {
			pr.pod = p.Name
		}
		probes = append(probes, pr)
	}
	var out []preflight.Result
	for _, pr := range probes {
		r := preflight.Result{Check: "node " + pr.node + ": sidecar check in a probe pod"}
		if pr.err != nil {
			r.Status, r.Detail = preflight.Fail, "create the probe pod: "+pr.err.Error()
			out = append(out, r)
			continue
		}
		r.Status, r.Detail = waitProbe(ctx, client, o, pr.pod)
		// Background: the probe's outcome is read; its removal need not
		// be waited for.
		_ = client.CoreV1().Pods(o.Namespace).Delete(context.WithoutCancel(ctx), pr.pod, metav1.DeleteOptions{})
		out = append(out, r)
	}
	return out
}

func probePod(node string, o ProbeOptions) *corev1.Pod {
	root, no, yes := int64(0), false, true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "meshlet-check-", Labels: map[string]string{webhook.PodLabel: "false",
			"app.kubernetes.io/name": "meshlet-check", "app.kubernetes.io/part-of": "meshlet"}},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			// Whatever taints the node carries: every node runs sidecars.
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "check", Image: o.Image, ImagePullPolicy: o.PullPolicy, Args: []string{"check"},
				// The injected sidecar's own: root with BPF and NET_ADMIN.
				SecurityContext: &corev1.SecurityContext{RunAsUser: &root, RunAsNonRoot: &no, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"BPF", "NET_ADMIN"}}},
			}},
		},
	}
}

// waitProbe waits for the probe pod to finish and reads its output.
func waitProbe(ctx context.Context, client kubernetes.Interface, o ProbeOptions, name string) (preflight.Status, string) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		p, err := client.CoreV1().Pods(o.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			switch p.Status.Phase {
			case corev1.PodSucceeded, corev1.PodFailed:
				logs := probeLogs(ctx, client, o.Namespace, name)
				if p.Status.Phase == corev1.PodFailed {
					return preflight.Fail, "the node's check failed:\n" + logs
				}
				return preflight.OK, logs
			}
		}
		select {
		case <-ctx.Done():
			detail := "no outcome within " + o.Timeout.String()
			if err == nil {
				for _, cs := range p.Status.ContainerStatuses {
					if w := cs.State.Waiting; w != nil {
						detail += ": " + w.Reason + " " + w.Message
					}
				}
			}
			return preflight.Fail, detail
		case <-t.C:
		}
	}
}

func probeLogs(ctx context.Context, client kubernetes.Interface, ns, name string) string {
	rc, err := client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: "check"}).Stream(ctx)
	if err != nil {
		return "(its output: " + err.Error() + ")"
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 16<<10))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := range lines {
		lines[i] = "    " + lines[i]
	}
	return strings.Join(lines, "\n")
}
