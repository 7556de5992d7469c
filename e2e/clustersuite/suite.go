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
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

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
// mutualTLSRequests reads a pod's sidecar metrics where its
// prometheus.io annotations say they are (through the API server) and
// sums istio_requests_total as the destination, over mutual TLS, from
// prometheusScrape: the injected pods carry the prometheus.io annotations,
// and a Prometheus that discovers pods by them (Target.Prometheus) has the
// zoneFailover: with meshlet.io/failover-labels on the Service the client
// is answered from its own zone only; with that zone's echo scaled to
// zero it fails over to the other zones, and comes back when the zone's
// strictAndJob: a pod with STRICT mTLS becomes Ready (the kubelet's
// probes go through its sidecar) and refuses plaintext from a pod outside
// the mesh, which reaches a PERMISSIVE echo pod meanwhile; a Job's pod in
// the mesh reaches it three times through the mesh and completes (the
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
