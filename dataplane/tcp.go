package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/logsink"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/accesslog"
	"github.com/meshlet-dev/meshlet/lb/respflag"
	"github.com/meshlet-dev/meshlet/mtls"
)

// proxyTCP is the L4 proxy: one upstream per connection, picked once (with
// one more pick on a connect failure, like Envoy's max_connect_attempts),
// then bytes copied both ways with half-close. pre holds sniffed bytes.
func (w *worker) proxyTCP(c net.Conn, st *state, ls *listenerState, info connInfo, pre *bufio.Reader) {
	defer c.Close()
	e := accesslog.Entry{StartTime: info.start, UpstreamServiceTime: -1}
	var details, failure, clusterName, upstreamPeer, hostZone string
	var rx, tx uint64
	var cl *cluster
	upMTLS := false
	defer func() {
		e.Duration = time.Since(info.start)
		e.BytesReceived, e.BytesSent = rx, tx
		w.s.access.Load().Write(w.id, &e, logsink.Extra{Details: details, Failure: failure, Cluster: clusterName,
			DownstreamPeer: info.peer, UpstreamPeer: upstreamPeer})
		k := stats.RequestKey{Service: serviceName("", info.dst), Cluster: clusterName, Protocol: "tcp", Flags: e.Flags}
		w.principals(&k, ls, &info, upMTLS, upstreamPeer)
		w.requestStats(nil, &k).Observe(e.Duration)
		if hostZone != "" {
			w.countZone(st, cl, hostZone, rx, tx, &info, true)
		}
	}()
	if ls.authz != nil && ls.authz.network != nil {
		var ok bool
		if details, ok = authorizeConn(ls.authz.network, info); !ok {
			return // closed, as Envoy's network RBAC filter closes it
		}
	}
	r := ls.matchRoute(info.dst, "", false)
	if r == nil {
		e.Flags |= respflag.NR
		details = "filter_chain_not_found"
		return
	}
	cl = r.cluster
	clusterName = cl.name
	cs := cl.stats[w.id]
	var up net.Conn
	var tried []lb.HostID
	for attempt := 0; attempt < 2 && up == nil; attempt++ {
		h, hc := w.pick(cl, &lb.PickContext{Previous: tried, SelectionRetries: 1})
		if h == nil {
			cs.Inc(stats.UpstreamCxNoneHealthy)
			e.Flags |= respflag.UH
			details = "no_healthy_upstream"
			return
		}
		tried = append(tried, h.ID)
		e.UpstreamHost = upstreamAddr(h, info.dst)
		conn, err := w.dialHostAt(context.Background(), cl, h, e.UpstreamHost, mtls.ALPNOpaqueTCP) // no shared parent context
		w.release(cl, h)
		hc.rqActive.Add(-1)
		if err != nil {
			hc.rqError.Add(1)
			hc.countConnectFail(err)
		} else {
			hc.rqSuccess.Add(1)
		}
		if err == nil {
			w.report(event{kind: evLocalOrigin, cluster: cl, addr: h.Address, local: lb.LocalOriginConnectSuccessFinal})
			up, hostZone = conn, h.Locality.Zone
			if tc, ok := conn.(*tls.Conn); ok {
				upMTLS = true
				if id, err := mtls.PeerID(tc.ConnectionState()); err == nil {
					upstreamPeer = id.String()
				}
			}
			break
		}
		var ce *connectError
		if errors.As(err, &ce) && ce.overflow {
			e.Flags |= respflag.UO
			details = "overflow"
			return
		}
		w.report(event{kind: evLocalOrigin, cluster: cl, addr: h.Address, local: lb.LocalOriginConnectFailed})
		failure = err.Error()
		if attempt == 1 {
			e.Flags |= respflag.UF | respflag.URX
			details = "upstream_max_connect_attempts_exceeded"
			cs.Inc(stats.UpstreamRqRetryLimitExceeded)
			return
		}
	}
	defer up.Close()
	idle := newIdleWatch(ls.cfg.TCPIdleTimeout, c, up)
	defer idle.stop()
	var head []byte // what detection buffered goes first
	if pre != nil && pre.Buffered() > 0 {
		head, _ = pre.Peek(pre.Buffered())
	}
	// Bytes the sk_msg program moved straight into a peer socket never
	// reach the queue splice reads, so accelerated connections are copied
	// with read and write.
	acc := w.s.opts.Accelerated
	spliced := acc == nil || !(acc(c) || acc(up))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, _ := w.copyTCP(up, c, head, spliced, idle)
		rx = uint64(n)
		closeWrite(up)
	}()
	n, err := w.copyTCP(c, up, nil, spliced, idle)
	tx = uint64(n)
	if idle.fired() {
		details = "idle_timeout"
		cs.TCPIdleTimeout.Add(1)
	} else if err != nil && !errors.Is(err, net.ErrClosed) {
		e.Flags |= respflag.UC
		details = "upstream_connection_termination"
	}
	closeWrite(c)
	wg.Wait()
}

// errNoSplice: splice cannot go on (see pipePool.splice); the rest is
// copied with read and write.
var errNoSplice = errors.New("dataplane: no splice")

// copyTCP copies head, then src, to dst until src's end: with splice(2)
// when allowed and both are plain sockets, else with read and write
// through one of the worker's buffers. idle learns of every byte moved.
// It returns the bytes written to dst.
func (w *worker) copyTCP(dst, src net.Conn, head []byte, spliced bool, idle *idleWatch) (int64, error) {
	var total int64
	if len(head) > 0 {
		n, err := dst.Write(head)
		total += int64(n)
		if err != nil {
			return total, err
		}
		idle.touch()
	}
	if rsrc, rdst := bareTCP(src), bareTCP(dst); spliced && rsrc != nil && rdst != nil {
		n, err := w.pipes.splice(rdst, rsrc, idle)
		total += n
		// The wrappers count bytes they see; these went round them.
		if cc, ok := src.(*countedConn); ok {
			cc.st.Add(stats.UpstreamCxRxBytesTotal, uint64(n))
		}
		if cc, ok := dst.(*countedConn); ok {
			cc.st.Add(stats.UpstreamCxTxBytesTotal, uint64(n))
		}
		if err != errNoSplice {
			return total, err
		}
	}
	buf := w.bufs.Get()
	defer w.bufs.Put(buf)
	// The wrappers hide ReadFrom and WriteTo, which would splice.
	n, err := io.CopyBuffer(idleWriter{dst, idle}, idleReader{src, idle}, buf)
	return total + n, err
}

// bareTCP is the socket under a plaintext connection (nil for TLS).
func bareTCP(c net.Conn) *net.TCPConn {
	switch x := c.(type) {
	case *net.TCPConn:
		return x
	case *countedConn:
		tc, _ := x.Conn.(*net.TCPConn)
		return tc
	}
	return nil
}

// idleReader and idleWriter tell an idleWatch that bytes moved.
type idleReader struct {
	r    io.Reader
	idle *idleWatch
}

func (r idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.idle.touch()
	}
	return n, err
}

type idleWriter struct {
	w    io.Writer
	idle *idleWatch
}

func (w idleWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if n > 0 {
		w.idle.touch()
	}
	return n, err
}

// idleWatch closes both sides of a proxied connection once no byte moved
// either way for its timeout (Envoy's tcp_proxy idle_timeout). Moving
// bytes only stores the time; one runtime timer per connection checks it
// when the timeout could have passed and is re-armed for what is left,
// so the copy loops never touch a timer, and a busy connection costs one
// timer firing per timeout. (Not the worker clock: a connection's watch
// is re-armed for what is left of its timeout, which the clock's
// tick-resolution alarms would only approximate.) A nil idleWatch
// (timeout 0) does nothing.
type idleWatch struct {
	timeout time.Duration
	// last is when bytes last moved, as clock.Elapsed().
	last  atomic.Int64
	timer *time.Timer
	conns [2]io.Closer
	// state is watching, fired (it closed the connection) or stopped.
	state atomic.Int32
}

const (
	idleWatching = iota
	idleFired
	idleStopped
)

func newIdleWatch(timeout time.Duration, a, b io.Closer) *idleWatch {
	if timeout <= 0 {
		return nil
	}
	iw := &idleWatch{timeout: timeout, conns: [2]io.Closer{a, b}}
	iw.touch()
	// Armed once iw.timer is set: check may re-arm it.
	iw.timer = time.AfterFunc(math.MaxInt64, iw.check)
	iw.timer.Reset(timeout)
	return iw
}

// touch records that bytes moved now.
func (iw *idleWatch) touch() {
	if iw != nil {
		iw.last.Store(int64(clock.Elapsed()))
	}
}

// check runs when the timeout may have passed: it closes the connection,
// or waits for the rest of the timeout counted from the last bytes.
func (iw *idleWatch) check() {
	quiet := clock.Elapsed() - time.Duration(iw.last.Load())
	if quiet < iw.timeout {
		if iw.state.Load() == idleWatching {
			iw.timer.Reset(iw.timeout - quiet)
			// A stop between the load and the Reset stopped the timer
			// before it was re-armed: stop it again, or it would keep the
			// closed connections until it fired.
			if iw.state.Load() != idleWatching {
				iw.timer.Stop()
			}
		}
		return
	}
	if iw.state.CompareAndSwap(idleWatching, idleFired) {
		for _, c := range iw.conns {
			_ = c.Close()
		}
	}
}

// stop ends the watch (the connection is over).
func (iw *idleWatch) stop() {
	if iw != nil {
		iw.state.CompareAndSwap(idleWatching, idleStopped)
		iw.timer.Stop()
	}
}

// fired reports whether the watch closed the connection.
func (iw *idleWatch) fired() bool { return iw != nil && iw.state.Load() == idleFired }

func closeWrite(c net.Conn) {
	type cw interface{ CloseWrite() error }
	if x, ok := c.(cw); ok {
		_ = x.CloseWrite()
		return
	}
	if cc, ok := c.(*countedConn); ok {
		closeWrite(cc.Conn)
	}
}
