package dataplane

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/meshlet-dev/meshlet/config"
)

// The servers of plaintext downstream HTTP/1 connections
// (Options.HTTP1Server).
const (
	// HTTP1ServerMeshlet is the hand-written server (internal/h1server), the
	// default: Envoy's HTTP/1 codec refusals and fewer goroutine hand-offs
	// per request.
	HTTP1ServerMeshlet = "meshlet"
	// HTTP1ServerNetHTTP is net/http's server with the same handler, kept
	// so that a Go release that breaks the hand-written server's
	// assumptions about net/http can be bisected against it.
	HTTP1ServerNetHTTP = "net/http"
)

// checkHTTP1Server validates Options.HTTP1Server ("" is the default).
func checkHTTP1Server(name string) error {
	switch name {
	case "", HTTP1ServerMeshlet, HTTP1ServerNetHTTP:
		return nil
	}
	return fmt.Errorf("dataplane: Options.HTTP1Server %q: want %q (the default) or %q", name, HTTP1ServerMeshlet, HTTP1ServerNetHTTP)
}

// h1Fallback is one net/http server of a worker, fed by its dispatch.
// Its requests are not full duplex: net/http reads what is left of an
// upload (up to 256 KiB) before it sends a response that came before the
// upload's end, which the fast server sends at once. Full duplex would
// send it, but net/http then leaves a background read pending after a
// body it discarded, and a pipelined next request panics its connection
// ("invalid concurrent Body.Read call").
type h1Fallback struct {
	srv *http.Server
	l   *connListener
}

// serveNetHTTP hands a detected HTTP/1 connection of listener ls to the
// worker's net/http server and returns once that server closed it, so
// that the connection stays counted (the downstream cap, Drain) as long
// as the fast server's would.
func (w *worker) serveNetHTTP(sc *sniffedConn, ls *listenerState) {
	headers := config.DefaultRequestHeadersTimeout
	if ls != nil {
		headers = ls.cfg.RequestHeadersTimeout
	}
	fb := w.fallback(headers)
	if fb == nil {
		sc.Close() // draining: as the fast server, serve nothing more
		return
	}
	fc := &fallbackConn{Conn: sc, tcp: sc.TCPConn, info: sc.info, closed: make(chan struct{})}
	if !fb.l.deliver(fc) {
		sc.Close()
		return
	}
	<-fc.closed
}

// fallback returns the worker's net/http server whose ReadHeaderTimeout is
// headers, started on first use (net/http's timeout is per server, a
// listener's request_headers_timeout per listener); nil once the worker
// drains.
func (w *worker) fallback(headers time.Duration) *h1Fallback {
	w.fbMu.Lock()
	defer w.fbMu.Unlock()
	if w.fbStopped {
		return nil
	}
	if fb := w.fb[headers]; fb != nil {
		return fb
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true) // prior-knowledge HTTP/2 never reaches it (detect)
	ctx := w.s.ctx
	fb := &h1Fallback{l: newConnListener(fmt.Sprintf("worker %d HTTP/1 fallback", w.id))}
	fb.srv = &http.Server{
		Handler:           http.HandlerFunc(w.serveStream),
		ReadHeaderTimeout: headers,
		IdleTimeout:       h1IdleTimeout,
		// net/http reads up to 4 KiB past it before answering 431.
		MaxHeaderBytes: maxRequestHeaderBytes,
		ErrorLog:       slog.NewLogLogger(w.s.log.Handler(), slog.LevelDebug),
		Protocols:      protocols,
		// A proxy passes OPTIONS * on, as the fast server does.
		DisableGeneralOptionsHandler: true,
		// The server's stop ends the requests in flight, as the fast
		// server's stop does (serverStopped).
		BaseContext: func(net.Listener) context.Context { return ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if fc, ok := c.(*fallbackConn); ok {
				return context.WithValue(ctx, connInfoKey{}, fc.info)
			}
			return ctx
		},
	}
	go func() { _ = fb.srv.Serve(fb.l) }()
	if w.fb == nil {
		w.fb = map[time.Duration]*h1Fallback{}
	}
	w.fb[headers] = fb
	return fb
}

// drainFallback stops the worker's net/http servers gracefully: no new
// connections, keep-alive off, idle connections closed; requests in
// flight finish (Server.Drain waits for them up to the drain timeout).
func (w *worker) drainFallback() {
	for _, fb := range w.stopFallback() {
		go func() { _ = fb.srv.Shutdown(context.Background()) }()
	}
}

// closeFallback closes the worker's net/http servers and their
// connections (what the drain left; also ends the Shutdown calls).
func (w *worker) closeFallback() {
	for _, fb := range w.stopFallback() {
		_ = fb.srv.Close()
	}
}

// stopFallback keeps new connections from the net/http servers and
// returns them.
func (w *worker) stopFallback() []*h1Fallback {
	w.fbMu.Lock()
	defer w.fbMu.Unlock()
	w.fbStopped = true
	out := make([]*h1Fallback, 0, len(w.fb))
	for _, fb := range w.fb {
		out = append(out, fb)
	}
	return out
}

// fallbackConn is a dispatched connection as net/http's server sees it:
// its sniffed bytes first (sniffedConn), and nothing of *net.TCPConn's
// but CloseWrite (its ReadFrom and WriteTo would bypass the sniffed
// reader). Its close tells serveNetHTTP the server is done with it.
type fallbackConn struct {
	net.Conn
	tcp       *net.TCPConn
	info      connInfo
	closeOnce sync.Once
	closed    chan struct{}
}

// CloseWrite half-closes the connection (net/http does, before closing a
// connection whose request body it left unread).
func (c *fallbackConn) CloseWrite() error { return c.tcp.CloseWrite() }

// Close closes the connection and releases serveNetHTTP.
func (c *fallbackConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() { close(c.closed) })
	return err
}

// connListener is a net.Listener whose connections come from a worker's
// dispatch (deliver) rather than from a socket.
type connListener struct {
	addr      listenerAddr
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newConnListener(name string) *connListener {
	return &connListener{addr: listenerAddr(name), conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to the server's Accept; false when the listener is
// closed (the caller still owns c).
func (l *connListener) deliver(c net.Conn) bool {
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept returns the next delivered connection, or net.ErrClosed once the
// listener is closed.
func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, fmt.Errorf("dataplane: accept on %s: %w", l.addr, net.ErrClosed)
	}
}

// Close stops Accept and deliver.
func (l *connListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

// Addr names the listener (it has no socket of its own).
func (l *connListener) Addr() net.Addr { return l.addr }

// listenerAddr is a connListener's name as a net.Addr.
type listenerAddr string

// Network is "dispatch": the connections come from a worker's dispatch.
func (a listenerAddr) Network() string { return "dispatch" }

func (a listenerAddr) String() string { return string(a) }
