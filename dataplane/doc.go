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
//
// # The traffic path, and the file that owns each step
//
//   - start, reload, drain, the main loop and its state: server.go;
//     the sockets of each worker (SO_REUSEPORT): listen.go;
//   - accept, the connection cap, original destination, protocol
//     detection and dispatch: worker.go (acceptLoop, serveConn, detect,
//     dispatch), limits.go (the cap);
//   - inbound mutual TLS (handshake, peer authorization) and the mesh's
//     upstream TLS: mtls.go;
//   - opaque TCP (one upstream per connection, idle timeout): tcp.go, with
//     splice_linux.go (pipes) and internal/rawio (raw socket I/O);
//   - the HTTP/1 server (connection loop, request reading, response
//     writer, client-gone watch): h1server.go; the request-head checks
//     (Envoy's HTTP/1 codec refusals): internal/h1 (head.go), the refusal's answer: h1reject.go;
//   - the net/http fallback of the HTTP/1 server (Options.HTTP1Server: a
//     net/http server per worker, fed by dispatch): h1fallback.go;
//   - HTTP/2 downstream: x/net's server, entered at serveStream (http.go),
//     the generic path the net/http fallback's requests take too; its
//     rapid-reset accounting: h2guard.go;
//   - per-request timeouts: the route timeout and the stream idle timeout
//     (streamidle.go) on the worker's clock (internal/clock);
//   - the router (route match, retries, per-try timeouts, failure
//     classification): http.go (serveRequest, route, tryOnce); header
//     handling, proxying and upgrades: proxy.go (proxy);
//   - upstream connections: dial, connect circuit breaker and counted
//     connections in http.go (worker.dial); the HTTP/1.1 pool and Envoy's
//     response framing rules: h1pool.go, with internal/h1 (fast.go: the fast response
//     reader); the choice of a worker's transport per cluster: worker.go
//     (transport); plain HTTP/1.1 and h2c: http.go (newUpstreamTransport);
//     mesh (mTLS) ones: mtls.go (newMeshTransport, dialHost);
//   - health checks: health.go; the app's probes behind the sidecar:
//     appprobe.go;
//   - observation: the access log (internal/logsink), statistics and
//     Prometheus names (internal/stats; the label rules in stats.go), the admin, health and metrics endpoints
//     (admin.go).
package dataplane
