package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/bpf"
	"github.com/meshlet-dev/meshlet/dataplane"
	"github.com/meshlet-dev/meshlet/dataplane/config"
	"github.com/meshlet-dev/meshlet/discovery"
	sidecarexample "github.com/meshlet-dev/meshlet/examples/sidecar"
	"github.com/meshlet-dev/meshlet/sds"
)

// run is `sidecar run`: the data plane from a static config file, reloaded
// on SIGHUP or when the file changes, drained on SIGTERM.
func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", "", "static config file (default: the embedded examples/sidecar/sidecar.yaml)")
	redirectMode := fs.String("redirect", "none", "traffic capture: none (explicit listeners) or ebpf")
	podCgroup := fs.String("pod-cgroup", "", "with -redirect=ebpf: the pod's cgroup v2 directory (default: MESHLET_POD_CGROUP, else the parent of the sidecar's cgroup)")
	accelerate := fs.Bool("accelerate", os.Getenv("MESHLET_ACCELERATE") == "true",
		"with -redirect=ebpf: short-circuit the pod's loopback hops (app <-> sidecar) with sockops + sk_msg (default: MESHLET_ACCELERATE=true)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	watch := fs.Duration("watch", 2*time.Second, "how often to check the config file for changes (0: only on SIGHUP)")
	xdsAddr := fs.String("xds", "", "control plane address for clusters and routes over ADS (merged into the static config)")
	nodeID := fs.String("node-id", "", "xDS node id (default: POD_NAME.POD_NAMESPACE, else the config's node.id)")
	xdsCA := fs.String("xds-ca", "", "PEM root the control plane's TLS certificate must chain to (empty: plaintext)")
	xdsToken := fs.String("xds-token", "", "file with the ServiceAccount token sent to the control plane (needs -xds-ca)")
	xdsSotw := fs.Bool("xds-sotw", false, "use the state-of-the-world ADS protocol instead of delta (incremental) xDS")
	sdsAddr := fs.String("sds", "", "SDS server of the workload certificate: host:port (the control plane, TLS against -sds-ca with the token in -sds-token) or unix:///path (a SPIRE agent); enables mTLS")
	sdsCA := fs.String("sds-ca", "", "PEM root of the SDS server's TLS certificate (default: -xds-ca)")
	sdsToken := fs.String("sds-token", "", "file with the ServiceAccount token sent to the SDS server (default: -xds-token)")
	identityFlag := fs.String("identity", "", "SPIFFE ID the sidecar requests by CSR (default with -pod: spiffe://$MESHLET_TRUST_DOMAIN/ns/$POD_NAMESPACE/sa/$SERVICE_ACCOUNT; none with a unix -sds: the server delivers key and ID)")
	defaultUID, err := envCount("MESHLET_PROXY_UID", bpf.DefaultProxyUID, "0 (stay root) or a uid")
	if err != nil {
		return err
	}
	proxyUID := fs.Int("proxy-uid", defaultUID,
		"with -redirect=ebpf: once the redirect is attached and the listeners registered, the sidecar switches to this uid and gid and drops every capability (default: MESHLET_PROXY_UID, else 1337); 0 stays root")
	defaultConcurrency, err := envCount("MESHLET_CONCURRENCY", 0, "a worker count (0: one per usable CPU)")
	if err != nil {
		return err
	}
	concurrency := fs.Int("concurrency", defaultConcurrency,
		"workers at most, one per usable CPU below that (default: MESHLET_CONCURRENCY, which the injector sets to 2; 0: one per usable CPU)")
	defaultAdaptive, err := envBool("MESHLET_ADAPTIVE_PROCS", true)
	if err != nil {
		return err
	}
	defaultRelease, err := envBool("MESHLET_RELEASE_BINARY_PAGES", true)
	if err != nil {
		return err
	}
	defaultIdle, err := envBool("MESHLET_RELEASE_MEMORY_WHEN_IDLE", true)
	if err != nil {
		return err
	}
	defaultSinglePage, err := envBool("MESHLET_SINGLE_PAGE_BINARY_FAULTS", true)
	if err != nil {
		return err
	}
	adaptiveProcs := fs.Bool("adaptive-procs", defaultAdaptive,
		"run Go on one processor until it is 80 % busy, on one per worker within 100 ms of that, on one again after 2 s under half a CPU (processors with little to do cost CPU per request); the workers stay (default: MESHLET_ADAPTIVE_PROCS, else true)")
	releaseBinary := fs.Bool("release-binary-pages", defaultRelease,
		"once configuration changes settle, drop the sidecar's mappings of its own executable's pages (start-up and config loading touch most of it; the request path maps back what it uses) (default: MESHLET_RELEASE_BINARY_PAGES, else true)")
	releaseIdle := fs.Bool("release-memory-when-idle", defaultIdle,
		"when the sidecar goes quiet (under 32 KiB allocated in a second) after a busy spell (2 MiB since the last release, at most one release per 10 s), return the heap's free memory and the binary's pages at once, as after configuration changes (default: MESHLET_RELEASE_MEMORY_WHEN_IDLE, else true)")
	singlePage := fs.Bool("single-page-binary-faults", defaultSinglePage,
		"map the sidecar's own executable a page at a time, not the kernel's 64 KiB around each touched page: 4-7 MiB less RSS under load (Linux 6.7+ on x86-64, userfaultfd allowed; elsewhere the sidecar says why at start and runs as without) (default: MESHLET_SINGLE_PAGE_BINARY_FAULTS, else true)")
	pod := fs.Bool("pod", false, "in a Kubernetes pod: the built-in pod config (outbound 127.0.0.1:15001, inbound :15006 to the app ports in MESHLET_APP_PORTS, health :15021, Prometheus :15090) instead of -config")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("run: %w\n%s", err, usage)
	}
	var lv slog.LevelVar
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("run: -log-level %q: want debug, info, warn or error", *level)
	}
	switch *redirectMode {
	case "none", "ebpf":
	default:
		return fmt.Errorf("run: -redirect %q: want none or ebpf", *redirectMode)
	}
	if *proxyUID < 0 || *proxyUID > 1<<31-2 {
		return fmt.Errorf("run: -proxy-uid %d: want 0 (stay root) or a uid", *proxyUID)
	}
	if *concurrency < 0 {
		return fmt.Errorf("run: -concurrency %d: want a worker count (0: one per usable CPU)", *concurrency)
	}
	limitConcurrency(*concurrency)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: &lv}))
	releaseMemory.configure(log, *releaseBinary)
	if *singlePage {
		if n, err := singlePageImageFaults(); err != nil {
			log.Info("the kernel maps 64 KiB around each page of the binary the sidecar touches", "err", err)
		} else {
			log.Debug("the binary is mapped a page at a time", "bytes", n)
		}
	}
	if *pod && *path != "" {
		return fmt.Errorf("run: -pod and -config are exclusive")
	}
	load := func() (*config.Config, error) {
		if *pod {
			return podConfig(os.Getenv)
		}
		return loadConfig(*path)
	}
	// The stamp is taken before the first read: a change written while
	// the sidecar starts is reloaded at the first tick, not missed.
	stamp := fileStamp(*path)
	cfg, err := load()
	if err != nil {
		return err
	}
	probers, err := dataplane.ParseAppProbers(os.Getenv("MESHLET_APP_PROBERS"))
	if err != nil {
		return fmt.Errorf("run: MESHLET_APP_PROBERS: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := dataplane.Options{Logger: log, LogLevel: &lv, AppProbers: probers, StartNotReady: *xdsAddr != "" || *sdsAddr != "",
		AdaptiveProcs: *adaptiveProcs}
	gate := &readiness{}
	var sdsClient *sds.Client
	if *xdsAddr != "" {
		gate.left++
	}
	if *sdsAddr != "" {
		gate.left++
		d := sdsDial{target: *sdsAddr, caFile: *sdsCA, tokenFile: *sdsToken}
		if d.caFile == "" {
			d.caFile = *xdsCA
		}
		if d.tokenFile == "" {
			d.tokenFile = *xdsToken
		}
		switch {
		case *identityFlag != "":
			if d.id, err = spiffeid.FromString(*identityFlag); err != nil {
				return fmt.Errorf("run: -identity %q: %w", *identityFlag, err)
			}
		case *pod && !strings.HasPrefix(d.target, "unix:"):
			if d.id, err = podIdentity(os.Getenv); err != nil {
				return err
			}
		}
		if opts.Identity, sdsClient, err = newSDS(d, log); err != nil {
			return err
		}
	}
	var rd *redirect
	if *redirectMode == "ebpf" {
		// Attach before any listener exists and before readiness: the
		// app's connects are captured from the first one.
		if rd, err = setupRedirect(cfg, *podCgroup, *accelerate, *proxyUID); err != nil {
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
		if *proxyUID > 0 && os.Geteuid() == 0 {
			switch err := dropPrivileges(*proxyUID, *proxyUID, rd.probe); {
			case err == nil:
				log.Info("running unprivileged", "uid", *proxyUID, "gid", *proxyUID)
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
	var xsrc *xdsSource
	if *xdsAddr != "" {
		id := *nodeID
		if id == "" && os.Getenv("POD_NAME") != "" {
			id = os.Getenv("POD_NAME") + "." + os.Getenv("POD_NAMESPACE")
		}
		if id == "" {
			id = cfg.Node.ID
		}
		// Not ready until the first complete configuration has arrived.
		xsrc, err = startXDS(ctx, *xdsAddr, id, xdsDial{caFile: *xdsCA, tokenFile: *xdsToken, sotw: *xdsSotw}, cfg, srv, log, gate.done)
		if err != nil {
			srv.Shutdown()
			return err
		}
		defer xsrc.close()
	}
	fmt.Fprintf(out, "sidecar: %d workers; listeners %v; admin %v\n", dataplane.Workers(), srv.ListenerAddrs(), srv.AdminAddrs())
	releaseMemory.kick()
	idleCtx, stopIdle := context.WithCancel(ctx)
	defer stopIdle()
	if *releaseIdle {
		go releaseMemory.watchIdle(idleCtx)
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	var tick <-chan time.Time
	if *path != "" && *watch > 0 {
		t := time.NewTicker(*watch)
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
				if *path != "" {
					reload("SIGHUP")
				}
				continue
			}
			log.Info("signal: draining", "signal", sig.String())
			srv.Shutdown()
			return nil
		case <-tick:
			if st := fileStamp(*path); st != stamp {
				stamp = st
				reload("file change")
			}
		case <-srv.Done():
			return nil
		}
	}
}

// envBool reads a boolean from the environment variable name, def when unset.
func envBool(name string, def bool) (bool, error) {
	v := os.Getenv(name)
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
// name, def when it is unset; want says what a bad value should have been.
func envCount(name string, def int, want string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("run: %s %q: want %s", name, v, want)
	}
	return n, nil
}

// limitConcurrency caps the Go runtime's processors, and with them the
// data plane's workers (dataplane.Workers), at n: a sidecar without a CPU
// limit would otherwise run one worker per CPU of the node, and every idle
// processor costs CPU time in the scheduler looking for work. The runtime's
// default already follows a CPU limit and the affinity mask, so n only
// lowers it; 0 keeps it.
func limitConcurrency(n int) {
	if n > 0 && n < runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(n)
	}
}

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
