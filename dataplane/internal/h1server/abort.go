package h1server

import (
	"net"
	"sync"

	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
)

// UpstreamAbort cuts a request's upstream connection (a deadline in the
// past) when the request ends early, as a context.AfterFunc on the
// request's context would, without the five allocations and the
// registration on the context that one costs per exchange. Each Writer
// has one for its requests (Writer.Abort); the zero value, for an
// exchange without a server request, watches nothing until Watch.
type UpstreamAbort struct {
	mu    sync.Mutex
	conn  net.Conn
	fired bool
}

// Watch makes conn the connection to cut; it is cut now if the request
// has already ended.
func (a *UpstreamAbort) Watch(conn net.Conn) {
	a.mu.Lock()
	a.conn = conn
	if a.fired {
		_ = conn.SetDeadline(rawio.ALongTimeAgo)
	}
	a.mu.Unlock()
}

// reset readies the abort for the writer's next request.
func (a *UpstreamAbort) reset() {
	a.mu.Lock()
	a.conn, a.fired = nil, false
	a.mu.Unlock()
}

// Release stops watching; it reports false if the connection was cut
// (as a context.AfterFunc's stop reports that its function ran).
func (a *UpstreamAbort) Release() bool {
	a.mu.Lock()
	cut := a.fired && a.conn != nil
	a.conn = nil
	a.mu.Unlock()
	return !cut
}

// Fire cuts the watched connection, and any watched later.
func (a *UpstreamAbort) Fire() {
	a.mu.Lock()
	a.fired = true
	if a.conn != nil {
		// Under mu: once Release returns, no cut lands late on a
		// connection given back its deadline (keepCancelled).
		_ = a.conn.SetDeadline(rawio.ALongTimeAgo)
	}
	a.mu.Unlock()
}
