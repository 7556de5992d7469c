package cli

import (
	"cmp"
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet-dev/meshlet/internal/clustercheck"
	"github.com/meshlet-dev/meshlet/internal/preflight"
	"github.com/meshlet-dev/meshlet/webhook"
)

func checkFlags(fs *flag.FlagSet, _ func(string) string) func(io.Writer) error {
	var kf kubeFlags
	kf.register(fs)
	o := clustercheck.Options{Namespace: "meshlet-system", Name: "meshlet-injector"}
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "the control plane's `NAMESPACE`.")
	probeNS := fs.String("probe-namespace", "", "the `NAMESPACE` the probe pods run in: one whose PodSecurity admits a root pod with BPF and NET_ADMIN. Empty: -namespace (which must exist: before an install, name another).")
	fs.BoolVar(&o.Installed, "installed", false, "fail unless the control plane is installed and ready (after helm install), and check that the webhook injects a dry-run pod; the right to install is then not checked.")
	fs.StringVar(&o.ReleaseNamespace, "release-namespace", "default", "the `NAMESPACE` helm install runs in (helm -n), where Helm keeps the release's Secret.")
	webhookNS := fs.String("webhook-namespace", "default", "the `NAMESPACE` of -installed's dry-run pod (labelled meshlet.io/inject=true; nothing is created).")
	probe := fs.Bool("probe", false, "run the sidecar image's own check (eBPF programs, cgroup v2, kernel) in a short-lived pod on every node.")
	po := clustercheck.ProbeOptions{PullPolicy: corev1.PullIfNotPresent, Timeout: 2 * time.Minute}
	fs.StringVar(&po.Image, "probe-image", "", "the sidecar `IMAGE` the probe pods run. Empty: with -installed, the image the webhook injects into the dry-run pod, else "+webhook.DefaultImage+".")
	fs.StringVar((*string)(&po.PullPolicy), "probe-pull-policy", string(po.PullPolicy), "the probe pods' imagePullPolicy `POLICY`.")
	fs.DurationVar(&po.Timeout, "probe-timeout", po.Timeout, "how long each probe pod may take, its image pull included (`DURATION`).")
	return func(out io.Writer) error {
		k, err := kf.connect()
		if err != nil {
			return err
		}
		// An interrupt cancels the checks; the probe pods are removed still.
		sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithTimeout(sig, time.Minute+po.Timeout)
		defer cancel()
		results := clustercheck.Run(ctx, k.client, o)
		injected := ""
		if o.Installed {
			var r preflight.Result
			r, injected = clustercheck.WebhookReach(ctx, k.client, *webhookNS)
			results = append(results, r)
		}
		if *probe {
			// The image the cluster's sidecars run, unless told otherwise.
			po.Image = cmp.Or(po.Image, injected, webhook.DefaultImage)
			po.Namespace = cmp.Or(*probeNS, o.Namespace)
			results = append(results, clustercheck.NodeProbes(ctx, k.client, po)...)
		}
		return preflight.Report(out, results)
	}
}
