package h2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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
	// Nothing of a request stays in the HPACK table: its strings may be
	// the caller's reused memory (and a request's unique fields would
	// evict the others anyway).
	cc.henc.SetMaxDynamicTableSize(0)
	cc.mu.Lock()
	cc.wbuf = append(cc.wbuf, http2.ClientPreface...)
	cc.ourSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	err = cc.flushLocked()
	cc.mu.Unlock()
	if err == nil {
		if dl, ok := ctx.Deadline(); ok {
			_ = nc.SetReadDeadline(dl)
		}
		var f http2.Frame
		f, err = cc.fr.ReadFrame()
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

// clientConn is one connection's client side.
type clientConn struct {
	conn
	t        *Transport
	addr     string
	streams  map[uint32]*clientStream
	nextID   uint32
	reserved int  // streams promised to callers of reserve
	goAway   bool // no new streams (the server's GOAWAY, idle, closing)
	idle     *time.Timer
	idleAt   time.Time
	removed  bool
}

// reserve takes a stream of the connection, if it has one left.
func (cc *clientConn) reserve() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil || cc.goAway || uint32(len(cc.streams)+cc.reserved) >= cc.peerMaxStream || cc.nextID >= 1<<31-1 {
		return false
	}
	cc.reserved++
	return true
}

// clientStream is one request's stream.
type clientStream struct {
	cc          *clientConn
	id          uint32
	req         *http.Request
	res         *http.Response
	err         error
	ready       chan struct{} // closed once res or err is set
	gotHeaders  bool
	sendWindow  int64
	recvWindow  int64
	recvUnacked int64
	declared    int64
	received    int64
	remoteEnd   bool
	localEnd    bool
	reset       bool
	body        responseBody
	stop        func() bool // the request context's AfterFunc
}

// roundTrip sends req on a reserved stream and waits for the response's
// headers.
func (cc *clientConn) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	cs := &clientStream{cc: cc, req: req, ready: make(chan struct{}), recvWindow: streamWindow, declared: -1}
	cs.body.cs = cs
	hasBody := req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0
	cc.mu.Lock()
	cc.reserved--
	if cc.err != nil || cc.goAway {
		cc.mu.Unlock()
		return nil, errUnprocessed
	}
	cs.id = cc.nextID
	cc.nextID += 2
	cs.sendWindow = cc.peerInitial
	cc.streams[cs.id] = cs
	cc.idleAt = time.Time{}
	cc.writeHeaders(cs.id, !hasBody, func(enc encoder) { cc.encodeRequest(enc, req) })
	cs.localEnd = !hasBody
	// (Registered before the response can arrive, which stops it; a
	// context that already ended runs it on a goroutine of its own.)
	cs.stop = context.AfterFunc(ctx, func() {
		cc.mu.Lock()
		cs.abortLocked(ctx.Err(), http2.ErrCodeCancel)
		_ = cc.flushLocked()
		cc.mu.Unlock()
	})
	err := cc.flushLocked()
	cc.mu.Unlock()
	if err != nil {
		cs.stop()
		return nil, errUnprocessed
	}
	if hasBody {
		go cs.writeBody()
	}
	<-cs.ready
	if cs.err != nil {
		cs.stop()
		return nil, cs.err
	}
	return cs.res, nil
}

// encodeRequest encodes req's header block (mu held).
func (cc *clientConn) encodeRequest(enc encoder, req *http.Request) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	_ = enc.WriteField(hpack.HeaderField{Name: ":method", Value: req.Method})
	if req.Method != http.MethodConnect {
		_ = enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "http"})
	}
	_ = enc.WriteField(hpack.HeaderField{Name: ":authority", Value: host})
	if req.Method != http.MethodConnect {
		path := req.URL.RequestURI()
		if req.URL.Opaque != "" {
			path = req.URL.Opaque
		}
		_ = enc.WriteField(hpack.HeaderField{Name: ":path", Value: path})
	}
	cc.encodeHeader(enc, req.Header, false)
	if len(req.Trailer) > 0 && len(req.Header["Trailer"]) == 0 {
		keys := make([]string, 0, len(req.Trailer))
		for k := range req.Trailer {
			keys = append(keys, cc.lowerKey(k))
		}
		_ = enc.WriteField(hpack.HeaderField{Name: "trailer", Value: strings.Join(keys, ",")})
	}
	if req.ContentLength > 0 && req.Header.Get("Content-Length") == "" {
		_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(req.ContentLength, 10)})
	}
}

// writeBody sends the request body, then its trailers.
func (cs *clientStream) writeBody() {
	cc := cs.cc
	body := cs.req.Body
	buf := make([]byte, 16<<10)
	defer body.Close()
	for {
		n, err := body.Read(buf)
		cc.mu.Lock()
		if n > 0 {
			if werr := cc.writeData(cs.id, &cs.sendWindow, buf[:n], false, &cs.reset); werr != nil {
				cc.mu.Unlock()
				return
			}
		}
		switch {
		case err == io.EOF:
			if t := cs.req.Trailer; len(t) > 0 {
				cc.writeHeaders(cs.id, true, func(enc encoder) { cc.encodeHeader(enc, t, false) })
			} else {
				_ = cc.writeData(cs.id, &cs.sendWindow, nil, true, &cs.reset)
			}
			cs.localEnd = true
			cc.forgetLocked(cs)
		case err != nil:
			cs.abortLocked(fmt.Errorf("h2: reading the request body: %w", err), http2.ErrCodeCancel)
		}
		_ = cc.flushLocked()
		cc.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// abortLocked resets the stream from this side with err as its error.
func (cs *clientStream) abortLocked(err error, code http2.ErrCode) {
	cc := cs.cc
	if !cs.reset && !(cs.localEnd && cs.remoteEnd) {
		_ = cc.fr.WriteRSTStream(cs.id, code)
	}
	cs.failLocked(err)
}

// failLocked ends the stream with err: the wait for the response, or
// the body's reads.
func (cs *clientStream) failLocked(err error) {
	if !cs.reset {
		cs.reset = true
		if !cs.gotHeaders {
			cs.err = err
			cs.gotHeaders = true
			close(cs.ready)
		} else if cs.body.err == nil {
			cs.body.err = err
		}
	}
	cs.cc.out.Broadcast()
	cs.localEnd, cs.remoteEnd = true, true
	cs.cc.forgetLocked(cs)
}

// forgetLocked drops a stream that ended both ways from the count.
func (cc *clientConn) forgetLocked(cs *clientStream) {
	if !cs.localEnd || !cs.remoteEnd || cc.streams[cs.id] != cs {
		return
	}
	delete(cc.streams, cs.id)
	if len(cc.streams) > 0 || cc.reserved > 0 {
		return
	}
	if cc.goAway {
		cc.shutLocked()
	} else {
		cc.idleAt = time.Now()
	}
}

// shutLocked closes the connection and takes it out of the pool.
func (cc *clientConn) shutLocked() {
	cc.goAway = true
	cc.failLocked(errClosed)
	if !cc.removed {
		cc.removed = true
		go cc.t.remove(cc)
	}
}

// idleCheck closes a connection idle for IdleTimeout.
func (cc *clientConn) idleCheck() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil {
		return
	}
	wait := cc.t.IdleTimeout
	if !cc.idleAt.IsZero() && len(cc.streams) == 0 && cc.reserved == 0 {
		since := time.Since(cc.idleAt)
		if since >= wait {
			cc.shutLocked()
			return
		}
		wait -= since
	}
	cc.idle.Reset(wait)
}

// readLoop reads the server's frames until the connection ends.
func (cc *clientConn) readLoop() {
	var err error
	for {
		var f http2.Frame
		f, err = cc.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				cc.mu.Lock()
				if cs := cc.streams[se.StreamID]; cs != nil {
					cs.abortLocked(fmt.Errorf("h2: upstream stream %d: %w", se.StreamID, se), se.Code)
				}
				_ = cc.flushLocked()
				cc.mu.Unlock()
				continue
			}
			break
		}
		if err = cc.handle(f); err != nil {
			break
		}
	}
	cc.mu.Lock()
	var ce http2.ConnectionError
	if errors.As(err, &ce) || errors.Is(err, http2.ErrFrameTooLarge) {
		code := http2.ErrCodeFrameSize
		if errors.As(err, &ce) {
			code = http2.ErrCode(ce)
		}
		_ = cc.fr.WriteGoAway(0, code, nil)
		_ = cc.flushLocked()
	}
	cerr := fmt.Errorf("h2: connection to %s ended: %w", cc.addr, err)
	cc.failLocked(cerr)
	if cc.idle != nil {
		cc.idle.Stop()
	}
	for _, cs := range cc.streams {
		cs.failLocked(cerr)
	}
	cc.goAway = true
	if !cc.removed {
		cc.removed = true
		go cc.t.remove(cc)
	}
	cc.mu.Unlock()
}

// handle applies one frame from the server.
func (cc *clientConn) handle(f http2.Frame) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	var err error
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		err = cc.headers(f)
	case *http2.DataFrame:
		err = cc.data(f)
	case *http2.RSTStreamFrame:
		if cs := cc.streams[f.StreamID]; cs != nil {
			cs.failLocked(http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode})
		}
	case *http2.SettingsFrame:
		if !f.IsAck() {
			var delta int64
			if delta, err = cc.applySettings(f); err == nil {
				for _, cs := range cc.streams {
					cs.sendWindow += delta
				}
				_ = cc.fr.WriteSettingsAck()
				cc.out.Broadcast()
			}
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = cc.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		cc.goAway = true
		for id, cs := range cc.streams {
			if id > f.LastStreamID {
				cs.failLocked(errUnprocessed)
			}
		}
		if len(cc.streams) == 0 && cc.reserved == 0 {
			cc.shutLocked()
		} else if !cc.removed {
			cc.removed = true
			go cc.t.remove(cc)
		}
	case *http2.WindowUpdateFrame:
		inc := int64(f.Increment)
		if f.StreamID == 0 {
			if cc.sendWindow+inc > maxWindow {
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
			cc.sendWindow += inc
		} else if cs := cc.streams[f.StreamID]; cs != nil {
			if cs.sendWindow+inc > maxWindow {
				cs.abortLocked(errors.New("h2: upstream overflowed a stream's window"), http2.ErrCodeFlowControl)
			} else {
				cs.sendWindow += inc
			}
		}
		cc.out.Broadcast()
	case *http2.PushPromiseFrame:
		err = http2.ConnectionError(http2.ErrCodeProtocol) // push is off
	}
	if err != nil {
		var se http2.StreamError
		if errors.As(err, &se) {
			if cs := cc.streams[se.StreamID]; cs != nil {
				cs.abortLocked(fmt.Errorf("h2: upstream stream %d: %w", se.StreamID, se), se.Code)
			}
			err = nil
		}
	}
	if err == nil && len(cc.wbuf) > maxQueued {
		err = http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	if err == nil {
		_ = cc.flushControlLocked()
	}
	return err
}

// headers takes a response's header block or its trailers (mu held).
func (cc *clientConn) headers(f *http2.MetaHeadersFrame) error {
	cs := cc.streams[f.StreamID]
	if cs == nil {
		if f.StreamID%2 == 0 || f.StreamID >= cc.nextID {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil // a stream this end reset
	}
	protoErr := http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
	if cs.res != nil {
		if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
			return protoErr
		}
		cs.body.trailers = trailersOf(f)
		return cs.endLocked()
	}
	code, err := strconv.Atoi(f.PseudoValue("status"))
	if err != nil || code < 100 || code > 999 || f.Truncated {
		return protoErr
	}
	if code < 200 {
		if f.StreamEnded() {
			return protoErr
		}
		return nil // informational: the final response follows
	}
	h := cc.headerOf(f)
	res := &http.Response{
		Status: strconv.Itoa(code) + " " + http.StatusText(code), StatusCode: code,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Request: cs.req, ContentLength: -1,
		Trailer: declaredTrailers(h),
	}
	if cl := h["Content-Length"]; len(cl) == 1 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil && n >= 0 {
			cs.declared, res.ContentLength = n, n
		}
	}
	if f.StreamEnded() || cs.req.Method == http.MethodHead {
		res.ContentLength = 0
		res.Body = http.NoBody
	} else {
		res.Body = &cs.body
	}
	cs.res = res
	cs.gotHeaders = true
	close(cs.ready)
	if f.StreamEnded() {
		return cs.endLocked()
	}
	return nil
}

// endLocked takes the server's END_STREAM.
func (cs *clientStream) endLocked() error {
	if cs.declared >= 0 && cs.received != cs.declared && cs.req.Method != http.MethodHead {
		return http2.StreamError{StreamID: cs.id, Code: http2.ErrCodeProtocol}
	}
	cs.remoteEnd = true
	cs.cc.out.Broadcast()
	if cs.res.Body == http.NoBody {
		cs.stop()
	}
	cs.cc.forgetLocked(cs)
	return nil
}

// data takes a DATA frame into its response body (mu held).
func (cc *clientConn) data(f *http2.DataFrame) error {
	n := int64(f.Length)
	if err := cc.takeData(n); err != nil {
		return err
	}
	cs := cc.streams[f.StreamID]
	if cs == nil {
		if f.StreamID%2 == 0 || f.StreamID >= cc.nextID {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		cc.consumed(n)
		return nil
	}
	if cs.res == nil || cs.remoteEnd || n > cs.recvWindow {
		cc.consumed(n)
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
	}
	data := f.Data()
	cs.recvWindow -= n
	if pad := n - int64(len(data)); pad > 0 {
		cc.consumed(pad)
		cs.recvWindow += pad
	}
	cs.received += int64(len(data))
	if cs.declared >= 0 && cs.received > cs.declared {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
	}
	if cs.body.closed {
		cc.consumed(int64(len(data)))
	} else {
		if cs.body.buf == nil {
			cs.body.buf = getBuf()
		}
		cs.body.buf = append(cs.body.buf, data...)
	}
	cc.out.Broadcast()
	if f.StreamEnded() {
		return cs.endLocked()
	}
	return nil
}

// responseBody is a response's body, fed by the connection's read loop.
type responseBody struct {
	cs       *clientStream
	trailers http.Header // received, for the response's Trailer at EOF
	buf      []byte
	off      int
	err      error
	closed   bool
}

func (b *responseBody) Read(p []byte) (int, error) {
	cs := b.cs
	cc := cs.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for {
		if b.off < len(b.buf) {
			n := copy(p, b.buf[b.off:])
			b.off += n
			if b.off == len(b.buf) {
				b.buf, b.off = b.buf[:0], 0
			}
			cs.credit(int64(n))
			if b.off == 0 && cs.remoteEnd && b.err == nil {
				b.eof()
				return n, io.EOF
			}
			return n, nil
		}
		switch {
		case b.err != nil:
			return 0, b.err
		case cs.remoteEnd:
			b.eof()
			return 0, io.EOF
		case b.closed:
			return 0, errStreamClosed
		}
		cc.out.Wait()
	}
}

// eof hands the trailers over as the reader meets the end (mu held).
func (b *responseBody) eof() {
	mergeTrailers(&b.cs.res.Trailer, b.trailers)
	b.trailers = nil
	b.release()
}

// release gives the body's buffer back (mu held), once nothing in it is
// unread.
func (b *responseBody) release() {
	if b.buf != nil {
		putBuf(b.buf)
		b.buf, b.off = nil, 0
	}
}

// Ready says whether a Read returns without waiting for the server.
func (b *responseBody) Ready() bool {
	cc := b.cs.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return b.off < len(b.buf) || b.err != nil || b.cs.remoteEnd
}

func (b *responseBody) Close() error {
	cs := b.cs
	cc := cs.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	cc.consumed(int64(len(b.buf) - b.off))
	b.release()
	if !cs.remoteEnd && !cs.reset {
		cs.abortLocked(errStreamClosed, http2.ErrCodeCancel)
	}
	cs.stop()
	_ = cc.flushLocked()
	return nil
}

// credit returns n consumed bytes to the server (mu held).
func (cs *clientStream) credit(n int64) {
	cc := cs.cc
	cc.consumed(n)
	cs.recvUnacked += n
	if !cs.remoteEnd && !cs.reset && cs.recvUnacked >= streamWindow/2 {
		_ = cc.fr.WriteWindowUpdate(cs.id, uint32(cs.recvUnacked))
		cs.recvWindow += cs.recvUnacked
		cs.recvUnacked = 0
	}
	if len(cc.wbuf) > 0 {
		_ = cc.flushLocked()
	}
}
