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
// # The traffic path, and what owns each step
//
// Steps whose code needs no state of the server's are internal packages,
// whose imports the compiler keeps one-way (they import nothing of
// dataplane); the rest are files of this package.
//
//   - start, reload, drain, the main loop and its state: server.go; the
//     sockets of each worker (SO_REUSEPORT): listen.go;
//   - accept, the connection cap, original destination and dispatch:
//     worker.go (acceptLoop, serveConn, dispatch), limits.go (the cap);
//     protocol detection: sniff.go (detect);
//   - raw socket reads and writes under every connection: internal/rawio;
//   - inbound mutual TLS (handshake, peer authorization) and the mesh's
//     upstream TLS: mtls.go;
//   - opaque TCP (one upstream per connection, idle timeout): tcp.go, with
//     splice_linux.go (pipes);
//   - the HTTP/1 server (connection loop with its idle and header
//     deadlines, the response writer its requests reuse, request bodies,
//     the client-gone watch, the route timeout's alarm, the upstream
//     abort, the Date header, the drain of idle connections, a refused
//     request's answer): internal/h1server, one per worker; the wire
//     format it reads (request-head checks with Envoy's HTTP/1 codec
//     refusals, fast request and response head readers): internal/h1;
//     the router's side of it (h1handler.go: serveH1, a connection's
//     handler with the pool's response store and a refused request's
//     log line, a writer's stream with the router's state, whose Serve
//     enters serveRequest with the writer as the request's handle);
//   - the net/http fallback of the HTTP/1 server (Options.HTTP1Server: a
//     net/http server per worker, fed by dispatch): h1fallback.go;
//   - HTTP/2 downstream (h2c and the mesh hop): meshlet's own server,
//     internal/h2, entered at serveStream (http.go), the generic path the
//     net/http fallback's requests take too; its rapid-reset accounting:
//     h2guard.go;
//   - the router: route match (routematch.go) and a route's table of
//     rules, from RDS (routetable.go: routeByTable); the handler, route and
//     retry loop, per-try timeouts and failure classification (http.go:
//     serveRequest, route, tryOnce, classifyFailure); header handling,
//     proxying the response and upgrades (proxy.go: proxy);
//   - per-request timeouts: the route timeout (http.go; a fast-server
//     request's is its writer's alarm, internal/h1server) and the stream
//     idle timeout (streamidle.go), alarms on the worker's clock
//     (internal/clock);
//   - upstream: the choice of a worker's transport per cluster, dial with
//     the connect timeout and max_connections, counted connections, the
//     plain HTTP/1.1 / h2c transport (upstream.go); the HTTP/1.1 pool and
//     Envoy's response framing rules (h1pool.go, which the router hands
//     the fast server request's stream, or the upstream abort internal/h2
//     fires for a serveStream request, explicitly: h1Pool.send); the mesh
//     (mTLS) transports (mtls.go: newMeshTransport, dialHost), HTTP/2 by
//     internal/h2's client;
//   - health checks: health.go; the app's probes behind the sidecar:
//     appprobe.go;
//   - observation: the access-log writer (internal/logsink; the line's
//     format is lb/accesslog), statistics (internal/stats; the identity
//     labels in stats.go), the Prometheus collector (prometheus.go), the
//     admin, health and metrics endpoints (admin.go).
package dataplane
