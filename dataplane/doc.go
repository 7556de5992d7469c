// Package dataplane is the sidecar's proxy: per-CPU workers that accept the
// app's (outbound) and peers' (inbound) connections, detect the protocol,
// route by original destination and host, pick an upstream through lb, and
// proxy opaque TCP or HTTP with Envoy's retry, timeout and circuit-breaker
// behaviour, explaining every failure with Envoy's response flags in the
// access log and the metrics.
//
// A Server runs from a config.Config. One main-loop goroutine owns the
// mutable cluster state (endpoints, health-check and outlier results) and
// publishes immutable lb snapshots; workers read them with atomic loads and
// never share a lock with each other on the request path.
package dataplane
