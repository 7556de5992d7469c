package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
	"github.com/meshlet-dev/meshlet/lb"
)

// transport returns this worker's upstream connection pool of the given
// kind for c.
func (w *worker) transport(c *cluster, kind transportKind) http.RoundTripper {
	w.mu.Lock()
	defer w.mu.Unlock()
	cl := &c.perWorker[w.id]
	if kind == transportPlain && cl.plain != nil {
		return cl.plain
	}
	k := transportKey{c, kind}
	t := w.transports[k]
	if t == nil {
		switch kind {
		case transportPlain:
			t = newUpstreamTransport(w, c, c.cfg.Protocol)
		case transportPlainH2:
			t = newUpstreamTransport(w, c, config.UpstreamHTTP2)
		default:
			t = newMeshTransport(w, c, kind)
		}
		w.transports[k] = t
	}
	if kind == transportPlain {
		cl.plain = t
	}
	return t
}

// connectError is a failed upstream connect (UF), or a connect refused by
// the max_connections circuit breaker (UO).
type connectError struct {
	addr     string
	err      error
	timeout  bool
	overflow bool
	tls      bool // the TCP connection was up; the mTLS handshake failed
}

func (e *connectError) Error() string {
	switch {
	case e.tls:
		return "TLS_error: " + e.err.Error()
	case e.overflow:
		return "overflow"
	case e.timeout:
		return "delayed connect error: timeout"
	}
	if errors.Is(e.err, syscall.ECONNREFUSED) {
		return "delayed connect error: 111"
	}
	return e.err.Error()
}

func (e *connectError) Unwrap() error { return e.err }

// dialer opens upstream connections for cluster c on worker w, enforcing
// the connect timeout and max_connections, and counting them.
//
// A request that needs a new connection is pending while it is dialled
// (the pools never queue a request behind a busy connection): that is
// what max_pending_requests bounds here.
func (w *worker) dial(ctx context.Context, c *cluster, addr string) (net.Conn, error) {
	st := c.stats[w.id]
	if n := c.rqPending.Add(1); !c.cfg.CircuitBreakers.PendingRequestAllowed(uint64(n - 1)) {
		c.rqPending.Add(-1)
		st.Inc(stats.UpstreamRqPendingOverflow)
		return nil, &connectError{addr: addr, overflow: true}
	}
	st.AddGauge(stats.UpstreamRqPendingActive, 1)
	defer func() {
		c.rqPending.Add(-1)
		st.AddGauge(stats.UpstreamRqPendingActive, -1)
	}()
	if n := c.cxActive.Add(1); !c.cfg.CircuitBreakers.ConnectionAllowed(uint64(n - 1)) {
		c.cxActive.Add(-1)
		st.Inc(stats.UpstreamCxOverflow)
		return nil, &connectError{addr: addr, overflow: true}
	}
	st.Inc(stats.UpstreamCxTotal)
	d := net.Dialer{Timeout: c.cfg.ConnectTimeout}
	d.SetMultipathTCP(false)
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		c.cxActive.Add(-1)
		st.Inc(stats.UpstreamCxConnectFail)
		ce := &connectError{addr: addr, err: err, timeout: rawio.IsDeadline(err) && ctx.Err() == nil}
		if ce.timeout {
			st.Inc(stats.UpstreamCxConnectTimeout)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, ce
	}
	st.AddGauge(stats.UpstreamCxActive, 1)
	cc := &countedConn{Conn: conn, raw: conn, c: c, st: st}
	if tc, ok := conn.(*net.TCPConn); ok {
		cc.raw = rawio.IO(tc)
	}
	return cc, nil
}

// countedConn keeps the connection gauges and byte counters.
type countedConn struct {
	net.Conn
	raw  io.ReadWriter // the socket's raw reads and writes (rawio.Socket), or Conn
	c    *cluster
	st   *stats.Cluster
	once sync.Once
}

func (cc *countedConn) Read(p []byte) (int, error) {
	n, err := cc.raw.Read(p)
	cc.st.Add(stats.UpstreamCxRxBytesTotal, uint64(n))
	return n, err
}

func (cc *countedConn) Write(p []byte) (int, error) {
	n, err := cc.raw.Write(p)
	cc.st.Add(stats.UpstreamCxTxBytesTotal, uint64(n))
	return n, err
}

// ReadFrom and WriteTo keep splice(2) between sockets for the TCP proxy.
func (cc *countedConn) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(cc.Conn, r)
	cc.st.Add(stats.UpstreamCxTxBytesTotal, uint64(n))
	return n, err
}

func (cc *countedConn) WriteTo(w io.Writer) (int64, error) {
	n, err := io.Copy(w, cc.Conn)
	cc.st.Add(stats.UpstreamCxRxBytesTotal, uint64(n))
	return n, err
}

func (cc *countedConn) Close() error {
	cc.once.Do(func() {
		cc.c.cxActive.Add(-1)
		cc.st.AddGauge(stats.UpstreamCxActive, -1)
		cc.st.Inc(stats.UpstreamCxDestroy)
	})
	return cc.Conn.Close()
}

// newUpstreamTransport is a worker's connection pool for one cluster:
// HTTP/1.1 keep-alive with the cluster's idle timeout (h1Pool), or h2c.
// The HTTP/1.1 pool's fallback Transport, which takes requests with a body,
// keeps no connection: it pools one (or hands it to a waiting request)
// before it looks for bytes after the response, so an upstream that sends
// extra bytes could answer another client's request (h1Pool).
func newUpstreamTransport(w *worker, c *cluster, protocol config.UpstreamProtocol) http.RoundTripper {
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) { return w.dial(ctx, c, addr) }
	if protocol == config.UpstreamHTTP2 {
		return &http2.Transport{
			AllowHTTP: true,
			DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				return dial(ctx, network, addr)
			},
			IdleConnTimeout: idleTimeout(c),
		}
	}
	return newH1Pool(w, c, &http.Transport{
		DialContext:            dial,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	})
}

func idleTimeout(c *cluster) time.Duration { return c.cfg.IdleTimeout }

// upstreamAddr is the address to dial for h: its own, or for a
// passthrough endpoint (config.PassthroughPort) its host at the original
// destination's port, or the original destination itself
// (config.PassthroughAddress).
func upstreamAddr(h *lb.Host, dst netip.AddrPort) string {
	if !strings.HasSuffix(h.Address, ":0") || !dst.IsValid() {
		return h.Address
	}
	if h.Address == config.PassthroughAddress {
		return dst.String()
	}
	return h.Address[:len(h.Address)-1] + strconv.Itoa(int(dst.Port()))
}
