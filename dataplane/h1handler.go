package dataplane

import (
	"net/http"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1server"
	"github.com/meshlet-dev/meshlet/dataplane/internal/logsink"
	"github.com/meshlet-dev/meshlet/lb/accesslog"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// The router's side of the fast HTTP/1 server (internal/h1server): per
// connection its handler (h1Downstream: the upstream pool's response
// storage, the log line of a refused request), per writer its stream
// (h1Stream: the router's state of the writer's requests), each holding
// the server's own state of the connection or writer, so that neither
// costs an allocation of its own.

// maxHeadersFor is a listener's header-line limit (Envoy's
// common_http_protocol_options.max_headers_count).
func maxHeadersFor(ls *listenerState) int {
	if ls != nil {
		return int(ls.cfg.MaxHeadersCount)
	}
	return config.DefaultMaxHeadersCount
}

// serveH1 serves a detected plaintext HTTP/1.x connection with the fast
// server until it closes.
func (w *worker) serveH1(sc *sniffedConn) {
	d := &h1Downstream{w: w, info: sc.info}
	d.store.Hdr = &d.respHdr
	ls := w.s.state.Load().listeners[sc.info.listener]
	o := h1server.ConnOptions{Context: w.s.ctx, TCP: sc.TCPConn, Detected: sc.r, Raw: sc.w, RemoteAddr: sc.info.src, Info: sc.info,
		HeadersTimeout: config.DefaultRequestHeadersTimeout, MaxHeaders: maxHeadersFor(ls)}
	if ls != nil {
		o.HeadersTimeout, d.streamIdle = ls.cfg.RequestHeadersTimeout, ls.cfg.StreamIdleTimeout
	}
	w.h1.Serve(&d.conn, d, o)
}

// h1Downstream is the router's handler of one fast-server connection
// (h1server.Handler).
type h1Downstream struct {
	// conn is the server's state of the connection.
	conn h1server.Conn
	w    *worker
	info connInfo
	// streamIdle is the listener's stream_idle_timeout (0: none).
	streamIdle time.Duration
	// store is the storage of its requests' upstream responses (the
	// HTTP/1.1 pool's), with respHdr their header map: reused from
	// request to request, as a request is done with its response before
	// the next is read, and from writer to writer.
	store   respStore
	respHdr h1.HeadScratch
}

// NewStream is a new writer's stream: the writer is in it.
func (d *h1Downstream) NewStream() (h1server.Stream, *h1server.Writer) {
	s := &h1Stream{conn: d}
	s.idle.s, s.idle.w, s.idle.h1 = &s.scratch, d.w, &s.rw
	return s, &s.rw
}

// Rejected writes a refused request's access-log line and, for a
// protocol error, counts it on the listener.
func (d *h1Downstream) Rejected(r *h1.Reject) {
	text := http.StatusText(r.Code)
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	proto := r.Proto
	if proto == "" {
		proto = "HTTP/1.1"
	}
	w := d.w
	e := accesslog.Entry{StartTime: time.Now(), Method: dash(r.Method), Path: dash(r.Target), Protocol: proto, ResponseCode: r.Code,
		Flags: r.Flags, UpstreamServiceTime: -1, Authority: r.Authority, BytesSent: uint64(len(text))}
	w.s.access.Load().Write(w.id, &e, logsink.Extra{Details: r.Details, Failure: r.Why, DownstreamPeer: d.info.peer})
	if r.Flags&respflag.DPE != 0 {
		w.s.countProtocolError(w.s.state.Load(), d.info)
	}
}

// h1Stream is the router's state for the requests of one fast-server
// writer (h1server.Stream), with the writer: one allocation, made once
// per connection and again only after a request may have left it held.
type h1Stream struct {
	rw   h1server.Writer
	conn *h1Downstream
	// scratch is the router's state of the request in flight, zeroed for
	// each; idle its stream idle timeout.
	scratch httpScratch
	idle    streamIdle
}

// Serve routes req, answering on the stream's writer.
func (s *h1Stream) Serve(req *http.Request) {
	s.scratch = httpScratch{}
	if t := s.conn.streamIdle; t > 0 {
		s.idle.arm(t)
	}
	s.conn.w.serveRequest(&s.rw, req, &s.scratch, s, nil)
}

// Ended stops the request's stream idle timeout.
func (s *h1Stream) Ended() { s.idle.stop() }

// Held reports whether the request's context went somewhere other than
// the HTTP/1.1 pool's own exchange (activeStream.ctxShared), which may
// hold it, or what shares the stream's memory, after the request.
func (s *h1Stream) Held() bool { return s.scratch.ex.ctxShared }

// target is the request's target as read (activeStream.target).
func (s *h1Stream) target() string { return s.scratch.ex.target }

// HeaderLent reports whether the request itself (its header map) went to
// a transport that may read it after the request (activeStream.headerLent).
func (s *h1Stream) HeaderLent() bool { return s.scratch.ex.headerLent }
