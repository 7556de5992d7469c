package webhook

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func appPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{ServiceAccountName: "web", Containers: []corev1.Container{{
			Name: "web", Image: "web:1",
			Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromString("http")}}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
			StartupProbe:   &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}},
		}}},
	}
}

func TestDecide(t *testing.T) {
	enabled := map[string]string{NamespaceLabel: "enabled"}
	cases := []struct {
		name   string
		mutate func(*corev1.Pod)
		ns     string
		labels map[string]string
		want   bool
	}{
		{"labelled namespace", nil, "shop", enabled, true},
		{"unlabelled namespace", nil, "shop", nil, false},
		{"pod opts in", func(p *corev1.Pod) { p.Labels[PodLabel] = "true" }, "shop", nil, true},
		{"pod opts out", func(p *corev1.Pod) { p.Labels[PodLabel] = "false" }, "shop", enabled, false},
		{"host network", func(p *corev1.Pod) { p.Spec.HostNetwork = true; p.Labels[PodLabel] = "true" }, "shop", enabled, false},
		{"system namespace", func(p *corev1.Pod) { p.Labels[PodLabel] = "true" }, "kube-system", enabled, false},
		{"meshlet-system", nil, "meshlet-system", enabled, false},
	}
	for _, tc := range cases {
		p := appPod()
		if tc.mutate != nil {
			tc.mutate(p)
		}
		if d := Decide(p, tc.ns, tc.labels); d.Inject != tc.want || d.Reason == "" {
			t.Errorf("%s: %+v, want inject=%v with a reason", tc.name, d, tc.want)
		}
	}
}

func TestInjectNativeSidecar(t *testing.T) {
	out, err := Inject(appPod(), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Spec.InitContainers) != 1 || out.Spec.InitContainers[0].Name != ProxyContainer {
		t.Fatalf("init containers %v", out.Spec.InitContainers)
	}
	proxy := out.Spec.InitContainers[0]
	if proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("native sidecar needs restartPolicy Always")
	}
	if sp := proxy.StartupProbe; sp == nil || sp.HTTPGet.Path != "/healthz/ready" || sp.HTTPGet.Port.IntVal != HealthPort {
		t.Errorf("startup probe %+v", sp)
	}
	if proxy.Lifecycle == nil || proxy.Lifecycle.PreStop == nil || !strings.Contains(strings.Join(proxy.Lifecycle.PreStop.Exec.Command, " "), "drain") {
		t.Error("no draining preStop")
	}
	caps := proxy.SecurityContext.Capabilities
	if !reflect.DeepEqual(caps.Drop, []corev1.Capability{"ALL"}) || !reflect.DeepEqual(caps.Add, []corev1.Capability{"BPF", "NET_ADMIN", "SETUID", "SETGID"}) {
		t.Errorf("capabilities %+v", caps)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range proxy.Env {
		env[e.Name] = e
	}
	for name, path := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid",
		"POD_IP": "status.podIP", "NODE_NAME": "spec.nodeName", "SERVICE_ACCOUNT": "spec.serviceAccountName"} {
		if e, ok := env[name]; !ok || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("env %s: %+v", name, e)
		}
	}
	if env["MESHLET_APP_PORTS"].Value != "8080" || env["MESHLET_CONTROL_PLANE"].Value == "" {
		t.Errorf("app ports / control plane env: %+v", env)
	}
	if args := strings.Join(proxy.Args, " "); !strings.Contains(args, "--pod --redirect=ebpf --xds=$(MESHLET_CONTROL_PLANE)") ||
		!strings.HasSuffix(args, " --proxy-uid=1337") {
		t.Errorf("sidecar args %v", proxy.Args)
	}
	var token *corev1.ServiceAccountTokenProjection
	var tokenMode *int32
	for _, v := range out.Spec.Volumes {
		if v.Name == TokenVolume {
			token, tokenMode = v.Projected.Sources[0].ServiceAccountToken, v.Projected.DefaultMode
		}
	}
	if token == nil || token.Audience != TokenAudience {
		t.Errorf("projected token %+v", token)
	}
	// The sidecar, by then uid 1337, re-reads the rotated token.
	if tokenMode == nil || *tokenMode != 0o644 {
		t.Errorf("projected token mode %v, want 0644", tokenMode)
	}
	// The app's probes now go to the sidecar; exec probes stay.
	app := out.Spec.Containers[0]
	if g := app.LivenessProbe.HTTPGet; g == nil || g.Path != "/app-health/web/livez" || g.Port.IntVal != HealthPort {
		t.Errorf("liveness %+v", app.LivenessProbe)
	}
	if g := app.ReadinessProbe.HTTPGet; g == nil || g.Path != "/app-health/web/readyz" || app.ReadinessProbe.TCPSocket != nil {
		t.Errorf("readiness %+v", app.ReadinessProbe)
	}
	if app.StartupProbe.Exec == nil {
		t.Error("exec probe rewritten")
	}
	var probers map[string]appProber
	if err := json.Unmarshal([]byte(env[ProbersEnv].Value), &probers); err != nil {
		t.Fatalf("%s: %v", ProbersEnv, err)
	}
	if p := probers["/app-health/web/livez"]; p.HTTPGet == nil || p.HTTPGet.Path != "/live" || p.HTTPGet.Port.IntVal != 8080 {
		t.Errorf("original liveness probe for the sidecar: %+v (named port resolved to 8080)", p)
	}
	if p := probers["/app-health/web/readyz"]; p.TCPSocket == nil || p.TCPSocket.Port.IntVal != 8080 {
		t.Errorf("original readiness probe: %+v", p)
	}
}

func TestInjectClassicAndIdempotent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ServerMinor = 28
	out, err := Inject(appPod(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Spec.InitContainers) != 0 || out.Spec.Containers[0].Name != ProxyContainer || out.Spec.Containers[0].Lifecycle.PostStart == nil {
		t.Fatalf("classic mode: containers %v", out.Spec.Containers)
	}
	again, err := Inject(out, cfg)
	if err != nil || !reflect.DeepEqual(again, out) {
		t.Errorf("second injection changed the pod (err %v)", err)
	}
	// The annotation forces a mode.
	p := appPod()
	p.Annotations = map[string]string{ModeAnnotation: "native"}
	if out, _ := Inject(p, cfg); len(out.Spec.InitContainers) != 1 {
		t.Error("mode annotation ignored")
	}
}

func TestInjectAnnotationErrors(t *testing.T) {
	for ann, v := range map[string]string{ModeAnnotation: "sideways", CPURequestAnnotation: "lots",
		ExcludeOutboundPortsAnnotation: "80,http", ExcludeOutboundCIDRsAnnotation: "foo/bar", MTLSModeAnnotation: "DISABLE", AccelerateAnnotation: "yes",
		ConcurrencyAnnotation: "-1"} {
		p := appPod()
		p.Annotations = map[string]string{ann: v}
		if _, err := Inject(p, DefaultConfig()); err == nil || !strings.Contains(err.Error(), ann) {
			t.Errorf("annotation %s=%q: err %v, want it named", ann, v, err)
		}
	}
	p := appPod()
	p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 15090})
	if _, err := Inject(p, DefaultConfig()); err == nil || !strings.Contains(err.Error(), `port 15090: reserved for the meshlet sidecar`) {
		t.Errorf("app port 15090: err %v, want it refused", err)
	}
	p = appPod()
	p.Annotations = map[string]string{ExcludeOutboundPortsAnnotation: "3306, 5432", ImageAnnotation: "my/proxy:2", MemoryLimitAnnotation: "1Gi",
		MTLSModeAnnotation: "strict", AccelerateAnnotation: "true", ConcurrencyAnnotation: "4"}
	out, err := Inject(p, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	proxy := out.Spec.InitContainers[0]
	env := map[string]string{}
	for _, e := range proxy.Env {
		env[e.Name] = e.Value
	}
	if env["MESHLET_MTLS_MODE"] != "STRICT" || env["MESHLET_TRUST_DOMAIN"] != "cluster.local" || env["MESHLET_ACCELERATE"] != "true" {
		t.Errorf("mTLS env: %v", env)
	}
	if env["MESHLET_CONCURRENCY"] != "4" {
		t.Errorf("concurrency annotation 4: MESHLET_CONCURRENCY %q", env["MESHLET_CONCURRENCY"])
	}
	// Without the annotation: the injector's default, Istio's 2.
	def, err := Inject(appPod(), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	got := "(unset)"
	for _, e := range def.Spec.InitContainers[0].Env {
		if e.Name == "MESHLET_CONCURRENCY" {
			got = e.Value
		}
	}
	if got != "2" {
		t.Errorf("default MESHLET_CONCURRENCY %s, want 2", got)
	}
	if args := strings.Join(proxy.Args, " "); !strings.Contains(args, "--sds=$(MESHLET_CONTROL_PLANE)") {
		t.Errorf("args %s lack --sds", args)
	}
	if proxy.Image != "my/proxy:2" || proxy.Resources.Limits.Memory().String() != "1Gi" {
		t.Errorf("overrides: image %s limits %v", proxy.Image, proxy.Resources.Limits)
	}
}

// The mesh-wide mTLS mode (Config.MTLSMode, injector serve -mtls-mode)
// reaches a pod without the annotation; the annotation still wins; without
// either the sidecar is left to its own default (no MESHLET_MTLS_MODE); a
// mode other than STRICT or PERMISSIVE is refused, named.
func TestInjectMeshMTLSMode(t *testing.T) {
	mode := func(p *corev1.Pod, cfg Config) string {
		t.Helper()
		out, err := Inject(p, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range out.Spec.InitContainers[0].Env {
			if e.Name == "MESHLET_MTLS_MODE" {
				return e.Value
			}
		}
		return "(unset)"
	}
	strict := DefaultConfig()
	strict.MTLSMode = "STRICT"
	if got := mode(appPod(), strict); got != "STRICT" {
		t.Errorf("mesh default STRICT, no annotation: MESHLET_MTLS_MODE %s", got)
	}
	p := appPod()
	p.Annotations = map[string]string{MTLSModeAnnotation: "permissive"}
	if got := mode(p, strict); got != "PERMISSIVE" {
		t.Errorf("mesh default STRICT, annotation permissive: MESHLET_MTLS_MODE %s", got)
	}
	if got := mode(appPod(), DefaultConfig()); got != "(unset)" {
		t.Errorf("no mesh default, no annotation: MESHLET_MTLS_MODE %s", got)
	}
	bad := DefaultConfig()
	bad.MTLSMode = "DISABLE"
	if _, err := Inject(appPod(), bad); err == nil || !strings.Contains(err.Error(), `mtls_mode: "DISABLE"`) {
		t.Errorf("mesh default DISABLE: err %v, want it refused and named", err)
	}
}

// review posts an AdmissionReview to the handler and returns the response.
func review(t *testing.T, h http.Handler, pod *corev1.Pod) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, _ := json.Marshal(pod)
	ar := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{Kind: "AdmissionReview", APIVersion: "admission.k8s.io/v1"},
		Request: &admissionv1.AdmissionRequest{UID: "u1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Operation: admissionv1.Create, Namespace: pod.Namespace, Object: runtime.RawExtension{Raw: raw}}}
	body, _ := json.Marshal(ar)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body)))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID != "u1" {
		t.Fatalf("response %s: %v", rec.Body.String(), err)
	}
	return out.Response
}

func TestAdmissionReviewPatchAppliesToTheMutatedPod(t *testing.T) {
	in := &Injector{Config: DefaultConfig(), Namespaces: func(ns string) (map[string]string, bool) {
		return map[string]string{NamespaceLabel: "enabled"}, ns == "shop"
	}}
	pod := appPod()
	resp := review(t, in, pod)
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response %+v", resp)
	}
	raw, _ := json.Marshal(pod)
	patched := applyPatch(t, raw, resp.Patch)
	var got corev1.Pod
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	want, _ := Inject(pod, DefaultConfig())
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("patched pod differs from Inject's result")
	}
	// Reinvocation on the injected pod: allowed, no patch.
	if resp := review(t, in, &got); resp.Patch != nil {
		t.Errorf("second admission patched again: %s", resp.Patch)
	}
	// An unlabelled namespace: allowed untouched.
	other := appPod()
	other.Namespace = "plain"
	in.Namespaces = func(string) (map[string]string, bool) { return nil, true }
	if resp := review(t, in, other); !resp.Allowed || resp.Patch != nil {
		t.Errorf("unlabelled namespace: %+v", resp)
	}
	if in.Injected.Load() != 1 || in.Skipped.Load() != 2 {
		t.Errorf("counters injected %d skipped %d", in.Injected.Load(), in.Skipped.Load())
	}
	// Malformed input: a clear 400, not a panic.
	rec := httptest.NewRecorder()
	in.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/inject", strings.NewReader("{not json")))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("malformed review: %d", rec.Code)
	}
}

// applyPatch applies an RFC 6902 patch of add / replace / remove
// operations (what CreatePatch emits); test-only, to check the patch.
func applyPatch(t *testing.T, doc, patch []byte) []byte {
	t.Helper()
	var root any
	json.Unmarshal(doc, &root)
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch: %v", err)
	}
	for _, op := range ops {
		parts := strings.Split(op.Path, "/")[1:]
		for i := range parts {
			parts[i] = strings.ReplaceAll(strings.ReplaceAll(parts[i], "~1", "/"), "~0", "~")
		}
		root = applyOp(t, root, parts, op.Op, op.Value)
	}
	out, _ := json.Marshal(root)
	return out
}

func applyOp(t *testing.T, node any, path []string, op string, value any) any {
	if len(path) == 0 {
		return value
	}
	key := path[0]
	switch n := node.(type) {
	case map[string]any:
		if len(path) == 1 {
			if op == "remove" {
				delete(n, key)
			} else {
				n[key] = value
			}
			return n
		}
		n[key] = applyOp(t, n[key], path[1:], op, value)
		return n
	case []any:
		i := len(n)
		if key != "-" {
			i, _ = strconv.Atoi(key)
		}
		if len(path) == 1 {
			switch op {
			case "add":
				n = append(n[:i], append([]any{value}, n[i:]...)...)
			case "replace":
				n[i] = value
			case "remove":
				n = append(n[:i], n[i+1:]...)
			}
			return n
		}
		n[i] = applyOp(t, n[i], path[1:], op, value)
		return n
	case nil:
		if len(path) == 1 {
			return map[string]any{key: value}
		}
		return map[string]any{key: applyOp(t, nil, path[1:], op, value)}
	}
	t.Fatalf("patch path %v into %T", path, node)
	return nil
}

// TestAppPortsOnceEach: MESHLET_APP_PORTS lists each TCP container port
// once (two containers may declare the same one; a duplicate would give the
// sidecar two inbound clusters of one name) and leaves UDP out.
func TestAppPortsOnceEach(t *testing.T) {
	pod := appPod()
	pod.Spec.Containers[0].Ports = append(pod.Spec.Containers[0].Ports,
		corev1.ContainerPort{ContainerPort: 53, Protocol: corev1.ProtocolUDP}, corev1.ContainerPort{ContainerPort: 9090, Protocol: corev1.ProtocolTCP})
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "metrics", Image: "m:1",
		Ports: []corev1.ContainerPort{{ContainerPort: 9090}, {ContainerPort: 8080}}})
	if got := appPorts(pod); got != "8080,9090" {
		t.Errorf("appPorts = %q, want 8080,9090", got)
	}
}

// The spans' service name follows Istio's canonical service: its label,
// the app labels, else the pod's name without the ReplicaSet's and the
// pod's generated suffixes.
func TestCanonicalService(t *testing.T) {
	for _, tc := range []struct {
		labels       map[string]string
		generateName string
		name, want   string
	}{
		{map[string]string{"service.istio.io/canonical-name": "checkout", "app": "web"}, "web-5d9f-", "", "checkout"},
		{map[string]string{"app.kubernetes.io/name": "cart", "app": "web"}, "", "cart-0", "cart"},
		{map[string]string{"app": "web"}, "", "", "web"},
		{map[string]string{"pod-template-hash": "7d4f9c8b6"}, "echo-7d4f9c8b6-", "", "echo"},
		{nil, "job-", "", "job"},
		{nil, "", "db-0", "db-0"},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels, GenerateName: tc.generateName, Name: tc.name}}
		if got := canonicalService(pod); got != tc.want {
			t.Errorf("canonicalService(labels %v, generateName %q, name %q) = %q, want %q", tc.labels, tc.generateName, tc.name, got, tc.want)
		}
	}
}

// The scrape annotations go on a pod that has none, pointed at the
// sidecar's metrics; a pod with its own (even scrape "false") keeps them
// as they are, and an operator can turn them off.
func TestInjectPrometheusAnnotations(t *testing.T) {
	out, err := Inject(appPod(), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "15090", "prometheus.io/path": "/stats/prometheus"}
	for k, v := range want {
		if out.Annotations[k] != v {
			t.Errorf("annotation %s: %q, want %q", k, out.Annotations[k], v)
		}
	}
	for _, own := range []map[string]string{{"prometheus.io/scrape": "false"}, {"prometheus.io/port": "9102", "prometheus.io/scrape": "true"},
		{"prometheus.io.scrape": "true"}, {"prometheus-io/port": "9102"}} {
		p := appPod()
		p.Annotations = maps.Clone(own)
		out, err := Inject(p, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		for k := range want {
			if out.Annotations[k] != own[k] {
				t.Errorf("pod with %v: annotation %s became %q", own, k, out.Annotations[k])
			}
		}
	}
	cfg := DefaultConfig()
	cfg.PrometheusAnnotations = false
	if out, err = Inject(appPod(), cfg); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if v, ok := out.Annotations[k]; ok {
			t.Errorf("PrometheusAnnotations off: annotation %s=%q added", k, v)
		}
	}
}

// With a csi-driver-spiffe driver named, the sidecar reads its identity
// from the driver's files, which must name the pod's own SPIFFE ID,
// instead of SDS; the volume asks for the files' group to be the proxy's.
func TestInjectIdentityCSIDriver(t *testing.T) {
	cfg := DefaultConfig()
	cfg.IdentityCSIDriver = "spiffe.csi.cert-manager.io"
	cfg.ProxyUID = 4242
	out, err := Inject(appPod(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy := out.Spec.InitContainers[0]
	args := strings.Join(proxy.Args, " ")
	for _, want := range []string{"--identity-dir=" + IdentityPath, "--identity-files=tls.crt,tls.key,ca.crt",
		"--identity=spiffe://$(MESHLET_TRUST_DOMAIN)/ns/$(POD_NAMESPACE)/sa/$(SERVICE_ACCOUNT)", "--xds=$(MESHLET_CONTROL_PLANE)"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--sds") {
		t.Errorf("args %q still ask SDS", args)
	}
	// What --identity expands from: the mesh's trust domain, and the
	// pod's namespace and service account from the downward API.
	for env, from := range map[string]string{"MESHLET_TRUST_DOMAIN": "cluster.local", "POD_NAMESPACE": "metadata.namespace",
		"SERVICE_ACCOUNT": "spec.serviceAccountName"} {
		if !slices.ContainsFunc(proxy.Env, func(e corev1.EnvVar) bool {
			return e.Name == env && (e.Value == from || e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == from)
		}) {
			t.Errorf("no env %s from %s for the --identity expansion: %+v", env, from, proxy.Env)
		}
	}
	var vol *corev1.Volume
	for i := range out.Spec.Volumes {
		if out.Spec.Volumes[i].Name == IdentityVolume {
			vol = &out.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.CSI == nil || vol.CSI.Driver != cfg.IdentityCSIDriver || vol.CSI.ReadOnly == nil || !*vol.CSI.ReadOnly ||
		vol.CSI.VolumeAttributes["spiffe.csi.cert-manager.io/fs-group"] != "4242" {
		t.Fatalf("identity volume: %+v", vol)
	}
	if !slices.ContainsFunc(proxy.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == IdentityVolume && m.MountPath == IdentityPath && m.ReadOnly
	}) {
		t.Errorf("no read-only mount of %s: %+v", IdentityVolume, proxy.VolumeMounts)
	}
	if !strings.Contains(out.Annotations[StatusAnnotation], IdentityVolume) {
		t.Errorf("status %s does not name the identity volume", out.Annotations[StatusAnnotation])
	}
	cfg.IdentityCSIDriver = "not a driver/"
	if _, err := Inject(appPod(), cfg); err == nil || !strings.Contains(err.Error(), "identity_csi_driver") {
		t.Errorf("bad driver name: %v", err)
	}
	// Without it, SDS as before and no identity volume.
	out, err = Inject(appPod(), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(out.Spec.InitContainers[0].Args, " "); !strings.Contains(args, "--sds=$(MESHLET_CONTROL_PLANE)") || strings.Contains(args, "identity") {
		t.Errorf("default args %q", args)
	}
}
