package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/bpf"
	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
	"github.com/meshlet-dev/meshlet/cmd/sidecar/internal/procs"
	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane"
	"github.com/meshlet-dev/meshlet/discovery"
	sidecarexample "github.com/meshlet-dev/meshlet/examples/sidecar"
	"github.com/meshlet-dev/meshlet/mtls"
	"github.com/meshlet-dev/meshlet/mtls/svidfile"
	"github.com/meshlet-dev/meshlet/sds"
)

// runOptions are the flags of `sidecar run`.
type runOptions struct {
	config, redirect, podCgroup, logLevel string
	http1Server                           string
	xds, nodeID, xdsCA, xdsToken          string
	sds, sdsCA, sdsToken, identity        string
	identityDir, identityFiles            string
	pod, accelerate, xdsSotw              bool
	adaptiveProcs, releaseIdle            bool
	watch                                 time.Duration
	proxyUID, concurrency                 int
	envErr                                error // the first bad variable behind a default
}

// runFlags defines the flags of `sidecar run` on fs, the defaults of some
// from the environment, and returns the command.
func runFlags(fs *flag.FlagSet, getenv func(string) string) func(io.Writer) error {
	o := &runOptions{}
	envBool := func(name string, def bool) bool {
		b, err := envBool(getenv, name, def)
		o.envErr = cmp.Or(o.envErr, err)
		return b
	}
	envCount := func(name string, def int, want string) int {
		n, err := envCount(getenv, name, def, want)
		o.envErr = cmp.Or(o.envErr, err)
		return n
	}
	// Where the config comes from.
	fs.StringVar(&o.config, "config", "",
		"static config `FILE` (Envoy-style YAML), reloaded on SIGHUP and, see -watch, when it changes; an invalid file is refused and the running config kept. Empty: the embedded examples/sidecar/sidecar.yaml. Exclusive with -pod.")
	fs.BoolVar(&o.pod, "pod", false,
		"in a Kubernetes pod: build the config from the pod's environment instead of -config: outbound listener 127.0.0.1:15001, inbound :15006 with one route per app port in MESHLET_APP_PORTS, health :15021, Prometheus :15090, admin on loopback, inbound mTLS mode from MESHLET_MTLS_MODE (STRICT, or PERMISSIVE, the default). Exclusive with -config.")
	fs.DurationVar(&o.watch, "watch", 2*time.Second,
		"check the -config file for changes every `INTERVAL`; 0: reload only on SIGHUP.")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error.")
	// Control plane and identity.
	fs.StringVar(&o.xds, "xds", "",
		"ADS control plane at `HOST:PORT` to take clusters and outbound routes from, merged over the base config (a reload of the config keeps them); readiness waits for the first complete configuration. Empty: the static config alone.")
	fs.BoolVar(&o.xdsSotw, "xds-sotw", false,
		"use the state-of-the-world ADS protocol instead of delta (incremental) xDS, the default: delta brings a change to every sidecar of a large mesh sooner and costs the control plane a fraction of the CPU.")
	fs.StringVar(&o.xdsCA, "xds-ca", "",
		"PEM root `FILE` the control plane's TLS certificate must chain to. Empty: plaintext xDS, and no token is sent.")
	fs.StringVar(&o.xdsToken, "xds-token", "",
		"`FILE` holding the ServiceAccount token sent to the control plane as authorization: Bearer, re-read for each stream (a rotated token is picked up); needs -xds-ca, a token is never sent without TLS.")
	fs.StringVar(&o.nodeID, "node-id", "",
		"xDS node `ID`. Empty: $POD_NAME.$POD_NAMESPACE when POD_NAME is set, else the config's node.id.")
	fs.StringVar(&o.sds, "sds", "",
		"SDS server `ADDR` of the workload certificate and trust bundle: HOST:PORT, the control plane, over TLS against -sds-ca with the token in -sds-token; or unix:///PATH, a SPIRE agent's socket. Turns on mTLS; readiness waits for the first certificate.")
	fs.StringVar(&o.sdsCA, "sds-ca", "",
		"PEM root `FILE` of the SDS server's TLS certificate. Empty: -xds-ca.")
	fs.StringVar(&o.sdsToken, "sds-token", "",
		"`FILE` holding the ServiceAccount token sent to the SDS server. Empty: -xds-token.")
	fs.StringVar(&o.identity, "identity", "",
		"the `SPIFFE-ID` the sidecar requests by CSR from the SDS server. Empty: with -pod, spiffe://$MESHLET_TRUST_DOMAIN/ns/$POD_NAMESPACE/sa/$SERVICE_ACCOUNT (trust domain default cluster.local); with a unix:// -sds none, as a SPIRE agent delivers key and ID. With -identity-dir: the ID the files' certificate must name, a set naming another refused; empty: any.")
	fs.StringVar(&o.identityDir, "identity-dir", "",
		"`DIR` holding the workload certificate chain, private key and trust bundle as PEM files that another agent writes and rotates (SPIRE's spiffe-helper, cert-manager's csi-driver-spiffe), checked every second and installed when they change; a set that is not a valid identity is refused and the last good one kept. Turns on mTLS; readiness waits for the first good set. Exclusive with -sds.")
	fs.StringVar(&o.identityFiles, "identity-files", svidfile.DefaultCertFile+","+svidfile.DefaultKeyFile+","+svidfile.DefaultBundleFile,
		"with -identity-dir: the `CERT,KEY,BUNDLE` file names in it; the default is spiffe-helper's, tls.crt,tls.key,ca.crt is csi-driver-spiffe's.")
	// Traffic capture.
	fs.StringVar(&o.redirect, "redirect", "none",
		"traffic capture `MODE`: none, the app dials the sidecar's listeners; or ebpf, load and attach the eBPF capture (cgroup connect and sk_lookup programs) to the pod's cgroup before any listener starts, which needs CAP_BPF and CAP_NET_ADMIN (root). Exclusions come from MESHLET_EXCLUDE_INBOUND_PORTS, MESHLET_EXCLUDE_OUTBOUND_PORTS and MESHLET_EXCLUDE_OUTBOUND_CIDRS.")
	fs.StringVar(&o.podCgroup, "pod-cgroup", "",
		"with -redirect=ebpf: the pod's cgroup v2 `DIR` to attach to. Empty: $MESHLET_POD_CGROUP, else the pod's cgroup found by POD_UID under $MESHLET_HOST_CGROUP, else the parent of the sidecar's own cgroup.")
	fs.IntVar(&o.proxyUID, "proxy-uid", envCount("MESHLET_PROXY_UID", bpf.DefaultProxyUID, "0 (stay root) or a uid"),
		"with -redirect=ebpf as root: once the redirect is attached and the listeners registered, switch every thread to this `UID` (and gid) with no capability left, before dialling SDS or xDS; 0 stays root. Where the kernel (before 6.5, unless kernel.unprivileged_bpf_disabled=0) keeps the maps from an unprivileged process, the sidecar stays root with a warning. Default from $MESHLET_PROXY_UID when set.")
	fs.BoolVar(&o.accelerate, "accelerate", getenv("MESHLET_ACCELERATE") == "true",
		"with -redirect=ebpf: short-circuit the pod's loopback hops between app and sidecar with sockops + sk_msg (an app that reads a loopback socket with splice(2) does not see accelerated bytes). Default true when $MESHLET_ACCELERATE is \"true\" (the meshlet.io/accelerate annotation).")
	// Downstream HTTP/1.
	fs.StringVar(&o.http1Server, "http1-server", dataplane.HTTP1ServerMeshlet,
		"server `NAME` of plaintext downstream HTTP/1 connections: meshlet, the hand-written server, which refuses malformed requests as Envoy's HTTP/1 codec does; or net/http, Go's own server with the same routing, whose refusals are net/http's (looser), for telling whether a Go upgrade broke the hand-written server. HTTP/2 is served alike either way.")
	// Resources.
	fs.IntVar(&o.concurrency, "concurrency", envCount("MESHLET_CONCURRENCY", 0, "a worker count (0: one per usable CPU)"),
		"run at most `N` workers, fewer where the CPU limit or affinity allows fewer; 0: one per usable CPU, which without a CPU limit is every CPU of the node, each idle one costing scheduler CPU. The injector sets 2 (meshlet.io/concurrency annotation). Default from $MESHLET_CONCURRENCY when set.")
	fs.BoolVar(&o.adaptiveProcs, "adaptive-procs", envBool("MESHLET_ADAPTIVE_PROCS", false),
		"run Go on one processor until it is 80 % busy, on one per worker within 100 ms of that, and on one again after 2 s under half a CPU, so that an idle second processor is not woken to look for work; the count at start is the ceiling, also if the CPU limit is raised later. The cost: on one processor a CPU-bound moment (a config reload or xDS update, a burst of new connections or TLS handshakes) delays requests until it ends or the second processor is added. Off by default: measured at 1000 req/s it saved no CPU and raised the p99 latency (docs/performance.md). meshlet_go_processors on /stats/prometheus shows the count. false: one processor per worker. Default from $MESHLET_ADAPTIVE_PROCS when set.")
	fs.BoolVar(&o.releaseIdle, "release-memory-when-idle", envBool("MESHLET_RELEASE_MEMORY_WHEN_IDLE", true),
		"when traffic stops (the first second allocating under 32 KiB after a busy spell of 2 MiB allocated since the last release; at most one release per 10 s), return the heap's free memory to the kernel, as after configuration changes. false: do not. Default from $MESHLET_RELEASE_MEMORY_WHEN_IDLE when set.")
	return o.run
}

// run is `sidecar run` with args.
func run(args []string, out io.Writer) error { return command("run", args, out) }

// run runs the data plane from a static config file, reloaded on SIGHUP
// or when the file changes, drained on SIGTERM.
func (o *runOptions) run(out io.Writer) error {
	if o.envErr != nil {
		return o.envErr
	}
	var lv slog.LevelVar
	if err := lv.UnmarshalText([]byte(o.logLevel)); err != nil {
		return cmdline.Usagef("-log-level %q: want debug, info, warn or error", o.logLevel)
	}
	switch o.redirect {
	case "none", "ebpf":
	default:
		return cmdline.Usagef("-redirect %q: want none or ebpf", o.redirect)
	}
	if o.proxyUID < 0 || o.proxyUID > 1<<31-2 {
		return cmdline.Usagef("-proxy-uid %d: want 0 (stay root) or a uid", o.proxyUID)
	}
	switch o.http1Server {
	case dataplane.HTTP1ServerMeshlet, dataplane.HTTP1ServerNetHTTP:
	default:
		return cmdline.Usagef("-http1-server %q: want %s or %s", o.http1Server, dataplane.HTTP1ServerMeshlet, dataplane.HTTP1ServerNetHTTP)
	}
	if o.concurrency < 0 {
		return cmdline.Usagef("-concurrency %d: want a worker count (0: one per usable CPU)", o.concurrency)
	}
	if o.pod && o.config != "" {
		return cmdline.Usagef("-pod and -config are exclusive")
	}
	if o.identityDir != "" && o.sds != "" {
		return cmdline.Usagef("-identity-dir and -sds are exclusive")
	}
	var fileID spiffeid.ID // the ID the identity files must name
	if o.identityDir != "" && o.identity != "" {
		var err error
		if fileID, err = spiffeid.FromString(o.identity); err != nil {
			return cmdline.Usagef("-identity %q: %v", o.identity, err)
		}
	}
	idFiles := strings.Split(o.identityFiles, ",")
	if len(idFiles) != 3 || slices.Contains(idFiles, "") {
		return cmdline.Usagef("-identity-files %q: want CERT,KEY,BUNDLE, three file names", o.identityFiles)
	}
	workers := resolveWorkers(o.concurrency)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: &lv}))
	load := func() (*config.Config, error) {
		if o.pod {
			return podConfig(os.Getenv)
		}
		return loadConfig(o.config)
	}
	// The stamp is taken before the first read: a change written while
	// the sidecar starts is reloaded at the first tick, not missed.
	stamp := fileStamp(o.config)
	cfg, err := load()
	if err != nil {
		return err
	}
	if o.pod && cfg.Node.Locality.Zone == "" {
		// Zone-aware routing and the meshlet_zone_* counters need it.
		log.Warn("the pod has no zone: its node carries no topology.kubernetes.io/zone label, or the API server copies no topology labels to pods (PodTopologyLabelsAdmission, Kubernetes 1.35 and later); zone-aware routing treats this sidecar as zoneless")
	}
	probers, err := dataplane.ParseAppProbers(os.Getenv("MESHLET_APP_PROBERS"))
	if err != nil {
		return fmt.Errorf("run: MESHLET_APP_PROBERS: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := dataplane.Options{Logger: log, LogLevel: &lv, AppProbers: probers, StartNotReady: o.xds != "" || o.sds != "" || o.identityDir != "",
		Workers: workers, Collectors: []prometheus.Collector{goProcessors}, HTTP1Server: o.http1Server}
	gate := &readiness{}
	var sdsClient *sds.Client
	if o.xds != "" {
		gate.left++
	}
	if o.sds != "" {
		gate.left++
		d := sdsDial{target: o.sds, caFile: o.sdsCA, tokenFile: o.sdsToken}
		if d.caFile == "" {
			d.caFile = o.xdsCA
		}
		if d.tokenFile == "" {
			d.tokenFile = o.xdsToken
		}
		switch {
		case o.identity != "":
			if d.id, err = spiffeid.FromString(o.identity); err != nil {
				return cmdline.Usagef("-identity %q: %v", o.identity, err)
			}
		case o.pod && !strings.HasPrefix(d.target, "unix:"):
			if d.id, err = podIdentity(os.Getenv); err != nil {
				return err
			}
		}
		if opts.Identity, sdsClient, err = newSDS(d, log); err != nil {
			return err
		}
	}
	var idWatcher *svidfile.Watcher
	if o.identityDir != "" {
		gate.left++
		opts.Identity = mtls.NewStore()
		idWatcher, err = svidfile.New(svidfile.Config{Dir: o.identityDir, CertFile: idFiles[0], KeyFile: idFiles[1], BundleFile: idFiles[2],
			ID: fileID, Store: opts.Identity, Logger: log})
		if err != nil {
			return fmt.Errorf("run: -identity-dir: %w", err)
		}
	}
	var rd *redirect
	if o.redirect == "ebpf" {
		// Attach before any listener exists and before readiness: the
		// app's connects are captured from the first one.
		if rd, err = setupRedirect(cfg, o.podCgroup, o.accelerate, o.proxyUID); err != nil {
			return err
		}
		defer rd.close()
		opts.OriginalDst = originalDst
		opts.Accelerated = rd.objs.Accelerated
		opts.Collectors = append(opts.Collectors, redirectCollector{rd.objs})
	}
	srv, err := dataplane.New(cfg, opts)
	if err != nil {
		return err
	}
	gate.set = srv.SetReady
	if err := srv.Start(ctx); err != nil {
		return err
	}
	if opts.Identity != nil {
		go func() {
			if _, err := opts.Identity.WaitReady(ctx); err == nil {
				log.Info("workload certificate ready", "id", opts.Identity.Current().ID.String())
				gate.done()
			}
		}()
	}
	if rd != nil {
		if err := rd.registerSockets(srv); err != nil {
			srv.Shutdown()
			return err
		}
		// Everything that needed root is done: the programs are attached,
		// the listeners bound and in the maps.
		if o.proxyUID > 0 && os.Geteuid() == 0 {
			switch err := dropPrivileges(o.proxyUID, o.proxyUID, rd.probe); {
			case err == nil:
				log.Info("running unprivileged", "uid", o.proxyUID, "gid", o.proxyUID)
			case errors.Is(err, errMapsNeedPrivilege), errors.Is(err, errNoSetuid):
				log.Warn("staying root", "err", err)
			default:
				srv.Shutdown()
				return fmt.Errorf("run: %w", err)
			}
		}
	}
	if sdsClient != nil {
		go func() { _ = sdsClient.Run(ctx) }()
	}
	if idWatcher != nil {
		// After the privilege drop: the files are read as the proxy's uid.
		go func() { _ = idWatcher.Run(ctx) }()
	}
	var xsrc *xdsSource
	if o.xds != "" {
		id := o.nodeID
		if id == "" && os.Getenv("POD_NAME") != "" {
			id = os.Getenv("POD_NAME") + "." + os.Getenv("POD_NAMESPACE")
		}
		if id == "" {
			id = cfg.Node.ID
		}
		// Not ready until the first complete configuration has arrived.
		var self netip.Addr
		if o.pod {
			self, _ = netip.ParseAddr(os.Getenv("POD_IP")) // absent or bad: none
		}
		xsrc, err = startXDS(ctx, o.xds, id, self, xdsDial{caFile: o.xdsCA, tokenFile: o.xdsToken, sotw: o.xdsSotw}, cfg, srv, log, gate.done)
		if err != nil {
			srv.Shutdown()
			return err
		}
		defer xsrc.close()
	}
	if o.adaptiveProcs {
		scaled := procs.Start(ctx, workers, log)
		defer func() { cancel(); <-scaled }() // GOMAXPROCS back before run returns
	}
	// Signals are caught before the start-up line says the sidecar runs:
	// a SIGTERM right after it drains rather than kills.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	fmt.Fprintf(out, "sidecar: %d workers; listeners %v; admin %v\n", srv.Workers(), srv.ListenerAddrs(), srv.AdminAddrs())
	releaseMemory.kick()
	idleCtx, stopIdle := context.WithCancel(ctx)
	defer stopIdle()
	if o.releaseIdle {
		go releaseMemory.watchIdle(idleCtx)
	}

	var tick <-chan time.Time
	if o.config != "" && o.watch > 0 {
		t := time.NewTicker(o.watch)
		defer t.Stop()
		tick = t.C
	}
	reload := func(why string) {
		next, err := load()
		switch {
		case err != nil:
		case xsrc != nil:
			err = xsrc.setBase(next) // keep what the control plane sent
		default:
			err = srv.Reload(next)
		}
		if err != nil {
			log.Error("config reload refused; keeping the running config", "trigger", why, "err", err)
			return
		}
		log.Info("config reloaded", "trigger", why)
		releaseMemory.kick()
	}
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if o.config != "" {
					reload("SIGHUP")
				}
				continue
			}
			log.Info("signal: draining", "signal", sig.String())
			srv.Shutdown()
			return nil
		case <-tick:
			if st := fileStamp(o.config); st != stamp {
				stamp = st
				reload("file change")
			}
		case <-srv.Done():
			return nil
		}
	}
}

// envBool reads a boolean from the environment variable name through
// getenv, def when it is unset.
func envBool(getenv func(string) string, name string, def bool) (bool, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def, fmt.Errorf("run: %s %q: want true or false", name, v)
	}
	return b, nil
}

// envCount reads a non-negative integer from the environment variable
// name through getenv, def when it is unset; want says what a bad value
// should have been.
func envCount(getenv func(string) string, name string, def int, want string) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("run: %s %q: want %s", name, v, want)
	}
	return n, nil
}

// resolveWorkers decides the data plane's worker count once, at start,
// and caps the Go runtime's processors at it: the usable CPUs (the
// runtime's default processor count, which follows the CPU affinity mask
// and the cgroup CPU limit), at most n when n > 0. A sidecar without a CPU
// limit would otherwise run one worker per CPU of the node, and every idle
// processor costs CPU time in the scheduler looking for work. n only
// lowers the count; 0 keeps it.
func resolveWorkers(n int) int {
	w := runtime.GOMAXPROCS(0)
	if n > 0 && n < w {
		w = n
		runtime.GOMAXPROCS(n)
	}
	return w
}

// goProcessors is the runtime's processor count, which the processor
// scaler (-adaptive-procs) changes while the sidecar runs.
var goProcessors = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
	Name: "meshlet_go_processors",
	Help: "Processors the Go runtime runs the sidecar on (GOMAXPROCS): one while one is enough with -adaptive-procs, else one per worker.",
}, func() float64 { return float64(runtime.GOMAXPROCS(0)) })

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return discovery.ParseStatic(sidecarexample.Config)
	}
	return discovery.LoadStaticFile(path)
}

// fileStamp changes when the file is rewritten.
func fileStamp(path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprint(fi.ModTime().UnixNano(), fi.Size())
}
