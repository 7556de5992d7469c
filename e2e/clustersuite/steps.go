package clustersuite

// The suite's steps, in the order Run takes them.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshlet-dev/meshlet/webhook"
)

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
