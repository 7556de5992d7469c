// Command injector is meshlet's control plane: `injector serve` runs the
// injection webhook, the mesh CA with SDS, xDS discovery and metrics
// (package injector); `injector inject -f manifest.yaml` prints a manifest
// as admission would store it (like `istioctl kube-inject`).
package main

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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshlet-dev/meshlet/injector"
	"github.com/meshlet-dev/meshlet/webhook"
)

const usage = `usage:
  injector serve [-kubeconfig FILE] [-namespace meshlet-system] [-trust-domain cluster.local] [-image IMAGE]
                 [-webhook-addr :9443] [-grpc-addr :15012] [-monitoring-addr :15014]
                 [-control-plane HOST:PORT] [-extra-hosts H1,H2] [-image-pull-policy IfNotPresent]
      run the control plane (in-cluster config unless -kubeconfig)
  injector inject -f manifest.yaml [-image IMAGE] [-server-minor 30]
      print the manifest with the meshlet sidecar injected into its Pods and pod templates ("-f -" reads stdin)`

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "injector:", err)
		os.Exit(2)
	}
}

func run(args []string, stdin io.Reader, out io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		return serve(args[1:])
	}
	if len(args) == 0 || args[0] != "inject" {
		return fmt.Errorf("%s", usage)
	}
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("f", "", "manifest file, or - for stdin")
	cfg := webhook.DefaultConfig()
	fs.StringVar(&cfg.Image, "image", cfg.Image, "sidecar image")
	fs.IntVar(&cfg.ServerMinor, "server-minor", 0, "Kubernetes minor version of the target cluster (below 29: classic sidecar)")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("inject: %w\n%s", err, usage)
	}
	if *file == "" {
		return fmt.Errorf("inject: need -f FILE\n%s", usage)
	}
	var data []byte
	var err error
	if *file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("inject: read %s: %w", *file, err)
	}
	res, err := webhook.InjectManifest(data, cfg)
	if err != nil {
		return err
	}
	_, err = out.Write(res)
	return err
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts := injector.DefaultOptions()
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster)")
	fs.StringVar(&opts.Namespace, "namespace", opts.Namespace, "namespace of the CA Secret")
	fs.StringVar(&opts.TrustDomain, "trust-domain", opts.TrustDomain, "SPIFFE trust domain")
	fs.DurationVar(&opts.CertTTL, "workload-cert-ttl", opts.CertTTL, "lifetime of workload certificates (0: 24h)")
	fs.StringVar(&opts.Sidecar.Image, "image", opts.Sidecar.Image, "sidecar image to inject")
	fs.IntVar(&opts.Sidecar.Concurrency, "concurrency", opts.Sidecar.Concurrency, "the sidecar's worker count at most (0: one per usable CPU); pods override it with the meshlet.io/concurrency annotation")
	fs.StringVar(&opts.WebhookAddr, "webhook-addr", opts.WebhookAddr, "webhook HTTPS listen address")
	fs.StringVar(&opts.GRPCAddr, "grpc-addr", opts.GRPCAddr, "SDS + xDS listen address")
	fs.StringVar(&opts.MonitoringAddr, "monitoring-addr", opts.MonitoringAddr, "metrics listen address")
	controlPlane := fs.String("control-plane", "", "the SDS / xDS address injected sidecars dial (default: the Service, meshlet-injector.NAMESPACE.svc and the -grpc-addr port); an IP where pods have no cluster DNS")
	extraHosts := fs.String("extra-hosts", "", "comma-separated names and IPs added to the control plane's serving certificate (the Service names are always in it)")
	pullPolicy := fs.String("image-pull-policy", string(opts.Sidecar.ImagePullPolicy), "the injected sidecar's imagePullPolicy: Always, IfNotPresent or Never")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("serve: %w\n%s", err, usage)
	}
	if *controlPlane != "" {
		if _, _, err := net.SplitHostPort(*controlPlane); err != nil {
			return fmt.Errorf("serve: -control-plane %q: want HOST:PORT: %w", *controlPlane, err)
		}
		opts.Sidecar.ControlPlane, opts.ControlPlaneService = *controlPlane, ""
	}
	for _, h := range strings.Split(*extraHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			opts.Hosts = append(opts.Hosts, h)
		}
	}
	switch p := corev1.PullPolicy(*pullPolicy); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		opts.Sidecar.ImagePullPolicy = p
	default:
		return fmt.Errorf("serve: -image-pull-policy %q: want Always, IfNotPresent or Never", *pullPolicy)
	}
	var cfg *rest.Config
	var err error
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
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
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return injector.New(client, opts).Run(ctx)
}
