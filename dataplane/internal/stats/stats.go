// Package stats holds the data plane's statistics, one shard per worker:
// Envoy's cluster and HTTP connection-manager counters and gauges and
// Istio's request metrics, written with atomics by the worker that owns
// the shard and summed when scraped.
package stats

import (
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// Counter indexes the per-worker counters of one cluster. Names are
// Envoy's cluster statistics (cluster.<name>.<stat>).
type Counter int

// The counters (CounterNames has their names).
const (
	UpstreamRqTotal Counter = iota
	UpstreamRqCompleted
	UpstreamRq1xx
	UpstreamRq2xx
	UpstreamRq3xx
	UpstreamRq4xx
	UpstreamRq5xx
	UpstreamRqTimeout
	UpstreamRqPerTryTimeout
	UpstreamRqRetry
	UpstreamRqRetrySuccess
	UpstreamRqRetryOverflow
	UpstreamRqRetryLimitExceeded
	UpstreamRqPendingOverflow
	UpstreamRqRxReset
	UpstreamRqTxReset
	UpstreamCxTotal
	UpstreamCxConnectFail
	UpstreamCxConnectTimeout
	UpstreamCxOverflow
	UpstreamCxDestroy
	UpstreamCxNoneHealthy
	UpstreamCxRxBytesTotal
	UpstreamCxTxBytesTotal
	UpstreamCxIdleTimeout
	UpstreamCxProtocolError
	NumCounters // how many there are
)

// CounterNames are the counters' Envoy names.
var CounterNames = [NumCounters]string{
	"upstream_rq_total", "upstream_rq_completed",
	"upstream_rq_1xx", "upstream_rq_2xx", "upstream_rq_3xx", "upstream_rq_4xx", "upstream_rq_5xx",
	"upstream_rq_timeout", "upstream_rq_per_try_timeout", "upstream_rq_retry", "upstream_rq_retry_success",
	"upstream_rq_retry_overflow", "upstream_rq_retry_limit_exceeded", "upstream_rq_pending_overflow",
	"upstream_rq_rx_reset", "upstream_rq_tx_reset",
	"upstream_cx_total", "upstream_cx_connect_fail", "upstream_cx_connect_timeout", "upstream_cx_overflow",
	"upstream_cx_destroy", "upstream_cx_none_healthy", "upstream_cx_rx_bytes_total", "upstream_cx_tx_bytes_total",
	"upstream_cx_idle_timeout", "upstream_cx_protocol_error",
}

// Gauge indexes per-worker gauges (each worker adds and subtracts;
// the sum is the cluster's value).
type Gauge int

// The gauges (GaugeNames has their names).
const (
	UpstreamRqActive Gauge = iota
	UpstreamRqPendingActive
	UpstreamCxActive
	NumGauges // how many there are
)

// GaugeNames are the gauges' Envoy names.
var GaugeNames = [NumGauges]string{"upstream_rq_active", "upstream_rq_pending_active", "upstream_cx_active"}

// Cluster is one worker's shard of one cluster's statistics. Only its
// worker writes it (atomically, so scrapes can read it).
type Cluster struct {
	counters [NumCounters]atomic.Uint64
	gauges   [NumGauges]atomic.Int64
	// LB holds this worker's lb_* counters (the Picker adds to it).
	LB lb.Stats
	// TCPIdleTimeout counts TCP-proxied connections to the cluster closed
	// by the idle timeout: Envoy's tcp.<stat_prefix>.idle_timeout, whose
	// stat_prefix Istio sets to the cluster name.
	TCPIdleTimeout atomic.Uint64
}

// Inc adds one to counter c.
func (s *Cluster) Inc(c Counter) { s.counters[c].Add(1) }

// Add adds n to counter c.
func (s *Cluster) Add(c Counter, n uint64) { s.counters[c].Add(n) }

// AddGauge moves gauge g by d.
func (s *Cluster) AddGauge(g Gauge, d int64) { s.gauges[g].Add(d) }

// CountCode counts a response status in its class (upstream_rq_<N>xx).
func (s *Cluster) CountCode(code int) {
	s.Inc(UpstreamRq1xx + Counter(min(max(code/100, 1), 5)-1))
}

// Get is counter c's value in this shard.
func (s *Cluster) Get(c Counter) uint64 { return s.counters[c].Load() }

// GaugeValue is gauge g's value in this shard.
func (s *Cluster) GaugeValue(g Gauge) int64 { return s.gauges[g].Load() }

// DurationBucketsMs are Istio's request-duration histogram buckets.
var DurationBucketsMs = [...]float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// RequestKey is the label set of Istio's request metrics.
type RequestKey struct {
	Reporter   string // "source" (outbound) or "destination" (inbound)
	Service    string // destination service: the route's host or destination
	Cluster    string
	Protocol   string // "http", "grpc" or "tcp"
	Code       int
	Flags      respflag.Flags
	GRPCStatus string
	// Identities ("" renders "unknown") and "mutual_tls" or "none".
	SourcePrincipal, DestPrincipal, Security string
}

// Request is one worker's istio_requests_total and
// istio_request_duration_milliseconds for one label set.
type Request struct {
	Count   atomic.Uint64
	Buckets [len(DurationBucketsMs)]atomic.Uint64 // non-cumulative
	SumUs   atomic.Uint64
}

// Observe counts one request that took d.
func (r *Request) Observe(d time.Duration) {
	r.Count.Add(1)
	r.SumUs.Add(uint64(d.Microseconds()))
	ms := float64(d) / float64(time.Millisecond)
	for i, b := range DurationBucketsMs {
		if ms <= b {
			r.Buckets[i].Add(1)
			return
		}
	}
}

// HTTP are one listener's HTTP connection-manager statistics:
// Envoy's http.<stat_prefix>.<stat>, the listener's name standing for the
// prefix. They are the Server's, kept across reloads.
type HTTP struct {
	// DownstreamCxProtocolError counts downstream connections closed for
	// an HTTP/1 protocol error (the requests flagged DPE).
	DownstreamCxProtocolError atomic.Uint64
	// DownstreamRqIdleTimeout counts requests ended by the stream idle
	// timeout (flag SI).
	DownstreamRqIdleTimeout atomic.Uint64
	// DownstreamRqTooManyPrematureResets counts HTTP/2 connections
	// closed for resetting too many of their streams early.
	DownstreamRqTooManyPrematureResets atomic.Uint64
}
