package h2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

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
	head        bool        // a HEAD request: no body follows
	// bodyDone is closed when the request body's writer is done (nil:
	// the request has no body).
	bodyDone chan struct{}
}

// endBodyWriter stops the request body's writer and waits for it, so
// that nothing reads the caller's body once its request is over: as
// x/net's transport does, a writer stuck in the body's Read is woken by
// closing the body.
func (cs *clientStream) endBodyWriter() {
	if cs.bodyDone == nil {
		return
	}
	cc := cs.cc
	cc.mu.Lock()
	running := !cs.localEnd
	if running {
		cs.abortLocked(errStreamClosed, http2.ErrCodeCancel)
		_ = cc.flushLocked()
	}
	cc.mu.Unlock()
	select {
	case <-cs.bodyDone:
		return
	default:
	}
	_ = cs.req.Body.Close()
	<-cs.bodyDone
}

// roundTrip sends req on a reserved stream and waits for the response's
// headers.
func (cc *clientConn) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	cs := &clientStream{cc: cc, req: req, ready: make(chan struct{}), recvWindow: streamWindow, declared: -1,
		head: req.Method == http.MethodHead}
	cs.body.cs = cs
	hasBody := req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0
	if hasBody {
		cs.bodyDone = make(chan struct{})
	}
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
		cs.endBodyWriter()
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
	cc.writeField(enc, ":method", req.Method)
	if req.Method != http.MethodConnect {
		_ = enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "http"})
	}
	cc.writeField(enc, ":authority", host)
	if req.Method != http.MethodConnect {
		path := req.URL.RequestURI()
		if req.URL.Opaque != "" {
			path = req.URL.Opaque
		}
		cc.writeField(enc, ":path", path)
	}
	cc.encodeHeader(enc, req.Header, false)
	if len(req.Trailer) > 0 && len(req.Header["Trailer"]) == 0 {
		keys := make([]string, 0, len(req.Trailer))
		for k := range req.Trailer {
			keys = append(keys, cc.lowerKey(k))
		}
		cc.writeField(enc, "trailer", strings.Join(keys, ","))
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
	defer close(cs.bodyDone)
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
		case err == io.EOF && cs.reset:
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
	cs.cc.signal()
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
		f, err = cc.readFrame()
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
	case *headerBlock:
		err = cc.headers(f)
	case *http2.DataFrame:
		err = cc.data(f)
	case *http2.RSTStreamFrame:
		if cs := cc.streams[f.StreamID]; cs != nil {
			if cs.remoteEnd {
				// The response is whole (a server that read enough
				// of the request says stop, RFC 9113 8.1): only the
				// request body's writer ends.
				cs.reset, cs.localEnd = true, true
				cc.signal()
				cc.forgetLocked(cs)
			} else {
				cs.failLocked(http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode})
			}
		}
	case *http2.SettingsFrame:
		if !f.IsAck() {
			var delta int64
			if delta, err = cc.applySettings(f); err == nil {
				for _, cs := range cc.streams {
					cs.sendWindow += delta
				}
				_ = cc.fr.WriteSettingsAck()
				cc.signal()
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
		cc.signal()
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
func (cc *clientConn) headers(f *headerBlock) error {
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
	if f.StreamEnded() || cs.head {
		res.ContentLength = 0
	}
	// (Its body even then: closing it stops the request body's writer.)
	res.Body = &cs.body
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
	if cs.declared >= 0 && cs.received != cs.declared && !cs.head {
		return http2.StreamError{StreamID: cs.id, Code: http2.ErrCodeProtocol}
	}
	cs.remoteEnd = true
	cs.cc.signal()
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
	if cs.declared >= 0 && cs.received > cs.declared && !cs.head {
		cc.consumed(int64(len(data)))
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
	}
	if cs.body.closed || cs.head {
		cc.consumed(int64(len(data)))
	} else {
		if cs.body.buf == nil {
			cs.body.buf = getBuf()
		}
		cs.body.buf = append(cs.body.buf, data...)
	}
	cc.signal()
	if f.StreamEnded() {
		return cs.endLocked()
	}
	return nil
}
