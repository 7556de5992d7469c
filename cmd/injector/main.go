// Command injector is meshlet's control plane: `injector serve` runs the
// injection webhook, the mesh CA with SDS, xDS discovery and metrics
// (package injector). The operator's commands (inject -f, check,
// proxy-status) are meshletctl's. Its flags are listed in
// docs/reference/cli.md, generated from the FlagSets (TestCLIReference).
package main

//go:generate go test -trimpath -tags grpcnotrace -run ^TestCLIReference$ . -update

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
	"github.com/meshlet-dev/meshlet/injector"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "injector:", err)
		os.Exit(2)
	}
}

// program is the injector binary's command line.
func program(io.Reader) *cmdline.Program {
	return &cmdline.Program{
		Name: "injector",
		Doc:  "meshlet's control plane: the injection webhook, the mesh CA with SDS, xDS discovery (operator commands: meshletctl).",
		Commands: []*cmdline.Command{
			{Name: "serve", Flags: serveFlags,
				Summary: "run the control plane (in-cluster config unless -kubeconfig)",
				Doc: `Runs the control plane: loads the mesh CA from the meshlet-ca Secret or
creates it there once; serves the injection webhook with a certificate the
CA issues; keeps the webhook configuration's caBundle and every
namespace's meshlet-root-ca ConfigMap equal to the CA root; serves SDS and
xDS on one TLS gRPC port, authenticating each stream's ServiceAccount
token with a TokenReview; and exposes Prometheus metrics. SIGTERM or an
interrupt stops it.`},
		},
	}
}

// run runs the command line args (without the binary's name), writing
// -help's usage to out.
func run(args []string, stdin io.Reader, out io.Writer) error {
	return program(stdin).Main(args, out)
}

func serveFlags(fs *flag.FlagSet, _ func(string) string) func(io.Writer) error {
	opts := injector.DefaultOptions()
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `FILE` to reach the API server with. Empty: the in-cluster config (the pod's ServiceAccount).")
	fs.StringVar(&opts.Namespace, "namespace", opts.Namespace, "the control plane's `NAMESPACE`: where the meshlet-ca Secret lives, and the namespace of the Service injected sidecars dial by default (see -control-plane).")
	fs.StringVar(&opts.TrustDomain, "trust-domain", opts.TrustDomain, "SPIFFE trust `DOMAIN` of the mesh's identities (spiffe://DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT), also given to injected sidecars as MESHLET_TRUST_DOMAIN.")
	fs.DurationVar(&opts.CertTTL, "workload-cert-ttl", opts.CertTTL, "lifetime `TTL` of the workload certificates the CA issues over SDS; sidecars renew them before they expire. 0: 24h.")
	fs.StringVar(&opts.Sidecar.Image, "image", opts.Sidecar.Image, "sidecar `IMAGE` to inject; a pod's meshlet.io/proxy-image annotation overrides it.")
	fs.StringVar((*string)(&opts.Sidecar.ImagePullPolicy), "image-pull-policy", string(opts.Sidecar.ImagePullPolicy), "the injected sidecar's imagePullPolicy `POLICY`: Always, IfNotPresent or Never.")
	fs.IntVar(&opts.Sidecar.Concurrency, "concurrency", opts.Sidecar.Concurrency, "run at most `N` workers in each injected sidecar (its MESHLET_CONCURRENCY, sidecar run -concurrency), fewer where its CPU limit allows fewer; 0: one per usable CPU, which without a CPU limit is every CPU of the node. A pod's meshlet.io/concurrency annotation overrides it.")
	fs.StringVar(&opts.WebhookAddr, "webhook-addr", opts.WebhookAddr, "listen `ADDR` of the injection webhook (HTTPS).")
	fs.StringVar(&opts.GRPCAddr, "grpc-addr", opts.GRPCAddr, "listen `ADDR` of SDS and xDS (gRPC over TLS, one port).")
	fs.StringVar(&opts.MonitoringAddr, "monitoring-addr", opts.MonitoringAddr, "listen `ADDR` of the Prometheus metrics (/metrics) and the readiness probe (/ready).")
	fs.StringVar(&opts.DebugAddr, "debug-addr", opts.DebugAddr, "listen `ADDR` of the debug endpoints (/debug/syncz, every sidecar's xDS state, which meshletctl proxy-status reads through a port-forward); keep it on loopback: it names every sidecar and its identity. Empty: none.")
	fs.StringVar(&opts.Sidecar.MTLSMode, "mtls-mode", opts.Sidecar.MTLSMode, "the inbound mTLS `MODE` of injected sidecars (their MESHLET_MTLS_MODE, and the mode of workloads no PeerAuthentication sets): STRICT or PERMISSIVE. A PeerAuthentication, then a pod's meshlet.io/mtls-mode annotation, overrides it. Empty: PERMISSIVE.")
	fs.StringVar(&opts.Sidecar.TracingEndpoint, "tracing-endpoint", opts.Sidecar.TracingEndpoint, "the OTLP/gRPC collector `HOST:PORT` injected sidecars send spans to (their MESHLET_TRACING_ENDPOINT), in plaintext. Empty: no tracing (trace headers pass through untouched).")
	fs.Float64Var(&opts.Sidecar.TraceSampling, "trace-sampling", opts.Sidecar.TraceSampling, "the `PERCENT` (0-100) of requests without a caller's sampling decision that injected sidecars trace; a pod's meshlet.io/trace-sampling annotation overrides it. Istio's default, 1.")
	fs.StringVar(&opts.Sidecar.IdentityCSIDriver, "identity-csi-driver", opts.Sidecar.IdentityCSIDriver, "the `DRIVER` name of a cert-manager csi-driver-spiffe (spiffe.csi.cert-manager.io) that gives every injected pod its SPIFFE certificate, key and trust bundle as files, which its sidecar reads (sidecar run -identity-dir, the files' ID checked against the pod's) instead of the control plane's CA over SDS. Every meshed pod must then take its identity from that driver, whose trust domain must be -trust-domain and whose CA bundle the driver must write (its --source-ca-bundle) under its default file names; meshed workloads must be restarted after a change (docs/reference/sidecar.md). Empty: SDS.")
	fs.BoolVar(&opts.Sidecar.PrometheusAnnotations, "prometheus-annotations", opts.Sidecar.PrometheusAnnotations, "add prometheus.io/scrape, /port and /path annotations for the sidecar's metrics (:15090/stats/prometheus) to injected pods that carry no prometheus.io annotation of their own, for a Prometheus that discovers pods by them (a pod's own annotations are kept: meshlet merges no app metrics into the sidecar's, as Istio's port 15020 does).")
	fs.StringVar(&opts.RootNamespace, "root-namespace", opts.RootNamespace, "the `NAMESPACE` whose PeerAuthentications and AuthorizationPolicies without a selector apply to the whole mesh, as Istio's root namespace. Empty: istio-system.")
	// The injected container's resources, one flag per quantity as the
	// pod annotations that override them (meshlet.io/proxy-cpu, ...).
	res := map[string]*string{}
	for _, r := range proxyResources {
		v := ""
		if q, ok := (*r.list(&opts.Sidecar.Resources))[r.name]; ok {
			v = q.String()
		}
		res[r.flag] = fs.String(r.flag, v, r.usage)
	}
	fs.DurationVar(&opts.ShutdownDelay, "shutdown-delay", opts.ShutdownDelay, "on SIGTERM, go on serving the webhook, SDS and xDS for `DURATION` before stopping, each webhook answer closing its connection, so that the Service's endpoints (kube-proxy) stop sending new connections first: a rollout of the Deployment then fails no admission. The pod's terminationGracePeriodSeconds must be longer.")
	controlPlane := fs.String("control-plane", "", "the SDS and xDS address `HOST:PORT` injected sidecars dial. Empty: the Service, meshlet-injector.NAMESPACE.svc with the -grpc-addr port; an IP where pods have no cluster DNS.")
	extraHosts := fs.String("extra-hosts", "", "`HOSTS`, comma-separated names and IPs, added to the control plane's serving certificate; the Service's names are always in it.")
	return func(io.Writer) error {
		for _, r := range proxyResources {
			if err := setResource(&opts.Sidecar.Resources, r, *res[r.flag]); err != nil {
				return err
			}
		}
		return startServe(opts, *kubeconfig, *controlPlane, *extraHosts)
	}
}

// startServe is serve; TestChartArgs replaces it to see the options the
// chart's args give, without a cluster.
var startServe = serve

// proxyResource is one of the injected container's resource quantities
// and the serve flag that sets it.
type proxyResource struct {
	flag  string
	name  corev1.ResourceName
	list  func(*corev1.ResourceRequirements) *corev1.ResourceList
	usage string
}

var proxyResources = []proxyResource{
	{"proxy-cpu", corev1.ResourceCPU, func(r *corev1.ResourceRequirements) *corev1.ResourceList { return &r.Requests },
		"CPU request `QUANTITY` of injected sidecars; a pod's meshlet.io/proxy-cpu annotation overrides it. Empty: none."},
	{"proxy-memory", corev1.ResourceMemory, func(r *corev1.ResourceRequirements) *corev1.ResourceList { return &r.Requests },
		"memory request `QUANTITY` of injected sidecars; a pod's meshlet.io/proxy-memory annotation overrides it. Empty: none."},
	{"proxy-cpu-limit", corev1.ResourceCPU, func(r *corev1.ResourceRequirements) *corev1.ResourceList { return &r.Limits },
		"CPU limit `QUANTITY` of injected sidecars (which also lowers their worker count); a pod's meshlet.io/proxy-cpu-limit annotation overrides it. Empty: none."},
	{"proxy-memory-limit", corev1.ResourceMemory, func(r *corev1.ResourceRequirements) *corev1.ResourceList { return &r.Limits },
		"memory limit `QUANTITY` of injected sidecars; a pod's meshlet.io/proxy-memory-limit annotation overrides it. Empty: none."},
}

// setResource sets (or, for an empty value, removes) r's quantity in res.
func setResource(res *corev1.ResourceRequirements, r proxyResource, value string) error {
	list := r.list(res)
	if strings.TrimSpace(value) == "" {
		delete(*list, r.name)
		return nil
	}
	q, err := resource.ParseQuantity(strings.TrimSpace(value))
	if err != nil {
		return cmdline.Usagef("-%s %q: %v", r.flag, value, err)
	}
	if *list == nil {
		*list = corev1.ResourceList{}
	}
	(*list)[r.name] = q
	return nil
}

func serve(opts injector.Options, kubeconfig, controlPlane, extraHosts string) error {
	if controlPlane != "" {
		if _, _, err := net.SplitHostPort(controlPlane); err != nil {
			return cmdline.Usagef("-control-plane %q: want HOST:PORT: %v", controlPlane, err)
		}
		opts.Sidecar.ControlPlane, opts.ControlPlaneService = controlPlane, ""
	}
	for _, h := range strings.Split(extraHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			opts.Hosts = append(opts.Hosts, h)
		}
	}
	opts.Sidecar.MTLSMode = strings.ToUpper(strings.TrimSpace(opts.Sidecar.MTLSMode))
	if m := opts.Sidecar.MTLSMode; m != "" && m != "STRICT" && m != "PERMISSIVE" {
		return cmdline.Usagef("-mtls-mode %q: want STRICT or PERMISSIVE", m)
	}
	if s := opts.Sidecar.TraceSampling; !(s >= 0 && s <= 100) {
		return cmdline.Usagef("-trace-sampling %v: want a percentage from 0 to 100", s)
	}
	if ep := opts.Sidecar.TracingEndpoint; ep != "" {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return cmdline.Usagef("-tracing-endpoint %q: want HOST:PORT of an OTLP/gRPC collector", ep)
		}
	}
	if opts.ShutdownDelay < 0 {
		return cmdline.Usagef("-shutdown-delay %v: want 0 or more", opts.ShutdownDelay)
	}
	switch opts.Sidecar.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return cmdline.Usagef("-image-pull-policy %q: want Always, IfNotPresent or Never", opts.Sidecar.ImagePullPolicy)
	}
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("serve: kubernetes config: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if opts.Gateway, err = gatewayclient.NewForConfig(cfg); err != nil {
		return fmt.Errorf("serve: gateway api client: %w", err)
	}
	if opts.Istio, err = istioclient.NewForConfig(cfg); err != nil {
		return fmt.Errorf("serve: istio client: %w", err)
	}
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return injector.New(client, opts).Run(ctx)
}
