package h1server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
)

// Writer is the http.ResponseWriter of a connection's requests: one
// writer serves request after request (begin readies it), so that a
// request costs no allocation of it, unless a request may have left a
// reference to it behind (see Serve): then the next gets a new one, with
// a new stream (Handler.NewStream). Its zero value is readied by the
// server; the stream that holds it only hands it over.
//
// Beyond http.ResponseWriter, http.Flusher and http.Hijacker, it gives
// the router and the upstream pool what the request's connection holds
// for them: the 100 Continue, the route timeout, the stream idle
// timeout's end, the body's framing error, the response header handed
// over, the request's context and its upstream abort.
type Writer struct {
	c  *Conn
	st Stream // the router's state of its requests
	response
	// What the worker clock, a runtime timer or the server's stop may
	// still reach after a request has ended (a clock lists a stopped
	// alarm until its next tick, and a function that fired may be
	// running as the request ends) is kept from request to request;
	// each such function checks, under mu, that it fires for the request
	// in flight.
	mu   sync.Mutex
	seq  uint64 // the number of the request in flight; guarded by mu
	live bool   // a request is in flight; guarded by mu
	// routeOn: the route timeout is armed; routeGen is its alarm's
	// generation (guarded by mu). routeTimeout is the alarm on the
	// worker's clock (response.routeTimer the runtime timer of a short
	// one); routeCause what it ends the request's context with.
	routeOn      bool
	routeGen     uint64
	routeTimeout clock.Alarm
	routeCause   error
	watch        dcWatch
	// abort cuts the request's upstream exchange (Abort).
	abort UpstreamAbort
	// timedOut says a timeout (route or stream idle) fired for the
	// request in flight, readsEnded that it ended the request's reads
	// (guarded by mu).
	timedOut   bool
	readsEnded bool
	// bodyPending: the request's body has not been read to its end (a
	// timeout then also ends its read, and the connection).
	bodyPending atomic.Bool
	// bodyErr is set (from whichever goroutine reads the body) when the
	// request's body broke its framing: the response closes the
	// connection, and the router answers 400 DPE rather than blame the
	// upstream.
	bodyErr atomic.Pointer[bodyError]
}

// response is a writer's state for one request, zeroed for each.
type response struct {
	req        *http.Request
	header     http.Header
	status     int
	wrote      bool // WriteHeader called
	committed  bool // status line and headers in the buffer
	buf        []byte
	cl         int64 // declared Content-Length, -1 none
	written    int64
	chunked    bool
	noBody     bool
	closeAfter bool
	hijacked   bool
	trailers   []string // announced in the Trailer header
	// hadBody: the request had a body (its reader keeps a pointer to
	// the writer, and a transport may read it after the request).
	hadBody bool
	// routeTimer is the runtime timer of a short route timeout
	// (ArmRouteTimeout).
	routeTimer *time.Timer
	// cancel ends the request's context with a cause (the route
	// timeout's); cancelRequest also aborts the upstream exchange.
	// Written under the writer's mu (begin, serve).
	cancel context.CancelCauseFunc
	// wantsClose: the client asked to close after this response.
	wantsClose bool
	// continuePending: the client waits for a 100 Continue before its
	// body, not sent yet (SendContinue).
	continuePending bool
	// in is the request as read (the connection's, Conn.in).
	in *h1.ReqStore
}

// newWriter gives c a new writer and stream (Handler.NewStream), ready
// for begin.
func (c *Conn) newWriter() {
	st, rw := c.h.NewStream()
	rw.c, rw.st = c, st
	rw.routeTimeout.Target = routeAlarm{rw}
	rw.watch.c, rw.watch.rw = c, rw
	rw.watch.alarm.Target = &rw.watch
	c.rw = rw
}

// begin readies rw for the connection's next request.
func (rw *Writer) begin() {
	rw.mu.Lock()
	rw.response = response{in: rw.c.in}
	rw.bodyErr.Store(nil)
	rw.seq++
	rw.timedOut, rw.readsEnded = false, false
	rw.bodyPending.Store(false)
	rw.mu.Unlock()
	rw.watch.reset()
	rw.abort.reset()
}

// started marks the request in flight, with cancel its context's.
func (rw *Writer) started(req *http.Request, cancel context.CancelCauseFunc) {
	rw.mu.Lock()
	rw.req, rw.cancel, rw.wantsClose = req, cancel, req.Close
	rw.live = true
	rw.mu.Unlock()
}

// ended marks the request over: nothing that fires late reaches it.
func (rw *Writer) ended() {
	rw.mu.Lock()
	rw.live, rw.routeOn = false, false
	rw.mu.Unlock()
}

// ArmRouteTimeout ends the request with cause once d has passed (unless
// the handler returns first): its context and upstream exchange at once,
// a body still being read too, what it still writes after
// Options.TimeoutGrace. It runs on the worker's clock, with the alarm in
// the writer, or on a runtime timer under clock.PreciseBelow.
func (rw *Writer) ArmRouteTimeout(d time.Duration, cause error) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.routeOn, rw.routeCause = true, cause
	if d < clock.PreciseBelow {
		seq := rw.seq
		rw.routeTimer = time.AfterFunc(d, func() { rw.routeFired(func() bool { return rw.seq == seq }) })
		return
	}
	rw.routeGen = rw.c.srv.o.Clock.Set(&rw.routeTimeout, d)
}

// stopRouteTimeout keeps the route timeout from firing if it has not yet.
func (rw *Writer) stopRouteTimeout() {
	rw.mu.Lock()
	rw.routeOn = false
	rw.mu.Unlock()
	if rw.routeTimer != nil {
		rw.routeTimer.Stop()
	}
	rw.routeTimeout.Stop()
}

// routeAlarm is the route timeout's alarm target (a pointer-shaped
// value: no allocation to box it).
type routeAlarm struct{ rw *Writer }

// AlarmFired is the route timeout's alarm: generation gen.
func (r routeAlarm) AlarmFired(gen uint64) {
	rw := r.rw
	rw.routeFired(func() bool { return rw.routeGen == gen })
}

// routeFired ends the request with the route timeout's cause if its
// timeout is still armed and mine (under mu) says the firing is this
// request's.
func (rw *Writer) routeFired(mine func() bool) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.live && rw.routeOn && mine() {
		rw.timedOutLocked(rw.routeCause, false)
	}
}

// StreamIdleExpired ends the request in flight, if there is one, for the
// router's stream idle timeout, with cause: its context and upstream
// exchange, its reads, and the connection after it (timedOutLocked).
func (rw *Writer) StreamIdleExpired(cause error) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.live {
		rw.timedOutLocked(cause, true)
	}
}

// timedOutLocked ends the request for a timeout (cause, under mu, the
// request in flight): its context and upstream exchange now, what it still
// writes downstream after Options.TimeoutGrace (a client that reads
// nothing then loses its connection, as Envoy resets the stream). A stream
// idle timeout (endReads), or any with the request's body still being
// read, also ends the body's read now, and the connection after the
// request.
func (rw *Writer) timedOutLocked(cause error, endReads bool) {
	rw.cancelRequest(cause)
	rw.timedOut = true
	if endReads || rw.bodyPending.Load() {
		rw.readsEnded = true
		_ = rw.c.tcp.SetReadDeadline(rawio.ALongTimeAgo)
	}
	_ = rw.c.tcp.SetWriteDeadline(time.Now().Add(rw.c.srv.o.TimeoutGrace))
}

// timeouts reports whether a timeout fired for the request (timedOut) and
// whether it ended the request's reads (readsEnded).
func (rw *Writer) timeouts() (timedOut, readsEnded bool) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.timedOut, rw.readsEnded
}

// serverStopped ends the request in flight, if there is one, when the
// server stops.
func (rw *Writer) serverStopped() {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.live {
		rw.abort.Fire()
		rw.cancel(context.Canceled)
	}
}

// cancelRequest ends the request: its context with cause, then its
// upstream exchange. It runs on the request's goroutines, or under mu
// with the request in flight.
func (rw *Writer) cancelRequest(cause error) {
	rw.cancel(cause)
	rw.abort.Fire()
}

// Header is the response's header map (http.ResponseWriter), made on
// first use.
func (rw *Writer) Header() http.Header {
	if rw.header == nil {
		rw.header = make(http.Header, 8)
	}
	return rw.header
}

// AdoptHeader makes h the response's header map if nothing was set in
// the writer's own yet (the router hands over the upstream response's,
// which is its to give: no copy per request); it reports whether it did.
func (rw *Writer) AdoptHeader(h http.Header) bool {
	if len(rw.header) > 0 || rw.wrote || rw.hijacked {
		return false
	}
	rw.header = h
	return true
}

// WriteHeader sets the response's status (http.ResponseWriter); an
// informational one (1xx but 101) goes out at once, the final status
// follows.
func (rw *Writer) WriteHeader(code int) {
	if rw.wrote || rw.hijacked {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// Informational: goes out now, the final status follows.
		fmt.Fprintf(rw.c.bw, "HTTP/1.1 %d %s\r\n", code, http.StatusText(code))
		_ = rw.header.Write(rw.c.bw)
		_, _ = io.WriteString(rw.c.bw, "\r\n")
		_ = rw.c.bw.Flush()
		return
	}
	rw.status, rw.wrote = code, true
}

// Write writes body bytes (http.ResponseWriter), status 200 if none was
// set: a body without a Content-Length is held up to 4 KiB, so that a
// handler that ends soon gets one.
func (rw *Writer) Write(p []byte) (int, error) {
	if rw.hijacked {
		return 0, http.ErrHijacked
	}
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	if !rw.committed {
		// A body without a Content-Length is held (up to 4 KiB) so that
		// a handler that ends soon gets one; a sized body goes straight
		// to the connection's buffer.
		if _, sized := rw.header["Content-Length"]; !sized && bodyAllowed(rw.status) && len(rw.buf)+len(p) <= 4096 {
			rw.buf = append(rw.buf, p...)
			return len(p), nil
		}
		rw.commit(false)
	}
	return rw.writeBody(p)
}

func (rw *Writer) writeBody(p []byte) (int, error) {
	if rw.noBody {
		if rw.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if len(p) == 0 {
		return 0, nil
	}
	rw.written += int64(len(p))
	if rw.chunked {
		fmt.Fprintf(rw.c.bw, "%x\r\n", len(p))
		n, err := rw.c.bw.Write(p)
		_, _ = io.WriteString(rw.c.bw, "\r\n")
		return n, err
	}
	return rw.c.bw.Write(p)
}

// Flush sends what is buffered (http.Flusher).
func (rw *Writer) Flush() {
	if rw.hijacked {
		return
	}
	rw.start(false)
	_ = rw.c.bw.Flush()
}

// start puts the status line and headers in the buffer if they are not
// there yet (status 200 if none was set); final: the handler is done.
func (rw *Writer) start(final bool) {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	if !rw.committed {
		rw.commit(final)
	}
}

// Hijack hands the connection over (Upgrade, http.Hijacker): its reads
// start with what the request reader had buffered.
func (rw *Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if rw.hijacked {
		return nil, nil, http.ErrHijacked
	}
	rw.hijacked = true
	// The watch must not read the connection any more; a byte it read
	// is in the request reader's source.
	rw.watch.stop()
	rw.c.setReadDeadline(time.Time{})
	_ = rw.c.bw.Flush()
	if q := rw.c.q; q != nil {
		_ = q.FlushQueued() // the connection's writes bypass bw from now on
	}
	conn := &hijackedConn{TCPConn: rw.c.tcp, r: rw.c.br}
	return conn, bufio.NewReadWriter(bufio.NewReaderSize(conn, 16), rw.c.bw), nil
}

// hijackedConn reads through the request reader: its buffer, a byte the
// watch read, then the socket.
type hijackedConn struct {
	*net.TCPConn
	r *bufio.Reader
}

func (h *hijackedConn) Read(p []byte) (int, error) { return h.r.Read(p) }

// WriteTo copies through Read: the embedded TCPConn's would skip the
// buffered bytes.
func (h *hijackedConn) WriteTo(w io.Writer) (int64, error) {
	return io.Copy(w, struct{ io.Reader }{h})
}

func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && (status < 100 || status >= 200)
}

// commit writes the status line and headers, choosing the framing; final
// says the handler is done (a buffered body then gets its length).
func (rw *Writer) commit(final bool) {
	rw.committed = true
	h := rw.Header()
	rw.cl = -1
	if v := h1.Get(h, "Content-Length"); v != "" {
		// (Plain digits, as the readers leave them, without ParseInt's
		// code on every request; anything else as before.)
		if n := h1.ParseLength(v); n >= 0 {
			rw.cl = n
		} else if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			rw.cl = n
		} else {
			h.Del("Content-Length")
		}
	}
	for _, v := range h["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				rw.trailers = append(rw.trailers, http.CanonicalHeaderKey(k))
			}
		}
	}
	http11 := rw.req.ProtoAtLeast(1, 1)
	if rw.wantsClose || !http11 || rw.c.srv.o.Draining.Load() || rw.bodyErr.Load() != nil {
		rw.closeAfter = true
	}
	switch {
	case !bodyAllowed(rw.status):
		rw.noBody = true
		h.Del("Content-Length")
		h.Del("Transfer-Encoding")
	case rw.req.Method == http.MethodHead:
		rw.noBody = true
		if rw.cl < 0 && final && len(rw.buf) > 0 {
			h.Set("Content-Length", strconv.Itoa(len(rw.buf)))
		}
	case rw.cl >= 0:
	case final && len(rw.trailers) == 0:
		rw.cl = int64(len(rw.buf))
		h.Set("Content-Length", strconv.Itoa(len(rw.buf)))
	case http11:
		rw.chunked = true
		h.Set("Transfer-Encoding", "chunked")
	default:
		rw.closeAfter = true
	}
	if rw.closeAfter {
		h.Set("Connection", "close")
	}
	if _, ok := h["Date"]; !ok {
		h.Set("Date", rw.c.srv.httpDate())
	}
	bw := rw.c.bw
	text := http.StatusText(rw.status)
	if text == "" {
		text = "status code " + strconv.Itoa(rw.status)
	}
	// The head is appended in the writer's free space, then written once.
	b := append(bw.AvailableBuffer(), "HTTP/1.1 "...)
	if s := rw.status; 100 <= s && s <= 999 {
		// (Three digits without the number formatter's code.)
		b = append(b, byte('0'+s/100), byte('0'+s/10%10), byte('0'+s%10))
	} else {
		b = strconv.AppendInt(b, int64(s), 10)
	}
	b = append(b, ' ')
	b = append(b, text...)
	b = append(b, "\r\n"...)
	for k, vv := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, headerValue(v)...)
			b = append(b, "\r\n"...)
		}
	}
	b = append(b, "\r\n"...)
	_, _ = bw.Write(b)
	buf := rw.buf
	rw.buf = nil
	_, _ = rw.writeBody(buf)
}

// headerValue keeps a header value on one line.
func headerValue(v string) string {
	if strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0 {
		return strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	return v
}

// finish ends the response: the buffered body with its length, the last
// chunk with the trailers, the flush.
func (rw *Writer) finish() {
	if rw.hijacked {
		return
	}
	rw.start(true)
	if rw.chunked {
		_, _ = io.WriteString(rw.c.bw, "0\r\n")
		for _, k := range rw.trailers {
			for _, v := range rw.header[k] {
				fmt.Fprintf(rw.c.bw, "%s: %s\r\n", k, headerValue(v))
			}
		}
		for k, vv := range rw.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, v := range vv {
					fmt.Fprintf(rw.c.bw, "%s: %s\r\n", name, headerValue(v))
				}
			}
		}
		_, _ = io.WriteString(rw.c.bw, "\r\n")
	}
	if !rw.noBody && rw.cl >= 0 && rw.written != rw.cl {
		rw.closeAfter = true // short or long body: the framing is broken
	}
	// The last of the response waits for the next read (connOut), unless
	// the request had a body: its reader (the transport's goroutine) may
	// still be reading the socket, and that read must not be the one that
	// sends the response.
	rw.c.out.queue = !rw.hadBody
	err := rw.c.bw.Flush()
	rw.c.out.queue = false
	if err != nil {
		rw.closeAfter = true
	}
}

// SendContinue sends the 100 Continue the client of rw's request waits
// for before its body (Expect: 100-continue), once, from the request's
// goroutine before the request goes upstream: the body is then read by
// the transport's goroutine, which must not write to the client while the
// response is written. A request that asked none, or whose answer is
// local, sends none.
func (rw *Writer) SendContinue() {
	if !rw.continuePending {
		return
	}
	if !rw.committed {
		_, _ = io.WriteString(rw.c.bw, "HTTP/1.1 100 Continue\r\n\r\n")
		_ = rw.c.bw.Flush()
	}
	rw.continuePending = false
}

// BodyErr is the framing error of the request's body (a malformed chunk),
// nil while it has none: the client's protocol error, not the upstream's
// (the response then closes the connection).
func (rw *Writer) BodyErr() error {
	if be := rw.bodyErr.Load(); be != nil {
		return be.err
	}
	return nil
}

// HopFree reports that the request's head, read by the fast reader, had
// no hop-by-hop header (nor an Upgrade or a TE): there is nothing to
// remove before it goes upstream.
func (rw *Writer) HopFree() bool { return rw.in.HopFree }

// Context is the context of the request in flight as the server gave it
// to the handler: every end of it (the route timeout, the client gone,
// the server's stop, the request's end) fires Abort.
func (rw *Writer) Context() context.Context { return rw.req.Context() }

// Abort is the request's upstream abort: a transport that watches its
// connection with it has it cut when the request ends early, without a
// watch of the request's context of its own.
func (rw *Writer) Abort() *UpstreamAbort { return &rw.abort }
