package webhook

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Decision says whether and why a pod is (not) injected.
type Decision struct {
	Inject bool
	Reason string
}

// Decide applies the selection rules: never host-network pods or system
// namespaces; the pod label overrides; otherwise the namespace label.
func Decide(pod *corev1.Pod, namespace string, nsLabels map[string]string) Decision {
	switch {
	case systemNamespaces[namespace]:
		return Decision{false, "system namespace " + namespace}
	case pod.Spec.HostNetwork:
		return Decision{false, "host-network pod"}
	}
	switch pod.Labels[PodLabel] {
	case "true":
		return Decision{true, "pod label " + PodLabel + "=true"}
	case "false":
		return Decision{false, "pod label " + PodLabel + "=false"}
	}
	if nsLabels[NamespaceLabel] == "enabled" {
		return Decision{true, "namespace label " + NamespaceLabel + "=enabled"}
	}
	return Decision{false, "namespace not labelled " + NamespaceLabel + "=enabled"}
}

// status is what StatusAnnotation records.
type status struct {
	Version    string   `json:"version"`
	Mode       string   `json:"mode"`
	Containers []string `json:"containers"`
	Volumes    []string `json:"volumes"`
}

// injectorVersion changes when what Inject adds changes.
const injectorVersion = "3"

// Inject returns the pod with the sidecar added. A pod that already
// carries StatusAnnotation is returned unchanged (idempotent: reinvocation
// and re-applies yield the same pod). Bad annotations are errors naming
// the annotation.
func Inject(pod *corev1.Pod, cfg Config) (*corev1.Pod, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := pod.DeepCopy()
	if _, done := out.Annotations[StatusAnnotation]; done {
		return out, nil
	}
	if err := checkReservedPorts(out); err != nil {
		return nil, err
	}
	mode, err := sidecarMode(out, cfg)
	if err != nil {
		return nil, err
	}
	proxy, err := proxyContainer(out, cfg, mode)
	if err != nil {
		return nil, err
	}
	if out.Annotations[RewriteProbesAnnotation] != "false" {
		probers, err := rewriteProbes(out)
		if err != nil {
			return nil, err
		}
		if probers != "" {
			proxy.Env = append(proxy.Env, corev1.EnvVar{Name: ProbersEnv, Value: probers})
		}
	}
	if mode == "native" {
		out.Spec.InitContainers = append([]corev1.Container{proxy}, out.Spec.InitContainers...)
	} else {
		out.Spec.Containers = append([]corev1.Container{proxy}, out.Spec.Containers...)
	}
	vols := volumes(cfg)
	out.Spec.Volumes = append(out.Spec.Volumes, vols...)
	names := make([]string, len(vols))
	for i, v := range vols {
		names[i] = v.Name
	}
	st, _ := json.Marshal(status{Version: injectorVersion, Mode: mode, Containers: []string{ProxyContainer}, Volumes: names})
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[StatusAnnotation] = string(st)
	if cfg.PrometheusAnnotations && !hasPrometheusAnnotations(out) {
		out.Annotations[PrometheusScrapeAnnotation] = "true"
		out.Annotations[PrometheusPortAnnotation] = strconv.Itoa(MetricsPort)
		out.Annotations[PrometheusPathAnnotation] = MetricsPath
	}
	return out, nil
}

// hasPrometheusAnnotations says whether the pod says anything of its own
// to Prometheus (prometheus.io/scrape "false" included), in any spelling
// that Prometheus's pod discovery reads as the same label
// (prometheus.io.scrape, prometheus-io/scrape: each character but
// letters and digits becomes _), since two of them would collide.
func hasPrometheusAnnotations(pod *corev1.Pod) bool {
	for k := range pod.Annotations {
		label := strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '_'
		}, k)
		if strings.HasPrefix(label, "prometheus_io_") {
			return true
		}
	}
	return false
}

// sidecarMode is "native" (an init container with restartPolicy Always,
// Kubernetes 1.29+) or "classic" (a regular container started first and
// holding the app back until it is ready).
func sidecarMode(pod *corev1.Pod, cfg Config) (string, error) {
	switch m := pod.Annotations[ModeAnnotation]; m {
	case "native", "classic":
		return m, nil
	case "":
	default:
		return "", fmt.Errorf("webhook: annotation %s: %q (want native or classic)", ModeAnnotation, m)
	}
	if cfg.ServerMinor != 0 && cfg.ServerMinor < nativeMinorFirst {
		return "classic", nil
	}
	return "native", nil
}

func proxyContainer(pod *corev1.Pod, cfg Config, mode string) (corev1.Container, error) {
	image := cfg.Image
	if v := pod.Annotations[ImageAnnotation]; v != "" {
		image = v
	}
	res := *cfg.Resources.DeepCopy()
	for _, o := range []struct {
		ann  string
		list *corev1.ResourceList
		name corev1.ResourceName
	}{{CPURequestAnnotation, &res.Requests, corev1.ResourceCPU}, {MemoryRequestAnnotation, &res.Requests, corev1.ResourceMemory},
		{CPULimitAnnotation, &res.Limits, corev1.ResourceCPU}, {MemoryLimitAnnotation, &res.Limits, corev1.ResourceMemory}} {
		v, ok := pod.Annotations[o.ann]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return corev1.Container{}, fmt.Errorf("webhook: annotation %s: %q: %v", o.ann, v, err)
		}
		if *o.list == nil {
			*o.list = corev1.ResourceList{}
		}
		(*o.list)[o.name] = q
	}
	env := []corev1.EnvVar{
		fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace"), fieldEnv("POD_UID", "metadata.uid"),
		fieldEnv("POD_IP", "status.podIP"), fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("SERVICE_ACCOUNT", "spec.serviceAccountName"),
		{Name: "MESHLET_CONTROL_PLANE", Value: cfg.ControlPlane},
		{Name: "MESHLET_TRUST_DOMAIN", Value: cfg.TrustDomain},
		{Name: "MESHLET_HOST_CGROUP", Value: HostCgroupPath},
	}
	if ports := appPorts(pod); ports != "" {
		env = append(env, corev1.EnvVar{Name: "MESHLET_APP_PORTS", Value: ports})
	}
	for _, ex := range []struct{ ann, env string }{{ExcludeInboundPortsAnnotation, "MESHLET_EXCLUDE_INBOUND_PORTS"},
		{ExcludeOutboundPortsAnnotation, "MESHLET_EXCLUDE_OUTBOUND_PORTS"}, {ExcludeOutboundCIDRsAnnotation, "MESHLET_EXCLUDE_OUTBOUND_CIDRS"}} {
		v, ok := pod.Annotations[ex.ann]
		if !ok {
			continue
		}
		if err := validateList(ex.ann, v); err != nil {
			return corev1.Container{}, err
		}
		env = append(env, corev1.EnvVar{Name: ex.env, Value: v})
	}
	if v, ok := pod.Annotations[AccelerateAnnotation]; ok {
		if v != "true" && v != "false" {
			return corev1.Container{}, fmt.Errorf("webhook: annotation %s: %q (want \"true\" or \"false\")", AccelerateAnnotation, v)
		}
		env = append(env, corev1.EnvVar{Name: "MESHLET_ACCELERATE", Value: v})
	}
	concurrency := strconv.Itoa(cfg.Concurrency)
	if v, ok := pod.Annotations[ConcurrencyAnnotation]; ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n < 0 || n > 1024 {
			return corev1.Container{}, fmt.Errorf("webhook: annotation %s: %q (want a worker count from 0, one per CPU, to 1024)", ConcurrencyAnnotation, v)
		}
		concurrency = strings.TrimSpace(v)
	}
	env = append(env, corev1.EnvVar{Name: "MESHLET_CONCURRENCY", Value: concurrency})
	mtlsMode := cfg.MTLSMode
	if v, ok := pod.Annotations[MTLSModeAnnotation]; ok {
		m := strings.ToUpper(strings.TrimSpace(v))
		if m != "STRICT" && m != "PERMISSIVE" {
			return corev1.Container{}, fmt.Errorf("webhook: annotation %s: %q (want STRICT or PERMISSIVE)", MTLSModeAnnotation, v)
		}
		mtlsMode = m
	}
	if mtlsMode != "" {
		env = append(env, corev1.EnvVar{Name: "MESHLET_MTLS_MODE", Value: mtlsMode})
	}
	env = append(env, fieldEnv("MESHLET_ZONE", "metadata.labels['"+ZoneLabel+"']"), fieldEnv("MESHLET_REGION", "metadata.labels['"+RegionLabel+"']"))
	if cfg.TracingEndpoint != "" {
		sampling := strconv.FormatFloat(cfg.TraceSampling, 'f', -1, 64)
		if v, ok := pod.Annotations[TraceSamplingAnnotation]; ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || !(f >= 0 && f <= 100) {
				return corev1.Container{}, fmt.Errorf("webhook: annotation %s: %q (want a percentage from 0 to 100)", TraceSamplingAnnotation, v)
			}
			sampling = strconv.FormatFloat(f, 'f', -1, 64)
		}
		env = append(env, corev1.EnvVar{Name: "MESHLET_TRACING_ENDPOINT", Value: cfg.TracingEndpoint},
			corev1.EnvVar{Name: "MESHLET_TRACE_SAMPLING", Value: sampling},
			corev1.EnvVar{Name: "MESHLET_TRACE_SERVICE", Value: canonicalService(pod)})
	}
	root := int64(0)
	c := corev1.Container{
		Name: ProxyContainer, Image: image, ImagePullPolicy: cfg.ImagePullPolicy,
		// The pod config (listeners on Istio's ports, inbound routes to the
		// app ports), clusters and routes over xDS and the workload
		// certificate over SDS from the control plane (or from the
		// csi-driver-spiffe volume, identityArgs), authenticated with the
		// projected token over TLS to the mesh root.
		Args: append([]string{"run", "--pod", "--redirect=ebpf", "--xds=$(MESHLET_CONTROL_PLANE)"}, append(identityArgs(cfg),
			"--xds-ca="+RootCAPath+"/root-cert.pem", "--xds-token="+TokenPath+"/meshlet-token",
			"--proxy-uid="+strconv.FormatInt(cfg.ProxyUID, 10))...),
		Env: env, Resources: res,
		Ports: []corev1.ContainerPort{
			{Name: "meshlet-health", ContainerPort: HealthPort, Protocol: corev1.ProtocolTCP},
			{Name: "http-envoy-prom", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: TokenVolume, MountPath: TokenPath, ReadOnly: true},
			{Name: RootCAVolume, MountPath: RootCAPath, ReadOnly: true},
			{Name: CgroupVolume, MountPath: HostCgroupPath, ReadOnly: true},
		},
		// The sidecar starts as root with every capability dropped but
		// four: BPF (load programs and maps), NET_ADMIN (attach the cgroup
		// sock and sk_lookup programs), SETUID and SETGID (switch to
		// ProxyUID). Once the programs are attached and its listeners
		// registered it switches to ProxyUID:ProxyUID, which empties its
		// capability sets, these four included (and no_new_privs keeps them empty):
		// it serves traffic as uid 1337 with no capability, like Istio's
		// proxy. It cannot start as 1337: Kubernetes gives a non-root
		// container's process no capabilities (no ambient set) unless its
		// binary has file capabilities, which need
		// allowPrivilegeEscalation. Its own connects are exempt from the
		// redirect by its cgroup and by that uid.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: &root, RunAsNonRoot: ptr(false), AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"BPF", "NET_ADMIN", "SETUID", "SETGID"}},
		},
		ReadinessProbe: healthProbe(),
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"/usr/local/bin/sidecar", "drain"}},
		}},
	}
	if cfg.IdentityCSIDriver != "" {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: IdentityVolume, MountPath: IdentityPath, ReadOnly: true})
	}
	if mode == "native" {
		always := corev1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
		// The kubelet starts the app only once the startup probe passes.
		c.StartupProbe = healthProbe()
		c.StartupProbe.FailureThreshold = 600
		c.StartupProbe.PeriodSeconds = 1
	} else {
		// Classic mode: the kubelet runs postStart before starting the next
		// container, so the app waits until the sidecar is ready.
		c.Lifecycle.PostStart = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/usr/local/bin/sidecar", "wait"}}}
	}
	return c, nil
}

// identityArgs is where the sidecar's certificate comes from: SDS from
// the control plane, or the csi-driver-spiffe files, which must name the
// pod's own SPIFFE ID (Kubernetes expands the $(VAR)s from the container's
// environment).
func identityArgs(cfg Config) []string {
	if cfg.IdentityCSIDriver == "" {
		return []string{"--sds=$(MESHLET_CONTROL_PLANE)"}
	}
	return []string{"--identity-dir=" + IdentityPath, "--identity-files=tls.crt,tls.key,ca.crt",
		"--identity=spiffe://$(MESHLET_TRUST_DOMAIN)/ns/$(POD_NAMESPACE)/sa/$(SERVICE_ACCOUNT)"}
}

// appPorts lists the app containers' TCP ports, each once, for the
// sidecar's inbound routes.
func appPorts(pod *corev1.Pod) string {
	var ports []string
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if s := strconv.Itoa(int(p.ContainerPort)); (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) && !slices.Contains(ports, s) {
				ports = append(ports, s)
			}
		}
	}
	return strings.Join(ports, ",")
}

// ReservedPorts are the sidecar's ports in the pod's network namespace
// (Istio's numbers): an app container declaring one would fail to bind it or
// have its traffic taken by the sidecar, so such a pod is refused.
var ReservedPorts = []int32{15000, 15001, 15006, 15021, 15090}

func checkReservedPorts(pod *corev1.Pod) error {
	for _, c := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, p := range c.Ports {
			if slices.Contains(ReservedPorts, p.ContainerPort) && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
				return fmt.Errorf("webhook: container %q port %d: reserved for the meshlet sidecar (%v); move the app, or opt the pod out with label %s: \"false\"",
					c.Name, p.ContainerPort, ReservedPorts, PodLabel)
			}
		}
	}
	return nil
}

func healthProbe() *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/healthz/ready", Port: intstr.FromInt32(HealthPort)}}, PeriodSeconds: 2, TimeoutSeconds: 3, FailureThreshold: 30}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func ptr[T any](v T) *T { return &v }

// validateList checks a comma-separated list of ports or CIDRs.
func validateList(ann, v string) error {
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if strings.Contains(ann, "cidrs") {
			if _, err := netip.ParsePrefix(item); err != nil {
				return fmt.Errorf("webhook: annotation %s: %q is not a CIDR", ann, item)
			}
			continue
		}
		if p, err := strconv.Atoi(item); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("webhook: annotation %s: %q is not a port", ann, item)
		}
	}
	return nil
}

func volumes(cfg Config) []corev1.Volume {
	expiry := int64(43200)
	dir := corev1.HostPathDirectory
	vols := []corev1.Volume{
		// Mode 0644: the sidecar re-reads the rotated token as ProxyUID
		// (the kubelet would make it 0600 for the pod's uid when all
		// containers share one); only the sidecar container mounts it.
		{Name: TokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr(int32(0o644)), Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: TokenAudience, ExpirationSeconds: &expiry, Path: "meshlet-token"}}}}}},
		{Name: RootCAVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cfg.RootCAConfigMap}}}},
		{Name: CgroupVolume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs/cgroup", Type: &dir}}},
	}
	if cfg.IdentityCSIDriver != "" {
		vols = append(vols, corev1.Volume{Name: IdentityVolume, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver: cfg.IdentityCSIDriver, ReadOnly: ptr(true),
			VolumeAttributes: map[string]string{csiSPIFFEFSGroup: strconv.FormatInt(cfg.ProxyUID, 10)}}}})
	}
	return vols
}

// csiSPIFFEFSGroup is csi-driver-spiffe's volume attribute that sets the
// group of the files it writes.
const csiSPIFFEFSGroup = "spiffe.csi.cert-manager.io/fs-group"

// appProber is what the sidecar needs to run an app's probe itself.
type appProber struct {
	HTTPGet   *corev1.HTTPGetAction   `json:"httpGet,omitempty"`
	TCPSocket *corev1.TCPSocketAction `json:"tcpSocket,omitempty"`
	GRPC      *corev1.GRPCAction      `json:"grpc,omitempty"`
	Timeout   int32                   `json:"timeoutSeconds,omitempty"`
}

// rewriteProbes points the app containers' HTTP, TCP and gRPC probes at the
// sidecar's health port (/app-health/<container>/<kind>), which runs the
// original probe against the app on loopback: the kubelet's plaintext
// probes would otherwise meet STRICT mTLS. It returns the original probes
// as JSON for the sidecar (path -> prober), or "" when there are none.
func rewriteProbes(pod *corev1.Pod) (string, error) {
	probers := map[string]appProber{}
	for ci := range pod.Spec.Containers {
		c := &pod.Spec.Containers[ci]
		for _, p := range []struct {
			kind  string
			probe *corev1.Probe
		}{{"livez", c.LivenessProbe}, {"readyz", c.ReadinessProbe}, {"startupz", c.StartupProbe}} {
			if p.probe == nil || p.probe.Exec != nil {
				continue // exec probes run inside the app container
			}
			path := AppHealthPrefix + c.Name + "/" + p.kind
			ap := appProber{Timeout: p.probe.TimeoutSeconds}
			switch {
			case p.probe.HTTPGet != nil:
				h := p.probe.HTTPGet.DeepCopy()
				port, err := resolvePort(c, h.Port)
				if err != nil {
					return "", fmt.Errorf("webhook: container %q %s probe: %w", c.Name, p.kind, err)
				}
				h.Port = intstr.FromInt32(port)
				ap.HTTPGet = h
			case p.probe.TCPSocket != nil:
				t := p.probe.TCPSocket.DeepCopy()
				port, err := resolvePort(c, t.Port)
				if err != nil {
					return "", fmt.Errorf("webhook: container %q %s probe: %w", c.Name, p.kind, err)
				}
				t.Port = intstr.FromInt32(port)
				ap.TCPSocket = t
			case p.probe.GRPC != nil:
				ap.GRPC = p.probe.GRPC.DeepCopy()
			default:
				continue
			}
			probers[path] = ap
			p.probe.ProbeHandler = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(HealthPort), Scheme: corev1.URISchemeHTTP}}
		}
	}
	if len(probers) == 0 {
		return "", nil
	}
	b, err := json.Marshal(probers)
	return string(b), err
}

// resolvePort turns a named port into its number.
func resolvePort(c *corev1.Container, p intstr.IntOrString) (int32, error) {
	if p.Type == intstr.Int {
		return p.IntVal, nil
	}
	i := slices.IndexFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.StrVal })
	if i < 0 {
		return 0, fmt.Errorf("named port %q not declared by the container", p.StrVal)
	}
	return c.Ports[i].ContainerPort, nil
}

// canonicalService is the pod's service as Istio names it for telemetry
// (service.istio.io/canonical-name, else app.kubernetes.io/name, else
// app, else the pod's name without its generated suffixes); the sidecar
// adds its namespace for the spans' service.name.
func canonicalService(pod *corev1.Pod) string {
	name := ""
	for _, l := range []string{"service.istio.io/canonical-name", "app.kubernetes.io/name", "app"} {
		if name = pod.Labels[l]; name != "" {
			break
		}
	}
	if name == "" {
		// A Deployment's pods are named <deployment>-<pod-template-hash>-<random>.
		name = strings.TrimSuffix(pod.GenerateName, "-")
		if h := pod.Labels["pod-template-hash"]; h != "" {
			name = strings.TrimSuffix(name, "-"+h)
		}
	}
	if name == "" {
		name = pod.Name
	}
	return name
}
