// This file is over 600 lines: the HTTP/1 connection loop, its response
// writer, the request body and the client-gone watch all work on the
// connection's state (h1ServerConn, h1Writer) under one lock discipline,
// so splitting the file would not split the state; the wire format it
// reads is internal/h1. The server's own package, behind the handler API,
// is the re-layering's next step (docs/architecture.md).

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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// The downstream HTTP/1.x server of plaintext connections (h1server.go).
//
// net/http's server starts, for every request, a goroutine that reads the
// connection in the background so that a client going away cancels the
// request (the DC flag), and stops it when the handler returns: a goroutine
// start, a park and a wake-up per request, which the proxy benchmark showed
// as a large part of the CPU at low load. This server reads requests with
// net/http's parser on the connection's goroutine and serves them with the
// same router (worker.serveRequest, handed the request's writer), and watches for the client
// going away only once a request has taken longer than dcWatchDelay: most
// requests are answered before.
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
// header-line limit), headers over maxRequestHeaderBytes get 431, and a
// refused request gets its status, an access-log line flagged DPE and
// the connection closed.

const (
	// dcWatchDelay is how long a request runs before the connection is
	// watched for the client going away.
	dcWatchDelay = 2 * time.Millisecond
	// maxRequestHeaderBytes is Envoy's default max_request_headers_kb.
	maxRequestHeaderBytes = 60 << 10
	// maxDrainBody is how much of an unread request body is skipped to
	// keep the connection.
	maxDrainBody  = 256 << 10
	h1IdleTimeout = 5 * time.Minute
	h1IdleSlack   = 30 * time.Second
)

// h1ServerConn is one downstream HTTP/1 connection; idle (waiting for a
// request) is read by drain.
type h1ServerConn struct {
	w    *worker
	sc   *sniffedConn
	src  *h1Source
	br   *bufio.Reader
	bw   *bufio.Writer
	idle atomic.Bool
	// cur is the request being served (its upstream abort).
	cur atomic.Pointer[h1Writer]
	// headersTimeout and streamIdle are the listener's
	// request_headers_timeout and stream_idle_timeout (0: none).
	headersTimeout, streamIdle time.Duration
	// readDL is the read deadline last set by this connection's
	// goroutines (drain's are not recorded: the connection then ends).
	readDL time.Time
	// respHdr is the header map of its requests' upstream responses,
	// reused: a request is done with its response before the next is
	// read.
	respHdr h1.HeadScratch
	// reqHdr is the header map of its requests read by h1.ReadRequestFast,
	// reused unless a request lent it to a transport that may still read
	// it (activeStream.headerLent): then the next request starts a new one.
	reqHdr h1.HeadScratch
	// in holds the request read by h1.ReadRequestFast (its http.Request
	// and URL) and store its upstream response: reused from request to
	// request as the header maps are (in is replaced when reqHdr is:
	// a transport that may still read the request has its URL too).
	in    *h1.ReqStore
	store respStore
	// rw is the writer of its requests (see h1Writer), nil until the
	// next request makes one.
	rw *h1Writer
	// reqCtx is the context of the requests read by h1.ReadRequestFast
	// (in.blank carries it), kept from request to request while nothing
	// can still hold it (reqCtxKept); nil until the next request makes
	// one. reqCancel cancels it.
	reqCtx    context.Context
	reqCancel context.CancelCauseFunc
	// out is what bw writes to; q the socket's write queue for its next
	// read (raw socket I/O), nil without (see h1Out).
	out h1Out
	q   rawio.Queuer
	// waitMu guards waiting, waitGen, kicked and pipelined. waiting: the
	// response is queued for the next read, which waits without trying
	// first (waitForRequest); its check (check, on the worker's clock,
	// the generation waitGen of its alarm) may cut the wait short
	// (kicked).
	waitMu  sync.Mutex
	check   idleCheck
	waiting bool
	waitGen uint64
	kicked  bool
	// pipelined: a check found bytes the wait had not been told about
	// (a client that sends before its response): no more waits.
	pipelined bool
	// skipped counts the empty lines' bytes skipped before the next
	// request (skipLineEnds).
	skipped int
}

// h1Out is the writer under a connection's bufio.Writer. A response's
// last flush (finish) queues its bytes on the socket instead of sending
// them (queue): the next request's read sends them from its poller
// callback and may then wait without a read that would find nothing
// (rawio.Socket.QueueForRead), which saves a system call per request. Any
// other write sends what is queued first, so the order on the wire is the
// order written.
type h1Out struct {
	c     *h1ServerConn
	queue bool
}

func (o *h1Out) Write(p []byte) (int, error) {
	q := o.c.q
	if q != nil {
		if o.queue {
			q.QueueForRead(p)
			return len(p), nil
		}
		if err := q.FlushQueued(); err != nil {
			return 0, err
		}
	}
	return o.c.sc.w.Write(p)
}

// idleCheckDelay is how long a connection waits for its next request
// without trying a read before it is checked (idleCheck): bytes that came
// in before the wait began (a pipelined request, the client's end of
// stream) raised no edge the wait could see.
const idleCheckDelay = clock.Tick

// idleCheck is a connection's check of its waits, run on the worker's
// clock; the alarm's generation tells the waits apart.
type idleCheck struct {
	alarm clock.Alarm
	c     *h1ServerConn
}

func (ic *idleCheck) AlarmFired(gen uint64) { ic.c.checkWait(gen) }

// waitForRequest arms the next request's read to wait without trying a
// read first, after it has sent the queued response: only where the
// socket is the next thing read (nothing buffered) and its last read was
// short (it had nothing more then), so that only what a client sends
// before it has its response could be missed, and ic's check finds that.
// Otherwise what is queued goes out now. It returns the armed wait's
// check (the connection's), or nil.
func (c *h1ServerConn) waitForRequest() *idleCheck {
	q := c.q
	if q == nil || !q.Queued() {
		return nil
	}
	if c.pipelined || c.br.Buffered() > 0 || len(c.src.pending) > 0 || (c.src.first != nil && c.src.first.Buffered() > 0) ||
		!q.Drained() || c.w.s.draining.Load() {
		_ = q.FlushQueued()
		return nil
	}
	q.WaitAfterQueued()
	ic := &c.check
	c.waitMu.Lock()
	c.waiting = true
	c.waitGen = c.w.clock.Set(&ic.alarm, idleCheckDelay)
	c.waitMu.Unlock()
	return ic
}

// endWait ends a wait armed by waitForRequest once the read has returned;
// it reports whether its check cut it short (the read then failed with a
// deadline, or got what the check saw: the read deadline is the idle one
// again either way).
func (c *h1ServerConn) endWait(ic *idleCheck) (kicked bool) {
	ic.alarm.Stop()
	c.waitMu.Lock()
	c.waiting = false
	kicked, c.kicked = c.kicked, false
	if kicked {
		_ = c.sc.SetReadDeadline(c.readDL)
	}
	c.waitMu.Unlock()
	return kicked
}

// checkWait runs on the clock: if the wait whose check's alarm had
// generation gen is still on, it peeks at the
// socket (MSG_PEEK, not blocking, without the read lock the wait holds).
// Nothing there: whatever comes later raises an edge the wait sees. Bytes,
// an end of stream or an error: they came before the wait began; a read
// deadline in the past wakes the wait to read them.
func (c *h1ServerConn) checkWait(gen uint64) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	if !c.waiting || gen != c.waitGen {
		return
	}
	rc, err := c.sc.TCPConn.SyscallConn()
	if err != nil {
		return
	}
	var n int
	var perr error
	if rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, perr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}) != nil || perr == unix.EAGAIN {
		return
	}
	if n > 0 {
		c.pipelined = true
	}
	c.kicked = true
	_ = c.sc.SetReadDeadline(aLongTimeAgo)
}

// setReadDeadline sets the connection's read deadline and records it.
func (c *h1ServerConn) setReadDeadline(t time.Time) {
	c.readDL = t
	_ = c.sc.SetReadDeadline(t)
}

// armIdle makes the next request's read time out after h1IdleTimeout of
// idleness, give or take h1IdleSlack: the deadline (a runtime timer,
// whose every change may wake the network poller) is moved only once it
// is h1IdleSlack old, not for every request.
func (c *h1ServerConn) armIdle() {
	now := time.Now()
	if c.readDL.IsZero() || c.readDL.Sub(now) < h1IdleTimeout-h1IdleSlack {
		c.setReadDeadline(now.Add(h1IdleTimeout))
	}
}

// headerBuffered reports whether the read buffer holds a whole request
// header block.
func (c *h1ServerConn) headerBuffered() bool {
	b, _ := c.br.Peek(c.br.Buffered())
	return bytes.Contains(b, []byte("\r\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// h1Source feeds the request reader: what detection buffered, a byte the
// disconnect watcher read, then the socket, with a byte limit while
// headers are read.
type h1Source struct {
	first   *bufio.Reader
	conn    io.Reader
	pending []byte
	limit   int // <0: none
	hit     bool
}

func (s *h1Source) Read(p []byte) (int, error) {
	if s.limit == 0 {
		s.hit = true
		return 0, io.EOF
	}
	if s.limit > 0 && len(p) > s.limit {
		p = p[:s.limit]
	}
	var n int
	var err error
	switch {
	case len(s.pending) > 0:
		n = copy(p, s.pending)
		s.pending = s.pending[n:]
	case s.first != nil && s.first.Buffered() > 0:
		n, err = s.first.Read(p)
	default:
		s.first = nil
		n, err = s.conn.Read(p)
	}
	if s.limit > 0 {
		s.limit -= n
	}
	return n, err
}

// serveH1 serves a detected plaintext HTTP/1.x connection until it closes.
func (w *worker) serveH1(sc *sniffedConn) {
	c := &h1ServerConn{w: w, sc: sc, src: &h1Source{first: sc.r, limit: -1}}
	c.check.c = c
	c.check.alarm.Target = &c.check
	ls := w.s.state.Load().listeners[sc.info.listener]
	c.in = &h1.ReqStore{Hdr: &c.reqHdr, MaxHeaders: maxHeadersFor(ls)}
	c.headersTimeout = config.DefaultRequestHeadersTimeout
	if ls != nil {
		c.headersTimeout, c.streamIdle = ls.cfg.RequestHeadersTimeout, ls.cfg.StreamIdleTimeout
	}
	c.store.Hdr = &c.respHdr
	// One raw socket reads and writes: the reads send what the writes
	// queued (h1Out).
	if q, ok := sc.w.(rawio.Queuer); ok {
		c.q, c.src.conn = q, sc.w.(io.Reader)
	} else {
		c.src.conn = rawio.IO(sc.TCPConn)
	}
	c.out.c = c
	c.br = bufio.NewReaderSize(c.src, 4096)
	c.bw = bufio.NewWriterSize(&c.out, 4096)
	w.h1mu.Lock()
	w.h1conns[c] = struct{}{}
	w.h1mu.Unlock()
	defer func() {
		w.h1mu.Lock()
		delete(w.h1conns, c)
		w.h1mu.Unlock()
		if c.q != nil {
			_ = c.q.FlushQueued() // the last response, if no read sent it
		}
		sc.Close()
	}()
	// One context per connection, as net/http's, holding the values
	// requests look up: ServerContextKey as net/http's server sets it (run
	// recovers the handler's ErrAbortHandler, a body copy that failed
	// after the headers), the connection's facts and the connection. It
	// cannot be cancelled: a request's context derived from a cancellable
	// parent registers itself there (a lock and a map entry per request).
	// The request in flight is cancelled by its own end, by the
	// connection's watches (dcWatch, route timeout) and, below, by the
	// server's stop. (One context with the three values, not three
	// nested ones: a request's context asks its parent for Done when it
	// is made and when it ends, and each lookup walked the chain.)
	base := &h1ConnCtx{Context: context.WithoutCancel(w.s.ctx), srv: w.httpSrv, info: sc.info}
	// The server's stop ends the request in flight and aborts its
	// upstream exchange (h1Pool.send): one watch per connection, not
	// per request.
	defer func() {
		if c.reqCancel != nil {
			c.reqCancel(context.Canceled)
		}
	}()
	defer context.AfterFunc(w.s.ctx, func() {
		if rw := c.cur.Load(); rw != nil {
			rw.serverStopped()
		}
	})()
	for {
		c.idle.Store(true)
		if w.s.draining.Load() {
			return
		}
		c.armIdle()
		ic := c.waitForRequest()
		_, err := c.br.Peek(1)
		if ic != nil && c.endWait(ic) {
			// The check woke the wait for what came before it: read
			// again, the usual way (the reader returned the deadline's
			// error once and kept what it had).
			c.idle.Store(false)
			continue
		}
		c.idle.Store(false)
		if err != nil {
			return
		}
		if emptied, tooMany := c.skipLineEnds(); tooMany {
			c.reject(&h1.Reject{Code: http.StatusBadRequest, Details: h1.DetailCodecError, Flags: respflag.DPE,
				Why: "more than " + strconv.Itoa(h1.MaxSkippedLineEnds) + " bytes of empty lines before a request"})
			return
		} else if emptied {
			continue // the request is still to come: wait for it as for any
		}
		// A request whose header block has arrived whole (nearly all)
		// is parsed without blocking: no header timeout to arm.
		// (The wait for the first byte was the idle one: the head has
		// begun.)
		headerWait := !c.headerBuffered() && c.headersTimeout > 0
		var headerDeadline time.Time
		if headerWait {
			headerDeadline = time.Now().Add(c.headersTimeout)
			c.setReadDeadline(headerDeadline)
		}
		c.src.limit = maxRequestHeaderBytes - c.br.Buffered()
		// The writer (with the router's state) is the connection's, as
		// are the stores of the request as read and of its upstream
		// response.
		if c.rw == nil {
			c.rw = newH1Writer(c)
		}
		if c.reqCtx == nil {
			// (A new store, after a lent header map, comes with a
			// new context: the lent request's was not kept.)
			c.reqCtx, c.reqCancel = context.WithCancelCause(base)
			c.in.Blank = (&http.Request{}).WithContext(c.reqCtx)
		}
		rw := c.rw
		rw.begin()
		// The plainest requests, whole in the buffer, are read without
		// net/http's allocations; everything else is checked
		// (h1.CheckRequestHead), then read by net/http.
		req, fast := h1.ReadRequestFast(c.br, c.in)
		var rej *h1.Reject
		if !fast {
			if rej, err = c.checkHead(); rej == nil && err == nil {
				req, err = http.ReadRequest(c.br)
			}
		}
		c.src.limit = -1
		if headerWait {
			c.setReadDeadline(time.Time{})
		}
		if rej != nil {
			c.reject(rej)
			return
		}
		if err != nil {
			// A client that closed or stalled mid-request gets nothing
			// (nobody to answer, as net/http); anything else was sent and
			// is malformed.
			switch {
			case c.src.hit || !(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isDeadline(err)):
				c.badRequest(err)
			case headerWait && isDeadline(err) && !time.Now().Before(headerDeadline):
				// A head that trickles in (slowloris): Envoy's 408 for
				// request_headers_timeout (no flag).
				c.reject(&h1.Reject{Code: http.StatusRequestTimeout, Details: "request_header_timeout",
					Why: "request head not received whole within " + c.headersTimeout.String()})
			}
			return
		}
		c.skipped = 0
		keep := c.serve(base, req, rw)
		if rw.scratch.ex.headerLent {
			// The transport may still read the request: its header
			// map and URL stay its own.
			c.reqHdr = h1.HeadScratch{}
			c.in = &h1.ReqStore{Hdr: &c.reqHdr, MaxHeaders: c.in.MaxHeaders}
		}
		if rw.mayBeHeld() {
			c.rw = nil
		}
		if !keep {
			return
		}
	}
}

// serve runs one request with its writer rw; it reports whether the
// connection stays open.
func (c *h1ServerConn) serve(base context.Context, req *http.Request, rw *h1Writer) (keep bool) {
	// A request h1.ReadRequestFast took has the connection's request
	// context, kept for the next request if nothing can still hold it;
	// any other gets a context of its own.
	ctx, cancel := c.reqCtx, c.reqCancel
	shared := ctx != nil && req.Context() == ctx
	if !shared {
		ctx, cancel = context.WithCancelCause(base)
		req = req.WithContext(ctx)
	}
	defer func() {
		if shared && c.reqCtxKept(ctx, rw) {
			return
		}
		cancel(context.Canceled)
		if shared {
			c.reqCtx, c.reqCancel = nil, nil
		}
	}()
	req.RemoteAddr = c.sc.info.src
	if (req.Body != nil && req.Body != http.NoBody) || hget(req.Header, "Upgrade") != "" {
		// The idle deadline must not cut an upload or an upgraded stream.
		c.setReadDeadline(time.Time{})
	}
	// The client's Connection: close is read now: forwarding changes the
	// request in place.
	rw.started(req, cancel)
	watch := &rw.watch
	c.cur.Store(rw)
	if c.streamIdle > 0 {
		rw.idle.arm(c.streamIdle)
	}
	defer func() {
		rw.idle.stop()
		c.cur.Store(nil)
		rw.ended()
		rw.abort.fire() // an exchange still watched ends with the request, as with its context
	}()
	if c.w.s.ctx.Err() != nil {
		// The server stopped before cur was set.
		rw.abort.fire()
		cancel(context.Canceled)
	}
	var body *h1ReqBody // kept here: the handler may replace req.Body
	if req.Body != nil && req.Body != http.NoBody {
		rw.hadBody = true
		rw.bodyPending.Store(true)
		body = &h1ReqBody{ReadCloser: req.Body, onEOF: watch.arm, w: rw}
		if strings.EqualFold(hget(req.Header, "Expect"), "100-continue") && req.ProtoAtLeast(1, 1) {
			// The proxy answers 100 Continue itself (Envoy's default,
			// proxy_100_continue false) once the request goes upstream
			// (sendContinue): a local answer (no route, no healthy
			// host) leaves the client's body unsent.
			rw.continuePending = true
			req.Header.Del("Expect")
		}
		req.Body = body
	} else {
		watch.arm()
	}
	aborted := c.run(rw, req)
	rw.stopRouteTimeout() // the handler is done: not during finish or the drain below
	watch.stop()
	if rw.hijacked {
		return false
	}
	if aborted {
		return false
	}
	rw.finish()
	if timedOut, readsEnded := rw.timeouts(); readsEnded {
		// Its read deadline passed: a body may be half read, and a
		// close with unread bytes would reset the answer away.
		c.lingerClose()
		return false
	} else if timedOut {
		_ = c.sc.SetWriteDeadline(time.Time{}) // the response went out whole
	}
	if rw.bodyErr.Load() != nil {
		c.lingerClose() // the rest of the broken body is unread
		return false
	}
	if rw.closeAfter || watch.gone {
		return false
	}
	// What the handler left of the body is skipped, up to a limit and a
	// deadline. A client still waiting for its 100 Continue will not send
	// the body: that connection closes.
	if body != nil && !body.eof {
		if rw.continuePending {
			return false
		}
		c.setReadDeadline(time.Now().Add(5 * time.Second))
		n, err := io.CopyN(io.Discard, body.ReadCloser, maxDrainBody+1)
		c.setReadDeadline(time.Time{})
		if n > maxDrainBody || err != io.EOF {
			return false
		}
	}
	return true
}

// reqCtxKept reports whether the connection's request context ctx, which
// rw's request had, may serve the next request: it has not ended (no
// route timeout, client gone or server stop), and nothing was given it
// that may outlive the request (a transport other than the HTTP/1.1
// pool's own exchange, a derived context, a request body, an upgraded
// stream). Its request has ended, so nothing fires for it any more.
func (c *h1ServerConn) reqCtxKept(ctx context.Context, rw *h1Writer) bool {
	return ctx.Err() == nil && !rw.mayBeHeld()
}

// mayBeHeld reports whether something may still hold what rw's request
// had once it ended, so that the next request needs a new writer (and
// context): its body reader (which points at the writer), an upgraded
// stream, or a transport other than the HTTP/1.1 pool's own exchange
// (activeStream.ctxShared, which a lent header map implies). Such a
// transport may also keep the generated x-request-id, which shares the
// writer's memory: an HTTP/2 connection's HPACK table keeps the strings
// it encoded.
func (rw *h1Writer) mayBeHeld() bool {
	return rw.hadBody || rw.hijacked || rw.scratch.ex.ctxShared
}

// run calls the handler; it reports an abort (proxy's
// http.ErrAbortHandler, or a panic, which is logged).
func (c *h1ServerConn) run(rw *h1Writer, req *http.Request) (aborted bool) {
	defer func() {
		if r := recover(); r != nil {
			aborted = true
			if r != http.ErrAbortHandler {
				c.w.s.log.Error("http handler panic", "panic", fmt.Sprint(r), "uri", req.URL.RequestURI())
			}
			if !rw.hijacked {
				_ = c.bw.Flush()
			}
		}
	}()
	c.w.serveRequest(rw, req, &rw.scratch, rw, nil)
	return false
}

// badRequest answers a request that could not be read: 431 for a head
// over maxRequestHeaderBytes (http1.headers_too_large), else 400
// (http1.codec_error), flagged DPE.
func (c *h1ServerConn) badRequest(err error) {
	r := &h1.Reject{Code: http.StatusBadRequest, Details: h1.DetailCodecError, Flags: respflag.DPE, Why: err.Error()}
	if c.src.hit {
		r.Code, r.Details = http.StatusRequestHeaderFieldsTooLarge, h1.DetailHeadersTooLarge
		r.Why = "request head over " + strconv.Itoa(maxRequestHeaderBytes) + " bytes"
	}
	c.reject(r)
}

// skipLineEnds discards the CRs and LFs buffered before the next request
// (RFC 9112 §2.2: a server ignores empty lines before a request line;
// some clients send one after a body). emptied: nothing else is buffered
// yet; tooMany: the connection sent more than h1.MaxSkippedLineEnds of them.
func (c *h1ServerConn) skipLineEnds() (emptied, tooMany bool) {
	b, _ := c.br.Peek(c.br.Buffered())
	n := 0
	for n < len(b) && (b[n] == '\r' || b[n] == '\n') {
		n++
	}
	if n == 0 {
		return false, false
	}
	_, _ = c.br.Discard(n)
	c.skipped += n
	return n == len(b), c.skipped > h1.MaxSkippedLineEnds
}

// checkHead reads the next request's head as far as its blank line and
// checks it (h1.CheckRequestHead) before net/http reads it. A head whole in
// the reader's buffer is checked there; a longer one is read out of the
// buffer and queued again ahead of the connection's other bytes
// (h1Source.pending), as is a head whose request line is rewritten, so
// that net/http reads exactly the bytes checked. err is a read error
// (the client closed or stalled, or the head passed
// maxRequestHeaderBytes: c.src.hit).
func (c *h1ServerConn) checkHead() (*h1.Reject, error) {
	br := c.br
	var head, collected []byte
	for head == nil {
		b, _ := br.Peek(br.Buffered())
		if collected == nil {
			if n := h1.HeadEnd(b); n >= 0 {
				head = b[:n]
				break
			}
			if h1.ScanRequestLine(b) == h1.LineNot {
				// Not a request line so far (bytes of another
				// protocol on an HTTP listener): refused now, not once
				// a head arrives.
				return &h1.Reject{Code: http.StatusBadRequest, Details: h1.DetailCodecError, Flags: respflag.DPE,
					Why: "malformed request line " + h1.QuoteInput(b)}, nil
			}
			if len(b) < br.Size() {
				if _, err := br.Peek(len(b) + 1); err != nil {
					return nil, err
				}
				continue
			}
			collected = make([]byte, 0, 2*br.Size())
		}
		collected = append(collected, b...)
		_, _ = br.Discard(len(b))
		if n := h1.HeadEnd(collected); n >= 0 {
			head = collected[:n]
			break
		}
		if _, err := br.Peek(1); err != nil {
			return nil, err
		}
	}
	rej, line := h1.CheckRequestHead(head, c.in.MaxHeaders)
	if rej != nil {
		return rej, nil
	}
	if line == nil && collected == nil {
		return nil, nil
	}
	// What was read out of the buffer, with the rewritten request line,
	// goes back ahead of the rest; the head is whole, so its byte limit
	// is done.
	if collected == nil {
		collected, _ = br.Peek(br.Buffered())
	}
	if line != nil {
		collected = append(line, collected[bytes.IndexByte(head, '\n')+1:]...)
	}
	_, _ = br.Discard(br.Buffered())
	c.src.pending = append(collected, c.src.pending...)
	c.src.limit = -1
	return nil, nil
}

// h1ReqBody is a request body: at its end the disconnect watch is armed (the
// connection may then be read). Close does not drain (net/http's would
// read all of an abandoned upload); serve skips a bounded rest. A body
// whose framing breaks (a malformed chunk) is recorded in its writer
// (h1Writer.bodyErr): the client's protocol error, not the upstream's.
type h1ReqBody struct {
	io.ReadCloser
	onEOF  func()
	w      *h1Writer // the request's
	eof    bool
	closed bool
}

// sendContinue sends the 100 Continue the client of rw's request waits
// for before its body (Expect: 100-continue), once, from the request's
// goroutine before the request goes upstream: the body is then read by
// the transport's goroutine, which must not write to the client while the
// response is written. A request that asked none, or whose answer is
// local, sends none.
func (rw *h1Writer) sendContinue() {
	if !rw.continuePending {
		return
	}
	if !rw.committed {
		_, _ = io.WriteString(rw.c.bw, "HTTP/1.1 100 Continue\r\n\r\n")
		_ = rw.c.bw.Flush()
	}
	rw.continuePending = false
}

// Close marks the body closed.
func (b *h1ReqBody) Close() error {
	b.closed = true
	return nil
}

func (b *h1ReqBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.eof {
		b.eof = true
		if b.w != nil {
			b.w.bodyPending.Store(false)
		}
		b.onEOF()
	} else if err != nil && err != io.EOF && b.w != nil && framingError(err) {
		b.w.bodyErr.CompareAndSwap(nil, &bodyError{err})
	}
	return n, err
}

// framingError reports whether a request body's read error is the
// body's framing (net/http's chunked reader refusing a chunk size, a
// missing CRLF, a malformed trailer), not the connection's: the end of
// stream before the body's end (io.ErrUnexpectedEOF), a socket error or a
// deadline.
func framingError(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return false // (checked first: the rest allocates)
	}
	var oe *net.OpError
	return !errors.As(err, &oe) && !errors.Is(err, net.ErrClosed) && !isDeadline(err) && !errors.Is(err, http.ErrBodyReadAfterClose)
}

// bodyError is the framing error of a request body.
type bodyError struct{ err error }

// dcWatch notices a client that goes away during a slow request: armed
// (once the request is read whole), it starts after dcWatchDelay (on the
// worker's clock: up to a clock.Tick later) a goroutine that reads the
// connection; end of stream or an error cancels the request (the handler
// then flags DC); a byte (the next pipelined request) is kept for the
// reader.
type dcWatch struct {
	c     *h1ServerConn
	rw    *h1Writer
	alarm clock.Alarm // its target is the watch
	// mu guards what follows: the watch of the request in flight.
	mu   sync.Mutex
	on   bool   // armed
	gen  uint64 // the alarm's generation when armed
	done chan struct{}
	off  bool
	gone bool
}

// reset readies the watch for the writer's next request (after stop).
func (d *dcWatch) reset() {
	d.mu.Lock()
	d.on, d.done, d.off, d.gone = false, nil, false, false
	d.mu.Unlock()
}

func (d *dcWatch) arm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off || d.on {
		return
	}
	d.on = true
	d.gen = d.c.w.clock.Set(&d.alarm, dcWatchDelay)
}

func (d *dcWatch) AlarmFired(gen uint64) { d.start(gen) }

// start starts the watch armed with the alarm's generation gen.
func (d *dcWatch) start(gen uint64) {
	d.mu.Lock()
	if d.off || !d.on || gen != d.gen || d.c.br.Buffered() > 0 || len(d.c.src.pending) > 0 {
		d.mu.Unlock()
		return // stopped, a firing for an earlier request, or the client has already sent more
	}
	d.done = make(chan struct{})
	d.mu.Unlock()
	go func() {
		defer close(d.done)
		var b [1]byte
		for {
			n, err := d.c.sc.TCPConn.Read(b[:])
			if n > 0 {
				d.c.src.pending = append(d.c.src.pending, b[:n]...)
				return
			}
			if err != nil && !isDeadline(err) {
				d.gone = true
				d.rw.cancelRequest(context.Canceled)
				return
			}
			// A deadline: stop's, or the connection's idle deadline
			// reached by a request that long: watch on without it.
			d.mu.Lock()
			if d.off {
				d.mu.Unlock()
				return
			}
			d.c.setReadDeadline(time.Time{})
			d.mu.Unlock()
		}
	}()
}

// stop ends the watch before the connection is used again.
func (d *dcWatch) stop() {
	d.mu.Lock()
	d.off = true
	if d.on {
		d.alarm.Stop()
	}
	done := d.done
	d.mu.Unlock()
	if done != nil {
		_ = d.c.sc.SetReadDeadline(aLongTimeAgo)
		<-done
		d.c.setReadDeadline(time.Time{})
	}
}

// h1Writer is the http.ResponseWriter of a connection's requests: one
// writer serves request after request (begin readies it), so that a
// request costs no allocation of it, unless a request may have left a
// reference to it behind (see serveH1): then the next gets a new one.
type h1Writer struct {
	c *h1ServerConn
	h1Response
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
	// worker's clock (h1Response.routeTimer the runtime timer of a short
	// one).
	routeOn      bool
	routeGen     uint64
	routeTimeout clock.Alarm
	watch        dcWatch
	// abort is the request's upstream HTTP/1.1 exchange (h1Pool.send gets the writer).
	abort upstreamAbort
	// idle is the request's stream idle timeout. timedOut says a
	// timeout (route or stream idle) fired for the request in flight,
	// readsEnded that it ended the request's reads (guarded by mu).
	idle       streamIdle
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

// h1Response is a writer's state for one request, zeroed for each.
type h1Response struct {
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
	// (armRouteTimeout).
	routeTimer *time.Timer
	// cancel ends the request's context with a cause (the route
	// timeout's); cancelRequest also aborts the upstream exchange.
	// Written under the writer's mu (begin, serve).
	cancel context.CancelCauseFunc
	// wantsClose: the client asked to close after this response.
	wantsClose bool
	// continuePending: the client waits for a 100 Continue before its
	// body, not sent yet (sendContinue).
	continuePending bool
	// in is the request as read and store its upstream response (the
	// connection's, h1ServerConn.in and .store); scratch the router's
	// state.
	in      *h1.ReqStore
	store   *respStore
	scratch httpScratch
}

// newH1Writer is c's writer, ready for begin.
func newH1Writer(c *h1ServerConn) *h1Writer {
	rw := &h1Writer{c: c}
	rw.routeTimeout.Target = rw
	rw.idle.s, rw.idle.w, rw.idle.h1 = &rw.scratch, c.w, rw
	rw.watch.c, rw.watch.rw = c, rw
	rw.watch.alarm.Target = &rw.watch
	return rw
}

// begin readies rw for the connection's next request.
func (rw *h1Writer) begin() {
	rw.mu.Lock()
	rw.h1Response = h1Response{in: rw.c.in, store: &rw.c.store}
	rw.bodyErr.Store(nil)
	rw.seq++
	rw.timedOut, rw.readsEnded = false, false
	rw.bodyPending.Store(false)
	rw.mu.Unlock()
	rw.watch.reset()
	rw.abort.reset()
}

// started marks the request in flight, with cancel its context's.
func (rw *h1Writer) started(req *http.Request, cancel context.CancelCauseFunc) {
	rw.mu.Lock()
	rw.req, rw.cancel, rw.wantsClose = req, cancel, req.Close
	rw.live = true
	rw.mu.Unlock()
}

// ended marks the request over: nothing that fires late reaches it.
func (rw *h1Writer) ended() {
	rw.mu.Lock()
	rw.live, rw.routeOn = false, false
	rw.mu.Unlock()
}

// armRouteTimeout ends the request with errRouteTimeout once d has passed
// (unless stopRouteTimeout comes first): on the worker's clock, with the
// alarm in the writer, or on a runtime timer under clock.PreciseBelow.
func (rw *h1Writer) armRouteTimeout(d time.Duration) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.routeOn = true
	if d < clock.PreciseBelow {
		seq := rw.seq
		rw.routeTimer = time.AfterFunc(d, func() { rw.routeFired(func() bool { return rw.seq == seq }) })
		return
	}
	rw.routeGen = rw.c.w.clock.Set(&rw.routeTimeout, d)
}

// stopRouteTimeout keeps the route timeout from firing if it has not yet.
func (rw *h1Writer) stopRouteTimeout() {
	rw.mu.Lock()
	rw.routeOn = false
	rw.mu.Unlock()
	if rw.routeTimer != nil {
		rw.routeTimer.Stop()
	}
	rw.routeTimeout.Stop()
}

// AlarmFired is the route timeout's alarm: generation gen.
func (rw *h1Writer) AlarmFired(gen uint64) {
	rw.routeFired(func() bool { return rw.routeGen == gen })
}

// routeFired ends the request with errRouteTimeout if its timeout is
// still armed and mine (under mu) says the firing is this request's.
func (rw *h1Writer) routeFired(mine func() bool) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.live && rw.routeOn && mine() {
		rw.timedOutLocked(errRouteTimeout)
	}
}

// timeoutFired ends the request in flight, if there is one, for a
// timeout: timedOutLocked.
func (rw *h1Writer) timeoutFired(cause error) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.live {
		rw.timedOutLocked(cause)
	}
}

// timedOutLocked ends the request for a timeout (cause, under mu, the
// request in flight): its context and upstream exchange now, what it still
// writes downstream after timeoutGrace (a client that reads nothing then
// loses its connection, as Envoy resets the stream). A stream idle
// timeout, or any with the request's body still being read, also ends the
// body's read now, and the connection after the request.
func (rw *h1Writer) timedOutLocked(cause error) {
	rw.cancelRequest(cause)
	rw.timedOut = true
	if cause == errStreamIdleTimeout || rw.bodyPending.Load() {
		rw.readsEnded = true
		_ = rw.c.sc.SetReadDeadline(aLongTimeAgo)
	}
	_ = rw.c.sc.SetWriteDeadline(time.Now().Add(timeoutGrace))
}

// timeouts reports whether a timeout fired for the request (timedOut) and
// whether it ended the request's reads (readsEnded).
func (rw *h1Writer) timeouts() (timedOut, readsEnded bool) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.timedOut, rw.readsEnded
}

// serverStopped ends the request in flight, if there is one, when the
// server stops.
func (rw *h1Writer) serverStopped() {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.live {
		rw.abort.fire()
		rw.cancel(context.Canceled)
	}
}

// cancelRequest ends the request: its context with cause, then its
// upstream exchange. It runs on the request's goroutines, or under mu
// with the request in flight.
func (rw *h1Writer) cancelRequest(cause error) {
	rw.cancel(cause)
	rw.abort.fire()
}

// h1ConnCtx is the context of a connection's requests: the server's
// values (it embeds the server's context without its cancellation) and
// the connection's: http.ServerContextKey and connInfoKey, each boxed
// once. It is never done.
type h1ConnCtx struct {
	context.Context
	srv  any // *http.Server
	info any // connInfo
}

// Value returns the connection's values, else the server context's.
func (x *h1ConnCtx) Value(key any) any {
	switch key {
	case connInfoKey{}:
		return x.info
	case http.ServerContextKey:
		return x.srv
	}
	return x.Context.Value(key)
}

// Done is nil: the context is never cancelled.
func (x *h1ConnCtx) Done() <-chan struct{} { return nil }

// Err is nil: the context is never cancelled.
func (x *h1ConnCtx) Err() error { return nil }

// upstreamAbort cuts a request's upstream connection (a deadline in the
// past) when the request ends early, as a context.AfterFunc on the
// request's context would, without the five allocations and the
// registration on the context that one costs per exchange.
type upstreamAbort struct {
	mu    sync.Mutex
	conn  net.Conn
	fired bool
}

// watch makes conn the connection to cut; it is cut now if the request
// has already ended.
func (a *upstreamAbort) watch(conn net.Conn) {
	a.mu.Lock()
	a.conn = conn
	if a.fired {
		_ = conn.SetDeadline(aLongTimeAgo)
	}
	a.mu.Unlock()
}

// reset readies the abort for the writer's next request.
func (a *upstreamAbort) reset() {
	a.mu.Lock()
	a.conn, a.fired = nil, false
	a.mu.Unlock()
}

// release stops watching; it reports false if the connection was cut
// (as a context.AfterFunc's stop reports that its function ran).
func (a *upstreamAbort) release() bool {
	a.mu.Lock()
	cut := a.fired && a.conn != nil
	a.conn = nil
	a.mu.Unlock()
	return !cut
}

// fire cuts the watched connection, and any watched later.
func (a *upstreamAbort) fire() {
	a.mu.Lock()
	a.fired = true
	if a.conn != nil {
		// Under mu: once release returns, no cut lands late on a
		// connection given back its deadline (keepCancelled).
		_ = a.conn.SetDeadline(aLongTimeAgo)
	}
	a.mu.Unlock()
}

func (rw *h1Writer) Header() http.Header {
	if rw.header == nil {
		rw.header = make(http.Header, 8)
	}
	return rw.header
}

// adoptHeader makes h the response's header map if nothing was set in
// the writer's own yet (proxy hands over the upstream response's, which
// is its to give: no copy per request); it reports whether it did.
func (rw *h1Writer) adoptHeader(h http.Header) bool {
	if len(rw.header) > 0 || rw.wrote || rw.hijacked {
		return false
	}
	rw.header = h
	return true
}

func (rw *h1Writer) WriteHeader(code int) {
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

func (rw *h1Writer) Write(p []byte) (int, error) {
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

func (rw *h1Writer) writeBody(p []byte) (int, error) {
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
func (rw *h1Writer) Flush() {
	if rw.hijacked {
		return
	}
	rw.start(false)
	_ = rw.c.bw.Flush()
}

// start puts the status line and headers in the buffer if they are not
// there yet (status 200 if none was set); final: the handler is done.
func (rw *h1Writer) start(final bool) {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	if !rw.committed {
		rw.commit(final)
	}
}

// Hijack hands the connection over (Upgrade, http.Hijacker): its reads
// start with what the request reader had buffered.
func (rw *h1Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
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
	conn := &hijackedConn{TCPConn: rw.c.sc.TCPConn, r: rw.c.br}
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
func (rw *h1Writer) commit(final bool) {
	rw.committed = true
	h := rw.Header()
	rw.cl = -1
	if v := hget(h, "Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
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
	if rw.wantsClose || !http11 || rw.c.w.s.draining.Load() || rw.bodyErr.Load() != nil {
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
		h.Set("Date", rw.c.w.httpDate())
	}
	bw := rw.c.bw
	text := http.StatusText(rw.status)
	if text == "" {
		text = "status code " + strconv.Itoa(rw.status)
	}
	_, _ = io.WriteString(bw, "HTTP/1.1 ")
	_, _ = io.WriteString(bw, strconv.Itoa(rw.status))
	_ = bw.WriteByte(' ')
	_, _ = io.WriteString(bw, text)
	_, _ = io.WriteString(bw, "\r\n")
	for k, vv := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		for _, v := range vv {
			_, _ = io.WriteString(bw, k)
			_, _ = io.WriteString(bw, ": ")
			_, _ = io.WriteString(bw, headerValue(v))
			_, _ = io.WriteString(bw, "\r\n")
		}
	}
	_, _ = io.WriteString(bw, "\r\n")
	buf := rw.buf
	rw.buf = nil
	_, _ = rw.writeBody(buf)
}

// headerValue keeps a header value on one line.
func headerValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		return strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	return v
}

// finish ends the response: the buffered body with its length, the last
// chunk with the trailers, the flush.
func (rw *h1Writer) finish() {
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
	// The last of the response waits for the next read (h1Out), unless
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

// httpDate is the Date header value, formatted once a second per worker.
func (w *worker) httpDate() string {
	now := time.Now().Unix()
	if d := w.date.Load(); d != nil && d.sec == now {
		return d.text
	}
	d := &cachedDate{sec: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	w.date.Store(d)
	return d.text
}

type cachedDate struct {
	sec  int64
	text string
}

// drainH1 closes this worker's idle HTTP/1 connections (the busy ones
// close after their response).
func (w *worker) drainH1(force bool) {
	w.h1mu.Lock()
	defer w.h1mu.Unlock()
	for c := range w.h1conns {
		if force || c.idle.Load() {
			_ = c.sc.SetReadDeadline(aLongTimeAgo)
		}
		if force {
			c.sc.Close()
		}
	}
}
