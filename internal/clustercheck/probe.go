package clustercheck

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet-dev/meshlet/internal/preflight"
	"github.com/meshlet-dev/meshlet/webhook"
)

// WebhookReach creates a Pod with dryRun=All in namespace ns, labelled
// meshlet.io/inject=true: the API server sends it through the admission
// webhooks and persists nothing, so the answer shows whether the
// injector is reachable and injects. The pod's image is never pulled. It
// also returns the sidecar image the webhook injected ("" if none).
func WebhookReach(ctx context.Context, client kubernetes.Interface, ns string) (preflight.Result, string) {
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
		return r, ""
	}
	for _, c := range append(got.Spec.InitContainers, got.Spec.Containers...) {
		if c.Name == webhook.ProxyContainer {
			r.Status, r.Detail = preflight.OK, fmt.Sprintf("injected %s (%s) in %s", c.Name, c.Image, time.Since(start).Round(time.Millisecond))
			return r, c.Image
		}
	}
	r.Status, r.Detail = preflight.Fail, "admitted without the sidecar: the webhook was not called (namespace excluded, or the webhook configuration missing) or it declined"
	return r, ""
}

// ProbeOptions configure NodeProbes.
type ProbeOptions struct {
	// Namespace is where the probe pods run: not injected, and one whose
	// PodSecurity admits a root pod with BPF and NET_ADMIN (the control
	// plane's, whose sidecars' pods need the same).
	Namespace string
	// Image is the sidecar image; its `sidecar check` runs on each node.
	Image string
	// PullPolicy of the probe pods' image.
	PullPolicy corev1.PullPolicy
	// Timeout bounds the wait for the probe pods to finish.
	Timeout time.Duration
}

// RunLabel marks the probe pods of one NodeProbes run, which it deletes
// by that label when it returns.
const RunLabel = "meshlet.io/check-run"

// NodeProbes runs the sidecar image's own check (`sidecar check`: the
// kernel release, cgroup v2, the eBPF programs loaded as the sidecar
// loads them) in a short-lived pod on each Linux node, with the
// capabilities loading needs and the node's cgroup hierarchy mounted as
// the injector mounts it, and reports each node's outcome with its
// output. The pods are deleted when it returns, ctx cancelled (an
// interrupt) or not; each also ends itself after Timeout.
func NodeProbes(ctx context.Context, client kubernetes.Interface, o ProbeOptions) []preflight.Result {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []preflight.Result{{Check: "node probes", Status: preflight.Fail, Detail: "list nodes: " + err.Error()}}
	}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	var out []preflight.Result
	defer func() {
		// Without ctx: an interrupted check still removes its pods.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := client.CoreV1().Pods(o.Namespace).DeleteCollection(dctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: RunLabel + "=" + run}); err != nil {
			out = append(out, preflight.Result{Check: "node probes: clean up", Status: preflight.Warn,
				Detail: fmt.Sprintf("delete the probe pods (%s=%s in %s): %v", RunLabel, run, o.Namespace, err)})
		}
	}()
	results := make([]preflight.Result, len(nodes.Items))
	var wg sync.WaitGroup
	for i, n := range nodes.Items {
		results[i].Check = "node " + n.Name + ": sidecar check in a probe pod"
		if os := n.Status.NodeInfo.OperatingSystem; os != "" && os != "linux" {
			results[i].Status, results[i].Detail = preflight.Skip, "a "+os+" node runs no sidecar"
			continue
		}
		p, err := client.CoreV1().Pods(o.Namespace).Create(ctx, probePod(n.Name, run, o), metav1.CreateOptions{})
		if err != nil {
			results[i].Status, results[i].Detail = preflight.Fail, "create the probe pod in "+o.Namespace+": "+err.Error()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].Status, results[i].Detail = waitProbe(ctx, client, o, p.Name)
		}()
	}
	wg.Wait()
	out = append(out, results...)
	return out
}

func probePod(node, run string, o ProbeOptions) *corev1.Pod {
	root, no, yes, dir := int64(0), false, true, corev1.HostPathDirectory
	deadline := int64(o.Timeout / time.Second)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "meshlet-check-", Labels: map[string]string{webhook.PodLabel: "false", RunLabel: run,
			"app.kubernetes.io/name": "meshlet-check", "app.kubernetes.io/part-of": "meshlet"}},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: corev1.RestartPolicyNever, ActiveDeadlineSeconds: &deadline,
			// Whatever taints the node carries: every node runs sidecars.
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken: &no,
			// The node's cgroup hierarchy, mounted as the injector mounts it
			// for the sidecar (containers may have no cgroup2 mount).
			Volumes: []corev1.Volume{{Name: webhook.CgroupVolume, VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs/cgroup", Type: &dir}}}},
			Containers: []corev1.Container{{
				Name: "check", Image: o.Image, ImagePullPolicy: o.PullPolicy, Args: []string{"check"},
				Env:          []corev1.EnvVar{{Name: "MESHLET_HOST_CGROUP", Value: webhook.HostCgroupPath}},
				VolumeMounts: []corev1.VolumeMount{{Name: webhook.CgroupVolume, MountPath: webhook.HostCgroupPath, ReadOnly: true}},
				// A namespace's LimitRange or quota may require them.
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}},
				// Root with what loading the programs needs (the injected
				// sidecar also has SETUID and SETGID, to drop root).
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
					for _, cs := range p.Status.ContainerStatuses {
						if term := cs.State.Terminated; term != nil {
							logs = fmt.Sprintf("    (exit code %d, %s %s)\n", term.ExitCode, term.Reason, term.Message) + logs
						}
					}
					if p.Status.Reason != "" {
						logs = "    (" + p.Status.Reason + ": " + p.Status.Message + ")\n" + logs
					}
					return preflight.Fail, "the node's check failed:\n" + logs
				}
				// A warning of the node's is the probe's.
				for _, l := range strings.Split(logs, "\n") {
					if strings.HasPrefix(strings.TrimSpace(l), preflight.Warn.String()+" ") {
						return preflight.Warn, "passed with a warning:\n" + logs
					}
				}
				return preflight.OK, "passed:\n" + logs
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
