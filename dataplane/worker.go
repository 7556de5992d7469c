package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1server"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h2"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
	"github.com/meshlet-dev/meshlet/lb"
)

// worker owns one SO_REUSEPORT socket of every listener and everything a
// connection accepted there touches: load-balancer pickers, upstream
// connection pools and stats shards. Its mutex is never taken by another
// worker; it only orders this worker's own connection goroutines.
type worker struct {
	s  *Server
	id int

	mu         sync.Mutex
	rnd        lb.Random
	transports map[transportKey]http.RoundTripper
	tlsConfigs map[[2]string]*tls.Config // by peer identity and ALPN
	requests   map[stats.RequestKey]*stats.Request
	// zones are the outbound zone-pair counters (countZone).
	zones map[zoneKey]*zoneCounters

	// events queues this worker's request results for the main loop.
	events chan event
	bufs   *bufferPool
	// pipes are the TCP proxy's splice pipes (nil where splice is not
	// available).
	pipes *pipePool

	// inflight counts this worker's HTTP requests being served (Drain
	// waits for them).
	inflight atomic.Int64
	// h1 is the fast HTTP/1 server of the plaintext connections
	// serveH1 serves (h1handler.go).
	h1 *h1server.Server
	// clock holds the request deadlines (route timeout, client-gone
	// watch) without a runtime timer each.
	clock   clock.Clock
	httpSrv *http.Server
	// meshH2 serves the HTTP/2 of peer sidecars over mutual TLS.
	meshH2 *h2.Server
	// netHTTP: Options.HTTP1Server is net/http. fb are then the
	// worker's net/http servers by request_headers_timeout (h1fallback.go),
	// started on first use; fbStopped says the drain stopped them.
	netHTTP   bool
	fbMu      sync.Mutex
	fb        map[time.Duration]*h1Fallback
	fbStopped bool
}

func newWorker(s *Server, id int) *worker {
	w := &worker{s: s, id: id, rnd: newRandom(),
		transports: map[transportKey]http.RoundTripper{}, tlsConfigs: map[[2]string]*tls.Config{}, requests: map[stats.RequestKey]*stats.Request{},
		zones: map[zoneKey]*zoneCounters{}}
	w.events = make(chan event, workerEventQueue)
	w.bufs = newBufferPool()
	w.pipes = newPipePool(pipePoolSize)
	// Never serves: the HTTP/2 server's base configuration (x/net reads
	// its idle timeout and header limit) and what requests find under
	// http.ServerContextKey.
	w.httpSrv = &http.Server{
		IdleTimeout: 5 * time.Minute,
		// HTTP/2 reads it as the decoded header list's limit (HPACK:
		// Envoy's max_request_headers_kb bounds the decoded list), past
		// which x/net decodes no more strings of the block: a small
		// block that expands to megabytes costs at most this.
		MaxHeaderBytes: maxRequestHeaderBytes,
	}
	w.meshH2 = &h2.Server{Handler: http.HandlerFunc(w.serveStream), MaxHeaderBytes: maxRequestHeaderBytes,
		IdleTimeout: w.httpSrv.IdleTimeout, Log: s.log}
	w.h1 = h1server.New(h1server.Options{Draining: &s.draining, Clock: &w.clock, Log: s.log, HTTPServer: w.httpSrv, InfoKey: connInfoKey{},
		MaxHeaderBytes: maxRequestHeaderBytes, IdleTimeout: h1IdleTimeout, TimeoutGrace: timeoutGrace})
	w.netHTTP = s.opts.HTTP1Server == HTTP1ServerNetHTTP
	return w
}

const (
	// maxRequestHeaderBytes is Envoy's default max_request_headers_kb:
	// the HTTP/1 servers' (fast and fallback) request head limit, and
	// HTTP/2's decoded header list's.
	maxRequestHeaderBytes = 60 << 10
	// h1IdleTimeout is how long an HTTP/1 connection waits for its next
	// request (both HTTP/1 servers).
	h1IdleTimeout = 5 * time.Minute
)

// connInfo is what a connection carries into its requests.
type connInfo struct {
	listener string // listener address (state key)
	dst      netip.AddrPort
	src      string
	start    time.Time
	// peer is the SPIFFE ID of an inbound mutual-TLS peer ("" otherwise);
	// mtls says the connection arrived over mutual TLS.
	peer string
	mtls bool
	// h2 is the HTTP/2 connection's stream account (nil for HTTP/1).
	h2 *h2Conn
}

type connInfoKey struct{}

// acceptLoop accepts the connections of one listener socket, refusing
// those over the sidecar's downstream connection cap (Server.admit).
func (w *worker) acceptLoop(l *net.TCPListener, addr string, ls *listenerStats) {
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(5 * time.Millisecond) // EMFILE and friends: back off
			continue
		}
		if !w.s.admit(ls) {
			c.Close()
			continue
		}
		w.s.conns.Add(1)
		go func() {
			defer w.s.conns.Done()
			defer w.s.downstreamClosed(ls)
			w.serveConn(c, addr)
		}()
	}
}

// serveConn finds the connection's original destination, detects its
// protocol and hands it to the TCP or HTTP proxy.
func (w *worker) serveConn(c *net.TCPConn, addr string) {
	st := w.s.state.Load()
	ls := st.listeners[addr]
	if ls == nil {
		c.Close()
		return
	}
	info := connInfo{listener: addr, src: c.RemoteAddr().String(), start: time.Now()}
	switch {
	case ls.cfg.Direction == config.Inbound:
		info.dst = netip.MustParseAddrPort(c.LocalAddr().String())
	case w.s.opts.OriginalDst != nil:
		if d, ok := w.s.opts.OriginalDst(c); ok {
			info.dst = d
		}
	}
	if !info.dst.IsValid() {
		info.dst = ls.staticDst
	}
	if ls.tlsConfig != nil {
		w.serveInbound(c, st, ls, info)
		return
	}
	w.dispatch(c, nil, st, ls, info)
}

// dispatch detects the protocol of a plaintext connection (br, when set,
// already holds its first bytes) and hands it to the TCP or HTTP proxy.
func (w *worker) dispatch(c *net.TCPConn, br *bufio.Reader, st *state, ls *listenerState, info connInfo) {
	proto := ls.cfg.Protocol
	if ls.serverFirst[info.dst.Port()] {
		proto = config.ProtocolTCP
	}
	if proto == config.ProtocolTCP {
		w.proxyTCP(c, st, ls, info, br)
		return
	}
	if br == nil {
		br = bufio.NewReaderSize(rawio.IO(c), 4096)
	}
	kind, timedOut := detect(c, br, ls.cfg.DetectionTimeout)
	if timedOut {
		ls.stats.preCxTimeout.Add(1)
	}
	sc := &sniffedConn{TCPConn: c, r: br, w: rawio.IO(c), info: info}
	switch {
	case kind == kindHTTP2:
		info.h2 = &h2Conn{conn: sc}
		w.meshH2.ServeConn(context.WithValue(w.s.ctx, connInfoKey{}, info), sc)
		c.Close()
	case kind == kindHTTP1, proto == config.ProtocolHTTP:
		// (An HTTP-only listener that got something else: the fast
		// server answers 400 with an access-log line flagged DPE,
		// net/http its own 400.)
		if w.netHTTP {
			w.serveNetHTTP(sc, ls)
		} else {
			w.serveH1(sc)
		}
	default:
		w.proxyTCP(c, st, ls, info, br)
	}
}

// report queues a request result for outlier detection (only clusters
// that run it), dropping it rather than blocking when the queue is full.
func (w *worker) report(ev event) {
	if ev.cluster.cfg.Outlier == nil {
		return
	}
	if ev.kind == evHTTPCode || ev.kind == evLocalOrigin {
		// This worker's successes on the host so far go with the result,
		// in order: the main loop may take the event after later ones.
		ev.worker = w.id
		w.mu.Lock()
		if hc := ev.cluster.perWorker[w.id].hosts[ev.addr]; hc != nil {
			ev.okBefore = hc.outlierOK.Swap(0)
		}
		w.mu.Unlock()
	}
	select {
	case w.events <- ev:
	default:
		w.s.dropped.Add(1)
	}
}

// workerCluster is one worker's state of one cluster (cluster.perWorker[w.id],
// guarded by the worker's mutex), reached without a map lookup: its
// picker, its per-host counters, its plain upstream pool and the request
// metrics of the label set its last request had.
type workerCluster struct {
	picker *lb.Picker
	hosts  map[string]*hostCounters
	plain  http.RoundTripper
	// reqKey and reqStats: the last label set counted and its metrics
	// (requestStats).
	reqKey   stats.RequestKey
	reqStats *stats.Request
	// zoneKey and zoneStats: the last zone pair counted (countZone).
	zoneKey   zoneKey
	zoneStats *zoneCounters
}

// pick chooses an upstream host of c for this worker (nil when none) and
// returns the host's counters on this worker.
func (w *worker) pick(c *cluster, ctx *lb.PickContext) (*lb.Host, *hostCounters) {
	snap := c.snap.Load()
	w.mu.Lock()
	defer w.mu.Unlock()
	cl := &c.perWorker[w.id]
	p := cl.picker
	if p == nil {
		p = lb.NewPicker(w.rnd, &c.stats[w.id].LB)
		cl.picker = p
	}
	h := p.Pick(snap, ctx)
	if h == nil {
		return nil, nil
	}
	p.RequestStarted(h)
	hs := cl.hosts
	if hs == nil {
		hs = map[string]*hostCounters{}
		cl.hosts = hs
	}
	hc := hs[h.Address]
	if hc == nil {
		hc = &hostCounters{}
		hs[h.Address] = hc
	}
	hc.rqTotal.Add(1)
	hc.rqActive.Add(1)
	return h, hc
}

// hostCounters are one worker's per-host counters (Envoy's host stats).
type hostCounters struct {
	rqTotal, rqError, rqSuccess, rqTimeout, cxConnectFail atomic.Uint64
	rqActive                                              atomic.Int64
	// outlierOK counts responses the outlier detector has not yet been
	// given that are no failure to it (reportCode).
	outlierOK atomic.Uint64
}

// countConnectFail counts a failed connect to the host, Envoy's per-host
// cx_connect_fail: a connectError (TCP or TLS), unless it is an overflow,
// where the circuit breaker refused before anything was dialled.
func (hc *hostCounters) countConnectFail(err error) {
	var ce *connectError
	if errors.As(err, &ce) && !ce.overflow {
		hc.cxConnectFail.Add(1)
	}
}

// reportCode gives an upstream response's code on h to c's outlier
// detector, if it has one. A failure (5xx) goes to the main loop at once; a
// success is only counted here: the worker's count goes with its next
// failure or local-origin result on the host (report), the other workers'
// counts are taken when the main loop applies it, and all of them before
// each tick (Server.deliverOutlierSuccesses), which leaves the
// detector where one event per response would (what a success does, reset
// the consecutive counters and count towards the success rate, commutes
// with other successes). Envoy's workers likewise update the host's
// counters themselves and post to the main thread only to eject: an event
// per response cost two goroutine hand-offs per request.
func (w *worker) reportCode(c *cluster, addr string, hc *hostCounters, code int) {
	if c.cfg.Outlier == nil {
		return
	}
	if code < 500 || code >= 600 {
		hc.outlierOK.Add(1)
		return
	}
	w.report(event{kind: evHTTPCode, cluster: c, addr: addr, code: code})
}

// release ends the request counted on h by pick.
func (w *worker) release(c *cluster, h *lb.Host) {
	w.mu.Lock()
	if p := c.perWorker[w.id].picker; p != nil {
		p.RequestFinished(h)
	}
	w.mu.Unlock()
}

// requestStats returns this worker's request metrics of label set k; c,
// if not nil, is the request's cluster, which remembers the last label
// set (a steady stream of requests has one: no map lookup).
func (w *worker) requestStats(c *cluster, k *stats.RequestKey) *stats.Request {
	w.mu.Lock()
	defer w.mu.Unlock()
	var cl *workerCluster
	if c != nil {
		if cl = &c.perWorker[w.id]; cl.reqStats != nil && cl.reqKey == *k {
			return cl.reqStats
		}
	}
	r := w.requests[*k]
	if r == nil {
		r = &stats.Request{}
		w.requests[*k] = r
	}
	if cl != nil {
		cl.reqKey, cl.reqStats = *k, r
	}
	return r
}

// dropCluster forgets a cluster a reload replaced and closes its idle
// upstream connections.
func (w *worker) dropCluster(c *cluster) {
	w.mu.Lock()
	var ts []http.RoundTripper
	for k, t := range w.transports {
		if k.c == c {
			ts = append(ts, t)
			delete(w.transports, k)
		}
	}
	w.mu.Unlock()
	for _, t := range ts {
		closeIdle(t)
	}
}

func closeIdle(t http.RoundTripper) {
	if t == nil {
		return
	}
	if ci, ok := t.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// drain stops taking new HTTP connections' requests on keep-alive and
// closes idle upstream connections.
func (w *worker) drain() {
	w.httpSrv.SetKeepAlivesEnabled(false)
	w.h1.Drain(false)
	w.meshH2.Drain()
	w.drainFallback()
	w.mu.Lock()
	ts := make([]http.RoundTripper, 0, len(w.transports))
	for _, t := range w.transports {
		ts = append(ts, t)
	}
	w.mu.Unlock()
	for _, t := range ts {
		closeIdle(t)
	}
}

func (w *worker) close() {
	w.pipes.close()
	w.h1.Drain(true)
	w.closeFallback()
}
