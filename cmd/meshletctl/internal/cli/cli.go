// Package cli is meshletctl's command line: proxy-status, proxy-config,
// check and inject, each reaching its cluster through client-go (a
// kubeconfig, the API server's port-forward to a sidecar's admin port or
// the control plane's monitoring port).
package cli

//go:generate go test -trimpath -tags grpcnotrace -run ^TestCLIReference$ . -update

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
)

// Run runs the command line args (without the binary's name), reading
// stdin for "inject -f -" and writing results and -help's usage to out.
func Run(args []string, stdin io.Reader, out io.Writer) error {
	return Program(stdin).Main(args, out)
}

// Program is meshletctl's command line; inject reads "-f -" from stdin.
func Program(stdin io.Reader) *cmdline.Program {
	pc := func(what, doc string, extra func(fs *flag.FlagSet, o *proxyConfigOptions)) *cmdline.Command {
		return &cmdline.Command{Name: "proxy-config " + what, Args: "POD[.NAMESPACE]",
			Summary: "a sidecar's " + cmp.Or(map[string]string{"log": "log level", "secrets": "certificates"}[what], what) + " (its admin port, through the API server)", Doc: doc,
			Flags: func(fs *flag.FlagSet, _ func(string) string) func(io.Writer) error {
				return proxyConfigFlags(fs, what, extra)
			}}
	}
	return &cmdline.Program{
		Name: "meshletctl",
		Doc:  "meshlet's operator CLI: sidecars' sync state and configuration, cluster preflight, manifest injection.",
		Commands: []*cmdline.Command{
			{Name: "proxy-status", Flags: proxyStatusFlags,
				Summary: "every sidecar the control plane serves, and whether its xDS is in sync",
				Doc: `Lists every sidecar stream of every control-plane pod (read from their
/debug/syncz on the loopback debug port 8080, through the API server's
port-forward), one row per sidecar (NAME is POD.NAMESPACE): the sync
state of each resource type (SYNCED: the last version sent was
acknowledged; STALE: sent, not yet acknowledged; NACKED: rejected; NOT
SENT: asked for, nothing sent yet; -: not asked for, as LDS: the
sidecar's listeners are its own), the control-plane pod, its version, and
the last rejection. Running pods that carry the sidecar but have no
stream are NOT CONNECTED (UNKNOWN when a control-plane pod could not be
read). Fails if a control-plane pod could not be read.`},
			pc("clusters", `Lists the sidecar's clusters (its /config_dump): name, protocol, load
balancer, endpoint count, priorities and circuit-breaker thresholds.`, nil),
			pc("endpoints", `Lists the sidecar's endpoints as its load balancer sees them (its
/clusters): address, health, cluster, locality (region/zone), priority
and weight, with each cluster's zone-routing state and priority load.`,
				func(fs *flag.FlagSet, o *proxyConfigOptions) {
					fs.StringVar(&o.cluster, "cluster", "", "only the cluster `NAME`.")
				}),
			pc("routes", `Lists the sidecar's routes (its /config_dump): listener, route name,
hosts, the route configuration it follows, and its cluster.`, nil),
			pc("listeners", `Lists the sidecar's listeners (its /config_dump): name, address,
direction, protocol and inbound mTLS mode.`, nil),
			pc("secrets", `Lists the sidecar's certificates (its /certs): the workload
certificate's chain delivered over SDS and the trust domains' roots, with
serial number, SPIFFE ID and validity.`, nil),
			pc("log", `Prints the sidecar's log level, or sets it with -level (its /logging).`,
				func(fs *flag.FlagSet, o *proxyConfigOptions) {
					fs.StringVar(&o.level, "level", "", "set the log `LEVEL`: debug, info, warn or error. Empty: print it.")
				}),
			{Name: "check", Flags: checkFlags,
				Summary: "check a cluster for meshlet, before or after helm install",
				Doc: `Checks the cluster for meshlet: the Kubernetes release (1.29 or later
for native sidecars), every node's Linux release and zone label, whether
the caller may create what the chart installs (before the install), and
whether the control plane is installed and ready (a failure with
-installed). With -probe, a short-lived pod on each node runs the
sidecar image's own check there (the kernel's eBPF programs loaded as
the sidecar loads them, cgroup v2). With -installed, a dry-run Pod in a
namespace labelled for injection shows whether the API server reaches
the webhook and the webhook injects. Prints one line per check and
fails if one failed.`},
			{Name: "inject", Flags: func(fs *flag.FlagSet, getenv func(string) string) func(io.Writer) error {
				return injectFlags(fs, getenv, stdin)
			},
				Summary: "print a manifest with the sidecar injected, as admission would store it",
				Doc: `Prints the manifest of -f with the meshlet sidecar injected into its Pods
and the pod templates of Deployments, StatefulSets, DaemonSets,
ReplicaSets, Jobs and CronJobs, as admission would store them (like
istioctl kube-inject); other objects, and pods that opt out, pass
unchanged.`},
		},
	}
}

// kubeFlags are the flags every cluster command takes.
type kubeFlags struct{ kubeconfig, context string }

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig `FILE`. Empty: $KUBECONFIG, else ~/.kube/config.")
	fs.StringVar(&k.context, "context", "", "the kubeconfig's `CONTEXT`. Empty: its current context.")
}

// kube is a cluster's client and config.
type kube struct {
	cfg       *rest.Config
	client    kubernetes.Interface
	namespace string // the kubeconfig context's namespace
}

func (k *kubeFlags) connect() (*kube, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k.kubeconfig != "" {
		rules.ExplicitPath = k.kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	cfg.Timeout = 30 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &kube{cfg: cfg, client: client, namespace: ns}, nil
}

// podArg splits POD[.NAMESPACE] at the last dot (namespaces have none;
// pod names may). With -n (namespace), a trailing ".NAMESPACE" equal to
// it is dropped and anything else is the pod's whole name; without, the
// kubeconfig context's namespace def applies to a name without a dot.
func podArg(arg, namespace, def string) (string, string) {
	if namespace != "" {
		return strings.TrimSuffix(arg, "."+namespace), namespace
	}
	if i := strings.LastIndexByte(arg, '.'); i > 0 && i < len(arg)-1 {
		return arg[:i], arg[i+1:]
	}
	return arg, def
}

// positional takes the one positional argument of fs, parsing the flags
// that follow it (meshletctl proxy-config endpoints POD -cluster X).
func positional(fs *flag.FlagSet, what string) (string, error) {
	if fs.NArg() == 0 {
		return "", cmdline.Usagef("need %s", what)
	}
	arg := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); errors.Is(err, flag.ErrHelp) {
		return "", err // the command's help
	} else if err != nil {
		return "", cmdline.Usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return "", cmdline.Usagef("unexpected argument %q", fs.Arg(0))
	}
	return arg, nil
}

// table writes rows under a header, columns padded to their widest cell
// (text/tabwriter, two spaces between columns).
func table(out io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, r := range append([][]string{header}, rows...) {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// dash is "-" for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
