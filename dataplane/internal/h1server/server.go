// Package h1server is the data plane's hand-written HTTP/1.x server of
// plaintext connections: the connection loop with its idle and header
// deadlines, the response writer one connection's requests reuse, request
// bodies, the client-gone watch, the route timeout's alarm, the abort of a
// request's upstream exchange, the Date header and the drain of idle
// connections. It routes nothing: each request goes to the Handler of its
// connection, the data plane's router, through the Stream the handler made
// for the request's Writer. It imports nothing of the data plane; the wire
// format it reads is internal/h1.
package h1server

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
)

// Why this server, and what it does.
//
// net/http's server starts, for every request, a goroutine that reads the
// connection in the background so that a client going away cancels the
// request (the DC flag), and stops it when the handler returns: a goroutine
// start, a park and a wake-up per request, which the proxy benchmark showed
// as a large part of the CPU at low load. This server reads requests with
// net/http's parser on the connection's goroutine and hands them to the
// router (Stream.Serve, with the request's Writer), and watches for the
// client going away only once a request has taken longer than
// dcWatchDelay: most requests are answered before.
//
// What it does as net/http does: keep-alive (HTTP/1.1 by default, HTTP/1.0
// closes), Connection: close, request bodies by Content-Length or chunked
// (unread rest drained up to maxDrainBody, else the connection closes),
// Expect: 100-continue, a response framed by its Content-Length, else by
// its size when the handler ends before 4 KiB, else chunked (HTTP/1.1) or
// by closing (HTTP/1.0), trailers, HEAD, Upgrade through Hijack, a Date
// header, header read and idle timeouts, draining. What it does as Envoy
// does: every head but the plainest is checked before net/http reads it
// (internal/h1: framing, header syntax, Host, version, CONNECT, the
// header-line limit), headers over Options.MaxHeaderBytes get 431, and a
// refused request gets its status and the connection closed, after the
// handler was told (Handler.Rejected: its access-log line flagged DPE).

const (
	// dcWatchDelay is how long a request runs before the connection is
	// watched for the client going away.
	dcWatchDelay = 2 * time.Millisecond
	// maxDrainBody is how much of an unread request body is skipped to
	// keep the connection.
	maxDrainBody = 256 << 10
	// idleSlack is how old the idle deadline gets before it is moved
	// (armIdle).
	idleSlack = 30 * time.Second
)

// Options are what a Server's connections need of the data plane's worker
// that serves them.
type Options struct {
	// Draining is set once the data plane drains: a connection then
	// closes after its response, and Drain closes the idle ones.
	Draining *atomic.Bool
	// Clock is the worker's clock, which holds the requests' alarms
	// (route timeout, client-gone watch, idle checks).
	Clock *clock.Clock
	// Log gets a handler's panic.
	Log *slog.Logger
	// HTTPServer is what requests find under http.ServerContextKey (a
	// server that never serves).
	HTTPServer *http.Server
	// InfoKey is the context key under which a request finds its
	// connection's ConnOptions.Info.
	InfoKey any
	// MaxHeaderBytes bounds a request head (Envoy's
	// max_request_headers_kb): a longer one gets 431.
	MaxHeaderBytes int
	// IdleTimeout is how long a connection waits for its next request.
	IdleTimeout time.Duration
	// TimeoutGrace is how long a request whose timeout fired (route or
	// stream idle) may still write its response: a client that reads
	// nothing longer loses its connection, as Envoy resets the stream.
	TimeoutGrace time.Duration
}

// ConnOptions are one connection's, for Serve.
type ConnOptions struct {
	// Context is the data plane server's: its values are every request's
	// (under the connection's own), and its end ends the request in
	// flight. The connection's requests do not derive from its
	// cancellation.
	Context context.Context
	// TCP is the accepted socket; Detected holds what protocol detection
	// read of it, read first; Raw is the socket's writes (rawio.IO), and
	// its reads too where it is a rawio.Queuer (a write can then be
	// queued for the next read).
	TCP      *net.TCPConn
	Detected *bufio.Reader
	Raw      io.Writer
	// RemoteAddr is the RemoteAddr of the connection's requests.
	RemoteAddr string
	// Info is the connection's value for its requests' contexts, under
	// Options.InfoKey (boxed once per connection).
	Info any
	// HeadersTimeout is the listener's request_headers_timeout (0: none).
	HeadersTimeout time.Duration
	// MaxHeaders is the listener's max_headers_count.
	MaxHeaders int
}

// Handler is the router's side of one connection (the data plane's
// router, per connection).
type Handler interface {
	// NewStream returns the router's state for a new writer's requests,
	// and the writer, a zero Writer the stream holds (one allocation for
	// both), which the server readies before its first request. The
	// server asks once per connection, and again only after a request
	// may have left its writer held (Stream.Held, a request body, an
	// upgrade): a request costs no allocation of either.
	NewStream() (Stream, *Writer)
	// Rejected is told of a request the server refuses, before its
	// answer goes out (the access-log line and the protocol-error
	// count, which a client that has its answer then finds).
	Rejected(r *h1.Reject)
}

// Stream is the router's state for the requests of one Writer.
type Stream interface {
	// Serve handles req, the request in flight, on the stream's Writer
	// (http.ErrAbortHandler aborts the response; another panic is logged
	// and aborts it as well).
	Serve(req *http.Request)
	// Ended is called once the request is over (its response finished,
	// or aborted), before the next begins: what the router watched it with
	// (its stream idle timeout) stops.
	Ended()
	// Held reports whether something the router gave the request (its
	// context to a transport other than one that ends with it, a copy of
	// the request) may outlive the request: the next request then gets
	// a new writer and context.
	Held() bool
	// HeaderLent reports whether the request's header map went to a
	// transport that may read it after the request ends: the next
	// request then gets a new one (and a new URL).
	HeaderLent() bool
}

// Server serves the HTTP/1 connections of one data-plane worker.
type Server struct {
	o Options
	// mu guards conns, the connections being served (Drain).
	mu    sync.Mutex
	conns map[*Conn]struct{}
	date  atomic.Pointer[cachedDate]
}

// New returns a Server with the options o.
func New(o Options) *Server {
	return &Server{o: o, conns: map[*Conn]struct{}{}}
}

// Len reports how many connections the server is serving.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Queuing reports how many of the connections it serves queue a
// response's last bytes for the next request's read (their socket is a
// rawio.Queuer: ConnOptions.Raw), saving a system call per request.
func (s *Server) Queuing() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if c.q != nil {
			n++
		}
	}
	return n
}

// Drain closes the server's idle connections (the busy ones close after
// their response, Options.Draining being set); force closes all of them.
func (s *Server) Drain(force bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if force || c.idle.Load() {
			_ = c.tcp.SetReadDeadline(rawio.ALongTimeAgo)
		}
		if force {
			c.tcp.Close()
		}
	}
}

// httpDate is the Date header value, formatted once a second per worker.
func (s *Server) httpDate() string {
	now := time.Now().Unix()
	if d := s.date.Load(); d != nil && d.sec == now {
		return d.text
	}
	d := &cachedDate{sec: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	s.date.Store(d)
	return d.text
}

type cachedDate struct {
	sec  int64
	text string
}

// connCtx is the context of a connection's requests: the server's
// values (it embeds the server's context without its cancellation) and
// the connection's: http.ServerContextKey and the connection's info,
// each boxed once. It is never done.
type connCtx struct {
	context.Context
	srv     any // *http.Server
	infoKey any
	info    any
}

// Value returns the connection's values, else the server context's.
func (x *connCtx) Value(key any) any {
	switch key {
	case x.infoKey:
		return x.info
	case http.ServerContextKey:
		return x.srv
	}
	return x.Context.Value(key)
}

// Done is nil: the context is never cancelled.
func (x *connCtx) Done() <-chan struct{} { return nil }

// Err is nil: the context is never cancelled.
func (x *connCtx) Err() error { return nil }
