//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet-dev/meshlet/internal/clustercheck"
	"github.com/meshlet-dev/meshlet/internal/preflight"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/webhook"
)

// Helm runs the real helm (testtool.Helm: helm.sh/helm/v4, built from
// source once) against the cluster and returns its output, or fails the
// test with it.
func (c *Cluster) Helm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(testtool.Helm(t), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Env = testtool.HelmEnv(t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// chartPath is the chart users install, deploy/helm/meshlet.
func chartPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "deploy", "helm", "meshlet"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// imageValues are the chart values (helm --set) that run the injector
// image injector and inject sidecar: references by digest
// (REPOSITORY@sha256:...) or by tag.
func imageValues(injector, sidecar string) []string {
	var out []string
	for _, img := range []struct{ key, ref string }{{"injector.image", injector}, {"proxy.image", sidecar}} {
		if i := strings.LastIndex(img.ref, "@"); i >= 0 {
			out = append(out, "--set="+img.key+".repository="+img.ref[:i], "--set="+img.key+".digest="+img.ref[i+1:])
			continue
		}
		i := strings.LastIndex(img.ref, ":")
		out = append(out, "--set="+img.key+".repository="+img.ref[:i], "--set="+img.key+".tag="+img.ref[i+1:], "--set="+img.key+".digest=")
	}
	return out
}

// podReady says whether a pod's Ready condition is true.
func podReady(p corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// retag pushes the image ref (a digest reference in the suite's registry)
// under a second tag there, as a registry serves a new release, and
// returns the tag's reference.
func retag(t *testing.T, ref, tag string) string {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatalf("retag %s: %v", ref, err)
	}
	desc, err := remote.Get(d)
	if err != nil {
		t.Fatalf("retag %s: %v", ref, err)
	}
	tg := d.Context().Tag(tag)
	if err := remote.Tag(tg, desc); err != nil {
		t.Fatalf("retag %s as %s: %v", ref, tg, err)
	}
	return tg.String()
}

// hasSidecar says whether a pod was admitted with the meshlet sidecar.
func hasSidecar(p *corev1.Pod) bool {
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == webhook.ProxyContainer {
			return true
		}
	}
	return false
}

// TestRealNodesHelm: the chart's life on real nodes. helm install (two
// injector replicas, the images by digest from the suite's registry)
// meshes a namespace: a three-zone echo Deployment and a client. helm
// upgrade to a second tag of the injector image rolls the injector one pod
// at a time while pods are admitted 40 times a second (server-side dry
// runs, which go through the webhook): none may fail, with failurePolicy
// Fail. The client's sidecar, injected under the previous release, keeps
// getting answers, and an echo pod created after the upgrade (injected by
// the new release, its certificate from the new replicas) answers it too:
// its endpoint reached the old sidecar over xDS from the new control
// plane, and mTLS between the two holds (one mesh CA across the upgrade).
// helm uninstall then removes the webhook configuration before its
// backend: a pod of the labelled namespace is created right after,
// without a sidecar, while the injector pods may still be stopping, and
// the control plane's namespace goes away.
func TestRealNodesHelm(t *testing.T) {
	c := StartClusterWith(t, ClusterOptions{Nodes: true})
	c.StartNodes(t, "zone-a", "zone-b", "zone-c")
	ctx := context.Background()
	c.dumpOnFailure(t, "meshlet-system", "shop", "kube-system")
	// meshletctl check before the install: nothing fails, the three zones
	// are seen, and the control plane is reported missing, not failed.
	before := preflightCheck(t, c, false, preflight.OK)
	if r := before["control plane meshlet-system/meshlet-injector"]; r.Status != preflight.Skip {
		t.Errorf("meshletctl check before the install: control plane %v (%s), want skip", r.Status, r.Detail)
	}
	if r := before["nodes: labelled "+preflight.ZoneLabel]; r.Detail != "3 zones: zone-a, zone-b, zone-c" {
		t.Errorf("meshletctl check: zones %q, want the nodes' three", r.Detail)
	}
	old := installControlPlane(t, c, 2)
	t.Logf("helm install: injector pods %s and %s Ready", old[0].Name, old[1].Name)
	preflightCheck(t, c, true, preflight.OK)

	_, app, grace := c.deployShop(t, ctx)
	var shop []corev1.Pod
	waitFor(t, "4 meshed pods Ready in shop", 180*time.Second, 500*time.Millisecond, func() (bool, string) {
		list, err := c.Client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		shop = list.Items
		ready := 0
		for _, p := range shop {
			if podReady(p) && hasSidecar(&p) {
				ready++
			}
		}
		return ready == 4 && len(shop) == 4, fmt.Sprintf("%d of %d Ready with the sidecar", ready, len(shop))
	})
	var client corev1.Pod
	echoBefore := map[string]bool{}
	for _, p := range shop {
		if p.Name == "client" {
			client = p
		} else {
			echoBefore[p.Name] = true
		}
	}
	// answersSince: the client's answers (echo pod names, or the failure)
	// from its /peers, since t0.
	answersSince := func(t0 time.Time) []string {
		var names []string
		for _, r := range clientResults(t, client.Status.PodIP) {
			if at, err := time.Parse(time.RFC3339Nano, r.Time); err != nil || at.Before(t0) {
				continue
			}
			if r.Code != 200 || !strings.HasPrefix(r.Body, "pod=") {
				names = append(names, fmt.Sprintf("code %d %s", r.Code, r.Error))
				continue
			}
			names = append(names, strings.TrimPrefix(strings.Fields(r.Body)[0], "pod="))
		}
		return names
	}
	waitFor(t, "the client answered through the mesh", 60*time.Second, time.Second, func() (bool, string) {
		names := answersSince(time.Time{})
		return len(names) >= 3 && echoBefore[names[len(names)-1]], fmt.Sprint(names)
	})

	// Admissions without a pause, from before the upgrade to after the
	// rollout: server-side dry runs of a pod in the meshed namespace go
	// through the webhook like real creations and leave nothing behind.
	// Four admitters at 10 a second each, so that some are in flight
	// whenever an old replica stops. A client of their own, so that the
	// test's other calls do not share (and throttle) its rate.
	const admitters, admitEvery = 4, 100 * time.Millisecond
	cfg := *c.Config
	cfg.QPS, cfg.Burst = 100, 100
	admitter := kubernetes.NewForConfigOrDie(&cfg)
	type admission struct {
		at  time.Time
		err error
	}
	var admitted atomic.Int64
	stop, results := make(chan struct{}), make(chan []admission, admitters)
	for range admitters {
		go func() {
			var out []admission
			tick := time.NewTicker(admitEvery)
			defer tick.Stop()
			probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "admission-probe"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: c.Images.Echo}}}}
			for {
				select {
				case <-stop:
					results <- out
					return
				case <-tick.C:
				}
				p, err := admitter.CoreV1().Pods("shop").Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if err == nil && !hasSidecar(p) {
					err = fmt.Errorf("admitted without the sidecar")
				}
				out = append(out, admission{time.Now(), err})
				if err == nil {
					admitted.Add(1)
				}
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()
	waitFor(t, "admissions before the upgrade", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		return admitted.Load() >= 20, fmt.Sprintf("%d admitted", admitted.Load())
	})

	// helm upgrade to a second tag of the injector image (installed by
	// digest), which the kubelets pull from the suite's registry.
	next := retag(t, c.Images.Injector, "upgrade")
	upgradeAt := time.Now()
	c.Helm(t, append([]string{"upgrade", "meshlet", chartPath(t), "--reuse-values"}, imageValues(next, c.Images.Sidecar)...)...)
	var rolled []corev1.Pod
	waitFor(t, "the injector rolled over to "+next, 180*time.Second, 500*time.Millisecond, func() (bool, string) {
		list, err := c.Client.CoreV1().Pods("meshlet-system").List(ctx, metav1.ListOptions{LabelSelector: "app=meshlet-injector"})
		if err != nil {
			return false, err.Error()
		}
		rolled = rolled[:0]
		var state []string
		for _, p := range list.Items {
			state = append(state, fmt.Sprintf("%s %s ready=%v deleting=%v", p.Name, p.Spec.Containers[0].Image, podReady(p), p.DeletionTimestamp != nil))
			if p.Spec.Containers[0].Image == next && podReady(p) && p.DeletionTimestamp == nil {
				rolled = append(rolled, p)
			}
		}
		// Done when only the new pods are left: the old ones have
		// finished their shutdown delay and are gone.
		return len(rolled) == 2 && len(list.Items) == 2, strings.Join(state, "; ")
	})
	rolledAt := time.Now()
	t.Logf("helm upgrade: injector pods %s and %s (%s) replaced the old ones in %.1f s", rolled[0].Name, rolled[1].Name, next, rolledAt.Sub(upgradeAt).Seconds())
	after := admitted.Load()
	waitFor(t, "admissions after the rollout", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		return admitted.Load() >= after+40, fmt.Sprintf("%d admitted since", admitted.Load()-after)
	})
	close(stop)
	var adms []admission
	for range admitters {
		adms = append(adms, <-results...)
	}
	var failed []string
	during := 0
	for _, a := range adms {
		if a.err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", a.at.Format("15:04:05.000"), a.err))
		}
		if a.at.After(upgradeAt) && a.at.Before(rolledAt) {
			during++
		}
	}
	t.Logf("%d admissions, %d of them during the rollout: %d failed", len(adms), during, len(failed))
	if len(failed) > 0 {
		t.Errorf("%d of %d admissions failed around the upgrade (failurePolicy Fail):\n%s", len(failed), len(adms), strings.Join(failed, "\n"))
	}
	if during < 40 {
		t.Errorf("only %d admissions during the rollout: too few to say it fails none", during)
	}
	// The new replicas answered admissions: their own counters say so.
	served := 0
	for _, p := range rolled {
		m := regexp.MustCompile(`(?m)^meshlet_injector_injections_total\{result="injected"\} (\d+)`).FindStringSubmatch(httpGet(t, "http://"+p.Status.PodIP+":15014/metrics"))
		if m != nil {
			n, _ := strconv.Atoi(m[1])
			served += n
		}
	}
	if served == 0 {
		t.Errorf("the upgraded injector pods counted no injection")
	}
	t.Logf("the upgraded injector pods injected %d pods", served)

	// The client's sidecar, injected under the previous release, keeps
	// getting answers after the rollover.
	t0 := time.Now()
	waitFor(t, "the client's answers after the upgrade", 60*time.Second, time.Second, func() (bool, string) {
		names := answersSince(t0)
		ok := 0
		for _, n := range names {
			if echoBefore[n] {
				ok++
			}
		}
		return ok >= 5, fmt.Sprint(names)
	})
	// A new echo pod, injected by the new release, answers it too.
	c.Kubectl(t, "", "scale", "-n", "shop", "deployment/echo", "--replicas=4")
	var fresh string
	waitFor(t, "a fourth echo pod Ready", 120*time.Second, 500*time.Millisecond, func() (bool, string) {
		list, err := c.Client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range list.Items {
			if !echoBefore[p.Name] {
				fresh = p.Name
				return podReady(p) && hasSidecar(&p), fmt.Sprintf("%s: %s ready=%v", p.Name, p.Status.Phase, podReady(p))
			}
		}
		return false, "no new echo pod"
	})
	t1 := time.Now()
	waitFor(t, "an answer from the new echo pod "+fresh, 60*time.Second, time.Second, func() (bool, string) {
		names := answersSince(t1)
		for _, n := range names {
			if n == fresh {
				return true, ""
			}
		}
		return false, fmt.Sprint(names) + "\nclient sidecar:\n" + c.podLog(t, client, webhook.ProxyContainer)
	})
	t.Logf("the client's sidecar (injected before the upgrade) is answered by %s, created after it, within %.1f s", fresh, time.Since(t1).Seconds())

	// helm uninstall: the webhook configuration goes first.
	c.Helm(t, "uninstall", "meshlet")
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshlet-injector", metaGet); !apierrors.IsNotFound(err) {
		t.Fatalf("after helm uninstall the webhook configuration is still there: %v", err)
	}
	left, _ := c.Client.CoreV1().Pods("meshlet-system").List(ctx, metav1.ListOptions{LabelSelector: "app=meshlet-injector"})
	p, err := c.Client.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "after-uninstall"},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, NodeName: "node-b", Containers: []corev1.Container{app()}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("after helm uninstall, a pod of the labelled namespace shop was refused: %v", err)
	}
	if hasSidecar(p) {
		t.Errorf("after helm uninstall, pod %s was injected", p.Name)
	}
	t.Logf("helm uninstall: pod shop/%s created right after, without a sidecar (%d injector pods still stopping)", p.Name, len(left.Items))
	preflightCheck(t, c, true, preflight.Fail)
	waitPodReady(t, c, "shop", "after-uninstall", 90*time.Second)
	waitFor(t, "the meshlet-system namespace deleted", 120*time.Second, time.Second, func() (bool, string) {
		ns, err := c.Client.CoreV1().Namespaces().Get(ctx, "meshlet-system", metaGet)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("%s %+v", ns.Status.Phase, ns.Status.Conditions)
	})
}

// preflightCheck runs meshletctl check's checks (clustercheck.Run, with
// -installed if installed) in-process against c as its admin, logs the
// report, and fails the test unless the control plane's check has status
// want (waiting for it to become ok after an install) and no other check
// failed. It returns the results by check.
func preflightCheck(t *testing.T, c *Cluster, installed bool, want preflight.Status) map[string]preflight.Result {
	t.Helper()
	o := clustercheck.Options{Namespace: "meshlet-system", Name: "meshlet-injector", Installed: installed}
	check := func() []preflight.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return clustercheck.Run(ctx, c.Client, o)
	}
	results := check()
	if installed && want == preflight.OK {
		// The install waited for the pods; the Deployment's status
		// catches up with them.
		waitFor(t, "meshletctl check -installed to find the control plane ready", 60*time.Second, 500*time.Millisecond, func() (bool, string) {
			results = check()
			r := results[len(results)-1]
			return r.Status == preflight.OK, r.Detail
		})
	}
	var out bytes.Buffer
	_ = preflight.Report(&out, results)
	t.Logf("meshletctl check (installed %v):\n%s", installed, out.String())
	by := map[string]preflight.Result{}
	for _, r := range results {
		by[r.Check] = r
		if strings.HasPrefix(r.Check, "control plane ") {
			if r.Status != want && !(want == preflight.OK && r.Status == preflight.Skip && !installed) {
				t.Errorf("meshletctl check (installed %v): %s is %v (%s), want %v", installed, r.Check, r.Status, r.Detail, want)
			}
		} else if r.Status == preflight.Fail {
			t.Errorf("meshletctl check (installed %v): %s failed: %s", installed, r.Check, r.Detail)
		}
	}
	return by
}
