package dataplane

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlet-dev/meshlet/config"
)

// zoneKey is one zone pair of an outbound cluster: the sidecar's own zone
// and the chosen endpoint's.
type zoneKey struct{ src, dst, cluster string }

// zoneCounters count what went from the sidecar's zone to another
// (cross-zone traffic is what cloud providers bill): HTTP requests, TCP
// connections, and bytes each way.
type zoneCounters struct {
	requests, connections, sent, received atomic.Uint64
}

// countZone counts one outbound request or connection (rx bytes from the
// downstream, sent on; tx bytes back) by the zone pair of its last
// upstream host. Only where both zones are known: the sidecar's node
// locality and the endpoint's (passthrough destinations have none).
func (w *worker) countZone(st *state, c *cluster, dstZone string, rx, tx uint64, info *connInfo, tcp bool) {
	src := st.cfg.Node.Locality.Zone
	if c == nil || src == "" || dstZone == "" {
		return
	}
	if ls := st.listeners[info.listener]; ls == nil || ls.cfg.Direction != config.Outbound {
		return
	}
	k := zoneKey{src, dstZone, c.name}
	w.mu.Lock()
	cl := &c.perWorker[w.id]
	z := cl.zoneStats
	if z == nil || cl.zoneKey != k {
		if z = w.zones[k]; z == nil {
			z = &zoneCounters{}
			w.zones[k] = z
		}
		cl.zoneKey, cl.zoneStats = k, z
	}
	w.mu.Unlock()
	if tcp {
		z.connections.Add(1)
	} else {
		z.requests.Add(1)
	}
	z.sent.Add(rx)
	z.received.Add(tx)
}

var (
	// cross_zone ("true" or "false") repeats what the two zones say, since
	// PromQL cannot compare two labels: the cross-zone share is a sum by it.
	zoneLabels      = []string{"source_zone", "destination_zone", "upstream_cluster", "cross_zone"}
	zoneRequestDesc = prometheus.NewDesc("meshlet_zone_requests_total",
		"Outbound HTTP requests by the sidecar's zone and the zone of the endpoint that served them.", zoneLabels, nil)
	zoneConnDesc = prometheus.NewDesc("meshlet_zone_connections_total",
		"Outbound TCP-proxied connections by the sidecar's zone and the endpoint's.", zoneLabels, nil)
	zoneSentDesc = prometheus.NewDesc("meshlet_zone_sent_bytes_total",
		"Bytes sent to endpoints (request bodies, TCP payload) by zone pair.", zoneLabels, nil)
	zoneReceivedDesc = prometheus.NewDesc("meshlet_zone_received_bytes_total",
		"Bytes received from endpoints (response bodies, TCP payload) by zone pair.", zoneLabels, nil)
)

// collectZones sums the workers' zone counters.
func (c *collector) collectZones(ch chan<- prometheus.Metric) {
	type sum struct{ requests, connections, sent, received uint64 }
	sums := map[zoneKey]*sum{}
	for _, w := range c.s.workers {
		w.mu.Lock()
		for k, z := range w.zones {
			s := sums[k]
			if s == nil {
				s = &sum{}
				sums[k] = s
			}
			s.requests += z.requests.Load()
			s.connections += z.connections.Load()
			s.sent += z.sent.Load()
			s.received += z.received.Load()
		}
		w.mu.Unlock()
	}
	for k, s := range sums {
		cross := strconv.FormatBool(k.src != k.dst)
		ch <- prometheus.MustNewConstMetric(zoneRequestDesc, prometheus.CounterValue, float64(s.requests), k.src, k.dst, k.cluster, cross)
		ch <- prometheus.MustNewConstMetric(zoneConnDesc, prometheus.CounterValue, float64(s.connections), k.src, k.dst, k.cluster, cross)
		ch <- prometheus.MustNewConstMetric(zoneSentDesc, prometheus.CounterValue, float64(s.sent), k.src, k.dst, k.cluster, cross)
		ch <- prometheus.MustNewConstMetric(zoneReceivedDesc, prometheus.CounterValue, float64(s.received), k.src, k.dst, k.cluster, cross)
	}
}
