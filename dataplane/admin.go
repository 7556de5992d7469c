package dataplane

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
	"github.com/meshlet-dev/meshlet/lb"
)

// adminServers are the admin (15000), health (15021) and Prometheus
// (15090) endpoints.
type adminServers struct {
	mu      sync.Mutex
	servers []*http.Server
	addrs   map[string]string // role -> bound address
	level   *slog.LevelVar
}

func (s *Server) startAdmin(cfg *config.Config) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{s: s})
	for _, c := range s.opts.Collectors {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("dataplane: metrics: %w", err)
		}
	}
	prom := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	s.admin = &adminServers{addrs: map[string]string{}, level: s.opts.LogLevel}
	if s.admin.level == nil {
		s.admin.level = &slog.LevelVar{}
	}

	admin := http.NewServeMux()
	admin.HandleFunc("/", s.adminIndex)
	admin.HandleFunc("/config_dump", s.adminConfigDump)
	admin.HandleFunc("/clusters", s.adminClusters)
	admin.HandleFunc("/certs", s.adminCerts)
	admin.HandleFunc("/stats", s.adminStats)
	admin.Handle("/stats/prometheus", prom)
	admin.HandleFunc("/ready", s.readyHandler)
	admin.HandleFunc("/drain", s.adminPost(func() { go s.Drain() }, "draining\n"))
	admin.HandleFunc("/healthcheck/fail", s.adminPost(func() { go s.Drain() }, "draining\n"))
	admin.HandleFunc("/quitquitquit", s.adminPost(func() { go s.Shutdown() }, "OK\n"))
	admin.HandleFunc("/logging", s.adminLogging)
	// Go's profiler (the admin listener is loopback-only by default), the
	// counterpart of Envoy's /cpuprofiler and /heapprofiler.
	admin.HandleFunc("/debug/pprof/", pprof.Index)
	admin.HandleFunc("/debug/pprof/profile", pprof.Profile)
	admin.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	admin.HandleFunc("/debug/pprof/trace", pprof.Trace)

	health := http.NewServeMux()
	health.HandleFunc("/healthz/ready", s.readyHandler)
	health.HandleFunc("/ready", s.readyHandler)
	health.HandleFunc("/app-health/", s.appHealth)

	promMux := http.NewServeMux()
	promMux.Handle("/stats/prometheus", prom)
	promMux.Handle("/metrics", prom)

	for _, srv := range []struct {
		role, addr string
		h          http.Handler
	}{{"admin", cfg.Admin, admin}, {"health", cfg.Health, health}, {"prometheus", cfg.Prometheus, promMux}} {
		if srv.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", srv.addr)
		if err != nil {
			s.stopAdmin()
			return fmt.Errorf("dataplane: %s listener %s: %w", srv.role, srv.addr, err)
		}
		hs := &http.Server{Handler: srv.h, ReadHeaderTimeout: 10 * time.Second}
		s.admin.servers = append(s.admin.servers, hs)
		s.admin.addrs[srv.role] = l.Addr().String()
		go func() { _ = hs.Serve(l) }()
	}
	return nil
}

// AdminAddrs returns the bound admin, health and prometheus addresses.
func (s *Server) AdminAddrs() map[string]string {
	if s.admin == nil {
		return nil
	}
	s.admin.mu.Lock()
	defer s.admin.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.admin.addrs {
		out[k] = v
	}
	return out
}

// LogLevel is the level /logging changes; wire it into the logger.
func (s *Server) LogLevel() *slog.LevelVar {
	if s.admin == nil {
		return nil
	}
	return s.admin.level
}

func (s *Server) stopAdmin() {
	if s.admin == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, hs := range s.admin.servers {
		_ = hs.Shutdown(ctx)
	}
}

func (s *Server) adminIndex(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	fmt.Fprint(w, "meshlet admin\n  /config_dump\n  /clusters[?format=json]\n  /certs\n  /stats\n  /stats/prometheus\n  /ready\n  POST /drain\n  POST /quitquitquit\n  POST /logging?level=debug|info|warn|error\n  /debug/pprof/\n")
}

func (s *Server) readyHandler(w http.ResponseWriter, _ *http.Request) {
	if s.draining.Load() {
		http.Error(w, "DRAINING", http.StatusServiceUnavailable)
		return
	}
	if s.notReady.Load() {
		http.Error(w, "NOT READY: waiting for the control plane's first configuration", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprint(w, "LIVE\n")
}

func (s *Server) adminPost(f func(), reply string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "method not allowed: use POST", http.StatusMethodNotAllowed)
			return
		}
		fmt.Fprint(w, reply)
		f()
	}
}

func (s *Server) adminLogging(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		fmt.Fprintf(w, "active level: %s\n", s.admin.level.Level())
		return
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(r.URL.Query().Get("level"))); err != nil {
		http.Error(w, "level: want debug, info, warn or error", http.StatusBadRequest)
		return
	}
	s.admin.level.Set(l)
	fmt.Fprintf(w, "active level: %s\n", l)
}

func (s *Server) adminConfigDump(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.state.Load().cfg)
}

// HostStatus is one host of /clusters.
type HostStatus struct {
	Address     string      `json:"address"`
	HealthFlags string      `json:"health_flags"`
	Weight      uint32      `json:"weight"`
	Locality    lb.Locality `json:"locality"`
	Priority    uint32      `json:"priority"`
	RqTotal     uint64      `json:"rq_total"`
	RqSuccess   uint64      `json:"rq_success"`
	RqError     uint64      `json:"rq_error"`
	RqTimeout   uint64      `json:"rq_timeout"`
	RqActive    int64       `json:"rq_active"`
	CxConnFail  uint64      `json:"cx_connect_fail"`
}

// ClusterStatus is one cluster of /clusters: routing state, priority
// loads, circuit-breaker thresholds and hosts.
type ClusterStatus struct {
	Name           string       `json:"name"`
	ZoneRouting    string       `json:"zone_routing_state"`
	HealthyLoad    []uint32     `json:"healthy_priority_load"`
	DegradedLoad   []uint32     `json:"degraded_priority_load"`
	MaxConnections uint32       `json:"max_connections"`
	MaxPending     uint32       `json:"max_pending_requests"`
	MaxRequests    uint32       `json:"max_requests"`
	MaxRetries     uint32       `json:"max_retries"`
	Hosts          []HostStatus `json:"hosts"`
}

// Clusters reports every cluster as /clusters does, from the published
// snapshots and the workers' per-host counters.
func (s *Server) Clusters() []ClusterStatus {
	st := s.state.Load()
	var out []ClusterStatus
	for _, name := range st.clusterNames() {
		c := st.clusters[name]
		snap := c.snap.Load()
		cb := c.cfg.CircuitBreakers
		cr := ClusterStatus{Name: name, ZoneRouting: snap.ZoneRouting().State.String(),
			HealthyLoad: snap.Load().HealthyLoad, DegradedLoad: snap.Load().DegradedLoad,
			MaxConnections: cb.MaxConnections, MaxPending: cb.MaxPendingRequests, MaxRequests: cb.MaxRequests, MaxRetries: cb.MaxRetries}
		counts := s.hostCounts(c)
		for _, hs := range snap.HostSets() {
			for _, h := range hs.Hosts {
				hc := counts[h.Address]
				cr.Hosts = append(cr.Hosts, HostStatus{Address: h.Address, HealthFlags: healthFlagsString(h.Flags), Weight: h.Weight,
					Locality: h.Locality, Priority: h.Priority, RqTotal: hc.rqTotal, RqSuccess: hc.rqSuccess, RqError: hc.rqError,
					RqTimeout: hc.rqTimeout, RqActive: hc.rqActive, CxConnFail: hc.cxConnectFail})
			}
		}
		slices.SortFunc(cr.Hosts, func(a, b HostStatus) int { return strings.Compare(a.Address, b.Address) })
		out = append(out, cr)
	}
	return out
}

type hostSums struct {
	rqTotal, rqSuccess, rqError, rqTimeout, cxConnectFail uint64
	rqActive                                              int64
}

func (s *Server) hostCounts(c *cluster) map[string]hostSums {
	out := map[string]hostSums{}
	for _, w := range s.workers {
		w.mu.Lock()
		for addr, hc := range c.perWorker[w.id].hosts {
			v := out[addr]
			v.rqTotal += hc.rqTotal.Load()
			v.rqSuccess += hc.rqSuccess.Load()
			v.rqError += hc.rqError.Load()
			v.rqTimeout += hc.rqTimeout.Load()
			v.cxConnectFail += hc.cxConnectFail.Load()
			v.rqActive += hc.rqActive.Load()
			out[addr] = v
		}
		w.mu.Unlock()
	}
	return out
}

// healthFlagsString renders host flags as Envoy's /clusters does.
func healthFlagsString(f lb.HealthFlags) string {
	var parts []string
	for _, x := range []struct {
		f    lb.HealthFlags
		name string
	}{{lb.FailedActiveHC, "/failed_active_hc"}, {lb.FailedOutlierCheck, "/failed_outlier_check"}, {lb.FailedEDSHealth, "/failed_eds_health"},
		{lb.DegradedActiveHC, "/degraded_active_hc"}, {lb.DegradedEDSHealth, "/degraded_eds_health"}, {lb.PendingActiveHC, "/pending_active_hc"},
		{lb.ExcludedImmediateHCFail, "/excluded_via_immediate_hc_fail"}} {
		if f&x.f != 0 {
			parts = append(parts, x.name)
		}
	}
	if len(parts) == 0 {
		return "healthy"
	}
	return strings.Join(parts, "")
}

func (s *Server) adminClusters(w http.ResponseWriter, r *http.Request) {
	reps := s.Clusters()
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"cluster_statuses": reps})
		return
	}
	// Written as it is formed: with 1,000 hosts the text is half a
	// megabyte, which a buffer would hold (twice over, as it grows) until
	// the next collection.
	w.Header().Set("Content-Type", "text/plain")
	b := bufio.NewWriterSize(w, 16<<10)
	for _, c := range reps {
		fmt.Fprintf(b, "%s::default_priority::max_connections::%d\n", c.Name, c.MaxConnections)
		fmt.Fprintf(b, "%s::default_priority::max_pending_requests::%d\n", c.Name, c.MaxPending)
		fmt.Fprintf(b, "%s::default_priority::max_requests::%d\n", c.Name, c.MaxRequests)
		fmt.Fprintf(b, "%s::default_priority::max_retries::%d\n", c.Name, c.MaxRetries)
		fmt.Fprintf(b, "%s::zone_routing_state::%s\n", c.Name, c.ZoneRouting)
		for _, h := range c.Hosts {
			p := c.Name + "::" + h.Address + "::"
			fmt.Fprintf(b, "%scx_connect_fail::%d\n%srq_active::%d\n%srq_error::%d\n%srq_success::%d\n%srq_timeout::%d\n%srq_total::%d\n",
				p, h.CxConnFail, p, h.RqActive, p, h.RqError, p, h.RqSuccess, p, h.RqTimeout, p, h.RqTotal)
			fmt.Fprintf(b, "%shealth_flags::%s\n%sweight::%d\n%sregion::%s\n%szone::%s\n%ssub_zone::%s\n%spriority::%d\n",
				p, h.HealthFlags, p, h.Weight, p, h.Locality.Region, p, h.Locality.Zone, p, h.Locality.SubZone, p, h.Priority)
		}
	}
	_ = b.Flush()
}

// statValue is one flat stat of /stats. An Envoy stat of a cluster,
// listener, TCP proxy or HTTP connection manager also has its scope
// ("cluster", "listener", "tcp", "http"), the scope's name and the stat's
// own name, which Prometheus gets as Envoy's tag extraction renders them
// (envoy_cluster_upstream_rq_total{envoy_cluster_name="..."}): names may
// hold dots themselves.
type statValue struct {
	name             string
	value            int64
	scope, scopeName string
	stat             string
	gauge            bool
}

// Stats returns every flat statistic of /stats by name
// (cluster.<name>.<stat>, listener.<address>.<stat>, tcp.<cluster>.<stat>,
// http.<listener name>.<stat>, server.*, overload.*, access_log.*).
func (s *Server) Stats() map[string]int64 {
	out := map[string]int64{}
	for _, sv := range s.flatStats() {
		out[sv.name] = sv.value
	}
	return out
}

func (s *Server) flatStats() []statValue {
	st := s.state.Load()
	var out []statValue
	envoyStat := func(scope, name, stat string, v int64, gauge bool) {
		out = append(out, statValue{name: scope + "." + name + "." + stat, value: v, scope: scope, scopeName: name, stat: stat, gauge: gauge})
	}
	for _, name := range st.clusterNames() {
		c := st.clusters[name]
		stat := func(n string, v int64, gauge bool) { envoyStat("cluster", name, n, v, gauge) }
		for i, n := range stats.CounterNames {
			stat(n, int64(sumCounter(c, stats.Counter(i))), false)
		}
		for i, n := range stats.GaugeNames {
			stat(n, sumGauge(c, stats.Gauge(i)), true)
		}
		lbs := sumLB(c)
		for _, n := range lb.StatNames {
			stat(n, int64(lbs[n]), false)
		}
		snap := c.snap.Load()
		var total, healthy, degraded, excluded int
		for _, hs := range snap.HostSets() {
			total += len(hs.Hosts)
			healthy += len(hs.Healthy)
			degraded += len(hs.Degraded)
			excluded += len(hs.Excluded)
		}
		stat("membership_total", int64(total), true)
		stat("membership_healthy", int64(healthy), true)
		stat("membership_degraded", int64(degraded), true)
		stat("membership_excluded", int64(excluded), true)
		if os := c.outlierStats.Load(); os != nil {
			os.Each(func(n string, v uint64) { stat("outlier_detection."+n, int64(v), n == "ejections_active") })
		}
	}
	for _, ls := range st.listenersByName() {
		if ls.cfg.Protocol == config.ProtocolTCP {
			continue
		}
		hs := s.httpStatsFor(ls.cfg.Name)
		envoyStat("http", ls.cfg.Name, "downstream_cx_protocol_error", int64(hs.DownstreamCxProtocolError.Load()), false)
		envoyStat("http", ls.cfg.Name, "downstream_rq_idle_timeout", int64(hs.DownstreamRqIdleTimeout.Load()), false)
		envoyStat("http", ls.cfg.Name, "downstream_rq_too_many_premature_resets", int64(hs.DownstreamRqTooManyPrematureResets.Load()), false)
	}
	for _, name := range st.clusterNames() {
		var n uint64
		for _, cs := range st.clusters[name].stats {
			n += cs.TCPIdleTimeout.Load()
		}
		envoyStat("tcp", name, "idle_timeout", int64(n), false)
	}
	for _, addr := range slices.Sorted(maps.Keys(st.listeners)) {
		ls := st.listeners[addr].stats
		name := envoyListenerAddress(addr)
		envoyStat("listener", name, "downstream_cx_total", int64(ls.cxTotal.Load()), false)
		envoyStat("listener", name, "downstream_cx_destroy", int64(ls.cxDestroy.Load()), false)
		envoyStat("listener", name, "downstream_cx_active", ls.cxActive.Load(), true)
		envoyStat("listener", name, "downstream_global_cx_overflow", int64(ls.globalCxOverflow.Load()), false)
		envoyStat("listener", name, "downstream_pre_cx_timeout", int64(ls.preCxTimeout.Load()), false)
	}
	if a := s.access.Load(); a != nil {
		out = append(out, statValue{name: "access_log.dropped", value: int64(a.Dropped())},
			statValue{name: "access_log.written", value: int64(a.Written())})
	}
	active := s.downstreamActive.Load()
	out = append(out, statValue{name: "server.events_dropped", value: int64(s.dropped.Load())},
		statValue{name: "server.concurrency", value: int64(len(s.workers)), gauge: true},
		statValue{name: "server.uptime", value: int64(time.Since(s.started).Seconds()), gauge: true},
		statValue{name: "server.downstream_cx_active", value: active, gauge: true},
		statValue{name: "server.global_downstream_max_connections", value: st.maxDownstream, gauge: true},
		// Envoy's resource pressure gauge, in percent.
		statValue{name: "overload.envoy.resource_monitors.global_downstream_max_connections.pressure",
			value: min(100, active*100/max(1, st.maxDownstream)), gauge: true})
	return out
}

func sumCounter(c *cluster, i stats.Counter) uint64 {
	var n uint64
	for _, st := range c.stats {
		n += st.Get(i)
	}
	return n
}

func sumGauge(c *cluster, i stats.Gauge) int64 {
	var n int64
	for _, st := range c.stats {
		n += st.GaugeValue(i)
	}
	return n
}

func sumLB(c *cluster) map[string]uint64 {
	out := map[string]uint64{}
	for _, st := range c.stats {
		st.LB.Each(func(n string, v uint64) { out[n] += v })
	}
	return out
}

func (s *Server) adminStats(w http.ResponseWriter, r *http.Request) {
	filter := r.URL.Query().Get("filter")
	w.Header().Set("Content-Type", "text/plain")
	for _, sv := range s.flatStats() {
		if filter != "" && !strings.Contains(sv.name, filter) {
			continue
		}
		fmt.Fprintf(w, "%s: %d\n", sv.name, sv.value)
	}
}
