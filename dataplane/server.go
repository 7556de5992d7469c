// This file is over 600 lines: the server's start, reload, drain, the main
// loop's event handling and the listener bookkeeping all own one mutable
// state (state, the clusters' health and outlier results), which only the
// main loop writes.

package dataplane

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/logsink"
	"github.com/meshlet-dev/meshlet/dataplane/internal/spans"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/mtls"
)

// OriginalDstFunc recovers the destination an outbound connection was
// dialled to (the eBPF redirect keeps it); ok is false when unknown.
type OriginalDstFunc func(c *net.TCPConn) (dst netip.AddrPort, ok bool)

// Options are the Server's settings that do not come from the config file.
type Options struct {
	// Logger for the data plane's own logs (nil: slog.Default()).
	Logger *slog.Logger
	// OriginalDst, when set, answers the original destination of outbound
	// connections; otherwise the listener's static original_destination is
	// used.
	OriginalDst OriginalDstFunc
	// AccessLog, when set, receives access-log lines instead of the
	// config's access_log.path.
	AccessLog io.Writer
	// TraceFlushInterval is how often queued spans are uploaded (0: the
	// OpenTelemetry SDK's default, 5 s; tests shorten it).
	TraceFlushInterval time.Duration
	// Workers is the number of workers, each with its own SO_REUSEPORT
	// socket of every listener (0: one). The caller decides it once
	// (the sidecar: -concurrency or the usable CPUs); the data plane
	// never derives it from the runtime's processor count, which the
	// process may change while it runs.
	Workers int
	// LogLevel, when set, is the level the admin /logging endpoint
	// changes (the caller's logger should read it).
	LogLevel *slog.LevelVar
	// AppProbers are the app's probes the health port serves under
	// /app-health/ (see ParseAppProbers).
	AppProbers map[string]AppProber
	// StartNotReady keeps readiness failing until SetReady(true), for a
	// sidecar that waits for its first configuration from the control plane.
	StartNotReady bool
	// Accelerated, when set, tells whether a connection's bytes may bypass
	// its socket's receive queue (the eBPF sk_msg loopback acceleration):
	// the TCP proxy then copies such connections with read and write
	// instead of splice(2), which would not see them.
	Accelerated func(net.Conn) bool
	// Collectors are extra metrics served on the Prometheus and admin
	// endpoints (the eBPF redirect's counters).
	Collectors []prometheus.Collector
	// HTTP1Server is the server of plaintext downstream HTTP/1
	// connections: HTTP1ServerMeshlet ("" too), the hand-written one with
	// Envoy's HTTP/1 codec refusals, or HTTP1ServerNetHTTP, net/http's
	// with its own, to tell whether a Go upgrade broke the former.
	HTTP1Server string
	// Identity is the sidecar's workload certificate and trust bundles
	// (fed by SDS). With it, meshed endpoints are reached with mutual TLS
	// and inbound listeners terminate it (see config.InboundMTLS); nil
	// means no mTLS: meshed endpoints are dialled in plaintext and inbound
	// TLS is opaque TCP.
	Identity *mtls.Store
}

// Server is a running data plane.
type Server struct {
	opts  Options
	log   *slog.Logger
	state atomic.Pointer[state]
	// stats shards per cluster name and listener stats per address, kept
	// across reloads.
	statsMu sync.Mutex
	stats   map[string][]*stats.Cluster
	lstats  map[string]*listenerStats
	// downstreamActive counts the open downstream connections of every
	// listener (admit); lastOverflowWarn is when the last refusal was
	// logged (UnixNano).
	downstreamActive atomic.Int64
	lastOverflowWarn atomic.Int64

	workers  []*worker
	events   chan event
	dropped  atomic.Uint64 // events the main loop could not take
	reloadCh chan reloadReq
	access   atomic.Pointer[logsink.Logger]
	// tracer exports spans (nil: tracing off); replaced when a reload
	// changes the collector or the resource.
	tracer atomic.Pointer[spans.Exporter]
	// spanCounts outlive the exporters a reload replaces.
	spanCounts spans.Counters

	listenMu  sync.Mutex
	listeners map[string][]*net.TCPListener // address -> one per worker

	ctx      context.Context
	cancel   context.CancelFunc
	draining atomic.Bool
	// drainOnce starts the drain; drained is closed once it is complete.
	drainOnce sync.Once
	drained   chan struct{}
	notReady  atomic.Bool
	conns     sync.WaitGroup
	mainDone  chan struct{}
	started   time.Time
	rnd       lb.Random // main loop only
	admin     *adminServers

	mtlsStats mtlsStats
	// authzStats are meshlet_authz_decisions_total's counters.
	authzStats authzCounters
	// httpStats holds each listener's *stats.HTTP by name.
	httpStats sync.Map
}

// state is everything a worker reads per connection or request: immutable,
// swapped whole on reload.
type state struct {
	// cfg is the configuration with its defaults resolved (WithDefaults);
	// given is the one Start or Reload was given (Config).
	cfg, given *config.Config
	clusters   map[string]*cluster
	listeners  map[string]*listenerState // by address
	// maxDownstream is the cap on open downstream connections
	// (GlobalDownstreamMaxConnections, or the default from the file
	// descriptor limit).
	maxDownstream int64
	// tracing: requests join or start traces (cfg.Tracing set);
	// traceThreshold is its sampling percentage as a bound on a 64-bit
	// draw.
	tracing        bool
	traceThreshold uint64
}

type listenerState struct {
	cfg         *config.Listener
	staticDst   netip.AddrPort
	serverFirst map[uint16]bool
	routes      []*routeState
	// Inbound listeners of a sidecar with an identity: the authorization
	// and the TLS config that reads the current certificate per handshake.
	policies  *mtls.PortPolicies
	tlsConfig *tls.Config
	// authz is an inbound listener's RBAC (nil: everything allowed).
	authz *listenerAuthz
	stats *listenerStats
}

type routeState struct {
	cfg     *config.Route
	dst     netip.AddrPort
	anyIP   bool
	hasDst  bool
	cluster *cluster
	// table: HTTP requests go by rules (a route table from RDS, which
	// may be empty: every request 404) rather than to cluster.
	table bool
	rules []*ruleState
}

// cluster is one upstream cluster at run time. Its lb snapshot is
// published atomically by the main loop; circuit-breaker counters are
// cluster-wide atomics (Envoy's resource manager).
type cluster struct {
	name  string
	cfg   *config.Cluster
	snap  atomic.Pointer[lb.Snapshot]
	stats []*stats.Cluster // per worker

	// perWorker is each worker's own state of the cluster, by worker id.
	perWorker []workerCluster

	rqActive, rqPending, retriesActive, cxActive atomic.Int64
	// outlierStats is a copy the main loop publishes for scrapes.
	outlierStats atomic.Pointer[lb.OutlierStats]

	// Main loop only.
	lbc     *lb.Cluster
	outlier *lb.OutlierDetector
	health  *healthChecker
	stopped chan struct{}
}

// eventKind is what a worker or checker reports to the main loop.
type eventKind uint8

const (
	evHTTPCode eventKind = iota
	evLocalOrigin
	evHealthResult
	evOutlierTick
)

type event struct {
	kind    eventKind
	cluster *cluster
	addr    string
	code    int
	local   lb.LocalOriginResult
	hc      healthResult
	// A request result's worker, and that worker's successes on the host
	// before it (worker.report).
	worker   int
	okBefore uint64
}

type reloadReq struct {
	cfg  *config.Config
	done chan error
}

// Queue sizes for request results on their way to the main loop (64 bytes
// a slot, allocated up front): each worker's, and the main loop's own,
// which the workers' forwarders fill. A result that finds its queue full is
// dropped and counted (server.events_dropped).
const (
	workerEventQueue = 1024
	mainEventQueue   = 2048
)

// New builds a Server from cfg; nothing listens until Start.
func New(cfg *config.Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, stats: map[string][]*stats.Cluster{}, lstats: map[string]*listenerStats{},
		events: make(chan event, mainEventQueue), reloadCh: make(chan reloadReq), listeners: map[string][]*net.TCPListener{},
		mainDone: make(chan struct{}), drained: make(chan struct{}), rnd: newRandom()}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.notReady.Store(opts.StartNotReady)
	if opts.Workers < 0 {
		return nil, fmt.Errorf("dataplane: Options.Workers %d: want a worker count (0: one)", opts.Workers)
	}
	if err := checkHTTP1Server(opts.HTTP1Server); err != nil {
		return nil, err
	}
	for i := range max(1, opts.Workers) {
		s.workers = append(s.workers, newWorker(s, i))
	}
	st, err := s.buildState(cfg, nil)
	if err != nil {
		return nil, err
	}
	s.state.Store(st)
	return s, nil
}

// Workers is the number of workers the Server runs (Options.Workers).
func (s *Server) Workers() int { return len(s.workers) }

// SetReady sets readiness (see Options.StartNotReady); draining always
// reports not ready.
func (s *Server) SetReady(ready bool) { s.notReady.Store(!ready) }

// newRandom returns a PCG source seeded from the OS.
func newRandom() lb.Random {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return rand.NewPCG(binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:]))
}

// Start opens the listeners, starts the workers, the main loop, health
// checks and the admin servers.
func (s *Server) Start(ctx context.Context) error {
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.started = time.Now()
	st := s.state.Load()
	al, err := logsink.New(st.cfg.AccessLog, s.opts.AccessLog, len(s.workers))
	if err != nil {
		return err
	}
	s.access.Store(al)
	s.setTracer(nil, st.cfg)
	// A failed start leaves no exporter dialling a collector behind.
	stopTracer := func() {
		if t := s.tracer.Swap(nil); t != nil {
			t.Close()
		}
	}
	if err := s.openListeners(st); err != nil {
		s.closeAllListeners()
		stopTracer()
		return err
	}
	go s.mainLoop()
	for _, w := range s.workers {
		go s.relayEvents(w)
	}
	s.startClusterLoops(st, nil)
	if err := s.startAdmin(st.cfg); err != nil {
		s.cancel()
		s.closeAllListeners()
		stopTracer()
		return err
	}
	return nil
}

// openListeners makes sure every listener address of st has one
// SO_REUSEPORT socket per worker, and closes those no longer configured.
func (s *Server) openListeners(st *state) error {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	for addr := range st.listeners {
		if _, ok := s.listeners[addr]; ok {
			continue
		}
		var group []*net.TCPListener
		bind := addr
		for _, w := range s.workers {
			l, err := listenReusePort(s.ctx, bind)
			if err != nil {
				for _, g := range group {
					g.Close()
				}
				return err
			}
			group = append(group, l)
			// Port 0: the first socket picks the port, the rest join it.
			bind = l.Addr().String()
			go w.acceptLoop(l, addr, s.listenerStatsFor(addr))
		}
		s.listeners[addr] = group
	}
	for addr, group := range s.listeners {
		if _, ok := st.listeners[addr]; !ok {
			for _, l := range group {
				l.Close()
			}
			delete(s.listeners, addr)
		}
	}
	return nil
}

func (s *Server) closeAllListeners() {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	for addr, group := range s.listeners {
		for _, l := range group {
			l.Close()
		}
		delete(s.listeners, addr)
	}
}

// ListenerAddrs returns the bound address of each configured listener
// (useful when the config asks for port 0).
func (s *Server) ListenerAddrs() map[string]string {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	out := map[string]string{}
	for addr, g := range s.listeners {
		out[addr] = g[0].Addr().String()
	}
	return out
}

// ListenerSockets returns the per-worker SO_REUSEPORT sockets of the
// listener configured at addr, in worker order (the eBPF redirect registers
// them for per-CPU steering), or nil.
func (s *Server) ListenerSockets(addr string) []*net.TCPListener {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	return append([]*net.TCPListener(nil), s.listeners[addr]...)
}

// Reload swaps in a new config. An invalid config is refused with the
// reason and the running one stays; connections are not dropped.
func (s *Server) Reload(cfg *config.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	r := reloadReq{cfg: cfg, done: make(chan error, 1)}
	select {
	case s.reloadCh <- r:
	case <-s.mainDone:
		return errors.New("dataplane: reload: server stopped")
	}
	return <-r.done
}

// Config returns the running configuration.
func (s *Server) Config() *config.Config { return s.state.Load().given }

// buildState resolves cfg into run-time structures, reusing clusters of
// old whose configuration did not change (they keep their health state,
// pickers and connection pools).
func (s *Server) buildState(cfg *config.Config, old *state) (*state, error) {
	given := cfg
	cfg = cfg.WithDefaults() // resolved once: the data plane reads settings as they are
	st := &state{cfg: cfg, given: given, clusters: map[string]*cluster{}, listeners: map[string]*listenerState{},
		maxDownstream: maxDownstream(cfg.GlobalDownstreamMaxConnections)}
	if cfg.Tracing != nil {
		st.tracing, st.traceThreshold = true, samplingThreshold(cfg.Tracing.Sampling)
	}
	if old == nil || old.maxDownstream != st.maxDownstream {
		s.logConnectionLimit(cfg, st.maxDownstream)
	}
	var local []lb.Endpoint
	if cfg.LocalCluster != "" {
		local = cfg.ClusterByName(cfg.LocalCluster).Endpoints
	}
	for i := range cfg.Clusters {
		cc := &cfg.Clusters[i]
		if old != nil {
			if oc := old.clusters[cc.Name]; oc != nil && reflect.DeepEqual(oc.cfg, cc) && sameLocal(old.cfg, cfg) {
				st.clusters[cc.Name] = oc
				continue
			}
		}
		var prev *cluster
		if old != nil {
			prev = old.clusters[cc.Name]
		}
		c, err := s.newCluster(cc, cfg, local, prev)
		if err != nil {
			return nil, err
		}
		st.clusters[cc.Name] = c
	}
	for i := range cfg.Listeners {
		lc := &cfg.Listeners[i]
		ls := &listenerState{cfg: lc, serverFirst: map[uint16]bool{}, stats: s.listenerStatsFor(lc.Address)}
		if lc.OriginalDestination != "" {
			ls.staticDst = netip.MustParseAddrPort(lc.OriginalDestination)
		}
		for _, p := range lc.ServerFirstPorts {
			ls.serverFirst[p] = true
		}
		if lc.Direction == config.Inbound && s.opts.Identity != nil {
			ls.policies = buildPolicies(lc.MTLS)
			ls.tlsConfig = mtls.ServerConfig(s.opts.Identity, mtls.ServerOptions{Authorize: ls.policies.Authorize})
		}
		if lc.Direction == config.Inbound {
			ls.authz = bindAuthz(lc.Authz, &s.authzStats)
		}
		for j := range lc.Routes {
			rc := &lc.Routes[j]
			rs := &routeState{cfg: rc, cluster: st.clusters[rc.Cluster], table: rc.RouteConfig != "" || len(rc.Rules) > 0}
			if rs.table {
				rs.rules = compileRules(rc, st.clusters)
			}
			if d := rc.Destination; d != "" {
				rs.hasDst = true
				if strings.HasPrefix(d, ":") {
					rs.anyIP = true
					d = "0.0.0.0" + d
				}
				rs.dst = netip.MustParseAddrPort(d)
			}
			ls.routes = append(ls.routes, rs)
		}
		st.listeners[lc.Address] = ls
	}
	return st, nil
}

func sameLocal(a, b *config.Config) bool {
	if a.LocalCluster != b.LocalCluster || a.Node.Locality != b.Node.Locality {
		return false
	}
	if a.LocalCluster == "" {
		return true
	}
	return reflect.DeepEqual(a.ClusterByName(a.LocalCluster), b.ClusterByName(b.LocalCluster))
}

// newCluster builds a cluster's run-time state. When a reload replaces
// prev, hosts that stay keep their active health-check verdict, so a
// config change does not send a health-checked cluster back to "all hosts
// failed until checked". (Outlier ejections start afresh with the new
// detector.)
func (s *Server) newCluster(cc *config.Cluster, cfg *config.Config, local []lb.Endpoint, prev *cluster) (*cluster, error) {
	c := &cluster{name: cc.Name, cfg: cc, stopped: make(chan struct{}), perWorker: make([]workerCluster, len(s.workers))}
	s.statsMu.Lock()
	shards := s.stats[cc.Name]
	if shards == nil {
		for range s.workers {
			shards = append(shards, &stats.Cluster{})
		}
		s.stats[cc.Name] = shards
	}
	s.statsMu.Unlock()
	c.stats = shards
	lbc, err := lb.NewCluster(cc.LB, lb.ClusterOptions{
		Local: cfg.Node.Locality, OverprovisioningFactor: cc.OverprovisioningFactor,
		WeightedPriorityHealth: cc.WeightedPriorityHealth, ActiveHealthChecked: len(cc.HealthChecks) > 0,
		IgnoreNewHostsUntilFirstHC: cc.IgnoreNewHostsUntilFirstHC,
	}, newRandom(), &shards[0].LB)
	if err != nil {
		return nil, fmt.Errorf("dataplane: cluster %q: %w", cc.Name, err)
	}
	if err := lbc.SetEndpoints(cc.Endpoints, cc.Priorities, time.Now().UnixNano()); err != nil {
		return nil, fmt.Errorf("dataplane: cluster %q: %w", cc.Name, err)
	}
	if local != nil && cc.Name != cfg.LocalCluster {
		lbc.SetLocalCluster(local)
	}
	if prev != nil && len(cc.HealthChecks) > 0 && len(prev.cfg.HealthChecks) > 0 {
		const hcFlags = lb.FailedActiveHC | lb.PendingActiveHC | lb.DegradedActiveHC
		for _, h := range lbc.Hosts() {
			if ph := prev.lbc.Host(h.Address); ph != nil {
				lbc.SetFlags(h.Address, hcFlags, false)
				lbc.SetFlags(h.Address, ph.Flags&hcFlags, true)
			}
		}
	}
	snap, err := lbc.Snapshot(time.Now().UnixNano())
	if err != nil {
		return nil, fmt.Errorf("dataplane: cluster %q: %w", cc.Name, err)
	}
	c.snap.Store(snap)
	c.lbc = lbc
	if cc.Outlier != nil {
		c.outlier = lb.NewOutlierDetector(*cc.Outlier, newRandom())
		for _, h := range lbc.Hosts() {
			c.outlier.AddHost(h.ID)
		}
		os := c.outlier.Stats()
		c.outlierStats.Store(&os)
	}
	return c, nil
}

// startClusterLoops starts outlier timers and health checkers of the
// clusters of st that old did not have, and stops those of old's clusters
// st dropped.
func (s *Server) startClusterLoops(st, old *state) {
	for _, c := range st.clusters {
		if old != nil && old.clusters[c.name] == c {
			continue
		}
		if c.outlier != nil {
			go s.outlierTicker(c)
		}
		if len(c.cfg.HealthChecks) > 0 {
			c.health = newHealthChecker(s, c)
			c.health.start()
		}
	}
	if old == nil {
		return
	}
	for name, oc := range old.clusters {
		if st.clusters[name] != oc {
			close(oc.stopped)
			for _, w := range s.workers {
				w.dropCluster(oc)
			}
		}
	}
}

func (s *Server) outlierTicker(c *cluster) {
	t := time.NewTicker(c.cfg.Outlier.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.report(event{kind: evOutlierTick, cluster: c})
		case <-c.stopped:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// report hands an event to the main loop without ever blocking (checkers
// and timers; workers use their own queue, see worker.report).
func (s *Server) report(ev event) {
	select {
	case s.events <- ev:
	default:
		s.dropped.Add(1)
	}
}

// relayEvents moves a worker's events to the main loop: a worker's request
// goroutines only touch their own worker's queue, so reporting results
// takes no lock shared with other workers.
func (s *Server) relayEvents(w *worker) {
	for {
		select {
		case ev := <-w.events:
			select {
			case s.events <- ev:
			case <-s.ctx.Done():
				return
			}
		case <-s.ctx.Done():
			return
		}
	}
}

// mainLoop owns clusters' mutable state: it applies request results,
// outlier ticks and health-check results, and republishes snapshots.
func (s *Server) mainLoop() {
	defer close(s.mainDone)
	for {
		select {
		case ev := <-s.events:
			s.handleEvent(ev)
		case r := <-s.reloadCh:
			r.done <- s.applyReload(r.cfg)
		case <-s.ctx.Done():
			return
		}
	}
}

func (s *Server) applyReload(cfg *config.Config) error {
	old := s.state.Load()
	st, err := s.buildState(cfg, old)
	if err != nil {
		return err
	}
	if err := s.openListeners(st); err != nil {
		// Roll the listener set back; the old state keeps running.
		_ = s.openListeners(old)
		return err
	}
	if !reflect.DeepEqual(old.cfg.AccessLog, st.cfg.AccessLog) && s.opts.AccessLog == nil {
		al, err := logsink.New(st.cfg.AccessLog, nil, len(s.workers))
		if err != nil {
			_ = s.openListeners(old)
			return err
		}
		s.access.Swap(al).Close()
	}
	s.setTracer(old.cfg, st.cfg)
	s.state.Store(st)
	s.startClusterLoops(st, old)
	s.log.Info("config reloaded", "clusters", len(cfg.Clusters), "listeners", len(cfg.Listeners))
	return nil
}

func (s *Server) handleEvent(ev event) {
	c := ev.cluster
	select {
	case <-c.stopped:
		return // the cluster was replaced by a reload
	default:
	}
	now := time.Now()
	changed := false
	apply := func(evs []lb.OutlierEvent) {
		for _, oe := range evs {
			h := c.hostByID(oe.Host)
			if h == nil {
				continue
			}
			switch oe.Action {
			case lb.Ejected:
				changed = c.lbc.SetFlags(h.Address, lb.FailedOutlierCheck, true) || changed
				s.log.Info("outlier ejected host", "cluster", c.name, "host", h.Address, "type", oe.Type.String(), "for", oe.Duration)
			case lb.Unejected:
				changed = c.lbc.SetFlags(h.Address, lb.FailedOutlierCheck, false) || changed
				s.log.Info("outlier returned host", "cluster", c.name, "host", h.Address)
			}
		}
	}
	switch ev.kind {
	case evHTTPCode, evLocalOrigin:
		if c.outlier == nil {
			return
		}
		h := c.lbc.Host(ev.addr)
		if h == nil {
			return
		}
		// The host's successes before this result come first: the
		// reporting worker's as counted when it reported, the other
		// workers' so far (worker.reportCode); other hosts' wait for
		// their own failures or the tick.
		if ev.okBefore > 0 {
			c.outlier.PutHTTPSuccesses(h.ID, ev.okBefore)
		}
		s.deliverOutlierSuccesses(c, ev.addr, ev.worker)
		if ev.kind == evHTTPCode {
			apply(c.outlier.PutHTTPResponseCode(h.ID, ev.code, now))
		} else {
			apply(c.outlier.PutLocalOriginResult(h.ID, ev.local, now))
		}
	case evOutlierTick:
		if c.outlier != nil {
			s.deliverOutlierSuccesses(c, "", -1)
			apply(c.outlier.Tick(now))
		}
	case evHealthResult:
		changed = c.health.apply(ev.addr, ev.hc, now, apply)
	}
	if c.outlier != nil {
		os := c.outlier.Stats()
		c.outlierStats.Store(&os)
	}
	if changed {
		s.publish(c)
	}
}

// deliverOutlierSuccesses gives c's outlier detector the upstream
// successes the workers but except (-1: none) counted since the last
// delivery (worker.reportCode), zeroing the counts: those of the host at
// addr, or of every host when addr is "".
func (s *Server) deliverOutlierSuccesses(c *cluster, addr string, except int) {
	put := func(addr string, hc *hostCounters) {
		if n := hc.outlierOK.Swap(0); n > 0 {
			if h := c.lbc.Host(addr); h != nil {
				c.outlier.PutHTTPSuccesses(h.ID, n)
			}
		}
	}
	for _, w := range s.workers {
		if w.id == except {
			continue
		}
		w.mu.Lock()
		if hs := c.perWorker[w.id].hosts; addr == "" {
			for a, hc := range hs {
				put(a, hc)
			}
		} else if hc := hs[addr]; hc != nil {
			put(addr, hc)
		}
		w.mu.Unlock()
	}
}

// publish rebuilds and publishes c's snapshot; a failed rebuild keeps the
// previous one (and is logged).
func (s *Server) publish(c *cluster) {
	snap, err := c.lbc.Snapshot(time.Now().UnixNano())
	if err != nil {
		s.log.Error("snapshot rebuild failed; keeping the previous one", "cluster", c.name, "err", err)
		return
	}
	c.snap.Store(snap)
}

func (c *cluster) hostByID(id lb.HostID) *lb.Host {
	for _, h := range c.lbc.Hosts() {
		if h.ID == id {
			return h
		}
	}
	return nil
}

// Drain stops accepting, lets in-flight work finish for up to the
// configured drain timeout, and closes idle upstream connections.
func (s *Server) Drain() {
	s.drainOnce.Do(func() {
		s.draining.Store(true)
		s.log.Info("draining")
		s.closeAllListeners()
		for _, w := range s.workers {
			w.drain()
		}
		go func() {
			s.conns.Wait()
			// An HTTP/1 connection's serveConn returns once the worker's
			// http.Server has it: its requests are counted per worker.
			for s.inflightRequests() > 0 {
				time.Sleep(10 * time.Millisecond)
			}
			close(s.drained)
		}()
	})
	// Every caller waits: Shutdown after an earlier /drain (the preStop
	// hook, then SIGTERM) must not cut what is still in flight.
	timeout := s.state.Load().cfg.DrainTimeout
	select {
	case <-s.drained:
	case <-time.After(timeout):
		s.log.Warn("drain timeout: closing remaining connections", "timeout", timeout)
	}
}

// inflightRequests is the number of HTTP requests being served.
func (s *Server) inflightRequests() int64 {
	var n int64
	for _, w := range s.workers {
		n += w.inflight.Load()
	}
	return n
}

// Shutdown drains, then stops everything.
func (s *Server) Shutdown() {
	s.Drain()
	s.stopAdmin()
	if s.cancel != nil {
		s.cancel()
	}
	for _, w := range s.workers {
		w.close()
	}
	s.access.Load().Close()
	if t := s.tracer.Swap(nil); t != nil {
		t.Close()
	}
}

// Done is closed when the server has stopped (after Shutdown or
// /quitquitquit).
func (s *Server) Done() <-chan struct{} { return s.mainDone }

// clusterNames returns the running clusters' names, sorted.
func (st *state) clusterNames() []string {
	names := make([]string, 0, len(st.clusters))
	for n := range st.clusters {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// listenersByName returns the listeners sorted by name, one per name (the
// first in address order where two share one).
func (st *state) listenersByName() []*listenerState {
	addrs := make([]string, 0, len(st.listeners))
	for a := range st.listeners {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	seen := map[string]bool{}
	var out []*listenerState
	for _, a := range addrs {
		ls := st.listeners[a]
		if !seen[ls.cfg.Name] {
			seen[ls.cfg.Name] = true
			out = append(out, ls)
		}
	}
	slices.SortFunc(out, func(a, b *listenerState) int { return strings.Compare(a.cfg.Name, b.cfg.Name) })
	return out
}

// ClockTick is the resolution of the workers' clocks, which run route
// timeouts and other alarms of the request path.
const ClockTick = clock.Tick

// UntilClockTick is how long after now the next instant comes that is a
// multiple of every from the instant the workers' clocks count their
// ticks from: more than 0, at most every. A periodic task of the process
// whose period is a multiple of ClockTick wakes then, with the clocks,
// instead of on its own.
func UntilClockTick(now time.Time, every time.Duration) time.Duration {
	return clock.Until(now, every)
}
