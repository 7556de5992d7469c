package xds

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the control plane's xDS metrics, with the names Istio's
// istiod gives them (operators' dashboards and alerts know them):
// pushes and rejects by resource type, connected sidecars, and the
// convergence time from a change of the mesh to the sidecar's snapshot.
type metrics struct {
	mu      sync.Mutex
	pushes  map[string]uint64 // by type (cds, eds, rds, ecds)
	rejects map[string]uint64
	// convergence observes, per sidecar published, the time from the
	// first change the rebuild took in to its snapshot set.
	convergence prometheus.Histogram
}

func newMetrics() *metrics {
	// The types a sidecar is sent start at 0, so that a dashboard's rate
	// of NACKs is 0 rather than no series.
	m := &metrics{pushes: map[string]uint64{}, rejects: map[string]uint64{}}
	for _, t := range []string{"cds", "eds", "rds", "ecds"} {
		m.pushes[t], m.rejects[t] = 0, 0
	}
	m.convergence = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pilot_proxy_convergence_time",
		Help:    "Seconds from a change of the mesh (a Service, endpoints, route or policy) to the sidecar's new snapshot set for its stream (Istio's name).",
		Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}})
	return m
}

// shortType is Istio's type label for a type URL: cds, eds, rds, lds,
// sds, ecds, or the URL's last element.
func shortType(url string) string {
	switch {
	case strings.HasSuffix(url, ".Cluster"):
		return "cds"
	case strings.HasSuffix(url, ".ClusterLoadAssignment"):
		return "eds"
	case strings.HasSuffix(url, ".RouteConfiguration"):
		return "rds"
	case strings.HasSuffix(url, ".Listener"):
		return "lds"
	case strings.HasSuffix(url, ".Secret"):
		return "sds"
	case strings.HasSuffix(url, ".TypedExtensionConfig"):
		return "ecds"
	}
	return url[strings.LastIndexByte(url, '.')+1:]
}

func (m *metrics) push(typeURL string) {
	m.mu.Lock()
	m.pushes[shortType(typeURL)]++
	m.mu.Unlock()
}

func (m *metrics) reject(typeURL string) {
	m.mu.Lock()
	m.rejects[shortType(typeURL)]++
	m.mu.Unlock()
}

var (
	pushesDesc  = prometheus.NewDesc("pilot_xds_pushes", "xDS responses sent to sidecars by type (Istio's name; a counter).", []string{"type"}, nil)
	rejectsDesc = prometheus.NewDesc("pilot_total_xds_rejects", "xDS responses sidecars rejected (NACKs) by type (Istio's name; a counter).", []string{"type"}, nil)
	xdsDesc     = prometheus.NewDesc("pilot_xds", "Sidecar xDS streams connected to this control plane (Istio's name).", []string{"version"}, nil)
	proxiesDesc = prometheus.NewDesc("meshlet_xds_proxies", "Sidecars this control plane serves (connected or registered).", nil, nil)
)

// Collector returns the server's metrics for a Prometheus registry:
// pilot_xds, pilot_xds_pushes, pilot_total_xds_rejects,
// pilot_proxy_convergence_time and meshlet_xds_proxies.
func (s *Server) Collector() prometheus.Collector { return (*collector)(s) }

type collector Server

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{pushesDesc, rejectsDesc, xdsDesc, proxiesDesc} {
		ch <- d
	}
	c.metrics.convergence.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := (*Server)(c)
	st := s.Stats()
	m := s.metrics
	m.mu.Lock()
	for t, n := range m.pushes {
		ch <- prometheus.MustNewConstMetric(pushesDesc, prometheus.CounterValue, float64(n), t)
	}
	for t, n := range m.rejects {
		ch <- prometheus.MustNewConstMetric(rejectsDesc, prometheus.CounterValue, float64(n), t)
	}
	m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(xdsDesc, prometheus.GaugeValue, float64(st.Streams), "meshlet")
	ch <- prometheus.MustNewConstMetric(proxiesDesc, prometheus.GaugeValue, float64(st.Proxies))
	m.convergence.Collect(ch)
}

// observeConvergence records a sidecar published for a change first seen
// at since (zero: nothing to record, e.g. a sidecar's first snapshot).
func (m *metrics) observeConvergence(since time.Time) {
	if !since.IsZero() {
		m.convergence.Observe(time.Since(since).Seconds())
	}
}
