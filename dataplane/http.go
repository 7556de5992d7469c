// This file is over 600 lines: the handler's entry, the route and retry
// loop, failure classification and the request's access-log line all read
// and write the activeStream, the one per-request state; the clock,
// statistics and log writer they use are packages of their own
// (internal/...), the upstream pool a file of its own (h1pool.go), and
// the router is the package's core (docs/architecture.md).

package dataplane

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/net/http2"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1server"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h2"
	"github.com/meshlet-dev/meshlet/dataplane/internal/logsink"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/accesslog"
	"github.com/meshlet-dev/meshlet/lb/respflag"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// maxRetryBody is the request body meshlet buffers so it can resend it on a
// retry (Envoy's per-request buffer limit); bigger bodies are not retried.
const maxRetryBody = 64 << 10

// activeStream is one downstream request's state (Envoy's name for it),
// shared by the handler, the proxying and the router.
type activeStream struct {
	w       *worker
	route   *routeState
	cluster *cluster
	stats   *stats.Cluster
	body    []byte // buffered body for retries; nil: not replayable
	flags   respflag.Flags
	details string // %RESPONSE_CODE_DETAILS%
	failure string // %UPSTREAM_TRANSPORT_FAILURE_REASON%
	host    string // the last upstream host tried
	tried   []lb.HostID
	grpc    bool
	sw      *statusWriter // the downstream response
	// target is the request target as read (proxy clears RequestURI, as
	// net/http's transports want): the HTTP/1.1 pool writes it again
	// while the URL says the same (h1.TargetOf).
	target string
	// h1 is the fast HTTP/1 server's stream of the request (nil for
	// other servers): its writer (body state, 100 Continue, route timeout,
	// upstream abort) and its connection's response store.
	h1 *h1Stream
	// down is a serveStream request's upstream abort that its server
	// fires (nil if none): the HTTP/1 pool watches its exchange with it.
	down *streamAbort
	// upMTLS says the last attempt went over mutual TLS, to upstreamPeer.
	upMTLS       bool
	upstreamPeer string
	// headerLent: the request itself (its header map) went to a
	// transport that may read it after the request ends.
	headerLent bool
	// ctxShared: the request's context went somewhere other than the
	// HTTP/1.1 pool's own exchange (a derived context, a copy of the
	// request, another transport), which may hold it after the request.
	ctxShared bool
	// upgraded counts the bytes of an upgraded stream, both ways (for
	// the stream idle timeout).
	upgraded atomic.Uint64
	// netHTTP1: an HTTP/1 request of the net/http fallback, whose
	// connection a timeout's local reply closes (proxyError).
	netHTTP1 bool
	// respHeaders are the response header changes of the request's rule
	// and backend (a route table's), applied to the upstream's response.
	respHeaders [2]*config.HeaderMutation
	// origPath is the request target before a route table's rewrite ("":
	// not rewritten), for the access log.
	origPath string
	// dst is the request's original destination (a passthrough
	// endpoint's port).
	dst netip.AddrPort
	// hostZone is the zone of the last upstream host tried.
	hostZone string
	// trace is the request's span in this sidecar (tracing on).
	trace traceState
}

// httpScratch is the router's state for one request, in one allocation
// (for the fast HTTP/1 server, inside the stream of the request's
// writer, h1Stream, zeroed for each request).
type httpScratch struct {
	sw      statusWriter
	cb      countingBody
	ex      activeStream
	tried   [4]lb.HostID // ex.tried's first attempts
	id      [36]byte     // a generated x-request-id
	idValue [1]string
}

// statusWriter records what was sent downstream.
type statusWriter struct {
	http.ResponseWriter
	code int
	// bytes is atomic: the stream idle timeout reads it while the
	// request runs.
	bytes atomic.Uint64
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 || s.code < 200 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(p)
	s.bytes.Add(uint64(n))
	return n, err
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Hijack hands the connection over for an Upgrade (WebSocket): the proxy
// then writes the upstream's 101 itself, so record it here.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil {
		s.code = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

// countingBody counts request bytes read from downstream. The count is
// atomic: a transport's goroutine may still read the body while the
// request's goroutine logs it.
type countingBody struct {
	io.ReadCloser
	n atomic.Uint64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(uint64(n))
	return n, err
}

// serveStream serves a request of a server other than the fast HTTP/1 one:
// an HTTP/2 stream (internal/h2's handler) or a request of the net/http
// fallback. Its timeouts reach it from other goroutines (streamEnd), so
// its state is its own. Their causes end the request's context: the
// stream's own where its server lets the handler end it (internal/h2),
// else one derived for the request.
func (w *worker) serveStream(rw http.ResponseWriter, req *http.Request) {
	hs := &streamScratch{stream: streamEnd{rw: rw}}
	if c, ok := rw.(requestCanceler); ok {
		hs.canceler = c
	} else {
		hs.streamCtx = req.Context()
		ctx, cancel := context.WithCancelCause(hs.streamCtx)
		hs.derived.cancel = cancel
		hs.canceler = &hs.derived
		req = req.WithContext(ctx)
	}
	hs.idle.s, hs.idle.w, hs.idle.hs = &hs.httpScratch, w, hs
	hs.route.hs, hs.route.alarm.Target = hs, &hs.route
	hs.ctx = req.Context()
	if aw, ok := rw.(abortWatcher); ok {
		hs.down.ctx = hs.ctx
		aw.WatchAbort(&hs.down.abort)
	}
	defer hs.end()
	w.serveRequest(rw, req, &hs.httpScratch, nil, hs)
}

// requestCanceler is a ResponseWriter whose server lets the handler end
// the request's context with a cause (internal/h2's).
type requestCanceler interface{ CancelRequest(cause error) }

// abortWatcher is a ResponseWriter whose server fires an upstream abort
// when the request's context ends (internal/h2's).
type abortWatcher interface {
	WatchAbort(a h2.Aborter)
}

// streamAbort is a serveStream request's upstream abort, fired by its
// server when the request's context ends (abortWatcher): the HTTP/1 pool
// cuts an exchange with it instead of a context.AfterFunc of its own.
type streamAbort struct {
	ctx   context.Context // the request's (an attempt with another is watched the usual way)
	abort h1server.UpstreamAbort
}

// derivedCancel ends a context serveStream derived for the request.
type derivedCancel struct{ cancel context.CancelCauseFunc }

func (d *derivedCancel) CancelRequest(cause error) { d.cancel(cause) }

// serveRequest is the router's entry for one request, with its state s.
// Each server passes its own handle on the request, never found by a
// type assertion: the fast HTTP/1 server the stream hw of the request's
// writer (h1Stream.Serve: rw is hw's writer), every other server the
// stream hs (serveStream).
func (w *worker) serveRequest(rw http.ResponseWriter, req *http.Request, s *httpScratch, hw *h1Stream, hs *streamScratch) {
	w.inflight.Add(1)
	defer w.inflight.Add(-1)
	start := time.Now()
	var info *connInfo
	if hw != nil {
		info = &hw.conn.info // the fast server's connection's: no context lookup
	} else {
		hs.info, _ = req.Context().Value(connInfoKey{}).(connInfo)
		info = &hs.info
	}
	sw := &s.sw
	sw.ResponseWriter = rw
	cb := &s.cb
	cb.ReadCloser = req.Body
	cb.n.Store(0)
	req.Body = cb
	st := w.s.state.Load()
	ex := &s.ex
	*ex = activeStream{w: w, sw: sw, h1: hw, dst: info.dst, grpc: strings.HasPrefix(h1.Get(req.Header, "Content-Type"), "application/grpc"), tried: s.tried[:0],
		netHTTP1: hw == nil && req.ProtoMajor == 1}
	if hs != nil && hs.down.ctx != nil {
		ex.down = &hs.down
	}
	if h1.Get(req.Header, "X-Request-Id") == "" {
		s.idValue[0] = w.requestIDInto(&s.id)
		req.Header["X-Request-Id"] = s.idValue[:]
	}
	if st.tracing {
		w.startTrace(st, req, &ex.trace)
	}
	down := req.Context()        // the downstream's (req may be replaced below)
	var routeCtx context.Context // the request's context with the route timeout
	var admitted *cluster        // the cluster whose max_requests counts it
	defer func() {
		r := recover()
		if r == http.ErrAbortHandler {
			// proxy aborts a response whose body copy failed, after its
			// headers went out: say why, as Envoy's flags do.
			ex.midBodyFailure(down, routeCtx)
		}
		if admitted != nil {
			admitted.rqActive.Add(-1)
			ex.stats.AddGauge(stats.UpstreamRqActive, -1)
			ex.stats.Inc(stats.UpstreamRqCompleted)
		}
		if ex.flags&respflag.SI != 0 {
			w.s.countStreamIdleTimeout(st, *info)
		}
		w.logHTTP(st, info, req, sw, cb.n.Load(), ex, start)
		if info.h2 != nil && hs != nil {
			w.endStream(st, *info, hs.downstreamEnded(), sw.code != 0, time.Since(start))
		}
		if r != nil {
			panic(r) // net/http closes the connection without a log of its own
		}
	}()

	ls := st.listeners[info.listener]
	if ls != nil && ls.authz != nil && ls.authz.http != nil && !w.authorizeRequest(sw, req, ex, ls.authz.http, *info) {
		return
	}
	var route *routeState
	if ls != nil {
		route = ls.matchRoute(info.dst, req.Host, true)
	}
	if route == nil {
		ex.flags |= respflag.NR
		ex.details = "route_not_found"
		http.Error(sw, "route not found", http.StatusNotFound)
		return
	}
	if t := ls.cfg.StreamIdleTimeout; t > 0 && hs != nil {
		hs.idle.arm(t) // (a fast-server HTTP/1 connection arms its requests' own)
	}
	if route.table {
		if route = w.routeByTable(sw, req, ex, route); route == nil {
			return // answered by the table
		}
	}
	ex.route, ex.cluster = route, route.cluster
	c := route.cluster
	ex.stats = c.stats[w.id]
	ex.stats.Inc(stats.UpstreamRqTotal)

	// Circuit breaker: max_requests (Envoy counts the overflow as pending).
	cb2 := &c.cfg.CircuitBreakers
	if n := c.rqActive.Add(1); !cb2.RequestAllowed(uint64(n - 1)) {
		c.rqActive.Add(-1)
		ex.stats.Inc(stats.UpstreamRqPendingOverflow)
		ex.flags |= respflag.UO
		ex.details = "overflow"
		w.localReply(sw, ex, http.StatusServiceUnavailable, "upstream connect error or disconnect/reset before headers. reset reason: overflow")
		return
	}
	ex.stats.AddGauge(stats.UpstreamRqActive, 1)
	admitted = c

	if route.cfg.Retry.NumRetries > 0 && req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0 {
		if req.ContentLength > 0 && req.ContentLength <= maxRetryBody {
			if hw != nil {
				hw.rw.SendContinue() // the body is read now, before any attempt
			}
			b, err := io.ReadAll(io.LimitReader(req.Body, maxRetryBody+1))
			if err != nil {
				if req.Context().Err() != nil {
					// The stream idle timeout ended a stalled upload
					// (408 SI), or the client reset it (DC): not an
					// empty 200.
					w.proxyError(sw, ex, w.contextError(req, ex))
					return
				}
				ex.flags |= respflag.DC
				ex.details = "downstream_remote_disconnect"
				return
			}
			if len(b) <= maxRetryBody {
				ex.body = b
				req.Body = io.NopCloser(bytes.NewReader(b))
			}
		}
	} else if req.ContentLength == 0 || req.Body == http.NoBody {
		ex.body = []byte{}
	}

	if t := route.cfg.Timeout; t > 0 {
		// Stopped as the handler returns: by the fast HTTP/1 server
		// (internal/h1server), by serveStream.
		if hw != nil {
			// The request's own context takes the timeout (no context
			// of its own for it).
			hw.rw.ArmRouteTimeout(t, errRouteTimeout)
		} else {
			hs.route.arm(w, t)
		}
	}
	routeCtx = req.Context()
	w.proxy(sw, req, ex)
}

// detailStreamIdleTimeout is Envoy's response code details for a stream
// idle timeout (flag SI).
const detailStreamIdleTimeout = "stream_idle_timeout"

// streamScratch is serveStream's state for one request (HTTP/2, or the
// net/http fallback's HTTP/1): the request's, its context and what ends
// it, and its timeouts.
type streamScratch struct {
	httpScratch
	ctx       context.Context // the request's
	info      connInfo        // its connection's (the context's connInfoKey)
	canceler  requestCanceler // ends ctx with a cause
	derived   derivedCancel   // the canceler of a context derived for the request
	down      streamAbort     // set if the server fires it (abortWatcher)
	streamCtx context.Context // the stream's, when ctx was derived from it
	idle      streamIdle
	route     streamRouteTimeout
	stream    streamEnd
}

// expire ends the request for a timeout: its context ends with cause,
// and its stream after the grace (streamEnd.timedOut).
func (hs *streamScratch) expire(cause error) {
	hs.canceler.CancelRequest(cause)
	hs.stream.timedOut(true) // a body still being read ends as well
}

// downstreamEnded reports whether the request's stream ended from the
// client's side (a reset, the connection gone) rather than by one of the
// request's own timeouts.
func (hs *streamScratch) downstreamEnded() bool {
	if hs.streamCtx != nil {
		return hs.streamCtx.Err() != nil
	}
	c := context.Cause(hs.ctx)
	return c != nil && c != errRouteTimeout && c != errStreamIdleTimeout
}

// end stops the request's timeouts and ends its context once the handler
// is done; the stream's writer is then out of reach (streamEnd.end).
func (hs *streamScratch) end() {
	hs.idle.stop()
	hs.route.stop()
	hs.canceler.CancelRequest(context.Canceled)
	hs.stream.end()
}

// streamRouteTimeout is a serveStream request's route timeout on the
// worker's clock: once it fires, the request's context ends with
// errRouteTimeout and the stream (HTTP/1: the connection) is reset if its
// response is still being written after the grace (a client that reads
// nothing), as Envoy resets it.
type streamRouteTimeout struct {
	alarm clock.Alarm
	timer *time.Timer // a timeout under clock.PreciseBelow
	hs    *streamScratch
}

func (r *streamRouteTimeout) arm(w *worker, d time.Duration) {
	if d < clock.PreciseBelow {
		r.timer = time.AfterFunc(d, func() { r.AlarmFired(0) })
		return
	}
	w.clock.Set(&r.alarm, d)
}

func (r *streamRouteTimeout) stop() {
	r.alarm.Stop()
	if r.timer != nil {
		r.timer.Stop()
	}
}

// AlarmFired ends the request (a late firing after the handler is
// harmless: the context is already over, the stream out of reach).
func (r *streamRouteTimeout) AlarmFired(uint64) {
	r.hs.expire(errRouteTimeout)
}

// errRouteTimeout ends a request's context when its route timeout passes.
var errRouteTimeout error = clock.Timeout("route timeout")

// midBodyFailure records why a response broke off after its headers: the
// client went away (DC), the route timeout fired (UT), or else the
// upstream's connection ended (UC), each with Envoy's response code
// details.
func (ex *activeStream) midBodyFailure(downstream, route context.Context) {
	switch {
	case errors.Is(context.Cause(downstream), errStreamIdleTimeout):
		ex.flags |= respflag.SI
		ex.details = detailStreamIdleTimeout
	case route != nil && errors.Is(context.Cause(route), errRouteTimeout):
		ex.flags |= respflag.UT
		ex.details = "upstream_response_timeout"
		if ex.stats != nil {
			ex.stats.Inc(stats.UpstreamRqTimeout)
		}
	case downstream.Err() != nil:
		ex.flags |= respflag.DC
		ex.details = "downstream_remote_disconnect"
	default:
		ex.flags |= respflag.UC
		ex.details = "upstream_reset_after_response_started{connection_termination}"
		if ex.stats != nil {
			ex.stats.Inc(stats.UpstreamRqRxReset)
		}
	}
}

// downstreamBodyBroken reports whether the request's HTTP/1 body broke
// its framing (h1server.Writer.BodyErr): then an attempt that failed failed for
// that, and the stream is flagged DPE with Envoy's http1.codec_error.
func (ex *activeStream) downstreamBodyBroken() bool {
	hw := ex.h1
	if hw == nil {
		return false
	}
	be := hw.rw.BodyErr()
	if be == nil {
		return false
	}
	ex.flags = ex.flags&^(respflag.UF|respflag.UC|respflag.UT|respflag.UR) | respflag.DPE
	ex.details = h1.DetailCodecError
	ex.failure = "request body: " + be.Error()
	return true
}

// proxyError turns the router's final error into Envoy's local reply.
func (w *worker) proxyError(rw http.ResponseWriter, ex *activeStream, err error) {
	switch {
	case ex.flags&respflag.DPE != 0:
		// The client's body broke its framing: Envoy's codec answers
		// 400 and closes (the writer closes: BodyErr).
		w.localReply(rw, ex, http.StatusBadRequest, "Bad Request")
	case ex.flags&respflag.DC != 0:
		return // nobody to answer
	case ex.flags&respflag.SI != 0:
		// Envoy's local reply to a stream idle before its response.
		ex.closeAfterTimeout(rw)
		w.localReply(rw, ex, http.StatusRequestTimeout, "stream timeout")
	case ex.flags&respflag.UT != 0:
		ex.closeAfterTimeout(rw)
		w.localReply(rw, ex, http.StatusGatewayTimeout, "upstream request timeout")
	case ex.flags&respflag.UH != 0:
		w.localReply(rw, ex, http.StatusServiceUnavailable, "no healthy upstream")
	case ex.flags&respflag.UPE != 0:
		// Envoy's words; what broke the protocol is in the access log.
		w.localReply(rw, ex, http.StatusBadGateway, "upstream connect error or disconnect/reset before headers. reset reason: protocol error")
	default:
		reason := "connection termination"
		switch {
		case ex.flags&respflag.UO != 0:
			reason = "overflow"
		case ex.flags&respflag.UF != 0:
			reason = "connection failure"
		case ex.flags&respflag.UR != 0:
			reason = "remote reset"
		}
		if ex.failure != "" {
			reason += ", transport failure reason: " + ex.failure
		}
		w.localReply(rw, ex, http.StatusServiceUnavailable, "upstream connect error or disconnect/reset before headers. reset reason: "+reason)
	}
}

// closeAfterTimeout makes a net/http fallback request's local reply to
// its timeout close the connection, as the fast server closes it after a
// timeout that ended the request's reads: the timeout ended them with a
// read deadline in the past (streamEnd), which fails net/http's
// background read and so cancels its connection's context, the next
// request's parent.
func (ex *activeStream) closeAfterTimeout(rw http.ResponseWriter) {
	if ex.netHTTP1 {
		rw.Header().Set("Connection", "close")
	}
}

// localReply answers from the proxy itself, as Envoy's local replies do.
func (w *worker) localReply(rw http.ResponseWriter, ex *activeStream, code int, body string) {
	h := rw.Header()
	h.Set("Content-Type", "text/plain")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	ex.applyResponseHeaders(h) // a route table rule's, as Envoy's local replies get them
	if ex.grpc {
		// gRPC clients read the status from trailers-only responses.
		h.Set("Content-Type", "application/grpc")
		h.Set("Grpc-Status", grpcStatusFor(code))
		h.Set("Grpc-Message", body)
		h.Del("Content-Length")
		rw.WriteHeader(http.StatusOK)
		return
	}
	rw.WriteHeader(code)
	_, _ = io.WriteString(rw, body)
}

// grpcStatusFor maps a local reply status to a gRPC code as Envoy does.
func grpcStatusFor(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "13" // INTERNAL
	case http.StatusUnauthorized:
		return "16" // UNAUTHENTICATED
	case http.StatusForbidden:
		return "7" // PERMISSION_DENIED
	case http.StatusGatewayTimeout:
		return "4" // DEADLINE_EXCEEDED
	case http.StatusNotFound:
		return "12" // UNIMPLEMENTED
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusBadGateway:
		return "14" // UNAVAILABLE
	}
	return "2" // UNKNOWN
}

// bufferPool is a worker's pool of copy buffers for the reverse proxy: a
// per-worker free list, so copying bodies takes no lock another worker
// takes (a global sync.Pool would).
type bufferPool struct{ free chan []byte }

func newBufferPool() *bufferPool { return &bufferPool{free: make(chan []byte, 256)} }

func (b *bufferPool) Get() []byte {
	select {
	case buf := <-b.free:
		return buf
	default:
		return make([]byte, 32<<10)
	}
}

func (b *bufferPool) Put(buf []byte) {
	select {
	case b.free <- buf:
	default:
	}
}

// route is Envoy's router for one request: pick a host, try it with the
// per-try timeout, decide about a retry, back off, try again.
func (w *worker) route(req *http.Request, ex *activeStream) (*http.Response, error) {
	c, route := ex.cluster, ex.route
	policy := &route.cfg.Retry
	var rs retry.State
	rs.Init(policy, lockedRandom{w})
	maxSel := policy.HostSelectionRetryMaxAttempts
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			switch {
			case ex.body == nil:
				return nil, errNotReplayable
			case len(ex.body) == 0:
				req.Body = nil
			default:
				req.Body = io.NopCloser(bytes.NewReader(ex.body))
			}
		}
		if req.Context().Err() != nil {
			// Reset or timed out before this attempt (an HTTP/2 stream
			// reset as soon as it was sent): nothing goes upstream.
			return nil, w.contextError(req, ex)
		}
		pc := lb.PickContext{Previous: ex.tried, SelectionRetries: maxSel, RetryPriority: rs.RetryPriority()}
		h, hc := w.pick(c, &pc)
		if h == nil {
			ex.stats.Inc(stats.UpstreamCxNoneHealthy)
			ex.flags |= respflag.UH
			ex.details = "no_healthy_upstream"
			return nil, errNoHealthyUpstream
		}
		rs.OnHostAttempted(h) // the retry priority excludes its level later
		ex.tried = append(ex.tried, h.ID)
		ex.host, ex.hostZone = upstreamAddr(h, ex.dst), h.Locality.Zone
		resp, err := w.tryOnce(req, ex, h, policy.PerTryTimeout)
		w.release(c, h)
		hc.rqActive.Add(-1)
		if err != nil && ex.downstreamBodyBroken() {
			return nil, err // the client's fault: not the host's, no retry
		}
		switch {
		case err != nil:
			hc.rqError.Add(1)
			hc.countConnectFail(err)
			if rawio.IsDeadline(err) {
				hc.rqTimeout.Add(1)
			}
		case resp.StatusCode >= 500:
			hc.rqError.Add(1)
		default:
			hc.rqSuccess.Add(1)
		}
		var decision retry.Decision
		var backoff time.Duration
		if err == nil {
			w.reportCode(c, h.Address, hc, resp.StatusCode)
			ex.stats.CountCode(resp.StatusCode)
			if rs.ResponseMatters() { // (else No, whatever the response says)
				decision, backoff = rs.OnResponse(resp.StatusCode, h1.Get(resp.Header, "X-Envoy-Ratelimited") != "", grpcStatusOf(resp), w.retryAllowed(c))
			}
			if decision != retry.Yes {
				ex.noRetry(decision)
				if attempt > 0 && decision == retry.No {
					ex.stats.Inc(stats.UpstreamRqRetrySuccess)
				}
				return resp, nil
			}
			// Retrying: drain and drop this response.
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		} else {
			reason, perTry := w.classifyFailure(req, ex, err, h)
			if reason < 0 {
				return nil, err // downstream gone or route timeout: no retry
			}
			if perTry {
				decision, backoff = rs.OnPerTryTimeout(true, w.retryAllowed(c))
			} else {
				decision, backoff = rs.OnReset(retry.ResetReason(reason), true, w.retryAllowed(c))
			}
			if decision != retry.Yes {
				ex.noRetry(decision)
				return nil, err
			}
			ex.flags &^= respflag.UF | respflag.UC | respflag.UT | respflag.UR | respflag.UPE
		}
		ex.stats.Inc(stats.UpstreamRqRetry)
		c.retriesActive.Add(1)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			c.retriesActive.Add(-1)
			return nil, w.contextError(req, ex)
		}
		c.retriesActive.Add(-1)
	}
}

// noRetry records why an attempt that could have been retried was not:
// the retry limit (URX) or the retry circuit breaker / budget (UO).
func (ex *activeStream) noRetry(d retry.Decision) {
	switch d {
	case retry.LimitExceeded:
		ex.flags |= respflag.URX
		ex.stats.Inc(stats.UpstreamRqRetryLimitExceeded)
	case retry.Overflow:
		ex.flags |= respflag.UO
		ex.stats.Inc(stats.UpstreamRqRetryOverflow)
	}
}

var (
	errNoHealthyUpstream       = errors.New("no healthy upstream")
	errNotReplayable           = errors.New("request body too large to retry")
	errPerTryTimeout     error = clock.Timeout("per try timeout")
)

func (w *worker) retryAllowed(c *cluster) bool {
	return c.cfg.CircuitBreakers.RetryAllowed(uint64(c.retriesActive.Load()), uint64(c.rqActive.Load()), uint64(c.rqPending.Load()))
}

// tryOnce sends one attempt to h.
func (w *worker) tryOnce(req *http.Request, ex *activeStream, h *lb.Host, perTry time.Duration) (*http.Response, error) {
	// The handler's request is the router's; only a per-try context (or
	// a retry, whose earlier attempt the transport may still hold) needs
	// a copy.
	out := req
	var cancel context.CancelFunc
	if perTry > 0 {
		var ctx context.Context
		ctx, cancel = w.clock.WithTimeout(req.Context(), perTry, errPerTryTimeout)
		out = req.Clone(ctx)
	} else if len(ex.tried) > 1 {
		out = req.Clone(req.Context())
	}
	out.URL.Host = ex.host
	kind := transportPlain
	if ex.grpc && ex.cluster.cfg.Protocol != config.UpstreamHTTP2 {
		kind = transportPlainH2
	}
	ex.upMTLS, ex.upstreamPeer = false, ""
	var mesh *h2.Transport
	if w.meshed(h) {
		kind = transportMesh
		if h1.Get(out.Header, "Upgrade") != "" {
			kind = transportMeshUpgrade
		}
		ex.upMTLS, ex.upstreamPeer = true, h.Metadata[config.MetadataIdentity]
	}
	t := w.transport(ex.cluster, kind)
	if kind == transportMeshUpgrade {
		if out == req {
			out = req.Clone(req.Context())
		}
		out = out.WithContext(context.WithValue(out.Context(), hostKey{}, h))
	}
	p, ok := t.(*h1Pool)
	pooled := ok && p.writesHead(req)
	switch mesh, _ = t.(*h2.Transport); {
	case mesh != nil:
		// The mesh's HTTP/2 transport reads the request's head while
		// RoundTrip runs, keeps none of its memory (its HPACK table
		// keeps copies, and the generated ids are not indexed), and
		// lets go of the context as the response body closes; only a
		// body it sends on its own goroutine outlives the call.
		if out != req || out.Body != nil && out.Body != http.NoBody {
			ex.ctxShared = true
		}
	case out == req && !pooled:
		ex.headerLent = true
		ex.ctxShared = true
	case out != req || !pooled:
		ex.ctxShared = true
	}
	if ex.h1 != nil {
		ex.h1.rw.SendContinue()
	}
	var resp *http.Response
	var err error
	switch {
	case mesh != nil:
		resp, err = mesh.RoundTripVia(out, h)
	case pooled:
		// The pool gets the fast HTTP/1 server request's stream
		// explicitly (nil for other servers): its connection's response
		// storage, its writer's upstream abort.
		resp, err = p.send(out, ex.h1, ex.down)
	default:
		resp, err = t.RoundTrip(out)
	}
	if cancel != nil {
		if err != nil {
			// A transport reports its context's end as context.Canceled
			// (the worker clock's per-try timeout cancels it): say why.
			if !errors.Is(err, errPerTryTimeout) && errors.Is(context.Cause(out.Context()), errPerTryTimeout) {
				err = fmt.Errorf("%w: %w", errPerTryTimeout, err)
			}
			cancel()
		} else {
			if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
				resp.Body = &cancelUpgraded{cancelBody: cancelBody{ReadCloser: rwc, cancel: cancel}, w: rwc}
			} else {
				resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
			}
		}
	}
	return resp, err
}

// isEventStream reports a Server-Sent Events response.
func isEventStream(contentType string) bool {
	if !containsFold(contentType, "event-stream") {
		return false
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}

// containsFold reports whether s holds sub (lower-case ASCII) in any
// ASCII case, without strings.ToLower's copy.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for ; j < len(sub); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != sub[j] {
				break
			}
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}

// cancelUpgraded is cancelBody for the connection of a 101 response,
// still writable.
type cancelUpgraded struct {
	cancelBody
	w io.Writer
}

func (b *cancelUpgraded) Write(p []byte) (int, error) { return b.w.Write(p) }

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// classifyFailure maps an attempt's error to an Envoy reset reason and response
// flags; reason < 0 means the request must end now (client gone, route
// timeout). perTry reports a per-try timeout.
func (w *worker) classifyFailure(req *http.Request, ex *activeStream, err error, h *lb.Host) (reason int, perTry bool) {
	c := ex.cluster
	if ctxErr := req.Context().Err(); ctxErr != nil {
		if errors.Is(context.Cause(req.Context()), errRouteTimeout) {
			// Only the route timeout is the host's (Envoy's router
			// reports it): a client that reset, left or stalled (the
			// stream idle timeout) says nothing about the host, and
			// must not get it ejected.
			w.report(event{kind: evLocalOrigin, cluster: c, addr: h.Address, local: lb.LocalOriginTimeout})
		}
		_ = w.contextError(req, ex)
		return -1, false
	}
	var ce *connectError
	switch {
	case errors.As(err, &ce) && ce.overflow:
		ex.flags |= respflag.UO
		ex.details = "overflow"
		return int(retry.ResetOverflow), false
	case errors.As(err, &ce):
		ex.flags |= respflag.UF
		ex.failure = ce.Error()
		ex.details = "upstream_reset_before_response_started{connection_failure}"
		w.report(event{kind: evLocalOrigin, cluster: c, addr: h.Address, local: lb.LocalOriginConnectFailed})
		if ce.timeout {
			return int(retry.ResetConnectTimeout), false
		}
		return int(retry.ResetConnectionFailure), false
	case errors.Is(err, errPerTryTimeout) || errors.Is(context.Cause(req.Context()), errPerTryTimeout) || rawio.IsDeadline(err):
		ex.stats.Inc(stats.UpstreamRqPerTryTimeout)
		ex.flags |= respflag.UT
		ex.details = "upstream_per_try_timeout"
		w.report(event{kind: evLocalOrigin, cluster: c, addr: h.Address, local: lb.LocalOriginTimeout})
		return int(retry.ResetLocal), true
	}
	var pe *upstreamProtocolError
	if errors.As(err, &pe) {
		// Envoy's reset for an upstream codec error: 502, UPE, counted as
		// its connection pools count a protocol_error reset.
		ex.flags |= respflag.UPE
		ex.failure = err.Error()
		ex.details = "upstream_reset_before_response_started{protocol_error}"
		ex.stats.Inc(stats.UpstreamRqTxReset)
		return int(retry.ResetProtocolError), false
	}
	var se http2.StreamError
	if errors.As(err, &se) && se.Code == http2.ErrCodeRefusedStream {
		ex.flags |= respflag.UR
		ex.details = "upstream_reset_before_response_started{remote_refused_stream_reset}"
		return int(retry.ResetRemoteRefusedStream), false
	}
	ex.flags |= respflag.UC
	ex.failure = err.Error()
	ex.details = "upstream_reset_before_response_started{connection_termination}"
	ex.stats.Inc(stats.UpstreamRqRxReset)
	return int(retry.ResetConnectionTermination), false
}

// contextError records why the request context ended: the route timeout
// (UT) or the downstream going away (DC).
func (w *worker) contextError(req *http.Request, ex *activeStream) error {
	cause := context.Cause(req.Context())
	if errors.Is(cause, errStreamIdleTimeout) {
		ex.flags = ex.flags&^(respflag.UF|respflag.UC) | respflag.SI
		ex.details = detailStreamIdleTimeout
		return errStreamIdleTimeout
	}
	if errors.Is(cause, errRouteTimeout) {
		ex.flags = ex.flags&^(respflag.UF|respflag.UC) | respflag.UT
		ex.details = "upstream_response_timeout"
		ex.stats.Inc(stats.UpstreamRqTimeout)
		return errRouteTimeout
	}
	ex.flags |= respflag.DC
	ex.details = "downstream_remote_disconnect"
	return context.Canceled
}

func grpcStatusOf(resp *http.Response) int {
	if v := h1.Get(resp.Header, "Grpc-Status"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return -1
}

// lockedRandom draws from the worker's random source under its mutex, for
// request goroutines (retry back-off jitter).
type lockedRandom struct{ w *worker }

func (r lockedRandom) Uint64() uint64 {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return r.w.rnd.Uint64()
}

// requestIDInto returns a random UUID v4 for x-request-id, written into
// buf, which the string shares (buf must not change after).
func (w *worker) requestIDInto(buf *[36]byte) string {
	w.mu.Lock()
	a, b := w.rnd.Uint64(), w.rnd.Uint64()
	w.mu.Unlock()
	a = a&^(0xf<<12) | 4<<12   // version 4
	b = b&^(0x3<<62) | 0x2<<62 // variant 10
	formatUUID(buf, a, b)
	return unsafe.String(&buf[0], len(buf))
}

// formatUUID writes the 128 bits a, b as a UUID's 36 characters. Byte by
// byte, dashes at fixed places: fmt's printer pool is a lock shared by all
// workers, and a loop that asks at every digit whether a dash comes next
// is most of the instructions a request's id takes.
func formatUUID(buf *[36]byte, a, b uint64) {
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], a)
	binary.BigEndian.PutUint64(raw[8:], b)
	hex.Encode(buf[0:8], raw[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], raw[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], raw[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], raw[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], raw[10:16])
}

// logHTTP writes the access-log line and the request metrics.
func (w *worker) logHTTP(st *state, info *connInfo, req *http.Request, sw *statusWriter, rx uint64, ex *activeStream, start time.Time) {
	end := time.Now()
	d := end.Sub(start)
	code := sw.code // 0: nothing was sent (a client gone first, DC)
	if lg := w.s.access.Load(); !lg.Off() {
		e := accesslog.Entry{
			StartTime: start, Method: req.Method, Path: cmp.Or(ex.origPath, ex.requestTarget(req)), Protocol: req.Proto,
			ResponseCode: code, Flags: ex.flags, BytesReceived: rx, BytesSent: sw.bytes.Load(), Duration: d,
			UpstreamServiceTime: -1, ForwardedFor: h1.Get(req.Header, "X-Forwarded-For"), UserAgent: h1.Get(req.Header, "User-Agent"),
			RequestID: h1.Get(req.Header, "X-Request-Id"), Authority: req.Host, UpstreamHost: ex.host,
		}
		lg.Write(w.id, &e, logsink.Extra{Details: ex.details, Failure: ex.failure, Cluster: ex.clusterName(),
			DownstreamPeer: info.peer, UpstreamPeer: ex.upstreamPeer, TraceID: ex.trace.logTraceID()})
	}
	if ex.trace.sampled {
		w.endTrace(st, *info, req, sw, rx, ex, start, end)
	}
	w.countZone(st, ex.cluster, ex.hostZone, rx, sw.bytes.Load(), info, false)
	if ex.flags&respflag.DPE != 0 {
		w.s.countProtocolError(st, *info)
	}
	proto := "http"
	if ex.grpc {
		proto = "grpc"
	}
	k := stats.RequestKey{Service: serviceName(req.Host, info.dst), Cluster: ex.clusterName(), Protocol: proto, Code: code, Flags: ex.flags}
	w.principals(&k, st.listeners[info.listener], info, ex.upMTLS, ex.upstreamPeer)
	w.requestStats(ex.cluster, &k).Observe(d)
}

// requestTarget is req's target (h1.RequestTarget), the one read if
// proxy has cleared RequestURI since.
func (ex *activeStream) requestTarget(req *http.Request) string {
	if ex.target != "" {
		return h1.TargetOf(req.URL, ex.target)
	}
	return h1.RequestTarget(req)
}

func (ex *activeStream) clusterName() string {
	if ex.cluster == nil {
		return ""
	}
	return ex.cluster.name
}

func serviceName(host string, dst netip.AddrPort) string {
	if host = hostOnly(host); host != "" {
		return host
	}
	if dst.IsValid() {
		return dst.String()
	}
	return "unknown"
}
