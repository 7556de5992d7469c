package h1server

import (
	"bufio"
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

	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// Conn is the server's state of one downstream HTTP/1 connection. Its
// zero value is ready for one Serve (a Conn is not reused for another
// connection); the Handler may hold it (in its own
// per-connection state, so that both are one allocation). idle (waiting
// for a request) is read by Drain.
type Conn struct {
	srv *Server
	// srvCtx is ConnOptions.Context.
	srvCtx context.Context
	h      Handler
	tcp    *net.TCPConn
	// raw is the socket's writes (ConnOptions.Raw); remote its requests'
	// RemoteAddr.
	raw    io.Writer
	remote string
	src    source
	br     *bufio.Reader
	bw     *bufio.Writer
	idle   atomic.Bool
	// cur is the request being served (its upstream abort).
	cur atomic.Pointer[Writer]
	// headersTimeout is the listener's request_headers_timeout (0:
	// none).
	headersTimeout time.Duration
	// readDL is the read deadline last set by this connection's
	// goroutines (drain's are not recorded: the connection then ends).
	readDL time.Time
	// reqHdr is the header map of its requests read by h1.ReadRequestFast,
	// reused unless a request lent it to a transport that may still read
	// it (Stream.HeaderLent): then the next request starts a new one.
	reqHdr h1.HeadScratch
	// in holds the request read by h1.ReadRequestFast (its http.Request
	// and URL): reused from request to request as the header map is (in
	// is replaced when reqHdr is: a transport that may still read the
	// request has its URL too).
	in *h1.ReqStore
	// rw is the writer of its requests (see Writer), with st its stream,
	// nil until the next request makes one.
	rw *Writer
	// reqCtx is the context of the requests read by h1.ReadRequestFast
	// (in.Blank carries it), kept from request to request while nothing
	// can still hold it (reqCtxKept); nil until the next request makes
	// one. reqCancel cancels it.
	reqCtx    context.Context
	reqCancel context.CancelCauseFunc
	// out is what bw writes to; q the socket's write queue for its next
	// read (raw socket I/O), nil without (see connOut).
	out connOut
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

// Serve serves the detected plaintext HTTP/1.x connection o.TCP with the
// state c (a zero Conn) and the router's handler h until the connection
// closes, which it closes.
func (s *Server) Serve(c *Conn, h Handler, o ConnOptions) {
	c.srv, c.h, c.tcp, c.raw, c.remote, c.srvCtx = s, h, o.TCP, o.Raw, o.RemoteAddr, o.Context
	c.src = source{first: o.Detected, limit: -1}
	c.check.c = c
	c.check.alarm.Target = &c.check
	c.in = &h1.ReqStore{Hdr: &c.reqHdr, MaxHeaders: o.MaxHeaders}
	c.headersTimeout = o.HeadersTimeout
	// One raw socket reads and writes: the reads send what the writes
	// queued (connOut).
	if q, ok := o.Raw.(rawio.Queuer); ok {
		c.q, c.src.conn = q, o.Raw.(io.Reader)
	} else {
		c.src.conn = rawio.IO(o.TCP)
	}
	c.out.c = c
	c.br = bufio.NewReaderSize(&c.src, 4096)
	c.bw = bufio.NewWriterSize(&c.out, 4096)
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		if c.q != nil {
			_ = c.q.FlushQueued() // the last response, if no read sent it
		}
		c.tcp.Close()
	}()
	// One context per connection, as net/http's, holding the values
	// requests look up: ServerContextKey as net/http's server sets it (run
	// recovers the handler's ErrAbortHandler, a body copy that failed
	// after the headers) and the connection's facts (ConnOptions.Info).
	// It cannot be cancelled: a request's context derived from a
	// cancellable parent registers itself there (a lock and a map entry
	// per request). The request in flight is cancelled by its own end, by
	// the connection's watches (dcWatch, route timeout) and, below, by the
	// server's stop. (One context with the values, not nested ones: a
	// request's context asks its parent for Done when it is made and when
	// it ends, and each lookup walked the chain.)
	base := &connCtx{Context: context.WithoutCancel(o.Context), srv: s.o.HTTPServer, infoKey: s.o.InfoKey, info: o.Info}
	// The server's stop ends the request in flight and aborts its
	// upstream exchange (Writer.Abort): one watch per connection, not
	// per request.
	defer func() {
		if c.reqCancel != nil {
			c.reqCancel(context.Canceled)
		}
	}()
	defer context.AfterFunc(o.Context, func() {
		if rw := c.cur.Load(); rw != nil {
			rw.serverStopped()
		}
	})()
	for {
		c.idle.Store(true)
		if s.o.Draining.Load() {
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
		c.src.limit = s.o.MaxHeaderBytes - c.br.Buffered()
		// The writer (with the router's state, its stream) is the
		// connection's, as is the store of the request as read.
		if c.rw == nil {
			c.newWriter()
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
			case c.src.hit || !(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || rawio.IsDeadline(err)):
				c.badRequest(err)
			case headerWait && rawio.IsDeadline(err) && !time.Now().Before(headerDeadline):
				// A head that trickles in (slowloris): Envoy's 408 for
				// request_headers_timeout (no flag).
				c.reject(&h1.Reject{Code: http.StatusRequestTimeout, Details: "request_header_timeout",
					Why: "request head not received whole within " + c.headersTimeout.String()})
			}
			return
		}
		c.skipped = 0
		keep := c.serve(base, req, rw)
		if rw.st.HeaderLent() {
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
func (c *Conn) serve(base context.Context, req *http.Request, rw *Writer) (keep bool) {
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
	req.RemoteAddr = c.remote
	if (req.Body != nil && req.Body != http.NoBody) || h1.Get(req.Header, "Upgrade") != "" {
		// The idle deadline must not cut an upload or an upgraded stream.
		c.setReadDeadline(time.Time{})
	}
	// The client's Connection: close is read now: forwarding changes the
	// request in place.
	rw.started(req, cancel)
	watch := &rw.watch
	c.cur.Store(rw)
	defer func() {
		rw.st.Ended()
		c.cur.Store(nil)
		rw.ended()
		rw.abort.Fire() // an exchange still watched ends with the request, as with its context
	}()
	if c.srvCtx.Err() != nil {
		// The server stopped before cur was set.
		rw.abort.Fire()
		cancel(context.Canceled)
	}
	var body *reqBody // kept here: the handler may replace req.Body
	if req.Body != nil && req.Body != http.NoBody {
		rw.hadBody = true
		rw.bodyPending.Store(true)
		body = &reqBody{ReadCloser: req.Body, onEOF: watch.arm, w: rw}
		if strings.EqualFold(h1.Get(req.Header, "Expect"), "100-continue") && req.ProtoAtLeast(1, 1) {
			// The proxy answers 100 Continue itself (Envoy's default,
			// proxy_100_continue false) once the request goes upstream
			// (SendContinue): a local answer (no route, no healthy
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
	return c.reusable(rw, body, aborted)
}

// reusable finishes rw's response (its request served, aborted if the
// handler aborted) and reports whether the connection can take another
// request. (A function of its own: with these returns in serve, serve's
// defers were not open-coded, two defer records per request.)
func (c *Conn) reusable(rw *Writer, body *reqBody, aborted bool) bool {
	watch := &rw.watch
	if rw.hijacked || aborted {
		return false
	}
	rw.finish()
	if timedOut, readsEnded := rw.timeouts(); readsEnded {
		// Its read deadline passed: a body may be half read, and a
		// close with unread bytes would reset the answer away.
		c.lingerClose()
		return false
	} else if timedOut {
		_ = c.tcp.SetWriteDeadline(time.Time{}) // the response went out whole
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
func (c *Conn) reqCtxKept(ctx context.Context, rw *Writer) bool {
	return ctx.Err() == nil && !rw.mayBeHeld()
}

// mayBeHeld reports whether something may still hold what rw's request
// had once it ended, so that the next request needs a new writer (and
// context, and stream): its body reader (which points at the writer), an
// upgraded stream, or what the router gave a transport other than the
// HTTP/1.1 pool's own exchange (Stream.Held, which a lent header map
// implies). Such a transport may also keep what shares the stream's
// memory (the router's generated x-request-id: an x/net HTTP/2
// connection's HPACK table keeps the strings it encoded).
func (rw *Writer) mayBeHeld() bool {
	return rw.hadBody || rw.hijacked || rw.st.Held()
}

// run calls the handler (Stream.Serve); it reports an abort (the
// router's http.ErrAbortHandler, or a panic, which is logged).
func (c *Conn) run(rw *Writer, req *http.Request) (aborted bool) {
	defer func() {
		if r := recover(); r != nil {
			aborted = true
			if r != http.ErrAbortHandler {
				c.srv.o.Log.Error("http handler panic", "panic", fmt.Sprint(r), "uri", req.URL.RequestURI())
			}
			if !rw.hijacked {
				_ = c.bw.Flush()
			}
		}
	}()
	rw.st.Serve(req)
	return false
}
