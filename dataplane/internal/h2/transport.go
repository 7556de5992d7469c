package h2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// Transport is a pool of HTTP/2 client connections, by the request URL's
// host: one connection per address, more while the peer's stream limit
// is reached.
type Transport struct {
	// Dial opens a connection to addr (its TLS settled, h2 agreed); via
	// is RoundTripVia's (nil for RoundTrip).
	Dial func(ctx context.Context, addr string, via any) (net.Conn, error)
	// IdleTimeout closes a connection without streams for that long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a response's decoded header list.
	MaxHeaderBytes uint32

	mu      sync.Mutex
	conns   map[string][]*clientConn
	dialing map[string]chan struct{} // closed when the address's dial ends
}

// errUnprocessed is a request the server did not process (past its
// GOAWAY, or the connection ended before the request went out): it is
// safe to send again.
var errUnprocessed = errors.New("h2: request not processed by the server")

// RoundTrip sends req on a pooled connection (see http.RoundTripper). A
// request without a body that the server did not process is sent again
// on another connection, as x/net's transport does.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.RoundTripVia(req, nil)
}

// RoundTripVia is RoundTrip with via handed to Dial if a connection must
// be opened (the endpoint the caller picked). The request's head is read
// while it runs; its body, if any, is sent on a goroutine of its own and
// its context held until the response body is closed.
func (t *Transport) RoundTripVia(req *http.Request, via any) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		cc, err := t.conn(req.Context(), req.URL.Host, via)
		if err != nil {
			return nil, err
		}
		res, err := cc.roundTrip(req)
		if errors.Is(err, errUnprocessed) && attempt < 3 && (req.Body == nil || req.Body == http.NoBody) {
			continue
		}
		return res, err
	}
}

// CloseIdleConnections closes the connections without streams.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	var idle []*clientConn
	for _, ccs := range t.conns {
		idle = append(idle, ccs...)
	}
	t.mu.Unlock()
	for _, cc := range idle {
		cc.mu.Lock()
		if len(cc.streams) == 0 && cc.reserved == 0 {
			cc.shutLocked()
		}
		cc.mu.Unlock()
	}
}

// conn returns a connection to addr with a stream reserved on it. One
// dial per address runs at a time: the others wait for it and take its
// streams, as far as the server's limit goes.
func (t *Transport) conn(ctx context.Context, addr string, via any) (*clientConn, error) {
	for {
		t.mu.Lock()
		for _, cc := range t.conns[addr] {
			if cc.reserve() {
				t.mu.Unlock()
				return cc, nil
			}
		}
		wait := t.dialing[addr]
		if wait == nil {
			break // t.mu held: this caller dials
		}
		t.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	done := make(chan struct{})
	if t.dialing == nil {
		t.dialing = map[string]chan struct{}{}
	}
	t.dialing[addr] = done
	t.mu.Unlock()
	cc, err := t.dial(ctx, addr, via)
	t.mu.Lock()
	delete(t.dialing, addr)
	close(done)
	if err == nil {
		if t.conns == nil {
			t.conns = map[string][]*clientConn{}
		}
		t.conns[addr] = append(t.conns[addr], cc)
	}
	t.mu.Unlock()
	return cc, err
}

// dial opens a connection with a stream reserved: the preface and this
// end's SETTINGS out, the server's SETTINGS (its stream limit) in.
func (t *Transport) dial(ctx context.Context, addr string, via any) (*clientConn, error) {
	nc, err := t.Dial(ctx, addr, via)
	if err != nil {
		return nil, err
	}
	cc := &clientConn{t: t, addr: addr, streams: map[uint32]*clientStream{}, nextID: 1}
	cc.init(nc, t.MaxHeaderBytes)
	cc.mu.Lock()
	cc.wbuf = append(cc.wbuf, http2.ClientPreface...)
	cc.ourSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	err = cc.flushLocked()
	cc.mu.Unlock()
	if err == nil {
		dl := time.Now().Add(prefaceTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(dl) {
			dl = d
		}
		_ = nc.SetReadDeadline(dl)
		stop := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Unix(1, 0)) })
		var f http2.Frame
		f, err = cc.readFrame()
		if !stop() && err != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		_ = nc.SetReadDeadline(time.Time{})
		if sf, ok := f.(*http2.SettingsFrame); err == nil && (!ok || sf.IsAck()) {
			err = errors.New("h2: the server's first frame is not SETTINGS")
		}
		if err == nil {
			err = cc.handle(f)
		}
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("h2: starting a connection to %s: %w", addr, err)
	}
	cc.mu.Lock()
	cc.reserved = 1
	if t.IdleTimeout > 0 {
		cc.idle = time.AfterFunc(t.IdleTimeout, cc.idleCheck)
	}
	cc.mu.Unlock()
	go cc.readLoop()
	return cc, nil
}

// remove drops cc from the pool.
func (t *Transport) remove(cc *clientConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ccs := t.conns[cc.addr]
	for i, c := range ccs {
		if c == cc {
			ccs = append(ccs[:i:i], ccs[i+1:]...)
			break
		}
	}
	if len(ccs) == 0 {
		delete(t.conns, cc.addr)
	} else {
		t.conns[cc.addr] = ccs
	}
}
