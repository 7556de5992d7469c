// Package webhook is meshlet's sidecar injection: AdmissionReview v1 in,
// JSONPatch out. It decides whether a pod is meshed (namespace label,
// pod label override, never host-network pods or system namespaces),
// adds the sidecar (a native sidecar by default, a classic container on
// clusters older than 1.29), rewrites the app's probes to the sidecar's
// health port, and records what it did in an annotation so a second
// admission yields the same pod.
package webhook

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/meshlet-dev/meshlet/internal/preflight"
)

// Labels and annotations operators set or read.
const (
	// NamespaceLabel enables injection for a namespace ("enabled").
	NamespaceLabel = "meshlet.io/injection"
	// PodLabel overrides the namespace: "true" or "false".
	PodLabel = "meshlet.io/inject"
	// StatusAnnotation records what was injected (JSON).
	StatusAnnotation = "meshlet.io/status"
	// ModeAnnotation forces "native" or "classic" sidecar mode.
	ModeAnnotation = "meshlet.io/sidecar-mode"
	// ImageAnnotation overrides the sidecar image.
	ImageAnnotation = "meshlet.io/proxy-image"
	// CPU / memory request and limit overrides.
	CPURequestAnnotation    = "meshlet.io/proxy-cpu"
	MemoryRequestAnnotation = "meshlet.io/proxy-memory"
	CPULimitAnnotation      = "meshlet.io/proxy-cpu-limit"
	MemoryLimitAnnotation   = "meshlet.io/proxy-memory-limit"
	// Traffic exclusions passed to the sidecar's eBPF redirect.
	ExcludeInboundPortsAnnotation  = "meshlet.io/exclude-inbound-ports"
	ExcludeOutboundPortsAnnotation = "meshlet.io/exclude-outbound-ports"
	ExcludeOutboundCIDRsAnnotation = "meshlet.io/exclude-outbound-cidrs"
	// AccelerateAnnotation "true" turns the sk_msg loopback acceleration on
	// for the pod (MESHLET_ACCELERATE); off by default, since an app that
	// reads a loopback socket with splice(2) would not see accelerated bytes.
	AccelerateAnnotation = "meshlet.io/accelerate"
	// MTLSModeAnnotation sets the pod's inbound mTLS mode: "STRICT" or
	// "PERMISSIVE" (the default, as Istio's PeerAuthentication).
	MTLSModeAnnotation = "meshlet.io/mtls-mode"
	// ConcurrencyAnnotation sets the sidecar's worker count (Istio's
	// proxy.istio.io/config concurrency); "0" means one per usable CPU.
	ConcurrencyAnnotation = "meshlet.io/concurrency"
	// RewriteProbesAnnotation "false" keeps the app's probes as they are.
	RewriteProbesAnnotation = "meshlet.io/rewrite-app-probes"
	// TraceSamplingAnnotation sets the percentage of the pod's requests
	// without a caller's decision that are traced, 0 to 100 (Istio's
	// proxy.istio.io/config tracing.sampling); the mesh-wide default is
	// Config.TraceSampling.
	TraceSamplingAnnotation = "meshlet.io/trace-sampling"
)

// The annotations Prometheus's usual pod discovery (the kubernetes-pods job
// of its example configuration and of the prometheus-community chart)
// scrapes by. Istio's injector sets them too, at its agent's port 15020,
// which merges the app's metrics in; meshlet merges nothing, so it points
// them at the sidecar's own metrics and leaves an app's own alone.
const (
	PrometheusScrapeAnnotation = "prometheus.io/scrape"
	PrometheusPortAnnotation   = "prometheus.io/port"
	PrometheusPathAnnotation   = "prometheus.io/path"
	// MetricsPort and MetricsPath are where the sidecar serves its
	// Prometheus metrics (Envoy's port and path).
	MetricsPort = 15090
	MetricsPath = "/stats/prometheus"
)

// ZoneLabel and RegionLabel are the well-known topology labels, which
// Kubernetes 1.35 and later copy from the node onto a pod as it is bound
// (PodTopologyLabelsAdmission); the sidecar reads its locality from them.
const (
	ZoneLabel   = "topology.kubernetes.io/zone"
	RegionLabel = "topology.kubernetes.io/region"
)

// Names of what the injector adds.
const (
	ProxyContainer = "meshlet-proxy"
	TokenVolume    = "meshlet-token"
	RootCAVolume   = "meshlet-root-ca"
	CgroupVolume   = "meshlet-host-cgroup"
	// IdentityVolume and IdentityPath are the csi-driver-spiffe volume of
	// Config.IdentityCSIDriver and where the sidecar reads it.
	IdentityVolume  = "meshlet-identity"
	IdentityPath    = "/var/run/secrets/meshlet/identity"
	TokenAudience   = "meshlet"
	TokenPath       = "/var/run/secrets/meshlet/tokens"
	RootCAPath      = "/var/run/secrets/meshlet/root-ca"
	HostCgroupPath  = "/host/sys/fs/cgroup"
	ProbersEnv      = "MESHLET_APP_PROBERS"
	HealthPort      = 15021
	AppHealthPrefix = "/app-health/"
	DefaultRootCACM = "meshlet-root-ca"
	DefaultProxyUID = 1337
	// DefaultConcurrency is the sidecar's default worker count (Istio's).
	DefaultConcurrency = 2
	DefaultImage       = "ghcr.io/meshlet-dev/sidecar:latest"
)

// nativeMinorFirst is the first Kubernetes 1.N whose pods get a native
// sidecar: the release meshletctl check checks for.
var nativeMinorFirst = preflight.MustVersion(preflight.NativeSidecarKubernetes).Minor

// systemNamespaces are never injected.
var systemNamespaces = map[string]bool{"kube-system": true, "kube-public": true, "kube-node-lease": true, "meshlet-system": true}

// Config is the injector's configuration of the sidecar it adds.
type Config struct {
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// Resources of the sidecar container.
	Resources corev1.ResourceRequirements
	// ProxyUID is the uid the redirect exempts as a second guard (the
	// sidecar's own cgroup is the first).
	ProxyUID int64
	// RootCAConfigMap holds the mesh root certificate.
	RootCAConfigMap string
	// ControlPlane is the SDS / xDS address the sidecar dials.
	ControlPlane string
	// TrustDomain of the mesh's SPIFFE IDs.
	TrustDomain string
	// ServerMinor is the API server's minor version (1.<minor>); 0 means
	// unknown (native sidecars assumed).
	ServerMinor int
	// DrainSeconds is how long the sidecar drains on stop.
	DrainSeconds int64
	// Concurrency is the sidecar's worker count at most (MESHLET_CONCURRENCY;
	// a CPU limit lowers it further); 0 means one per usable CPU, which
	// without a CPU limit is every CPU of the node. Default 2, Istio's.
	Concurrency int
	// MTLSMode is the inbound mTLS mode (MESHLET_MTLS_MODE) of a pod that
	// has no MTLSModeAnnotation: "STRICT" or "PERMISSIVE"; empty leaves it
	// to the sidecar, whose default is PERMISSIVE. The mesh-wide default an
	// operator sets (injector serve -mtls-mode, the chart's mesh.mtlsMode).
	MTLSMode string
	// TracingEndpoint is the OTLP/gRPC collector (host:port) sidecars send
	// spans to; empty: no tracing. TraceSampling is the mesh-wide
	// sampling percentage (Istio's default 1).
	TracingEndpoint string
	TraceSampling   float64
	// IdentityCSIDriver, when set, is the name of a cert-manager
	// csi-driver-spiffe CSI driver (spiffe.csi.cert-manager.io) that gives
	// each pod its SPIFFE certificate, key and trust bundle as files
	// (tls.crt, tls.key, ca.crt); the sidecar then reads them
	// (sidecar run -identity-dir) instead of asking the control plane's CA
	// over SDS. The volume asks for the files' group to be ProxyUID's, so
	// that the sidecar, which drops root, reads the rotated ones.
	IdentityCSIDriver string
	// PrometheusAnnotations adds the prometheus.io scrape annotations,
	// pointed at the sidecar's metrics, to pods that carry none of their
	// own (an app's own are left alone: its scrape keeps working, and the
	// sidecar's metrics are then a PodMonitor's). Default true, as Istio's
	// injector annotates pods by default.
	PrometheusAnnotations bool
}

// DefaultConfig returns the injector defaults.
func DefaultConfig() Config {
	return Config{
		Image: DefaultImage, ImagePullPolicy: corev1.PullIfNotPresent, ProxyUID: DefaultProxyUID,
		RootCAConfigMap: DefaultRootCACM, ControlPlane: "meshlet-injector.meshlet-system.svc:15012", TrustDomain: "cluster.local",
		DrainSeconds: 5, Concurrency: DefaultConcurrency, TraceSampling: 1, PrometheusAnnotations: true,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Image == "":
		return fmt.Errorf("webhook: config image: empty")
	case c.ProxyUID <= 0:
		return fmt.Errorf("webhook: config proxy_uid: %d must be > 0", c.ProxyUID)
	case c.Concurrency < 0:
		return fmt.Errorf("webhook: config concurrency: %d must be >= 0", c.Concurrency)
	case c.RootCAConfigMap == "":
		return fmt.Errorf("webhook: config root_ca_configmap: empty")
	case strings.TrimSpace(c.TrustDomain) == "":
		return fmt.Errorf("webhook: config trust_domain: empty")
	case c.MTLSMode != "" && c.MTLSMode != "STRICT" && c.MTLSMode != "PERMISSIVE":
		return fmt.Errorf("webhook: config mtls_mode: %q (want STRICT or PERMISSIVE)", c.MTLSMode)
	case !(c.TraceSampling >= 0 && c.TraceSampling <= 100):
		return fmt.Errorf("webhook: config trace_sampling: %v (want a percentage from 0 to 100)", c.TraceSampling)
	case c.TracingEndpoint != "" && !validHostPort(c.TracingEndpoint):
		return fmt.Errorf("webhook: config tracing_endpoint: %q (want host:port of an OTLP/gRPC collector)", c.TracingEndpoint)
	case c.IdentityCSIDriver != "" && !csiDriverName.MatchString(c.IdentityCSIDriver):
		return fmt.Errorf("webhook: config identity_csi_driver: %q (want a CSI driver name, such as spiffe.csi.cert-manager.io)", c.IdentityCSIDriver)
	}
	return nil
}

// csiDriverName is what Kubernetes accepts as a CSI driver's name: at most
// 63 characters, alphanumerics with dashes and dots between.
var csiDriverName = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9.-]{0,61}[a-zA-Z0-9])?$`)

func validHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && p > 0
}
