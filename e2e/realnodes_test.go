//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshlet-dev/meshlet/e2e/clustersuite"
	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/webhook"
)

// TestRealNodesMesh is the whole product on real Kubernetes nodes built on
// this machine: three kubelets with containerd in zones a, b and c, the
// real scheduler and controllers, kube-proxy and CoreDNS, and the control
// plane as deploy/ ships it (startInjectorPod: the injector Deployment's
// pod, its webhook called through its Service, serving SDS and xDS at the
// Service's name). A labelled namespace's pods (a 3-replica echo
// Deployment spread over the zones, and a client) are admitted with the
// native sidecar, which the kubelet starts first; each sidecar attaches the
// eBPF redirect to its pod's cgroup, switches to uid 1337 and gets its
// certificate and config from the injector. The client's app dials the
// Service's ClusterIP, which the redirect takes inside the pod before
// kube-proxy could (the host's conntrack never sees the connection), and
// gets answers from the echo pods over mutual TLS; a real
// Prometheus scrapes the sidecars and its query API returns the request
// counters with the mTLS labels. Then the Service gets locality failover
// and the client's zone loses its echo pod and gets it back.
func TestRealNodesMesh(t *testing.T) {
	c := StartClusterWith(t, ClusterOptions{Nodes: true})
	start := time.Now()
	nodes := c.StartNodes(t, "zone-a", "zone-b", "zone-c")
	t.Logf("%d nodes Ready in %.1f s", len(nodes), time.Since(start).Seconds())
	ctx := context.Background()

	c.dumpOnFailure(t, "meshlet-system", "shop", "kube-system")
	// A real Jaeger on the host, where the pods reach it (the nodes'
	// bridge address); the chart points every sidecar at it.
	jaeger := testtool.StartJaeger(t, ControlPlaneIP)
	inj := startInjectorPod(t, c, "--set=mesh.tracing.endpoint="+jaeger.OTLP)
	vip, app, grace := c.deployShop(t, ctx)

	// Every pod Running and Ready, each with the native sidecar.
	var pods []corev1.Pod
	for deadline := time.Now().Add(180 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		list, err := c.Client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			pods = list.Items
			for _, p := range pods {
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
		}
		if ready == 4 && len(pods) == 4 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range pods {
				t.Logf("pod %s on %s: %s %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.InitContainerStatuses)
				t.Logf("sidecar log:\n%s", c.podLog(t, p, webhook.ProxyContainer))
			}
			t.Fatalf("%d of 4 pods Ready after 180 s", ready)
		}
	}
	t.Logf("4 pods Running and Ready %.1f s after the nodes", time.Since(start).Seconds())
	zones := map[string]string{}
	for _, n := range nodes {
		zones[n.Name] = n.Zone
	}
	var echoIPs []string
	var clientPod corev1.Pod
	seenZones := map[string]bool{}
	for _, p := range pods {
		if len(p.Spec.InitContainers) != 1 || p.Spec.InitContainers[0].Name != webhook.ProxyContainer || p.Spec.InitContainers[0].RestartPolicy == nil {
			t.Fatalf("pod %s: no native meshlet sidecar: %+v", p.Name, p.Spec.InitContainers)
		}
		checkControlPlane(t, c, p, inj)
		if p.Labels["app"] == "echo" {
			echoIPs = append(echoIPs, p.Status.PodIP)
			seenZones[zones[p.Spec.NodeName]] = true
		} else {
			clientPod = p
		}
		t.Logf("pod %s on %s (%s): %s", p.Name, p.Spec.NodeName, zones[p.Spec.NodeName], p.Status.PodIP)
	}
	if len(seenZones) != 3 {
		t.Errorf("the echo pods are in zones %v, want one per zone", seenZones)
	}
	// Every container, the injector's too, runs an image the kubelet
	// pulled by digest from the suite's registry.
	c.checkPulled(t, append(pods, inj)...)
	c.checkRegistryPulls(t)
	t.Logf("every pod's images pulled by digest from the suite's registry: %s (sidecar), %s (injector), %s (echo)", c.Images.Sidecar, c.Images.Injector, c.Images.Echo)

	// The sidecars run unprivileged.
	for _, p := range pods {
		pid, err := sidecarPID(p)
		if err != nil {
			t.Errorf("pod %s: %v", p.Name, err)
			continue
		}
		if err := unprivileged(pid, 1337); err != nil {
			t.Errorf("pod %s sidecar: %v\n%s", p.Name, err, c.podLog(t, p, webhook.ProxyContainer))
		} else {
			t.Logf("pod %s: sidecar pid %d runs as 1337:1337 with no capabilities", p.Name, pid)
		}
	}
	// The injector runs as its image's user, which the chart sets too.
	if pid, err := containerPID(inj, "/usr/local/bin/injector\x00serve\x00"); err != nil {
		t.Errorf("injector pod %s: %v", inj.Name, err)
	} else if err := unprivileged(pid, 1337); err != nil {
		t.Errorf("injector pod %s: %v", inj.Name, err)
	} else {
		t.Logf("injector pid %d runs as 1337:1337 with no capabilities", pid)
	}

	// The client's app reaches the ClusterIP only through its sidecar.
	var peers []peerResult
	answered := map[string]bool{}
	for deadline := time.Now().Add(60 * time.Second); len(answered) < 3; time.Sleep(time.Second) {
		peers = clientResults(t, clientPod.Status.PodIP)
		for _, r := range peers {
			if r.Code == 200 && strings.HasPrefix(r.Body, "pod=echo-") {
				answered[strings.Fields(r.Body)[0]] = true
				// The native sidecar was ready before the app started.
				if !strings.HasSuffix(r.Body, "sidecar_ready_at_start=true") {
					t.Fatalf("an echo app started before its sidecar was ready: %q", r.Body)
				}
			}
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if len(answered) == 0 {
		t.Fatalf("the client never got an answer through the ClusterIP %s: %s\nclient sidecar:\n%s", vip, tail(fmt.Sprint(peers), 2000), c.podLog(t, clientPod, webhook.ProxyContainer))
	}
	t.Logf("the client's requests to %s were answered by %v, each app started after its sidecar was ready", vip, keys(answered))
	// kube-proxy translates the ClusterIP too, but the app's connections
	// never left its pod: the redirect gave them to the sidecar, which
	// dialed the echo pods' own addresses.
	if seen := conntrackEntries(t, clientPod.Status.PodIP, vip, 80); len(seen) > 0 {
		t.Errorf("the client's connections to %s:80 passed the host's netfilter (kube-proxy), not the redirect: %q", vip, seen)
	}

	// The echo sidecars saw them as mutual TLS from the client's identity.
	want := `connection_security_policy="mutual_tls"`
	principal := `source_principal="spiffe://cluster.local/ns/shop/sa/default"`
	found := false
	for _, ip := range echoIPs {
		m := httpGet(t, "http://"+ip+":15090/stats/prometheus")
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, "istio_requests_total{") && strings.Contains(line, want) && strings.Contains(line, principal) &&
				strings.Contains(line, `reporter="destination"`) {
				found = true
				t.Logf("%s: %s", ip, line)
			}
		}
	}
	if !found {
		t.Errorf("no echo sidecar counted an mTLS request from the client's identity")
	}

	// Distributed tracing: the client app's request, through both
	// sidecars, is one trace in Jaeger.
	checkTracing(t, c, clientPod, vip, jaeger)

	// A real Prometheus scrapes every sidecar.
	var targets []string
	for _, p := range pods {
		targets = append(targets, p.Status.PodIP+":15090")
	}
	q, prom := scrapeWithPrometheus(t, targets, []string{inj.Status.PodIP + ":15014"}, `sum(istio_requests_total{connection_security_policy="mutual_tls",reporter="destination"})`)
	t.Logf("Prometheus: %s", q)

	// Locality failover, the story of docs/design.md, on real nodes. With
	// meshlet.io/failover-labels the control plane gives the client (on
	// node-a) its own zone's endpoints at priority 0: only the zone-a echo
	// pod answers. With that pod gone (node-a cordoned, the pod deleted:
	// the spread constraint keeps its replacement Pending) zone-a has no
	// healthy endpoint and the traffic fails over to zones b and c; once
	// node-a is uncordoned the replacement lands there and the traffic
	// comes back.
	var local string
	for _, p := range pods {
		if p.Labels["app"] == "echo" && p.Spec.NodeName == "node-a" {
			local = p.Name
		}
	}
	answers := func(since time.Time) (names []string, failed int) {
		for _, x := range clientResults(t, clientPod.Status.PodIP) {
			at, err := time.Parse(time.RFC3339Nano, x.Time)
			if err != nil || at.Before(since) {
				continue
			}
			if x.Code != 200 || !strings.HasPrefix(x.Body, "pod=") {
				failed++
				names = append(names, fmt.Sprintf("code %d", x.Code))
				continue
			}
			names = append(names, strings.TrimPrefix(strings.Fields(x.Body)[0], "pod="))
		}
		return names, failed
	}
	// waitAnswers waits until the last n answers since t0 satisfy ok.
	waitAnswers := func(what string, t0 time.Time, n int, ok func(string) bool) []string {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
			names, _ := answers(t0)
			if len(names) >= n {
				good := true
				for _, name := range names[len(names)-n:] {
					good = good && ok(name)
				}
				if good {
					return names
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: answers since %s: %v\nclient sidecar:\n%s", what, t0.Format(time.RFC3339), names, c.podLog(t, clientPod, webhook.ProxyContainer))
			}
		}
	}
	c.Kubectl(t, "", "annotate", "-n", "shop", "service", "echo", "meshlet.io/failover-labels=topology.kubernetes.io/zone")
	t0 := time.Now()
	waitAnswers("same-zone answers", t0, 5, func(n string) bool { return n == local })
	t.Logf("with failover-labels: the client in zone-a is answered by %s only (zone-a) within %.1f s", local, time.Since(t0).Seconds())
	// Cross-zone accounting: the client sidecar counts by zone pair.
	checkZoneWindow(t, "same zone", clientPod.Status.PodIP, answers, "zone-a")
	// meshletctl against these nodes, while the client's endpoints are
	// split by zone: proxy-status, proxy-config, check.
	checkMeshletctl(t, c, clientPod, inj, pods, zones)

	c.Kubectl(t, "", "cordon", "node-a")
	if err := c.Client.CoreV1().Pods("shop").Delete(ctx, local, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	names := waitAnswers("failover to zones b and c", t1, 5, func(n string) bool { return strings.HasPrefix(n, "echo-") && n != local })
	_, failed := answers(t1)
	t.Logf("zone-a's echo pod deleted: answers from other zones within %.1f s (%d requests failed meanwhile): %v", time.Since(t1).Seconds(), failed, names)
	checkZoneWindow(t, "failed over", clientPod.Status.PodIP, answers, "zone-b", "zone-c")

	c.Kubectl(t, "", "uncordon", "node-a")
	t2 := time.Now()
	var back string
	names = waitAnswers("back to zone-a", t2, 5, func(n string) bool {
		if back == "" {
			if list, err := c.Client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"}); err == nil {
				for _, p := range list.Items {
					if p.Spec.NodeName == "node-a" && p.Name != local {
						back = p.Name
					}
				}
			}
		}
		return back != "" && n == back
	})
	_, failed = answers(t2)
	t.Logf("node-a uncordoned: its new echo pod %s answers alone again within %.1f s (%d failed)", back, time.Since(t2).Seconds(), failed)
	checkZoneWindow(t, "back in zone", clientPod.Status.PodIP, answers, "zone-a")

	// A STRICT pod behind the Service secure, which the HTTPRoute below
	// splits traffic to. The cluster suite checks STRICT's refusal of
	// plaintext and a Job through the mesh, as on any cluster.
	if _, err := c.Client.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "secure"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "secure"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createThroughWebhook(t, "pod shop/secure-0", func() error {
		_, err := c.Client.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "secure-0",
			Labels: map[string]string{"app": "secure"}, Annotations: map[string]string{webhook.MTLSModeAnnotation: "STRICT"}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, NodeName: "node-b", Containers: []corev1.Container{app()}}}, metav1.CreateOptions{})
		return err
	})
	secure := waitPodReady(t, c, "shop", "secure-0", 90*time.Second)
	t.Logf("STRICT pod secure-0 Ready (its rewritten readiness probe: %s)", describeProbe(secure))

	// The cluster suite, exactly as make e2e-cluster runs it against a
	// cluster of yours, here with a Prometheus that finds the pods by
	// their annotations through this cluster's API server.
	t.Run("ClusterSuite", func(t *testing.T) {
		clustersuite.Run(t, clustersuite.Target{Client: c.Client, AppImage: c.Images.Echo, Prometheus: podPrometheus(t, c), Wait: 90 * time.Second})
	})

	// Gateway API for mesh: an HTTPRoute on the echo Service.
	checkMeshRoutes(t, c, clientPod, vip)

	// Istio's PeerAuthentication and AuthorizationPolicy.
	checkAuthorization(t, c, app, grace)

	// Every panel of the Grafana dashboards, against the real
	// Prometheus that scraped this test's sidecars and control plane.
	checkDashboards(t, prom)
}

// waitPodReady waits until a pod is Ready and returns it.
func waitPodReady(t *testing.T, c *Cluster, ns, name string, within time.Duration) *corev1.Pod {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(500 * time.Millisecond) {
		p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return p
				}
			}
		}
		if time.Now().After(deadline) {
			if p != nil {
				t.Logf("pod %s: %s %+v\nsidecar:\n%s", name, p.Status.Phase, p.Status.ContainerStatuses, c.podLog(t, *p, webhook.ProxyContainer))
			}
			t.Fatalf("pod %s/%s not Ready after %v", ns, name, within)
		}
	}
}

func describeProbe(p *corev1.Pod) string {
	for _, ctr := range p.Spec.Containers {
		if ctr.Name == "app" && ctr.ReadinessProbe != nil && ctr.ReadinessProbe.HTTPGet != nil {
			return fmt.Sprintf("GET :%s%s", ctr.ReadinessProbe.HTTPGet.Port.String(), ctr.ReadinessProbe.HTTPGet.Path)
		}
	}
	return "none"
}

// peerResult is one GET of the echo client (its /peers).
type peerResult struct {
	Code  int    `json:"code"`
	Body  string `json:"body"`
	Error string `json:"error"`
	Time  string `json:"time"`
}

// clientResults reads the echo client's recent GETs from its /peers.
func clientResults(t *testing.T, ip string) []peerResult {
	t.Helper()
	b := httpGet(t, "http://"+ip+":8080/peers")
	var r struct {
		Results []peerResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(b), &r); err != nil {
		t.Fatalf("client /peers: %v: %s", err, b)
	}
	return r.Results
}

// podLog is a container's log through the API server (the kubelet serves
// it on the node IP).
func (c *Cluster) podLog(t *testing.T, p corev1.Pod, container string) string {
	cmd := exec.Command(filepath.Join(c.Bin, "kubectl"), "--kubeconfig", c.Kubeconfig, "logs", "-n", p.Namespace, p.Name, "-c", container, "--tail=60")
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// sidecarPID finds the pod's sidecar process on this machine: the one
// running the sidecar binary in a cgroup of the pod.
func sidecarPID(p corev1.Pod) (int, error) {
	return containerPID(p, "/usr/local/bin/sidecar\x00run\x00")
}

// containerPID is the host pid of the process of pod p whose command line
// starts with cmdline (its arguments NUL-separated), found through the
// pod's cgroup.
func containerPID(p corev1.Pod, cmdline string) (int, error) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	uid := strings.ReplaceAll(string(p.UID), "-", "_")
	for _, cl := range procs {
		b, err := os.ReadFile(cl)
		if err != nil || !strings.HasPrefix(string(b), cmdline) {
			continue
		}
		dir := filepath.Dir(cl)
		cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		if strings.Contains(string(cg), "pod"+string(p.UID)) || strings.Contains(string(cg), "pod"+uid) {
			var pid int
			fmt.Sscan(filepath.Base(dir), &pid)
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process %q in the cgroups of pod %s", strings.ReplaceAll(cmdline, "\x00", " "), p.UID)
}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// scrapeWithPrometheus runs Debian's Prometheus scraping targets'
// /stats/prometheus (the sidecars) and controlPlane's /metrics every
// second until the test ends, and returns the first non-empty answer of
// its query API to query, and its address.
func scrapeWithPrometheus(t *testing.T, targets, controlPlane []string, query string) (answer, addr string) {
	t.Helper()
	quote := func(l []string) string {
		q := make([]string, len(l))
		for i, tg := range l {
			q[i] = fmt.Sprintf("%q", tg)
		}
		return strings.Join(q, ", ")
	}
	addr, p := startPrometheus(t, "prometheus", fmt.Sprintf(`global: {scrape_interval: 1s}
scrape_configs:
  - job_name: meshlet-sidecars
    metrics_path: /stats/prometheus
    static_configs: [{targets: [%s]}]
  - job_name: meshlet-control-plane
    metrics_path: /metrics
    static_configs: [{targets: [%s]}]
`, quote(targets), quote(controlPlane)))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(query))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var r struct {
				Status string `json:"status"`
				Data   struct {
					Result []json.RawMessage `json:"result"`
				} `json:"data"`
			}
			if json.Unmarshal(b, &r) == nil && r.Status == "success" && len(r.Data.Result) > 0 {
				return string(b), addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus never answered %s with a result (targets %v):\n%s", query, targets, tail(p.out.String(), 2000))
		}
	}
}

// startPrometheus runs Debian's Prometheus with config (YAML) on a free
// loopback port until the test ends, and returns its address.
func startPrometheus(t *testing.T, name, config string) (string, *proc) {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is not installed (Debian package prometheus; .ci/run installs it): %v", err)
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "prometheus.yml", config)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return addr, startProc(t, name, bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
}

// deployShop creates the labelled namespace "shop" with the echo Service,
// a three-replica echo Deployment spread over the zones, and a client pod
// on node-a that requests the Service's ClusterIP: what the real-node mesh
// tests run. It returns the ClusterIP, the app container's template (the
// echo image, with extra env) and the pods' termination grace.
func (c *Cluster) deployShop(t *testing.T, ctx context.Context) (vip string, app func(env ...corev1.EnvVar) corev1.Container, grace int64) {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop",
		Labels: map[string]string{webhook.NamespaceLabel: "enabled"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultSA(t, "shop")

	svc, err := c.Client.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip = svc.Spec.ClusterIP
	echoEnv := []corev1.EnvVar{{Name: "LISTEN", Value: ":8080"}, {Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	app = func(env ...corev1.EnvVar) corev1.Container {
		return corev1.Container{Name: "app", Image: c.Images.Echo, Env: append(append([]corev1.EnvVar{}, echoEnv...), env...),
			Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}}
	}
	replicas := int32(3)
	grace = int64(2)
	labels := map[string]string{"app": "echo"}
	if _, err := c.Client.AppsV1().Deployments("shop").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
					WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
				Containers: []corev1.Container{app()}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createThroughWebhook(t, "pod shop/client", func() error {
		// Bound by the scheduler (not spec.nodeName), so that the
		// pod gets its node's topology labels, which its sidecar reads
		// its zone from; every request it sends is traced.
		_, err := c.Client.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client", Labels: map[string]string{"app": "client"},
			Annotations: map[string]string{webhook.TraceSamplingAnnotation: "100"}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, NodeSelector: map[string]string{"kubernetes.io/hostname": "node-a"},
				Containers: []corev1.Container{app(corev1.EnvVar{Name: "TARGETS", Value: "http://" + vip + "/"})}}}, metav1.CreateOptions{})
		return err
	})
	return vip, app, grace
}
