package h2

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// Server serves HTTP/2 connections whose TLS (or whose absence) its
// caller settled, each request on a goroutine of its own running Handler.
type Server struct {
	// Handler serves every request.
	Handler http.Handler
	// MaxHeaderBytes bounds a request's decoded header list
	// (SETTINGS_MAX_HEADER_LIST_SIZE); a longer one is answered 431.
	MaxHeaderBytes uint32
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS; a stream
	// past it is refused (REFUSED_STREAM).
	MaxConcurrentStreams uint32
	// IdleTimeout closes a connection without streams for that long.
	IdleTimeout time.Duration
	// Log takes what a handler's panic says.
	Log *slog.Logger

	// controlTimeout shortens controlWriteTimeout (tests).
	controlTimeout time.Duration

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	draining bool
	work     chan func()
}

// handlerIdle is how long a handler goroutine waits for the next stream
// before it exits: kept goroutines keep their grown stacks.
const handlerIdle = 10 * time.Second

// prefaceTimeout bounds the wait for a connection's preface.
const prefaceTimeout = 10 * time.Second

// go runs f on a kept handler goroutine, or a new one.
func (s *Server) goHandler(f func()) {
	select {
	case s.work <- f:
	default:
		go s.handlerLoop(f)
	}
}

func (s *Server) handlerLoop(f func()) {
	t := time.NewTimer(handlerIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(handlerIdle)
		select {
		case f = <-s.work:
		case <-t.C:
			return
		}
	}
}

// Drain sends every connection GOAWAY and closes each once its streams
// have ended; connections that arrive later are drained at once.
func (s *Server) Drain() {
	s.mu.Lock()
	s.draining = true
	conns := make([]*serverConn, 0, len(s.conns))
	for sc := range s.conns {
		conns = append(conns, sc)
	}
	s.mu.Unlock()
	for _, sc := range conns {
		sc.mu.Lock()
		sc.goAwayLocked(http2.ErrCodeNo)
		_ = sc.flushLocked()
		sc.mu.Unlock()
	}
}

// serverConn is one connection's server side.
type serverConn struct {
	conn
	srv     *Server
	ctx     context.Context
	streams map[uint32]*serverStream
	maxID   uint32 // the highest client stream ID seen
	goAway  bool   // GOAWAY sent: no new streams
	empty   int    // consecutive DATA frames without payload or end
	idleAt  time.Time
	idle    *time.Timer
	remote  string
	// handlers run now; queue waits for one to end (streams reset while
	// their handlers still run do not hold the client's stream count).
	handlers int
	queue    []*serverStream
}

// ServeConn serves nc until it closes or fails; ctx is every request's
// base context.
func (s *Server) ServeConn(ctx context.Context, nc net.Conn) {
	s.mu.Lock()
	if s.work == nil {
		s.work = make(chan func())
	}
	if s.conns == nil {
		s.conns = map[*serverConn]struct{}{}
	}
	sc := &serverConn{srv: s, ctx: ctx, streams: map[uint32]*serverStream{}, remote: nc.RemoteAddr().String()}
	s.conns[sc] = struct{}{}
	draining := s.draining
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
	}()
	sc.init(nc, s.MaxHeaderBytes)
	sc.controlTimeout = s.controlTimeout
	defer sc.close()

	_ = nc.SetReadDeadline(time.Now().Add(prefaceTimeout))
	if err := readPreface(sc.br); err != nil {
		sc.mu.Lock()
		_ = sc.fr.WriteGoAway(0, http2.ErrCodeProtocol, []byte("bad preface"))
		_ = sc.flushLocked()
		sc.mu.Unlock()
		return
	}
	sc.mu.Lock()
	sc.ourSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: s.maxStreams()})
	if draining {
		sc.goAwayLocked(http2.ErrCodeNo)
	}
	err := sc.flushLocked()
	sc.mu.Unlock()
	if err != nil {
		return
	}
	// The first frame must be the client's SETTINGS (RFC 9113 3.4).
	f, err := sc.fr.ReadFrame()
	if sf, ok := f.(*http2.SettingsFrame); err != nil || !ok || sf.IsAck() {
		sc.connError(http2.ErrCodeProtocol)
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	if !sc.handle(f) {
		return
	}
	if s.IdleTimeout > 0 {
		sc.idleAt = time.Now()
		sc.idle = time.AfterFunc(s.IdleTimeout, sc.idleCheck)
	}
	for {
		f, err := sc.fr.ReadFrame()
		if err != nil {
			if !sc.readError(f, err) {
				return
			}
			continue
		}
		if !sc.handle(f) {
			return
		}
	}
}

// readError handles what ReadFrame refused; false ends the connection.
func (sc *serverConn) readError(f http2.Frame, err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if st := sc.streams[se.StreamID]; st != nil {
			sc.resetLocked(st, se.Code)
		} else {
			if _, ok := f.(*http2.MetaHeadersFrame); ok && se.StreamID > sc.maxID {
				if se.StreamID%2 == 0 {
					sc.connErrorLocked(http2.ErrCodeProtocol)
					return false
				}
				sc.maxID = se.StreamID // a stream that opened and closed
			}
			_ = sc.fr.WriteRSTStream(se.StreamID, se.Code)
		}
		return sc.flushLocked() == nil
	case errors.As(err, &ce):
		sc.connError(http2.ErrCode(ce))
	case errors.Is(err, http2.ErrFrameTooLarge):
		sc.connError(http2.ErrCodeFrameSize)
	}
	return false
}

// handle applies one frame; false ends the connection.
func (sc *serverConn) handle(f http2.Frame) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var err error
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		err = sc.headers(f)
	case *http2.DataFrame:
		err = sc.data(f)
	case *http2.RSTStreamFrame:
		if f.StreamID > sc.maxID {
			err = http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
		} else if st := sc.streams[f.StreamID]; st != nil {
			st.peerReset(f.ErrCode)
			sc.forgetLocked(st)
		}
	case *http2.SettingsFrame:
		err = sc.settings(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = sc.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		// The client opens no more streams; the open ones finish, and
		// the client closes the connection (or the idle timeout does).
	case *http2.WindowUpdateFrame:
		err = sc.windowUpdate(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			err = http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
	case *http2.PushPromiseFrame:
		err = http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if _, ok := f.(*http2.DataFrame); !ok {
		sc.empty = 0
	}
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		if st := sc.streams[se.StreamID]; st != nil {
			sc.resetLocked(st, se.Code)
		} else {
			_ = sc.fr.WriteRSTStream(se.StreamID, se.Code)
		}
	case errors.As(err, &ce):
		sc.connErrorLocked(http2.ErrCode(ce))
		return false
	}
	if len(sc.wbuf) > maxQueued {
		// Control frames pile up behind a peer that does not read
		// (x/net's and Envoy's flood defences close such a connection).
		sc.connErrorLocked(http2.ErrCodeEnhanceYourCalm)
		return false
	}
	return sc.flushControlLocked() == nil
}

// maxQueued bounds the bytes queued for a peer that is not reading.
const maxQueued = 1 << 20

// headers opens a stream, or ends one with trailers (mu held).
func (sc *serverConn) headers(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if f.HasPriority() && f.Priority.StreamDep == id {
		if id > sc.maxID {
			sc.maxID = id
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if id <= sc.maxID {
		st := sc.streams[id]
		if st == nil {
			return http2.ConnectionError(http2.ErrCodeStreamClosed)
		}
		if st.remoteEnd {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		}
		// Trailers: they end the stream, and carry no pseudo-headers.
		if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		st.body.trailers = trailersOf(f)
		return st.endBody()
	}
	sc.maxID = id
	if sc.goAway {
		return nil // past the GOAWAY's last stream: ignored
	}
	if uint32(len(sc.streams)) >= sc.srv.maxStreams() {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	st := &serverStream{sc: sc, id: id, recvWindow: streamWindow, sendWindow: sc.peerInitial, declared: -1}
	st.rw.st = st
	if f.Truncated {
		// The list passed SETTINGS_MAX_HEADER_LIST_SIZE: 431, as x/net.
		sc.writeHeaders(id, true, func(enc encoder) { statusField(enc, http.StatusRequestHeaderFieldsTooLarge) })
		st.remoteEnd = f.StreamEnded()
		if !st.remoteEnd {
			_ = sc.fr.WriteRSTStream(id, http2.ErrCodeNo)
		}
		return nil
	}
	req, err := sc.newRequest(st, f)
	if err != nil {
		return err
	}
	st.req = req
	sc.streams[id] = st
	if sc.idle != nil && len(sc.streams) == 1 {
		sc.idleAt = time.Time{}
	}
	if sc.handlers >= int(sc.srv.maxStreams()) {
		if len(sc.queue) >= 4*int(sc.srv.maxStreams()) {
			// x/net's limit on handlers waiting behind reset streams.
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
		sc.queue = append(sc.queue, st)
		return nil
	}
	sc.handlers++
	sc.srv.goHandler(st.serve)
	return nil
}

// startQueuedLocked starts queued handlers while there is room.
func (sc *serverConn) startQueuedLocked() {
	for len(sc.queue) > 0 && sc.handlers < int(sc.srv.maxStreams()) {
		st := sc.queue[0]
		sc.queue = sc.queue[1:]
		if st.reset {
			continue
		}
		sc.handlers++
		sc.srv.goHandler(st.serve)
	}
}

// maxStreams is MaxConcurrentStreams, 250 (x/net's default) if unset.
func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams == 0 {
		return 250
	}
	return s.MaxConcurrentStreams
}

// newRequest builds a stream's request from its header block (mu held).
func (sc *serverConn) newRequest(st *serverStream, f *http2.MetaHeadersFrame) (*http.Request, error) {
	protoErr := http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
	method, path := f.PseudoValue("method"), f.PseudoValue("path")
	scheme, authority := f.PseudoValue("scheme"), f.PseudoValue("authority")
	if f.PseudoValue("status") != "" || f.PseudoValue("protocol") != "" || method == "" {
		return nil, protoErr
	}
	if method == http.MethodConnect {
		if path != "" || scheme != "" || authority == "" {
			return nil, protoErr
		}
	} else if path == "" || scheme == "" {
		return nil, protoErr
	}
	h := sc.headerOf(f)
	// Connection-specific fields make the request malformed (RFC 9113
	// 8.2.2); so does a TE other than "trailers".
	for _, k := range [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"} {
		if _, ok := h[k]; ok {
			return nil, protoErr
		}
	}
	if te, ok := h["Te"]; ok && (len(te) != 1 || te[0] != "trailers") {
		return nil, protoErr
	}
	if authority == "" {
		authority = h.Get("Host")
	}
	delete(h, "Host")
	if cl, ok := h["Content-Length"]; ok {
		n, err := strconv.ParseUint(cl[0], 10, 63)
		if err != nil || len(cl) > 1 {
			return nil, protoErr
		}
		st.declared = int64(n)
	}
	var u *url.URL
	var err error
	if method == http.MethodConnect {
		u = &url.URL{Host: authority}
		path = authority
	} else if u, err = url.ParseRequestURI(path); err != nil {
		return nil, protoErr
	}
	var cause context.CancelCauseFunc
	st.ctx, cause = context.WithCancelCause(sc.ctx)
	st.cancel = func() { cause(context.Canceled) }
	req := &http.Request{
		Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Host: authority,
		RequestURI: path, RemoteAddr: sc.remote, Trailer: declaredTrailers(h),
	}
	req = req.WithContext(st.ctx)
	switch {
	case f.StreamEnded():
		st.remoteEnd = true
		req.Body = http.NoBody
		if st.declared > 0 {
			return nil, protoErr
		}
	default:
		req.ContentLength = -1
		if st.declared >= 0 {
			req.ContentLength = st.declared
		}
		st.body.st = st
		req.Body = &st.body
	}
	return req, nil
}

// data takes a DATA frame into its stream's body (mu held).
func (sc *serverConn) data(f *http2.DataFrame) error {
	id := f.StreamID
	n := int64(f.Length)
	if id > sc.maxID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
	}
	if err := sc.takeData(n); err != nil {
		return err
	}
	st := sc.streams[id]
	if st == nil || st.remoteEnd {
		sc.consumed(n) // discarded: the connection's credit comes back
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if n > st.recvWindow {
		sc.consumed(n)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	if len(f.Data()) == 0 && !f.StreamEnded() {
		// Envoy's max_consecutive_inbound_frames_with_empty_payload (1):
		// a run of empty frames costs the proxy and moves nothing.
		sc.empty++
		if sc.empty > 1 {
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	} else {
		sc.empty = 0
	}
	st.recvWindow -= n
	data := f.Data()
	if pad := n - int64(len(data)); pad > 0 {
		sc.consumed(pad) // padding is consumed as it arrives
		st.recvWindow += pad
	}
	st.received += int64(len(data))
	if st.declared >= 0 && st.received > st.declared {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	st.body.buf = append(st.body.buf, data...)
	sc.out.Broadcast()
	if f.StreamEnded() {
		return st.endBody()
	}
	return nil
}

// settings applies the client's SETTINGS and acknowledges them (mu held).
func (sc *serverConn) settings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	delta, err := sc.applySettings(f)
	if err != nil {
		return err
	}
	for _, st := range sc.streams {
		st.sendWindow += delta
		if st.sendWindow > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
	}
	_ = sc.fr.WriteSettingsAck()
	sc.out.Broadcast()
	return nil
}

// windowUpdate grows a send window (mu held).
func (sc *serverConn) windowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if sc.sendWindow+inc > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		sc.sendWindow += inc
		sc.out.Broadcast()
		return nil
	}
	if f.StreamID > sc.maxID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
	}
	st := sc.streams[f.StreamID]
	if st == nil {
		return nil // closed: a late update
	}
	if st.sendWindow+inc > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	st.sendWindow += inc
	sc.out.Broadcast()
	return nil
}

// goAwayLocked tells the client no stream after the last seen opens;
// the connection closes once the open ones end.
func (sc *serverConn) goAwayLocked(code http2.ErrCode) {
	if !sc.goAway {
		sc.goAway = true
		_ = sc.fr.WriteGoAway(sc.maxID, code, nil)
	}
	if len(sc.streams) == 0 {
		sc.closeAfterFlushLocked()
	}
}

// closeAfterFlushLocked sends what is queued and closes the connection.
func (sc *serverConn) closeAfterFlushLocked() {
	_ = sc.flushLocked()
	sc.failLocked(errClosed)
}

func (sc *serverConn) connError(code http2.ErrCode) {
	sc.mu.Lock()
	sc.connErrorLocked(code)
	sc.mu.Unlock()
}

// connErrorLocked ends the connection with GOAWAY(code).
func (sc *serverConn) connErrorLocked(code http2.ErrCode) {
	_ = sc.fr.WriteGoAway(sc.maxID, code, nil)
	sc.goAway = true
	sc.closeAfterFlushLocked()
}

// resetLocked resets a stream from this side.
func (sc *serverConn) resetLocked(st *serverStream, code http2.ErrCode) {
	if !st.localEnd {
		_ = sc.fr.WriteRSTStream(st.id, code)
	}
	st.peerReset(code)
	st.localEnd = true
	sc.forgetLocked(st)
}

// forgetLocked drops an ended stream from the connection's count.
func (sc *serverConn) forgetLocked(st *serverStream) {
	if sc.streams[st.id] != st {
		return
	}
	delete(sc.streams, st.id)
	if len(sc.streams) > 0 {
		return
	}
	if sc.goAway {
		sc.closeAfterFlushLocked()
	} else if sc.idle != nil {
		sc.idleAt = time.Now()
	}
}

// idleCheck closes a connection idle for IdleTimeout (GOAWAY first), or
// looks again when it could be.
func (sc *serverConn) idleCheck() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.err != nil {
		return
	}
	wait := sc.srv.IdleTimeout
	if !sc.idleAt.IsZero() {
		if since := time.Since(sc.idleAt); since >= wait {
			sc.goAwayLocked(http2.ErrCodeNo)
			return
		} else {
			wait -= since
		}
	}
	sc.idle.Reset(wait)
}

// close ends every stream of a connection that is gone.
func (sc *serverConn) close() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.failLocked(errClosed)
	if sc.idle != nil {
		sc.idle.Stop()
	}
	for _, st := range sc.streams {
		st.peerReset(http2.ErrCodeCancel)
		delete(sc.streams, st.id)
	}
}
