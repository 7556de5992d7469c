// Package injector assembles meshlet's control-plane process (cmd/injector
// serve): the mesh CA loaded from (or created once in) a Secret, the
// sidecar-injection webhook served over HTTPS with a certificate the CA
// issues, a controller (informers, a rate-limited workqueue, idempotent
// syncs) that keeps the MutatingWebhookConfiguration's caBundle and every
// namespace's root-CA ConfigMap current, the SDS and xDS servers on one TLS
// gRPC port, and Prometheus metrics.
package injector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshlet-dev/meshlet/discovery/xds"
	"github.com/meshlet-dev/meshlet/mtls"
	"github.com/meshlet-dev/meshlet/mtls/kubeca"
	"github.com/meshlet-dev/meshlet/sds"
	"github.com/meshlet-dev/meshlet/sds/kubeauth"
	"github.com/meshlet-dev/meshlet/webhook"
)

// Options configure the control plane.
type Options struct {
	// Namespace is where the CA Secret lives (meshlet-system).
	Namespace string
	// CASecret names the Secret holding the mesh CA.
	CASecret string
	// WebhookConfig names the MutatingWebhookConfiguration to keep patched.
	WebhookConfig string
	// RootCAConfigMap is published to every namespace (pods mount it).
	RootCAConfigMap string
	// TrustDomain of the mesh's SPIFFE IDs.
	TrustDomain string
	// Hosts are the names in the serving certificates (the Service's DNS
	// names, and 127.0.0.1 in tests).
	Hosts []string
	// WebhookAddr, GRPCAddr (SDS + xDS) and MonitoringAddr listen addresses.
	WebhookAddr, GRPCAddr, MonitoringAddr string
	// DebugAddr is the debug endpoints' (/debug/syncz): loopback, as
	// istiod's 8080, since they name every sidecar and its identity; a
	// port-forward reaches it. Empty: none.
	DebugAddr string
	// Sidecar is the injected sidecar's configuration.
	Sidecar webhook.Config
	// ControlPlaneService is the Service sidecars dial for SDS and xDS
	// (<name>.<Namespace>.svc:<GRPCAddr port>).
	ControlPlaneService string
	// Resync is the resync period of the root-CA informers (default
	// DefaultResync): every cached Namespace, root-CA ConfigMap and the
	// webhook configuration are queued again and compared with what they
	// should be, against the cache, with no API request. Changes are
	// repaired as their watch events arrive, not at the next resync.
	Resync time.Duration
	// CertTTL is the lifetime of workload certificates (default
	// mtls.DefaultWorkloadTTL, 24 h).
	CertTTL time.Duration
	// ObserveAdmission, when set, receives the time each admission review
	// took inside the webhook handler (what the latency histogram
	// observes), for benchmarks that need exact percentiles.
	ObserveAdmission func(time.Duration)
	// ShutdownDelay: once Run's context ends, the webhook, SDS and xDS go
	// on serving this long (each webhook answer closing its connection, so
	// that the client's next request opens a new one) before they stop,
	// and the webhook then finishes its requests in flight. A pod being
	// deleted leaves its Service's endpoints while its container gets
	// SIGTERM: without the delay, connections kube-proxy still sends it
	// are refused, and with failurePolicy Fail an admission fails during
	// every rollout. 0 stops at once.
	ShutdownDelay time.Duration
	// Gateway is the Gateway API client xDS watches HTTPRoutes with (and
	// writes their status through); nil watches none, and a cluster
	// without the CRDs serves no routes.
	Gateway gatewayclient.Interface
	// Istio is the client xDS watches Istio's PeerAuthentications and
	// AuthorizationPolicies with (and writes their status through); nil
	// watches none.
	Istio istioclient.Interface
	// RootNamespace is where those policies apply mesh-wide without a
	// selector (xds.DefaultRootNamespace when empty).
	RootNamespace string
	Logger        *slog.Logger
}

// DefaultOptions are the production settings of deploy/meshlet.yaml.
func DefaultOptions() Options {
	return Options{Namespace: "meshlet-system", CASecret: "meshlet-ca", WebhookConfig: "meshlet-injector",
		RootCAConfigMap: webhook.DefaultRootCACM, TrustDomain: mtls.DefaultTrustDomain,
		Hosts:       []string{"meshlet-injector.meshlet-system.svc", "meshlet-injector.meshlet-system.svc.cluster.local"},
		WebhookAddr: ":9443", GRPCAddr: ":15012", MonitoringAddr: ":15014", DebugAddr: "127.0.0.1:8080", ControlPlaneService: "meshlet-injector",
		Sidecar: webhook.DefaultConfig(), Resync: DefaultResync}
}

// DefaultResync is Options.Resync's default: a safety net, since watch
// events already drive every repair.
const DefaultResync = 10 * time.Minute

// Server is a running control plane.
type Server struct {
	opts    Options
	client  kubernetes.Interface
	ca      *mtls.CA
	rootPEM []byte
	log     *slog.Logger
	addrs   map[string]string
	mu      sync.Mutex
	cert    *tls.Certificate
	ready   chan struct{}
	runErr  error
}

// Addrs returns the bound listen addresses by role (webhook, grpc,
// monitoring) once Run has started them (empty if Run failed first).
func (s *Server) Addrs() map[string]string {
	<-s.ready
	return s.addrs
}

// New prepares a control plane on client; Run starts it.
func New(client kubernetes.Interface, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	return &Server{opts: opts, client: client, log: opts.Logger, addrs: map[string]string{}, ready: make(chan struct{})}
}

// Run loads or creates the CA, starts every server and loop, and blocks
// until ctx ends.
func (s *Server) Run(ctx context.Context) (err error) {
	defer func() {
		if s.addrs["webhook"] == "" { // failed before serving: unblock Addrs / RootPEM
			s.runErr = err
			close(s.ready)
		}
	}()
	td, err := spiffeid.TrustDomainFromString(s.opts.TrustDomain)
	if err != nil {
		return fmt.Errorf("injector: trust domain %q: %w", s.opts.TrustDomain, err)
	}
	ca, created, err := mtls.LoadOrCreateCA(ctx, &kubeca.SecretStore{Client: s.client, Namespace: s.opts.Namespace, Name: s.opts.CASecret},
		mtls.CAOptions{TrustDomain: td})
	if err != nil {
		return fmt.Errorf("injector: mesh CA: %w", err)
	}
	s.ca = ca
	s.rootPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root().Raw})
	s.log.Info("mesh CA ready", "created", created, "secret", s.opts.Namespace+"/"+s.opts.CASecret)

	cfg := s.opts.Sidecar
	cfg.TrustDomain = s.opts.TrustDomain
	if _, port, err := net.SplitHostPort(s.opts.GRPCAddr); err == nil && s.opts.ControlPlaneService != "" {
		cfg.ControlPlane = net.JoinHostPort(s.opts.ControlPlaneService+"."+s.opts.Namespace+".svc", port)
	}
	if v, err := s.client.Discovery().ServerVersion(); err == nil {
		if m, err := strconv.Atoi(trimPlus(v.Minor)); err == nil {
			cfg.ServerMinor = m
		}
	}
	// The Namespace informer serves the webhook (a namespace's labels) and
	// the root-CA sync; the webhook answers only once it has synced.
	f := informers.NewSharedInformerFactory(s.client, s.opts.Resync)
	nsLister := f.Core().V1().Namespaces().Lister()
	reg := prometheus.NewRegistry()
	syncs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshlet_injector_root_ca_syncs_total",
		Help: "Syncs of the root-CA ConfigMaps (kind namespace) and the webhook caBundle (kind cabundle) by result: ok, conflict (requeued), error (requeued)."},
		[]string{"kind", "result"})
	reg.MustRegister(syncs)
	rootSync, factories, err := newCASync(s.client, s.rootPEM, s.opts, f, syncs)
	if err != nil {
		return err
	}
	// Shutdown waits for the informers' goroutines, which stop with their
	// context: cancelled first, also when Run fails early.
	informerCtx, stopInformers := context.WithCancel(ctx)
	factories = append(factories, f)
	defer func() {
		stopInformers()
		for _, fac := range factories {
			fac.Shutdown()
		}
	}()
	for _, fac := range factories {
		fac.Start(informerCtx.Done())
	}
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("injector: informer cache for %v never synced", typ)
		}
	}

	in := &webhook.Injector{Config: cfg, Log: s.log, Namespaces: func(ns string) (map[string]string, bool) {
		n, err := nsLister.Get(ns)
		if err != nil {
			return nil, false
		}
		return n.Labels, true
	}}
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshlet_injector_admission_duration_seconds",
		Help: "Time to answer an admission review.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	reg.MustRegister(latency)
	for _, r := range []struct {
		name string
		c    func() uint64
	}{{"injected", in.Injected.Load}, {"skipped", in.Skipped.Load}, {"error", in.Errored.Load}} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "meshlet_injector_injections_total",
			Help: "Admission reviews by result.", ConstLabels: prometheus.Labels{"result": r.name}}, func() float64 { return float64(r.c()) }))
	}

	webhookMux := http.NewServeMux()
	// draining: the shutdown delay has begun. Each answer then closes its
	// connection, so the client's next request dials again and reaches
	// another replica. Not SetKeepAlivesEnabled(false): it also closes the
	// idle connections at once, racing a client that is just sending on
	// one (an admission failed with EOF).
	var draining atomic.Bool
	webhookMux.Handle("/inject", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			w.Header().Set("Connection", "close")
		}
		start := time.Now()
		in.ServeHTTP(w, r)
		d := time.Since(start)
		latency.Observe(d.Seconds())
		if s.opts.ObserveAdmission != nil {
			s.opts.ObserveAdmission(d)
		}
	}))
	wl, err := tls.Listen("tcp", s.opts.WebhookAddr, &tls.Config{GetCertificate: s.servingCert, MinVersion: tls.VersionTLS12})
	if err != nil {
		return fmt.Errorf("injector: webhook listener %s: %w", s.opts.WebhookAddr, err)
	}
	webhookSrv := &http.Server{Handler: webhookMux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := webhookSrv.Serve(wl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("webhook server stopped", "err", err)
		}
	}()
	defer func() {
		// Requests in flight finish (bounded: a stuck one is cut).
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if webhookSrv.Shutdown(sctx) != nil {
			webhookSrv.Close()
		}
	}()

	// SDS and xDS share one TLS gRPC port and authenticate streams alike:
	// the sidecar's projected ServiceAccount token, checked with a
	// TokenReview.
	tokens := &kubeauth.TokenReviewAuthenticator{Client: s.client, Audiences: []string{sds.TokenAudience}}
	sdsSrv, err := sds.NewServer(sds.ServerConfig{CA: ca, Authenticator: tokens, CertTTL: s.opts.CertTTL,
		ServingHosts: s.opts.Hosts, Logger: s.log})
	if err != nil {
		return fmt.Errorf("injector: sds: %w", err)
	}
	tlsCfg, err := sdsSrv.TLSConfig()
	if err != nil {
		return fmt.Errorf("injector: sds tls: %w", err)
	}
	xdsSrv := xds.NewServer(xds.Options{Logger: s.log, TrustDomain: s.opts.TrustDomain, RootNamespace: s.opts.RootNamespace,
		MTLSMode: s.opts.Sidecar.MTLSMode, Authenticator: xds.AuthenticatorFunc(func(ctx context.Context) (string, string, error) {
			token, err := sds.BearerToken(ctx)
			if err != nil {
				return "", "", err
			}
			c, err := tokens.Authenticate(ctx, token)
			return c.Namespace, c.ServiceAccount, err
		})})
	// The SDS client pings every minute on idle streams: allow it.
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 20 * time.Second, PermitWithoutStream: true}))
	sdsSrv.Register(g)
	xdsSrv.Register(g)
	reg.MustRegister(xdsSrv.Collector())
	gl, err := net.Listen("tcp", s.opts.GRPCAddr)
	if err != nil {
		return fmt.Errorf("injector: grpc listener %s: %w", s.opts.GRPCAddr, err)
	}
	go func() {
		if err := g.Serve(gl); err != nil {
			s.log.Error("grpc server stopped", "err", err)
		}
	}()
	defer g.Stop()
	go xdsSrv.Run(ctx)
	go func() {
		if err := xds.RunAllInformers(ctx, xds.Clients{Kube: s.client, Gateway: s.opts.Gateway, Istio: s.opts.Istio}, xdsSrv, 0); err != nil {
			s.log.Error("discovery informers stopped", "err", err)
		}
	}()

	monMux := http.NewServeMux()
	monMux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	monMux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ready") })
	ml, err := net.Listen("tcp", s.opts.MonitoringAddr)
	if err != nil {
		return fmt.Errorf("injector: monitoring listener %s: %w", s.opts.MonitoringAddr, err)
	}
	monSrv := &http.Server{Handler: monMux, ReadHeaderTimeout: 10 * time.Second}
	go monSrv.Serve(ml)
	defer monSrv.Close()
	s.addrs = map[string]string{"webhook": wl.Addr().String(), "grpc": gl.Addr().String(), "monitoring": ml.Addr().String()}
	if s.opts.DebugAddr != "" {
		// Each sidecar stream's xDS state: what meshletctl proxy-status
		// reads through a port-forward.
		dbgMux := http.NewServeMux()
		dbgMux.Handle("/debug/syncz", xdsSrv.SynczHandler())
		dl, err := net.Listen("tcp", s.opts.DebugAddr)
		if err != nil {
			return fmt.Errorf("injector: debug listener %s: %w", s.opts.DebugAddr, err)
		}
		dbgSrv := &http.Server{Handler: dbgMux, ReadHeaderTimeout: 10 * time.Second}
		go dbgSrv.Serve(dl)
		defer dbgSrv.Close()
		s.addrs["debug"] = dl.Addr().String()
	}
	close(s.ready)
	// Deferred last, so run first on the way out: everything above still
	// serves during the delay.
	defer func() {
		if ctx.Err() == nil || s.opts.ShutdownDelay <= 0 {
			return
		}
		draining.Store(true)
		s.log.Info("stopping: serving on while the endpoints update", "delay", s.opts.ShutdownDelay)
		time.Sleep(s.opts.ShutdownDelay)
	}()

	rootSync.Run(ctx)
	return nil
}

func trimPlus(s string) string {
	for i, r := range s {
		if r < '0' || r > '9' {
			return s[:i]
		}
	}
	return s
}

// servingCert issues the webhook's certificate from the mesh CA and
// re-issues it past half its life; the caBundle is the CA root, so every
// replica's certificate is trusted and restarts change nothing.
func (s *Server) servingCert(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert != nil && s.cert.Leaf != nil {
		half := s.cert.Leaf.NotBefore.Add(s.cert.Leaf.NotAfter.Sub(s.cert.Leaf.NotBefore) / 2)
		if time.Now().Before(half) {
			return s.cert, nil
		}
	}
	c, err := s.ca.IssueServingCertificate(s.opts.Hosts, 0)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil && len(c.Certificate) > 0 {
		c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	s.cert = c
	return c, nil
}

// RootPEM is the mesh root certificate (after Run has loaded the CA).
func (s *Server) RootPEM() []byte {
	<-s.ready
	return s.rootPEM
}
