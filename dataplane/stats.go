package dataplane

import (
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// clusterCounter indexes the per-worker counters of one cluster. Names are
// Envoy's cluster statistics (cluster.<name>.<stat>).
type clusterCounter int

const (
	cUpstreamRqTotal clusterCounter = iota
	cUpstreamRqCompleted
	cUpstreamRq1xx
	cUpstreamRq2xx
	cUpstreamRq3xx
	cUpstreamRq4xx
	cUpstreamRq5xx
	cUpstreamRqTimeout
	cUpstreamRqPerTryTimeout
	cUpstreamRqRetry
	cUpstreamRqRetrySuccess
	cUpstreamRqRetryOverflow
	cUpstreamRqRetryLimitExceeded
	cUpstreamRqPendingOverflow
	cUpstreamRqRxReset
	cUpstreamRqTxReset
	cUpstreamCxTotal
	cUpstreamCxConnectFail
	cUpstreamCxConnectTimeout
	cUpstreamCxOverflow
	cUpstreamCxDestroy
	cUpstreamCxNoneHealthy
	cUpstreamCxRxBytesTotal
	cUpstreamCxTxBytesTotal
	cUpstreamCxIdleTimeout
	cUpstreamCxProtocolError
	numClusterCounters
)

var clusterCounterNames = [numClusterCounters]string{
	"upstream_rq_total", "upstream_rq_completed",
	"upstream_rq_1xx", "upstream_rq_2xx", "upstream_rq_3xx", "upstream_rq_4xx", "upstream_rq_5xx",
	"upstream_rq_timeout", "upstream_rq_per_try_timeout", "upstream_rq_retry", "upstream_rq_retry_success",
	"upstream_rq_retry_overflow", "upstream_rq_retry_limit_exceeded", "upstream_rq_pending_overflow",
	"upstream_rq_rx_reset", "upstream_rq_tx_reset",
	"upstream_cx_total", "upstream_cx_connect_fail", "upstream_cx_connect_timeout", "upstream_cx_overflow",
	"upstream_cx_destroy", "upstream_cx_none_healthy", "upstream_cx_rx_bytes_total", "upstream_cx_tx_bytes_total",
	"upstream_cx_idle_timeout", "upstream_cx_protocol_error",
}

// clusterGauge indexes per-worker gauges (each worker adds and subtracts;
// the sum is the cluster's value).
type clusterGauge int

const (
	gUpstreamRqActive clusterGauge = iota
	gUpstreamRqPendingActive
	gUpstreamCxActive
	numClusterGauges
)

var clusterGaugeNames = [numClusterGauges]string{"upstream_rq_active", "upstream_rq_pending_active", "upstream_cx_active"}

// clusterStats is one worker's shard of one cluster's statistics. Only its
// worker writes it (atomically, so scrapes can read it).
type clusterStats struct {
	counters [numClusterCounters]atomic.Uint64
	gauges   [numClusterGauges]atomic.Int64
	// lb holds this worker's lb_* counters (the Picker adds to it).
	lb lb.Stats
	// tcpIdleTimeout counts TCP-proxied connections to the cluster closed
	// by the idle timeout: Envoy's tcp.<stat_prefix>.idle_timeout, whose
	// stat_prefix Istio sets to the cluster name.
	tcpIdleTimeout atomic.Uint64
}

func (s *clusterStats) inc(c clusterCounter)           { s.counters[c].Add(1) }
func (s *clusterStats) add(c clusterCounter, n uint64) { s.counters[c].Add(n) }
func (s *clusterStats) gauge(g clusterGauge, d int64)  { s.gauges[g].Add(d) }
func (s *clusterStats) countCode(code int) {
	s.inc(cUpstreamRq1xx + clusterCounter(min(max(code/100, 1), 5)-1))
}
func (s *clusterStats) get(c clusterCounter) uint64   { return s.counters[c].Load() }
func (s *clusterStats) getGauge(g clusterGauge) int64 { return s.gauges[g].Load() }

// durationBucketsMs are Istio's request-duration histogram buckets.
var durationBucketsMs = [...]float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// requestKey is the label set of Istio's request metrics.
type requestKey struct {
	reporter   string // "source" (outbound) or "destination" (inbound)
	service    string // destination service: the route's host or destination
	cluster    string
	protocol   string // "http", "grpc" or "tcp"
	code       int
	flags      respflag.Flags
	grpcStatus string
	// Identities ("" renders "unknown") and "mutual_tls" or "none".
	sourcePrincipal, destPrincipal, security string
}

// requestStats is one worker's istio_requests_total and
// istio_request_duration_milliseconds for one label set.
type requestStats struct {
	count   atomic.Uint64
	buckets [len(durationBucketsMs)]atomic.Uint64 // non-cumulative
	sumUs   atomic.Uint64
}

func (r *requestStats) observe(d time.Duration) {
	r.count.Add(1)
	r.sumUs.Add(uint64(d.Microseconds()))
	ms := float64(d) / float64(time.Millisecond)
	for i, b := range durationBucketsMs {
		if ms <= b {
			r.buckets[i].Add(1)
			return
		}
	}
}

// principals fills the identity labels of a request's metrics (Istio's
// source_principal, destination_principal, connection_security_policy):
// inbound, the mTLS peer and this sidecar; outbound, this sidecar and the
// upstream's verified identity.
func (w *worker) principals(k *requestKey, ls *listenerState, info connInfo, upMTLS bool, upstreamPeer string) {
	self := ""
	if w.s.opts.Identity != nil {
		self = w.s.opts.Identity.Current().ID.String()
	}
	k.reporter, k.security = "source", "none"
	k.sourcePrincipal, k.destPrincipal = self, upstreamPeer
	if upMTLS {
		k.security = "mutual_tls"
	}
	if ls != nil && ls.cfg.Direction == config.Inbound {
		k.reporter = "destination"
		k.sourcePrincipal, k.destPrincipal = info.peer, self
		k.security = "none"
		if info.mtls {
			k.security = "mutual_tls"
		}
	}
}

// httpStats are one listener's HTTP connection-manager statistics:
// Envoy's http.<stat_prefix>.<stat>, the listener's name standing for the
// prefix. They are the Server's, kept across reloads.
type httpStats struct {
	// downstreamCxProtocolError counts downstream connections closed for
	// an HTTP/1 protocol error (the requests flagged DPE).
	downstreamCxProtocolError atomic.Uint64
	// downstreamRqIdleTimeout counts requests ended by the stream idle
	// timeout (flag SI).
	downstreamRqIdleTimeout atomic.Uint64
	// downstreamRqTooManyPrematureResets counts HTTP/2 connections
	// closed for resetting too many of their streams early.
	downstreamRqTooManyPrematureResets atomic.Uint64
}

// httpStatsFor returns the statistics of the listener named name.
func (s *Server) httpStatsFor(name string) *httpStats {
	if v, ok := s.httpStats.Load(name); ok {
		return v.(*httpStats)
	}
	v, _ := s.httpStats.LoadOrStore(name, new(httpStats))
	return v.(*httpStats)
}

// countProtocolError counts a downstream protocol error on the listener
// of info.
func (s *Server) countProtocolError(st *state, info connInfo) {
	s.listenerHTTPStats(st, info).downstreamCxProtocolError.Add(1)
}

// countStreamIdleTimeout counts a request ended by the stream idle timeout
// on the listener of info.
func (s *Server) countStreamIdleTimeout(st *state, info connInfo) {
	s.listenerHTTPStats(st, info).downstreamRqIdleTimeout.Add(1)
}

// listenerHTTPStats are the HTTP statistics of the listener of info.
func (s *Server) listenerHTTPStats(st *state, info connInfo) *httpStats {
	name := info.listener
	if ls := st.listeners[info.listener]; ls != nil {
		name = ls.cfg.Name
	}
	return s.httpStatsFor(name)
}
