package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/mtls"
)

// proxyTCP is the L4 proxy: one upstream per connection, picked once (with
// one more pick on a connect failure, like Envoy's max_connect_attempts),
// then bytes copied both ways with half-close. pre holds sniffed bytes.
func (w *worker) proxyTCP(c net.Conn, st *state, ls *listenerState, info connInfo, pre *bufio.Reader) {
	defer c.Close()
	e := lb.AccessLogEntry{StartTime: info.start, UpstreamServiceTime: -1}
	var details, failure, clusterName, upstreamPeer string
	var rx, tx uint64
	upMTLS := false
	defer func() {
		e.Duration = time.Since(info.start)
		e.BytesReceived, e.BytesSent = rx, tx
		w.s.access.Load().write(w.id, &e, logExtra{details: details, failure: failure, cluster: clusterName,
			downstreamPeer: info.peer, upstreamPeer: upstreamPeer})
		k := requestKey{service: serviceName("", info.dst), cluster: clusterName, protocol: "tcp", flags: e.Flags}
		w.principals(&k, ls, info, upMTLS, upstreamPeer)
		w.requestStats(nil, &k).observe(e.Duration)
	}()
	r := ls.matchRoute(info.dst, "", false)
	if r == nil {
		e.Flags |= lb.FlagNR
		details = "filter_chain_not_found"
		return
	}
	cl := r.cluster
	clusterName = cl.name
	stats := cl.stats[w.id]
	var up net.Conn
	var tried []lb.HostID
	for attempt := 0; attempt < 2 && up == nil; attempt++ {
		h, hc := w.pick(cl, &lb.PickContext{Previous: tried, SelectionRetries: 1})
		if h == nil {
			stats.inc(cUpstreamCxNoneHealthy)
			e.Flags |= lb.FlagUH
			details = "no_healthy_upstream"
			return
		}
		tried = append(tried, h.ID)
		e.UpstreamHost = h.Address
		conn, err := w.dialHost(context.Background(), cl, h, mtls.ALPNOpaqueTCP) // no shared parent context
		w.release(cl, h)
		hc.rqActive.Add(-1)
		if err != nil {
			hc.rqError.Add(1)
			hc.cxConnectFail.Add(1)
		} else {
			hc.rqSuccess.Add(1)
		}
		if err == nil {
			w.report(event{kind: evLocalOrigin, cluster: cl, addr: h.Address, local: lb.LocalOriginConnectSuccessFinal})
			up = conn
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
			e.Flags |= lb.FlagUO
			details = "overflow"
			return
		}
		w.report(event{kind: evLocalOrigin, cluster: cl, addr: h.Address, local: lb.LocalOriginConnectFailed})
		failure = err.Error()
		if attempt == 1 {
			e.Flags |= lb.FlagUF | lb.FlagURX
			details = "upstream_max_connect_attempts_exceeded"
			stats.inc(cUpstreamRqRetryLimitExceeded)
			return
		}
	}
	defer up.Close()
	// What detection buffered goes first, then the bare socket, which
	// io.Copy splices (the buffered reader reads through raw system
	// calls, which splice cannot).
	var src io.Reader = c
	if pre != nil && pre.Buffered() > 0 {
		head, _ := pre.Peek(pre.Buffered())
		src = io.MultiReader(bytes.NewReader(head), c)
	}
	// io.Copy splices between two bare sockets; bytes the sk_msg program
	// moved straight into a peer socket never reach the queue splice
	// reads, so accelerated connections are copied with read and write.
	var toUp io.Writer = up
	var fromUp io.Reader = up
	var toDown io.Writer = c
	if acc := w.s.opts.Accelerated; acc != nil && (acc(c) || acc(up)) {
		src, fromUp = struct{ io.Reader }{src}, struct{ io.Reader }{up}
		toUp, toDown = struct{ io.Writer }{up}, struct{ io.Writer }{c}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, _ := io.Copy(toUp, src) // splice(2) when src is the bare socket
		rx = uint64(n)
		closeWrite(up)
	}()
	n, err := io.Copy(toDown, fromUp)
	tx = uint64(n)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		e.Flags |= lb.FlagUC
		details = "upstream_connection_termination"
	}
	closeWrite(c)
	wg.Wait()
}

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
