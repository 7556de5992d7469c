// Package clustersuite is meshlet's cluster-level end-to-end story, written
// against nothing but the Kubernetes API, so that it runs unchanged on any
// cluster where meshlet is installed: the real-node cluster the e2e suite
// builds (TestRealNodesMesh) and a user's own (TestCluster, make
// e2e-cluster). It creates its own namespaces and deletes them at the end.
//
// Everything it observes comes through the API server: pod status, and
// the apps' and sidecars' HTTP endpoints through the API server's pod
// proxy. It never reaches a pod address from the test process, changes a
// node, or needs a container engine.
package clustersuite

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet-dev/meshlet/webhook"
)

// Target is a cluster where meshlet is installed and the suite's app
// image can be pulled.
type Target struct {
	// Client reaches the cluster's API server with rights to list nodes;
	// to create and delete namespaces; to create pods, Deployments, Jobs
	// and Services, patch Services and scale Deployments in them; and to
	// get pods' proxy subresource.
	Client kubernetes.Interface
	// AppImage is the test app (e2e/images/echo), pullable by the nodes.
	AppImage string
	// TrustDomain is the mesh's SPIFFE trust domain; empty: cluster.local.
	TrustDomain string
	// Prometheus is the base URL of a Prometheus that discovers pods by
	// their prometheus.io annotations. Empty: the suite reads the
	// annotated endpoint through the API server instead, and says so.
	Prometheus string
	// Name prefixes the suite's namespaces; empty: meshlet-e2e.
	Name string
	// Wait bounds each wait (pods Ready, answers, a Job); 0: 3 minutes,
	// room for image pulls on a real cluster.
	Wait time.Duration
}

// suite is one run's state.
type suite struct {
	Target
	t       *testing.T
	ctx     context.Context
	ns      string // the mesh namespace (labelled for injection)
	outside string // a namespace outside the mesh
	zones   []string
	created map[string]types.UID // the namespaces this run created
	vip     string
	client  string // the client pod's name
	grace   int64
}

// Run runs the suite's steps in order as subtests: injection, mTLS
// through the redirect, the Prometheus scrape, zone failover, STRICT
// refusal and a Job. A step that later steps build on stops the run when
// it fails.
func Run(t *testing.T, tg Target) {
	if tg.TrustDomain == "" {
		tg.TrustDomain = "cluster.local"
	}
	if tg.Name == "" {
		tg.Name = "meshlet-e2e"
	}
	if tg.Wait == 0 {
		tg.Wait = 3 * time.Minute
	}
	s := &suite{Target: tg, t: t, ctx: context.Background(), grace: 2, created: map[string]types.UID{}}
	suffix := make([]byte, 3)
	rand.Read(suffix)
	s.ns = tg.Name + "-" + hex.EncodeToString(suffix)
	s.outside = s.ns + "-outside"
	s.zones = s.nodeZones()
	t.Logf("cluster suite: namespaces %s (meshed) and %s (outside the mesh); schedulable zones %v", s.ns, s.outside, s.zones)
	t.Cleanup(s.cleanup)
	for _, step := range []struct {
		name     string
		run      func(t *testing.T)
		required bool
	}{
		{"Injection", s.injection, true},
		{"MutualTLSThroughTheRedirect", s.mutualTLS, true},
		{"PrometheusScrape", s.prometheusScrape, false},
		{"ZoneFailover", s.zoneFailover, false},
		{"StrictRefusalAndJob", s.strictAndJob, false},
	} {
		if !t.Run(step.name, step.run) && step.required {
			t.Fatalf("cluster suite: step %s failed; the later steps need it", step.name)
		}
	}
}

// nodeZones lists the zones (topology.kubernetes.io/zone) that have a
// node a pod can be scheduled on, sorted.
func (s *suite) nodeZones() []string {
	nodes, err := s.Client.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatalf("list nodes: %v", err)
	}
	set := map[string]bool{}
	for _, n := range nodes.Items {
		zone := n.Labels[webhook.ZoneLabel]
		if zone == "" || n.Spec.Unschedulable || !nodeReady(n) || slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool {
			return tn.Effect == corev1.TaintEffectNoSchedule || tn.Effect == corev1.TaintEffectNoExecute
		}) {
			continue
		}
		set[zone] = true
	}
	var zones []string
	for z := range set {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	return zones
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// RunLabel labels the suite's namespaces, so that those of a run that was
// killed before its cleanup can be found and deleted:
// kubectl delete namespace -l meshlet.io/e2e=cluster-suite.
const RunLabel = "meshlet.io/e2e"

// cleanup deletes the namespaces this run created (by UID: never one of
// the same name it did not) and waits for them to go, so that a run
// against a user's cluster leaves nothing behind.
func (s *suite) cleanup() {
	for ns, uid := range s.created {
		err := s.Client.CoreV1().Namespaces().Delete(s.ctx, ns, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			s.t.Errorf("delete namespace %s: %v", ns, err)
		}
	}
	err := s.waitFor("the suite's namespaces deleted", func() (bool, string) {
		var left []string
		for ns, uid := range s.created {
			if n, err := s.Client.CoreV1().Namespaces().Get(s.ctx, ns, metav1.GetOptions{}); err == nil && n.UID == uid {
				left = append(left, ns)
			}
		}
		return len(left) == 0, fmt.Sprint("left: ", left)
	})
	if err != nil {
		s.t.Logf("cluster suite: %v (they go once their pods have stopped)", err)
	}
}

// waitFor polls cond (an API read) every half second until it holds or
// the suite's wait passes; the error carries cond's last description.
func (s *suite) waitFor(what string, cond func() (bool, string)) error {
	var last string
	for deadline := time.Now().Add(s.Wait); ; time.Sleep(500 * time.Millisecond) {
		ok, desc := cond()
		if ok {
			return nil
		}
		last = desc
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v: %s", what, s.Wait, last)
		}
	}
}

// meta is a pod's metadata in the mesh namespace: PERMISSIVE unless mode
// says otherwise (the pod annotation overrides a mesh-wide STRICT, which
// would refuse the API server's plaintext pod-proxy reads).
func meta(name string, labels map[string]string, mode string) metav1.ObjectMeta {
	if mode == "" {
		mode = "PERMISSIVE"
	}
	return metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{webhook.MTLSModeAnnotation: mode}}
}

// podSpec runs containers on a Linux node (a cluster may have Windows
// ones), pinned to zone when it is not "".
func (s *suite) podSpec(zone string, containers ...corev1.Container) corev1.PodSpec {
	return corev1.PodSpec{TerminationGracePeriodSeconds: &s.grace, Affinity: inZone(zone),
		NodeSelector: map[string]string{corev1.LabelOSStable: "linux"}, Containers: containers}
}

// app is the test app's container: an echo server on :8080 that answers
// with its pod and zone, and with env TARGETS a client of those URLs.
func (s *suite) app(zone string, env ...corev1.EnvVar) corev1.Container {
	base := []corev1.EnvVar{{Name: "LISTEN", Value: ":8080"}, {Name: "ZONE", Value: zone},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	return corev1.Container{Name: "app", Image: s.AppImage, Env: append(base, env...),
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1}}
}

// inZone pins a pod to a zone's nodes; zone "" leaves it to the scheduler.
func inZone(zone string) *corev1.Affinity {
	if zone == "" {
		return nil
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: webhook.ZoneLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}}}}}}}
}

// createPod creates a pod, again while the API server answers with an
// error that passes (the webhook without a ready backend while the
// control plane rolls out, a timeout); any other refusal fails at once.
func (s *suite) createPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	var final error
	err := s.waitFor("create pod "+p.Namespace+"/"+p.Name, func() (bool, string) {
		_, err := s.Client.CoreV1().Pods(p.Namespace).Create(s.ctx, p, metav1.CreateOptions{})
		switch {
		case err == nil || apierrors.IsAlreadyExists(err): // a create whose answer was lost
			return true, ""
		case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err),
			apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err):
			return false, err.Error()
		}
		final = err
		return true, ""
	})
	if err == nil {
		err = final
	}
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

// createNamespace creates a namespace of this run and waits for its
// default ServiceAccount, without which pods are refused.
func (s *suite) createNamespace(t *testing.T, ns *corev1.Namespace) {
	t.Helper()
	ns.Labels[RunLabel] = "cluster-suite"
	got, err := s.Client.CoreV1().Namespaces().Create(s.ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", ns.Name, err)
	}
	s.created[got.Name] = got.UID
	err = s.waitFor("namespace "+ns.Name+"'s default ServiceAccount", func() (bool, string) {
		_, err := s.Client.CoreV1().ServiceAccounts(ns.Name).Get(s.ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// echoName is zone i's echo Deployment.
func echoName(i int) string { return "echo-" + strconv.Itoa(i) }

// injection: a labelled namespace's pods (an echo Deployment per zone, up
// to three, and a client in the first zone) are admitted with the sidecar
// and become Ready. The meshed namespace allows privileged pods (Pod
// Security): the sidecar attaches eBPF as root (docs/install.md).
func (s *suite) injection(t *testing.T) {
	s.createNamespace(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns, Labels: map[string]string{webhook.NamespaceLabel: "enabled",
		"pod-security.kubernetes.io/enforce": "privileged"}}})
	s.createNamespace(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.outside, Labels: map[string]string{}}})
	svc, err := s.Client.CoreV1().Services(s.ns).Create(s.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.vip = svc.Spec.ClusterIP
	zones := s.zones
	if len(zones) > 3 {
		zones = zones[:3]
	}
	if len(zones) == 0 {
		zones = []string{""}
	}
	one := int32(1)
	for i, zone := range zones {
		labels := map[string]string{"app": "echo", "zone-index": strconv.Itoa(i)}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: echoName(i)},
			Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: meta("", labels, ""), Spec: s.podSpec(zone, s.app(zone))}}}
		if _, err := s.Client.AppsV1().Deployments(s.ns).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The client in the first zone, bound by the scheduler so that it
	// gets its node's topology labels, which its sidecar reads its zone
	// from.
	s.client = "client"
	client := &corev1.Pod{ObjectMeta: meta(s.client, map[string]string{"app": "client"}, ""),
		Spec: s.podSpec(zones[0], s.app(zones[0], corev1.EnvVar{Name: "TARGETS", Value: "http://" + net.JoinHostPort(s.vip, "80") + "/"}))}
	client.Namespace = s.ns
	s.createPod(t, client)
	want := len(zones) + 1
	var pods []corev1.Pod
	err = s.waitFor(fmt.Sprintf("%d pods Ready in %s", want, s.ns), func() (bool, string) {
		list, err := s.Client.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods = list.Items
		var states []string
		ready := 0
		for _, p := range pods {
			if podReady(p) {
				ready++
			}
			states = append(states, p.Name+":"+string(p.Status.Phase))
		}
		return ready == want && len(pods) == want, strings.Join(states, " ")
	})
	if err != nil {
		for _, p := range pods {
			t.Logf("pod %s on %s: %+v %+v", p.Name, p.Spec.NodeName, p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
		}
		// A pod the API server refused (admission: Pod Security, the
		// webhook) shows only on its ReplicaSet.
		if rss, err := s.Client.AppsV1().ReplicaSets(s.ns).List(s.ctx, metav1.ListOptions{}); err == nil {
			for _, rs := range rss.Items {
				for _, c := range rs.Status.Conditions {
					t.Logf("ReplicaSet %s: %s %s: %s", rs.Name, c.Type, c.Reason, c.Message)
				}
			}
		}
		t.Fatal(err)
	}
	for _, p := range pods {
		mode := sidecarMode(p)
		if mode == "" {
			t.Errorf("pod %s: no %s container: %+v", p.Name, webhook.ProxyContainer, p.Spec.InitContainers)
			continue
		}
		if p.Annotations[webhook.StatusAnnotation] == "" {
			t.Errorf("pod %s: no %s annotation", p.Name, webhook.StatusAnnotation)
		}
		t.Logf("pod %s on %s: Ready with the %s sidecar", p.Name, p.Spec.NodeName, mode)
	}
}

// sidecarMode is "native" (an init container that restarts) or "classic"
// for a pod with the injected sidecar, else "".
func sidecarMode(p corev1.Pod) string {
	for _, c := range p.Spec.InitContainers {
		if c.Name == webhook.ProxyContainer && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return "native"
		}
	}
	for _, c := range p.Spec.Containers {
		if c.Name == webhook.ProxyContainer {
			return "classic"
		}
	}
	return ""
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// callTimeout bounds one read of a pod or of Prometheus, so that a hung
// endpoint cannot hold a wait past its bound.
const callTimeout = 10 * time.Second

// proxyGet is a GET of a pod's port through the API server's pod proxy.
func (s *suite) proxyGet(ns, pod string, port int, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
	defer cancel()
	return s.Client.CoreV1().Pods(ns).ProxyGet("http", pod, strconv.Itoa(port), path, nil).DoRaw(ctx)
}

// answer is one of the client app's GETs (its /peers).
type answer struct {
	Target string `json:"target"`
	Code   int    `json:"code"`
	Body   string `json:"body"`
	Error  string `json:"error"`
	Time   string `json:"time"`
}

// pod and zone are what the echo app put in its answer.
func (a answer) pod() string  { return field(a.Body, "pod") }
func (a answer) zone() string { return field(a.Body, "zone") }

func field(body, key string) string {
	for _, f := range strings.Fields(body) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// answers are the app's GETs after since (a time on the pod's clock, from
// mark, so that a node's clock skew cannot hide or add answers), oldest
// first.
func (s *suite) answers(ns, pod string, since time.Time) ([]answer, error) {
	b, err := s.proxyGet(ns, pod, 8080, "/peers")
	if err != nil {
		return nil, fmt.Errorf("%s/%s /peers: %w", ns, pod, err)
	}
	var r struct {
		Results []answer `json:"results"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s/%s /peers: %w: %.200q", ns, pod, err, b)
	}
	var out []answer
	for _, a := range r.Results {
		if at, err := time.Parse(time.RFC3339Nano, a.Time); err == nil && at.After(since) {
			out = append(out, a)
		}
	}
	return out, nil
}

// mark is the time of the client's latest GET, on its own clock: the
// answers after it are those of requests sent from now on.
func (s *suite) mark(t *testing.T) time.Time {
	t.Helper()
	got, err := s.answers(s.ns, s.client, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		return time.Time{}
	}
	at, _ := time.Parse(time.RFC3339Nano, got[len(got)-1].Time)
	return at
}

// waitAnswers waits until the client's last n answers since t0 all
// satisfy ok, and returns them.
func (s *suite) waitAnswers(t *testing.T, what string, t0 time.Time, n int, ok func(answer) bool) []answer {
	t.Helper()
	var last []answer
	err := s.waitFor(what, func() (bool, string) {
		got, err := s.answers(s.ns, s.client, t0)
		if err != nil {
			return false, err.Error()
		}
		if len(got) >= n {
			got = got[len(got)-n:]
		}
		last = got
		return len(got) == n && !slices.ContainsFunc(got, func(a answer) bool { return !ok(a) }), describe(got)
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

func describe(as []answer) string {
	var out []string
	for _, a := range as {
		switch {
		case a.Error != "":
			out = append(out, "error "+a.Error)
		case a.Code != 200:
			out = append(out, fmt.Sprintf("%d %.80s", a.Code, a.Body))
		default:
			out = append(out, a.pod()+"@"+a.zone())
		}
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// mutualTLS: the client app dials the Service's ClusterIP in plaintext;
// every echo pod answers it, and their sidecars counted the requests as
// mutual TLS from the client's SPIFFE identity: the client's sidecar took
// the app's connection (the redirect) and originated mTLS.
func (s *suite) mutualTLS(t *testing.T) {
	echoes, err := s.Client.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: "app=echo"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range echoes.Items {
		want[p.Name] = true
	}
	t0 := time.Time{}
	seen := map[string]bool{}
	err = s.waitFor("an answer from every echo pod", func() (bool, string) {
		got, err := s.answers(s.ns, s.client, t0)
		if err != nil {
			return false, err.Error()
		}
		for _, a := range got {
			if a.Code == 200 && want[a.pod()] {
				seen[a.pod()] = true
			}
		}
		return len(seen) == len(want), fmt.Sprintf("answered by %v of %v; last %s", keys(seen), keys(want), describe(tail(got, 5)))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the client's GETs of %s were answered by every echo pod: %v", s.vip, keys(seen))
	principal := "spiffe://" + s.TrustDomain + "/ns/" + s.ns + "/sa/default"
	for name := range want {
		n, err := s.mutualTLSRequests(name, principal)
		if err != nil {
			t.Error(err)
			continue
		}
		if n == 0 {
			t.Errorf("echo pod %s: its sidecar counted no mutual-TLS request from %s", name, principal)
			continue
		}
		t.Logf("echo pod %s: %v mutual-TLS requests from %s", name, n, principal)
	}
}

// mutualTLSRequests reads a pod's sidecar metrics where its
// prometheus.io annotations say they are (through the API server) and
// sums istio_requests_total as the destination, over mutual TLS, from
// principal.
func (s *suite) mutualTLSRequests(pod, principal string) (float64, error) {
	p, err := s.Client.CoreV1().Pods(s.ns).Get(s.ctx, pod, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	port, path := webhook.MetricsPort, webhook.MetricsPath
	if v := p.Annotations[webhook.PrometheusPortAnnotation]; v != "" {
		if port, err = strconv.Atoi(v); err != nil {
			return 0, fmt.Errorf("pod %s: annotation %s %q: %v", pod, webhook.PrometheusPortAnnotation, v, err)
		}
	}
	if v := p.Annotations[webhook.PrometheusPathAnnotation]; v != "" {
		path = v
	}
	b, err := s.proxyGet(s.ns, pod, port, path)
	if err != nil {
		return 0, fmt.Errorf("pod %s metrics :%d%s: %w", pod, port, path, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("pod %s metrics :%d%s: %w", pod, port, path, err)
	}
	var sum float64
	for _, m := range families["istio_requests_total"].GetMetric() {
		if label(m, "reporter") == "destination" && label(m, "connection_security_policy") == "mutual_tls" && label(m, "source_principal") == principal {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// prometheusScrape: the injected pods carry the prometheus.io annotations,
// and a Prometheus that discovers pods by them (Target.Prometheus) has the
// client's mutual-TLS requests as its query API's answer.
func (s *suite) prometheusScrape(t *testing.T) {
	pods, err := s.Client.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for k, v := range map[string]string{webhook.PrometheusScrapeAnnotation: "true", webhook.PrometheusPortAnnotation: strconv.Itoa(webhook.MetricsPort),
			webhook.PrometheusPathAnnotation: webhook.MetricsPath} {
			if p.Annotations[k] != v {
				t.Errorf("pod %s: annotation %s %q, want %q (the chart's monitoring.podAnnotations)", p.Name, k, p.Annotations[k], v)
			}
		}
	}
	if s.Prometheus == "" {
		t.Skip("no Prometheus named (MESHLET_E2E_PROMETHEUS): the annotated endpoint was read through the API server in MutualTLSThroughTheRedirect")
	}
	query := fmt.Sprintf(`sum(istio_requests_total{reporter="destination",connection_security_policy="mutual_tls",source_principal="spiffe://%s/ns/%s/sa/default"})`,
		s.TrustDomain, s.ns)
	var value string
	client := &http.Client{Timeout: callTimeout}
	err = s.waitFor("Prometheus's answer to "+query, func() (bool, string) {
		resp, err := client.Get(strings.TrimSuffix(s.Prometheus, "/") + "/api/v1/query?query=" + url.QueryEscape(query))
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var r struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &r); err != nil || r.Status != "success" || len(r.Data.Result) == 0 {
			return false, string(b)
		}
		value, _ = r.Data.Result[0].Value[1].(string)
		v, err := strconv.ParseFloat(value, 64)
		return err == nil && v > 0, string(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Prometheus (%s), which found the pods by their annotations: %s = %s", s.Prometheus, query, value)
}

// zoneFailover: with meshlet.io/failover-labels on the Service the client
// is answered from its own zone only; with that zone's echo scaled to
// zero it fails over to the other zones, and comes back when the zone's
// pod returns. Needs two zones.
func (s *suite) zoneFailover(t *testing.T) {
	if len(s.zones) < 2 {
		t.Skipf("zone failover needs schedulable nodes in two zones (label %s); this cluster has %v", webhook.ZoneLabel, s.zones)
	}
	local := s.zones[0]
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, "meshlet.io/failover-labels", webhook.ZoneLabel)
	if _, err := s.Client.CoreV1().Services(s.ns).Patch(s.ctx, "echo", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ok := func(a answer) bool { return a.Code == 200 && a.zone() == local }
	start, since := time.Now(), s.mark(t)
	// Ten in a row: with round robin over two zones, five could come from
	// the local one by chance before the annotation took effect.
	s.waitAnswers(t, "answers from the client's zone "+local+" only", since, 10, ok)
	t.Logf("with failover-labels: the client in %s is answered from %s only, within %.1f s", local, local, time.Since(start).Seconds())

	s.scale(t, echoName(0), 0)
	start, since = time.Now(), s.mark(t)
	got := s.waitAnswers(t, "failover out of "+local, since, 5, func(a answer) bool { return a.Code == 200 && a.zone() != local && a.zone() != "" })
	all, _ := s.answers(s.ns, s.client, since)
	t.Logf("%s's echo scaled to 0: answered from other zones within %.1f s (%d of %d requests failed meanwhile): %s",
		local, time.Since(start).Seconds(), failed(all), len(all), describe(got))

	s.scale(t, echoName(0), 1)
	start, since = time.Now(), s.mark(t)
	s.waitAnswers(t, "back to "+local, since, 10, ok)
	all, _ = s.answers(s.ns, s.client, since)
	t.Logf("%s's echo back: answered from %s only again within %.1f s (%d of %d failed meanwhile)", local, local, time.Since(start).Seconds(), failed(all), len(all))
}

func failed(as []answer) int {
	n := 0
	for _, a := range as {
		if a.Code != 200 {
			n++
		}
	}
	return n
}

// scale sets a Deployment's replicas.
func (s *suite) scale(t *testing.T, name string, n int32) {
	t.Helper()
	sc, err := s.Client.AppsV1().Deployments(s.ns).GetScale(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Spec.Replicas = n
	if _, err := s.Client.AppsV1().Deployments(s.ns).UpdateScale(s.ctx, name, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// strictAndJob: a pod with STRICT mTLS becomes Ready (the kubelet's
// probes go through its sidecar) and refuses plaintext from a pod outside
// the mesh, which reaches a PERMISSIVE echo pod meanwhile; a Job's pod in
// the mesh reaches it three times through the mesh and completes (the
// native sidecar stops once the app has exited).
func (s *suite) strictAndJob(t *testing.T) {
	secure, err := s.Client.CoreV1().Services(s.ns).Create(s.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "secure"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "secure"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	strict := &corev1.Pod{ObjectMeta: meta("secure", map[string]string{"app": "secure"}, "STRICT"), Spec: s.podSpec("", s.app(""))}
	strict.Namespace = s.ns
	s.createPod(t, strict)
	securePod := s.waitPodReady(t, s.ns, "secure")
	echoes, err := s.Client.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: "app=echo"})
	if err != nil {
		t.Fatal(err)
	}
	var echo *corev1.Pod
	for i, p := range echoes.Items {
		if podReady(p) && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			echo = &echoes.Items[i]
		}
	}
	if echo == nil {
		t.Fatalf("no Ready echo pod to compare with: %d pods", len(echoes.Items))
	}
	strictURL := "http://" + net.JoinHostPort(securePod.Status.PodIP, "8080") + "/"
	permissiveURL := "http://" + net.JoinHostPort(echo.Status.PodIP, "8080") + "/"
	outside := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plaintext", Namespace: s.outside},
		Spec: s.podSpec("", s.app("", corev1.EnvVar{Name: "TARGETS", Value: strictURL + "," + permissiveURL}))}
	s.createPod(t, outside)
	outsider := s.waitPodReady(t, s.outside, "plaintext")
	if sidecarMode(*outsider) != "" {
		t.Fatalf("pod %s/plaintext, in a namespace without the label, got a sidecar", s.outside)
	}
	var byTarget map[string][]answer
	err = s.waitFor("three plaintext GETs of each pod from outside the mesh", func() (bool, string) {
		got, err := s.answers(s.outside, "plaintext", time.Time{})
		if err != nil {
			return false, err.Error()
		}
		byTarget = map[string][]answer{}
		for _, a := range got {
			byTarget[a.Target] = append(byTarget[a.Target], a)
		}
		return len(byTarget[strictURL]) >= 3 && len(byTarget[permissiveURL]) >= 3, fmt.Sprint(len(got), " answers")
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(byTarget[strictURL]) - failed(byTarget[strictURL]); n > 0 {
		t.Errorf("plaintext from outside the mesh reached the STRICT pod's app %d times: %s", n, describe(byTarget[strictURL]))
	}
	if failed(byTarget[permissiveURL]) == len(byTarget[permissiveURL]) {
		t.Errorf("the pod outside the mesh could not reach the PERMISSIVE echo pod either, so the STRICT refusal shows nothing: %s", describe(byTarget[permissiveURL]))
	}
	t.Logf("from outside the mesh: the STRICT pod refused %s; the PERMISSIVE echo pod answered %d of %d",
		describe(tail(byTarget[strictURL], 1)), len(byTarget[permissiveURL])-failed(byTarget[permissiveURL]), len(byTarget[permissiveURL]))

	if mode := sidecarMode(*securePod); mode != "native" {
		t.Skipf("a Job's pod completes only with the native sidecar (Kubernetes 1.29+); this cluster's pods get the %s one", mode)
	}
	backoff := int32(0)
	spec := s.podSpec("", s.app("", corev1.EnvVar{Name: "TARGETS", Value: "http://" + net.JoinHostPort(secure.Spec.ClusterIP, "80") + "/"},
		corev1.EnvVar{Name: "COUNT", Value: "3"}))
	spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once"},
		Spec: batchv1.JobSpec{BackoffLimit: &backoff, Template: corev1.PodTemplateSpec{ObjectMeta: meta("", nil, ""), Spec: spec}}}
	if _, err := s.Client.BatchV1().Jobs(s.ns).Create(s.ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var status batchv1.JobStatus
	err = s.waitFor("Job once succeeded", func() (bool, string) {
		j, err := s.Client.BatchV1().Jobs(s.ns).Get(s.ctx, "once", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		status = j.Status
		return j.Status.Succeeded == 1 || j.Status.Failed > 0, fmt.Sprintf("%+v", j.Status)
	})
	if err != nil || status.Succeeded != 1 {
		if pods, lerr := s.Client.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: "job-name=once"}); lerr == nil {
			for _, p := range pods.Items {
				t.Logf("Job pod %s: %s\napp:\n%s\nsidecar:\n%s", p.Name, p.Status.Phase, s.logs(p, "app"), s.logs(p, webhook.ProxyContainer))
			}
		}
		t.Fatalf("Job once (3 GETs of the STRICT Service through the mesh): %v %+v", err, status)
	}
	t.Logf("Job once: 3 GETs of the STRICT Service through the mesh, completed in %.1f s (the sidecar stopped after the app)", time.Since(t0).Seconds())
	n, err := s.mutualTLSRequests("secure", "spiffe://"+s.TrustDomain+"/ns/"+s.ns+"/sa/default")
	if err != nil || n < 3 {
		t.Errorf("the STRICT pod's sidecar counted %v mutual-TLS requests from the Job (want 3 or more): %v", n, err)
	}
}

// logs is the tail of a container's log, for a failure's report.
func (s *suite) logs(p corev1.Pod, container string) string {
	lines := int64(40)
	ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
	defer cancel()
	b, err := s.Client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, TailLines: &lines}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// waitPodReady waits until a pod is Ready and returns it.
func (s *suite) waitPodReady(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	err := s.waitFor("pod "+ns+"/"+name+" Ready", func() (bool, string) {
		var err error
		p, err = s.Client.CoreV1().Pods(ns).Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return podReady(*p), fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func tail(as []answer, n int) []answer {
	if len(as) > n {
		return as[len(as)-n:]
	}
	return as
}
