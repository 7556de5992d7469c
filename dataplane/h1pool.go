// This file is over 600 lines: the pool, its reuse checks (peek, quiet
// idle) and Envoy's response framing rules share one connection type
// (h1Conn) and its invariants; the head readers it uses are internal/h1.

package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1server"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
)

// h1Pool is a worker's HTTP/1.1 keep-alive pool for one plaintext cluster,
// for the common request: one without a body, or with a small one
// (maxPooledBody) read whole first. The request's own goroutine writes the
// request and reads the response on a pooled connection, with no other
// goroutine involved (net/http's Transport hands every request to a
// writer and a reader goroutine per connection, a cost that showed in the
// proxy benchmark). Bigger or chunked bodies, whose upload may overlap the
// response, go to fallback, a net/http Transport on the same dialer.
//
// A connection goes back to the pool only clean: the response read to its
// end, framed as RFC 9112 says (checkFraming), no byte after it in the
// reader's buffer. Taken from the pool, it must still be open and silent
// (open, one non-blocking peek): an idle HTTP/1.1 connection has nothing
// to say, and bytes there would be read as the next request's response. This matters most inbound, where the pool
// to the app is shared by every peer: one peer that gets the app to send
// more than its response must not hand that to another.
//
// Connections idle longer than the cluster's idle timeout (kept shorter
// than the upstream's, the UC race) are closed, at reuse and by a sweep.
// A reused connection that fails before any byte of the response arrives
// (the upstream closed it just after the peek) is retried once on a new
// one for idempotent methods, as net/http does.
type h1Pool struct {
	w           *worker
	c           *cluster
	fallback    *http.Transport
	idleTimeout time.Duration

	mu     sync.Mutex
	idle   map[string][]*h1Conn // by upstream address, most recent last
	sweep  *time.Timer
	closed bool
}

// maxIdlePerHost bounds the idle connections kept per upstream address.
const maxIdlePerHost = 1024

type h1Conn struct {
	addr      string
	conn      net.Conn
	src       upstreamSource // what br reads
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	reused    bool
	// q is the socket's queue for its next read (raw socket I/O), nil
	// without: a request head goes out with the read of its response.
	q rawio.Queuer
	// quiet: taken from the pool under quietIdle after its last use.
	quiet bool
	// rc is the socket for open's peek (nil without one), and peek its
	// callback, made once with the connection so that a peek allocates
	// nothing; the callback leaves its result in peekN, peekErr, peekBuf.
	rc      syscall.RawConn
	peek    func(fd uintptr) bool
	peekN   int
	peekErr syscall.Errno
	peekBuf [len("HTTP/1.1 408")]byte
}

// upstreamSource is what a pool connection's reader reads from: the
// connection, plus, while tapping, a copy of what it read. A response head
// read by http.ReadResponse is tapped when it is not whole in the reader's
// buffer: the Response net/http makes no longer shows a Content-Length
// beside a Transfer-Encoding, which checkFraming must see.
type upstreamSource struct {
	conn    net.Conn
	tapping bool
	tap     []byte
}

func (s *upstreamSource) Read(p []byte) (int, error) {
	if !s.tapping {
		return s.conn.Read(p)
	}
	if len(s.tap) >= maxResponseHeaderBytes {
		return 0, errResponseHeadTooLarge
	}
	n, err := s.conn.Read(p)
	s.tap = append(s.tap, p[:n]...)
	return n, err
}

// maxResponseHeaderBytes bounds a response head, as Envoy's
// max_response_headers_kb default does (and the fallback Transport's
// MaxResponseHeaderBytes).
const maxResponseHeaderBytes = 60 << 10

var errResponseHeadTooLarge = fmt.Errorf("response head larger than %d bytes", maxResponseHeaderBytes)

// quietIdle is how long an idle connection may have been idle for its
// next response read to wait without a read attempt first (rawio.Queuer):
// an upstream that half-closed a connection it keeps reading would leave
// that read waiting, so only connections used moments ago (all of them
// under load) wait without one.
const quietIdle = time.Second

// queuedWriter queues a pool connection's writes for its next read,
// counting them as sent.
type queuedWriter struct {
	q  rawio.Queuer
	cc *countedConn
}

func (w queuedWriter) Write(p []byte) (int, error) {
	w.q.QueueForRead(p)
	w.cc.st.Add(stats.UpstreamCxTxBytesTotal, uint64(len(p)))
	return len(p), nil
}

// newH1Conn is the pool's connection over conn (from worker.dial).
func newH1Conn(addr string, conn net.Conn) *h1Conn {
	pc := &h1Conn{addr: addr, conn: conn}
	pc.src.conn = conn
	pc.br = bufio.NewReaderSize(&pc.src, 4<<10)
	var out io.Writer = conn
	if cc, ok := conn.(*countedConn); ok {
		if q, ok := cc.raw.(rawio.Queuer); ok {
			pc.q, out = q, queuedWriter{q: q, cc: cc}
		}
	}
	pc.bw = bufio.NewWriterSize(out, 4<<10)
	sock := conn
	if cc, ok := conn.(*countedConn); ok {
		sock = cc.Conn
	}
	if sc, ok := sock.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			pc.rc = rc
			pc.peek = func(fd uintptr) bool {
				pc.peekN, pc.peekErr = rawio.Peek(fd, pc.peekBuf[:])
				return true // never wait
			}
		}
	}
	return pc
}

func newH1Pool(w *worker, c *cluster, fallback *http.Transport) *h1Pool {
	return &h1Pool{w: w, c: c, fallback: fallback, idleTimeout: idleTimeout(c), idle: map[string][]*h1Conn{}}
}

// maxPooledBody is the largest request body the pool sends itself (with a
// Content-Length): read whole from the client first, it is written with
// the head before the response is read, on the request's goroutine, as a
// bodiless request is. Bigger or chunked bodies, whose upload may overlap
// the response, go to the fallback Transport, which keeps no connection
// (it would pool one before looking for bytes after the response).
const maxPooledBody = 64 << 10

// RoundTrip implements http.RoundTripper, for a request that no fast
// HTTP/1 server request's stream goes with: an HTTP/2 downstream's, or one
// the pool leaves to its fallback Transport (big or chunked bodies,
// Expect).
func (p *h1Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	return p.send(req, nil, nil)
}

// send sends req; down, if not nil, is the stream of the fast HTTP/1
// server request that req is an attempt of, whose connection's storage
// the response reuses and whose writer's upstream abort
// (h1server.Writer.Abort) cuts the connection when the request ends; sa,
// if not nil, the upstream abort another server fires for the request
// (serveStream's).
func (p *h1Pool) send(req *http.Request, down *h1Stream, sa *streamAbort) (*http.Response, error) {
	if !p.writesHead(req) {
		return p.fallback.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength > 0 {
		// Read before a connection is taken: a slow client holds none.
		body = make([]byte, req.ContentLength)
		if _, err := io.ReadFull(req.Body, body); err != nil {
			return nil, fmt.Errorf("request body: %w", err)
		}
	}
	addr := req.URL.Host
	idempotent := isIdempotent(req.Method)
	for attempt := 0; ; attempt++ {
		pc, err := p.get(req.Context(), addr)
		if err != nil {
			return nil, err
		}
		resp, nothingRead, err := p.roundTrip(pc, req, body, down, sa)
		if err == nil {
			return resp, nil
		}
		if attempt == 0 && pc.reused && nothingRead && idempotent && req.Context().Err() == nil {
			continue // closed by the upstream while idle
		}
		return nil, err
	}
}

// writesHead reports whether RoundTrip sends req itself, its head
// written before RoundTrip returns (so req.Header is not read after it),
// rather than through the fallback Transport, whose writer may still read
// it after a cancelled RoundTrip returned.
func (p *h1Pool) writesHead(req *http.Request) bool {
	if h1.Get(req.Header, "Expect") != "" {
		return false
	}
	return req.Body == nil || req.Body == http.NoBody || req.ContentLength >= 0 && req.ContentLength <= maxPooledBody
}

func isIdempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// get takes an idle connection to addr that is still open and silent
// (open), or dials one.
func (p *h1Pool) get(ctx context.Context, addr string) (*h1Conn, error) {
	now := time.Now()
	for {
		p.mu.Lock()
		list := p.idle[addr]
		var pc *h1Conn
		if n := len(list); n > 0 {
			pc = list[n-1]
			list[n-1] = nil
			p.idle[addr] = list[:n-1]
		}
		p.mu.Unlock()
		if pc == nil {
			break
		}
		if now.Sub(pc.idleSince) >= p.idleTimeout || !pc.open() {
			pc.conn.Close()
			continue
		}
		pc.reused, pc.quiet = true, now.Sub(pc.idleSince) < quietIdle
		return pc, nil
	}
	conn, err := p.w.dial(ctx, p.c, addr)
	if err != nil {
		return nil, err
	}
	return newH1Conn(addr, conn), nil
}

// open reports whether an idle connection may carry a request: nothing to
// read (an idle HTTP/1.1 connection has nothing to say; bytes there would
// be taken for the next request's response) and no end of stream. It
// peeks without blocking (MSG_PEEK | MSG_DONTWAIT, a system call per
// reuse): a read deadline in the past would return before trying. Bytes
// found count as a protocol error, as Envoy counts a response without a
// request, but for the 408 an upstream may send before it closes an idle
// connection.
func (pc *h1Conn) open() bool {
	if pc.br.Buffered() > 0 {
		pc.countProtocolError()
		return false
	}
	if pc.rc == nil {
		return true
	}
	if err := pc.rc.Read(pc.peek); err != nil {
		return false
	}
	if n := pc.peekN; n > 0 {
		if !is408(pc.peekBuf[:n]) {
			pc.countProtocolError()
		}
		return false
	}
	return pc.peekN < 0 && (pc.peekErr == syscall.EAGAIN || pc.peekErr == syscall.EWOULDBLOCK)
}

// is408 reports whether b starts a 408 response (an upstream closing an
// idle connection says so first).
func is408(b []byte) bool {
	return len(b) >= len("HTTP/1.1 408") && string(b[:7]) == "HTTP/1." && string(b[8:12]) == " 408"
}

// countProtocolError counts a connection closed for an upstream protocol
// error (Envoy's upstream_cx_protocol_error).
func (pc *h1Conn) countProtocolError() {
	if cc, ok := pc.conn.(*countedConn); ok {
		cc.st.Inc(stats.UpstreamCxProtocolError)
	}
}

// roundTrip sends req, with body (read from req.Body by send), on pc
// and reads the response head; down and sa are send's. nothingRead
// reports a failure before any byte of the response.
func (p *h1Pool) roundTrip(pc *h1Conn, req *http.Request, body []byte, down *h1Stream, sa *streamAbort) (resp *http.Response, nothingRead bool, err error) {
	// A cancelled context (client gone, route or per-try timeout) aborts
	// the exchange, also while the body is read.
	var stop exchangeWatch
	var st *respStore // the response's storage: the server request's
	// own: req has the server request's own context (not one derived for
	// a per-try timeout), every end of which (route timeout, client gone,
	// server stop) fires the writer's upstream abort; otherwise the
	// context is watched here.
	var own *h1server.UpstreamAbort
	if down != nil {
		st = &down.conn.store
		if down.rw.Context() == req.Context() {
			own = down.rw.Abort()
		}
	} else if sa != nil && sa.ctx == req.Context() {
		own = &sa.abort // fired by the request's server
	}
	if own != nil {
		own.Watch(pc.conn)
		stop.abort = own
	} else {
		// The same abort, fired by the context: its release then
		// guarantees no late cut (keepCancelled resets the deadline).
		ab := new(h1server.UpstreamAbort)
		ab.Watch(pc.conn)
		stop.abort = ab
		stop.stop = context.AfterFunc(req.Context(), ab.Fire)
	}
	fail := func(err error, nothing bool) (*http.Response, bool, error) {
		stop.release()
		pc.conn.Close()
		var pe *upstreamProtocolError
		if errors.As(err, &pe) {
			pc.countProtocolError()
		}
		if req.Context().Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(req.Context()))
		}
		return nil, nothing, err
	}
	target := ""
	if down != nil {
		target = down.target()
	}
	if writeRequestHead(pc.bw, req, body, target) {
		_, _ = pc.bw.Write(body)
	} else {
		if body != nil {
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		if err := req.Write(pc.bw); err != nil {
			return fail(err, true)
		}
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(err, true)
	}
	if pc.q != nil && pc.reused && pc.quiet {
		pc.q.WaitAfterQueued() // the head goes out with the response's read
	}
	keep := true // the framing allows reuse
	for first := true; ; first = false {
		if _, err := pc.br.Peek(1); err != nil {
			if first && p.keepCancelled(pc, req, stop, err) {
				return nil, true, fmt.Errorf("%w (%w)", err, context.Cause(req.Context()))
			}
			return fail(err, true)
		}
		var fast bool
		var fst *h1.RespStore
		if st != nil {
			fst = &st.RespStore
		}
		if resp, fast = h1.ReadResponseFast(pc.br, req, fst); !fast {
			var reusable bool
			if resp, reusable, err = pc.readResponse(req); err != nil {
				return fail(err, false)
			}
			keep = keep && reusable
		}
		// 1xx but 101 are informational (103 Early Hints): the final
		// response follows.
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		break
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The connection is the upgraded stream's now; proxy closes
		// it when the request context ends.
		stop.release()
		resp.Body = &h1Upgraded{pc: pc}
		return resp, false, nil
	}
	keep = keep && !resp.Close && !req.Close
	if resp.Body == http.NoBody || resp.ContentLength == 0 && len(resp.TransferEncoding) == 0 {
		resp.Body = http.NoBody
		p.finish(pc, stop, keep)
		return resp, false, nil
	}
	sized := resp.ContentLength > 0 && len(resp.TransferEncoding) == 0
	var b *h1Body
	if st != nil {
		b = &st.pool // an earlier attempt's body was read to its end or closed
	} else {
		b = new(h1Body)
	}
	*b = h1Body{p: p, pc: pc, body: resp.Body, stop: stop, keep: keep, sized: sized}
	resp.Body = b
	return resp, false, nil
}

// Bounds of keepCancelled's wait for a cancelled request's response (a
// variable for the test that must outwait a loaded machine).
var cancelledDrainTimeout = time.Second

const cancelledDrainBody = 64 << 10

// keepCancelled saves the connection of a request whose client went away
// while it waited for the response's first byte (err, the abort's
// deadline): rather than close it, as Envoy does, and make the next
// request dial (an HTTP/2 client resetting streams as fast as it opens
// them would cost the upstream a connection each), a goroutine reads the
// response for up to cancelledDrainTimeout, drops a body of up to
// cancelledDrainBody and pools the connection if it ended clean. A
// timeout's cancellation (route, per try) closes it: that upstream is
// slow.
func (p *h1Pool) keepCancelled(pc *h1Conn, req *http.Request, stop exchangeWatch, err error) bool {
	ctx := req.Context()
	if ctx.Err() == nil || !rawio.IsDeadline(err) || context.Cause(ctx) != context.Canceled || p.w.s.ctx.Err() != nil {
		return false
	}
	stop.release() // it fired: the deadline is reset below
	if pc.conn.SetDeadline(time.Now().Add(cancelledDrainTimeout)) != nil {
		pc.conn.Close()
		return true
	}
	// (RoundTrip still reads pc.reused: the goroutine leaves it alone.)
	go p.drainCancelled(pc, req.Method)
	return true
}

// drainCancelled reads and drops a cancelled request's response on pc
// (keepCancelled), then pools pc if the exchange ended clean, else closes
// it.
func (p *h1Pool) drainCancelled(pc *h1Conn, method string) {
	req := &http.Request{Method: method} // what ReadResponse needs: HEAD has no body
	for {
		resp, reusable, err := pc.readResponse(req)
		if err != nil {
			pc.conn.Close()
			return
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		n, err := io.CopyN(io.Discard, resp.Body, cancelledDrainBody+1)
		resp.Body.Close()
		if resp.StatusCode == http.StatusSwitchingProtocols || n > cancelledDrainBody || err != io.EOF ||
			pc.conn.SetDeadline(time.Time{}) != nil {
			pc.conn.Close()
			return
		}
		p.finish(pc, exchangeWatch{}, reusable && !resp.Close)
		return
	}
}

// readResponse reads a response head that h1.ReadResponseFast declined with
// http.ReadResponse, and checks its framing (checkFraming); reusable
// false means the connection must close after it. An error is the
// connection's (it ended, failed, timed out) or an upstreamProtocolError.
func (pc *h1Conn) readResponse(req *http.Request) (resp *http.Response, reusable bool, err error) {
	buf, _ := pc.br.Peek(pc.br.Buffered())
	f, whole := scanFraming(buf)
	if !whole {
		pc.src.tap = append(pc.src.tap[:0], buf...)
		pc.src.tapping = true
	}
	resp, err = http.ReadResponse(pc.br, req)
	if !whole {
		pc.src.tapping = false
		if err == nil {
			f, whole = scanFraming(pc.src.tap)
		}
		if cap(pc.src.tap) > 16<<10 {
			pc.src.tap = nil // a long head's copy is not kept with the connection
		}
	}
	switch {
	case errors.Is(err, errResponseHeadTooLarge):
		return nil, false, &upstreamProtocolError{detail: "http1.headers_too_large", err: err}
	case err != nil && !connError(err):
		return nil, false, &upstreamProtocolError{detail: "http1.codec_error", err: err}
	case err != nil:
		return nil, false, err
	case !whole:
		return nil, false, &upstreamProtocolError{detail: "http1.codec_error", err: errors.New("response head read without its end")}
	}
	reusable, err = checkFraming(resp, f)
	return resp, reusable, err
}

// connError reports an error of the connection itself, as opposed to a
// response net/http could not parse: its end, a failed read, a deadline.
func connError(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne)
}

// headFraming is what the raw lines of a response head say about its
// framing.
type headFraming struct {
	contentLength    bool // a Content-Length line
	transferEncoding bool // a Transfer-Encoding line
}

// scanFraming looks through a response head at the start of b for
// Content-Length and Transfer-Encoding lines, lines as net/textproto splits
// them (LF or CRLF; a line starting with a space or tab continues the
// last). whole reports that b holds the head's end, its empty line.
func scanFraming(b []byte) (f headFraming, whole bool) {
	first := true
	for {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			return f, false
		}
		line := b[:nl]
		b = b[nl+1:]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if first {
			first = false // the status line
			continue
		}
		if len(line) == 0 {
			return f, true
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue
		}
		name := line
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name = line[:i]
		}
		switch {
		case h1.EqualFold(name, "Content-Length"):
			f.contentLength = true
		case h1.EqualFold(name, "Transfer-Encoding"):
			f.transferEncoding = true
		}
	}
}

// checkFraming holds a response net/http read (resp, with the raw head's
// framing lines f) to what net/http lets through and RFC 9112 leaves to
// the recipient; it reports whether the connection may be reused, or an
// upstreamProtocolError. Where RFC 9112 lets a recipient choose, this
// follows Envoy (its HTTP/1 client codec), not haproxy, which forwards
// more of these:
//
//   - Content-Length and Transfer-Encoding together (RFC 9112, 6.3: the
//     Transfer-Encoding wins, but it "ought to be handled as an error",
//     a request smuggling or response splitting attempt): 502, as Envoy
//     without allow_chunked_length (net/http takes it as chunked);
//   - a Transfer-Encoding, or a Content-Length but 0, on a 1xx or 204
//     (RFC 9110, 8.6; RFC 9112, 6.1: a sender must not): 502, as Envoy
//     (net/http reads no body and ignores them);
//   - a Transfer-Encoding in an HTTP/1.0 response: the framing is faulty
//     and the connection closes after it (RFC 9112, 6.1, a must).
//
// A body after a HEAD, 1xx, 204 or 304 head cannot be one (RFC 9112,
// 6.3): its bytes come after the response, and finish closes the
// connection on them, the response delivered, as Envoy does on data
// after a complete response. Multiple differing or invalid
// Content-Length values and unknown transfer codings net/http already
// refuses: readResponse makes them protocol errors.
func checkFraming(resp *http.Response, f headFraming) (reusable bool, err error) {
	code := resp.StatusCode
	if f.contentLength && f.transferEncoding {
		return false, &upstreamProtocolError{detail: "http1.content_length_and_chunked_not_allowed",
			err: fmt.Errorf("response %d has both Content-Length and Transfer-Encoding", code)}
	}
	if code < 200 || code == http.StatusNoContent {
		if f.transferEncoding {
			return false, &upstreamProtocolError{detail: "http1.transfer_encoding_not_allowed",
				err: fmt.Errorf("response %d has a Transfer-Encoding", code)}
		}
		for _, v := range resp.Header["Content-Length"] {
			if v != "0" {
				return false, &upstreamProtocolError{detail: "http1.content_length_not_allowed",
					err: fmt.Errorf("response %d has Content-Length %q", code, v)}
			}
		}
	}
	return !f.transferEncoding || resp.ProtoAtLeast(1, 1), nil
}

// upstreamProtocolError is an upstream response that breaks HTTP/1.1 (its
// framing above all): the connection closes, and the request fails as in
// Envoy on an upstream codec error, 502 with the UPE flag.
type upstreamProtocolError struct {
	detail string // Envoy's http1.* detail for it
	err    error
}

func (e *upstreamProtocolError) Error() string {
	return "upstream protocol error (" + e.detail + "): " + e.err.Error()
}

func (e *upstreamProtocolError) Unwrap() error { return e.err }

// writeRequestHead writes the head of a request without a body, or with
// body (already read from req.Body), as net/http's Request.Write would
// (request line, Host, the body's Content-Length, or Content-Length: 0
// for the methods that carry a body, the headers on one line each, no
// User-Agent of its own), without its per-request allocations (a
// transfer writer, sorted header copies). It reports false, having
// written nothing, for a request it leaves to Request.Write: CONNECT, an
// opaque URL, an invalid Host, a header name or value net/http would
// have to clean (control characters, line breaks), a body not given.
// target is the request's target as read, if known (h1.TargetOf).
func writeRequestHead(bw *bufio.Writer, req *http.Request, body []byte, target string) bool {
	host := req.Host
	if host == "" && req.URL != nil {
		host = req.URL.Host
	}
	if body == nil && req.Body != nil && req.Body != http.NoBody || req.Method == http.MethodConnect || req.URL == nil || req.URL.Opaque != "" ||
		host == "" || !httpguts.ValidHostHeader(host) ||
		strings.IndexByte(host, '/') >= 0 || strings.IndexByte(host, ' ') >= 0 || strings.IndexByte(host, '%') >= 0 || req.Close {
		return false
	}
	// The head is built in the writer's free space and written once it
	// is whole, so that a header found invalid leaves nothing written.
	b := bw.AvailableBuffer()
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, h1.TargetOf(req.URL, target)...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	if ua, ok := req.Header["User-Agent"]; !ok {
		b = append(b, "User-Agent: Go-http-client/1.1\r\n"...)
	} else if len(ua) > 0 && ua[0] != "" {
		b = appendHeaderLine(b, "User-Agent", ua[0]) // (checked below, with the others)
	}
	switch {
	case body != nil:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	case req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch:
		b = append(b, "Content-Length: 0\r\n"...)
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		written := true
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			written = false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
			if written {
				b = appendHeaderLine(b, k, v)
			}
		}
	}
	b = append(b, "\r\n"...)
	_, _ = bw.Write(b)
	return true
}

// appendHeaderLine appends "k: v" (a valid value), trimmed as net/http
// writes it.
func appendHeaderLine(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	b = append(b, h1.TrimOWS(v)...)
	return append(b, "\r\n"...)
}

// exchangeWatch is what cuts an exchange's connection when its request
// ends early: the HTTP/1 server request's own upstream abort, or else an
// abort of its own fired by a context.AfterFunc on the request's context
// (stop).
type exchangeWatch struct {
	abort *h1server.UpstreamAbort
	stop  func() bool
}

// release stops the watch; false means it cut the connection. Once it
// returns, nothing cuts the connection any more.
func (e exchangeWatch) release() bool {
	if e.stop != nil {
		e.stop()
	}
	if e.abort == nil {
		return true
	}
	return e.abort.Release()
}

// finish returns pc to the pool if the exchange ended cleanly (keep) and
// nothing is after the response in the reader's buffer, its context
// watch stopped (or its deadline cleared, had it fired); else closes it.
func (p *h1Pool) finish(pc *h1Conn, stop exchangeWatch, keep bool) {
	// Bytes after a whole response answer no request: kept, they would
	// be the next request's response. Envoy's codec fails the connection
	// on them ("extraneous data after response complete").
	extra := pc.br.Buffered() > 0
	if extra {
		pc.countProtocolError()
	}
	// A watch that fired as the exchange completed cut a connection at a
	// clean boundary (it only set a past deadline): cleared, the
	// connection is kept, as drainCancelled keeps a cancelled request's.
	released := stop.release()
	if !keep || extra || !released && pc.conn.SetDeadline(time.Time{}) != nil {
		pc.conn.Close()
		return
	}
	pc.idleSince = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle[pc.addr]) >= maxIdlePerHost {
		p.mu.Unlock()
		pc.conn.Close()
		return
	}
	p.idle[pc.addr] = append(p.idle[pc.addr], pc)
	if p.sweep == nil {
		p.sweep = time.AfterFunc(p.idleTimeout, p.sweepIdle)
	}
	p.mu.Unlock()
}

// sweepIdle closes connections idle for the idle timeout; it re-arms while
// any remain.
func (p *h1Pool) sweepIdle() {
	now := time.Now()
	var expired []*h1Conn
	p.mu.Lock()
	next := time.Duration(0)
	for addr, list := range p.idle {
		keep := list[:0]
		for _, pc := range list {
			if age := now.Sub(pc.idleSince); age >= p.idleTimeout {
				expired = append(expired, pc)
			} else {
				keep = append(keep, pc)
				if left := p.idleTimeout - age; next == 0 || left < next {
					next = left
				}
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(p.idle, addr)
		} else {
			p.idle[addr] = keep
		}
	}
	if next > 0 && !p.closed {
		p.sweep = time.AfterFunc(next, p.sweepIdle)
	} else {
		p.sweep = nil
	}
	p.mu.Unlock()
	for _, pc := range expired {
		pc.conn.Close()
	}
}

// CloseIdleConnections closes the idle connections of both pools.
func (p *h1Pool) CloseIdleConnections() {
	p.mu.Lock()
	idle := p.idle
	p.idle = map[string][]*h1Conn{}
	p.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			pc.conn.Close()
		}
	}
	p.fallback.CloseIdleConnections()
}

// respStore is the storage of the upstream response of a fast HTTP/1
// server request (its connection's, h1Downstream.store): the fast
// reader's, and the pool's body over it, one attempt's at a time.
type respStore struct {
	h1.RespStore
	pool h1Body
}

// h1Body is a pooled response body: at its end the connection goes back to
// the pool; closed early, the connection is closed.
type h1Body struct {
	p    *h1Pool
	pc   *h1Conn
	body io.ReadCloser
	stop exchangeWatch
	keep bool
	done bool
	// sized: framed by Content-Length, so a read returns what the
	// connection's buffer holds without waiting for more.
	sized bool
}

// ready reports whether the next Read returns without waiting for the
// upstream.
func (b *h1Body) ready() bool { return b.done || (b.sized && b.pc.br.Buffered() > 0) }

// writeBuffered writes to dst what the connection's buffer holds of a
// body framed by Content-Length (h1.ReadResponseFast's), and consumes it;
// done reports the body's end, reached as Read reaches it (the connection
// goes back to the pool). A body of another kind writes nothing. A failed
// write is returned; the caller closes the body.
func (b *h1Body) writeBuffered(dst io.Writer) (done bool, err error) {
	if b.done {
		return true, nil
	}
	sb, ok := b.body.(*h1.SizedBody)
	if !ok {
		return false, nil
	}
	if done, err = sb.WriteBuffered(dst); err != nil || !done {
		return false, err
	}
	b.done = true
	b.p.finish(b.pc, b.stop, b.keep)
	return true, nil
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF:
		b.done = true
		b.p.finish(b.pc, b.stop, b.keep)
	case err != nil:
		b.done = true
		b.stop.release()
		b.pc.conn.Close()
	}
	return n, err
}

func (b *h1Body) Close() error {
	if !b.done {
		b.done = true
		b.stop.release()
		b.pc.conn.Close()
	}
	return nil
}

// h1Upgraded is the body of a 101 response: the raw connection, read
// through what the response reader had buffered.
type h1Upgraded struct{ pc *h1Conn }

func (u *h1Upgraded) Read(p []byte) (int, error)  { return u.pc.br.Read(p) }
func (u *h1Upgraded) Write(p []byte) (int, error) { return u.pc.conn.Write(p) }
func (u *h1Upgraded) Close() error                { return u.pc.conn.Close() }
