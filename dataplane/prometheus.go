package dataplane

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
)

// collector renders the stats for Prometheus at scrape time, summing the
// workers' shards: Envoy's names (envoy_cluster_*) and Istio's request
// metrics (istio_requests_total, istio_request_duration_milliseconds).
type collector struct{ s *Server }

func (c *collector) Describe(chan<- *prometheus.Desc) {} // unchecked collector

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	st := s.state.Load()
	stats := s.flatStats()
	for _, sv := range stats {
		if sv.scope == "" {
			continue
		}
		stat := sv.stat
		labels := []string{envoyScopeLabels[sv.scope]}
		values := []string{sv.scopeName}
		metric := "envoy_" + sv.scope + "_" + strings.ReplaceAll(stat, ".", "_")
		if sv.scope == "cluster" && strings.HasPrefix(stat, "upstream_rq_") && len(stat) == len("upstream_rq_2xx") && stat[len(stat)-2:] == "xx" {
			metric = "envoy_cluster_upstream_rq_xx"
			labels = append(labels, "envoy_response_code_class")
			values = append(values, stat[len("upstream_rq_"):len("upstream_rq_")+1])
		}
		// Envoy's names are kept exactly, so dashboards built for Envoy
		// work. Envoy types its counters "counter" without the _total
		// suffix, which Prometheus' linter rejects; meshlet exposes those
		// names untyped instead (rate() works the same).
		typ := prometheus.UntypedValue
		if sv.gauge && !strings.HasSuffix(metric, "_total") {
			typ = prometheus.GaugeValue
		} else if !sv.gauge && strings.HasSuffix(metric, "_total") {
			typ = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(desc(metric, labels), typ, float64(sv.value), values...)
	}
	for _, sv := range stats {
		if sv.scope != "" {
			continue
		}
		metric := "meshlet_" + strings.ReplaceAll(sv.name, ".", "_")
		if strings.HasPrefix(sv.name, "overload.") {
			// Envoy's name (its overload stats have no tags).
			metric = "envoy_" + strings.ReplaceAll(sv.name, ".", "_")
		}
		typ := prometheus.GaugeValue
		if !sv.gauge {
			typ = prometheus.CounterValue
			metric += "_total"
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(metric, "meshlet statistic "+sv.name, nil, nil), typ, float64(sv.value))
	}
	c.collectRequests(ch, st)
	c.collectZones(ch)
	c.collectTracing(ch)
	c.collectMTLS(ch)
	c.s.authzStats.each(func(action, policy, result string, n uint64) {
		ch <- prometheus.MustNewConstMetric(authzDesc, prometheus.CounterValue, float64(n), action, policy, result)
	})
}

// envoyScopeLabels are the labels Envoy's tag extraction gives each scope's
// name.
var envoyScopeLabels = map[string]string{"cluster": "envoy_cluster_name", "listener": "envoy_listener_address", "tcp": "envoy_tcp_prefix",
	"http": "envoy_http_conn_manager_prefix"}

var (
	authzDesc = prometheus.NewDesc("meshlet_authz_decisions_total",
		"Inbound RBAC decisions by the filter's action (ALLOW, DENY, AUDIT), the policy that matched (Istio's ns[..]-policy[..]-rule[i], or none) and the result (allowed, denied, logged).",
		[]string{"action", "policy", "result"}, nil)
	handshakesDesc = prometheus.NewDesc("meshlet_mtls_handshakes_total",
		"Mutual-TLS handshakes with peer sidecars by direction and result (ok, or why the peer was refused).", []string{"direction", "result"}, nil)
	certExpiryDesc = prometheus.NewDesc("meshlet_workload_cert_expiry_seconds",
		"Seconds until the workload certificate expires (negative once expired).", nil, nil)
	certReadyDesc = prometheus.NewDesc("meshlet_workload_cert_ready",
		"1 when the sidecar holds a workload certificate and a trust bundle.", nil, nil)
)

var tracingSpansDesc = prometheus.NewDesc("meshlet_tracing_spans_total",
	"Sampled spans by what became of them: exported to the collector, dropped (the export queue was full), failed (the upload failed).",
	[]string{"result"}, nil)

func (c *collector) collectTracing(ch chan<- prometheus.Metric) {
	if c.s.tracer.Load() == nil && c.s.spanCounts.Exported.Load()+c.s.spanCounts.Dropped.Load()+c.s.spanCounts.Failed.Load() == 0 {
		return
	}
	n := &c.s.spanCounts
	for _, r := range []struct {
		result string
		n      uint64
	}{{"exported", n.Exported.Load()}, {"dropped", n.Dropped.Load()}, {"failed", n.Failed.Load()}} {
		ch <- prometheus.MustNewConstMetric(tracingSpansDesc, prometheus.CounterValue, float64(r.n), r.result)
	}
}

func (c *collector) collectMTLS(ch chan<- prometheus.Metric) {
	c.s.mtlsStats.each(func(direction, result string, n uint64) {
		ch <- prometheus.MustNewConstMetric(handshakesDesc, prometheus.CounterValue, float64(n), direction, result)
	})
	store := c.s.opts.Identity
	if store == nil {
		return
	}
	snap := store.Current()
	ready := 0.0
	if snap.Ready() {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(certReadyDesc, prometheus.GaugeValue, ready)
	if snap.Certificate != nil {
		ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, time.Until(snap.NotAfter()).Seconds())
	}
}

// descs caches one Desc per metric name so every sample of a family has
// the same help text and label names.
var descs sync.Map

func desc(name string, labels []string) *prometheus.Desc {
	if d, ok := descs.Load(name); ok {
		return d.(*prometheus.Desc)
	}
	d, _ := descs.LoadOrStore(name, prometheus.NewDesc(name, "Envoy statistic "+strings.TrimPrefix(name, "envoy_")+" (meshlet).", labels, nil))
	return d.(*prometheus.Desc)
}

// serviceShortName is destination_service_name: the first label of a
// Service host (name.namespace.svc...), "unknown" for an address (a client
// that dialled an IP, or an original destination ip:port).
func serviceShortName(service string) string {
	host := service
	if h, _, err := net.SplitHostPort(service); err == nil {
		host = h
	}
	if host == "" || net.ParseIP(host) != nil {
		return "unknown"
	}
	name, _, _ := strings.Cut(host, ".")
	return name
}

var requestLabels = []string{"reporter", "source_workload", "source_principal", "destination_principal", "destination_service",
	"destination_service_name", "upstream_cluster", "request_protocol", "response_code", "response_flags", "connection_security_policy"}

func (c *collector) collectRequests(ch chan<- prometheus.Metric, st *state) {
	type agg struct {
		count   uint64
		sumUs   uint64
		buckets [len(stats.DurationBucketsMs)]uint64
	}
	sums := map[stats.RequestKey]*agg{}
	for _, w := range c.s.workers {
		w.mu.Lock()
		for k, r := range w.requests {
			a := sums[k]
			if a == nil {
				a = &agg{}
				sums[k] = a
			}
			a.count += r.Count.Load()
			a.sumUs += r.SumUs.Load()
			for i := range a.buckets {
				a.buckets[i] += r.Buckets[i].Load()
			}
		}
		w.mu.Unlock()
	}
	total := prometheus.NewDesc("istio_requests_total", "Requests handled by the sidecar (Istio's standard metric).", requestLabels, nil)
	// Istio calls this istio_request_duration_milliseconds; Prometheus'
	// linter (promtool check metrics) requires base units, so meshlet
	// exposes the same buckets in seconds.
	dur := prometheus.NewDesc("istio_request_duration_seconds", "Request duration in seconds (Istio's request duration histogram, in base units).", requestLabels, nil)
	workload := st.cfg.Node.Cluster
	if workload == "" {
		workload = "unknown"
	}
	for k, a := range sums {
		svcName := serviceShortName(k.Service)
		vals := []string{k.Reporter, workload, orUnknown(k.SourcePrincipal), orUnknown(k.DestPrincipal), k.Service, svcName, k.Cluster,
			k.Protocol, strconv.Itoa(k.Code), k.Flags.Short(), orUnknown(k.Security)}
		ch <- prometheus.MustNewConstMetric(total, prometheus.CounterValue, float64(a.count), vals...)
		cum := map[float64]uint64{}
		var run uint64
		for i, b := range stats.DurationBucketsMs {
			run += a.buckets[i]
			cum[b/1000] = run
		}
		ch <- prometheus.MustNewConstHistogram(dur, a.count, float64(a.sumUs)/1e6, cum, vals...)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
