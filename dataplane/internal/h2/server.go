package h2

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
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

	// controlTimeout shortens controlWriteTimeout, lingerTimeout
	// goAwayLinger (tests).
	controlTimeout, lingerTimeout time.Duration

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
	resets   [resetMemory]uint32 // streams this end reset (noteReset)
	nresets  int
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
	s.mu.Unlock()
	sc := &serverConn{srv: s, ctx: ctx, streams: map[uint32]*serverStream{}, remote: nc.RemoteAddr().String()}
	sc.init(nc, s.MaxHeaderBytes)
	sc.controlTimeout = s.controlTimeout
	sc.lingerTimeout = cmp.Or(s.lingerTimeout, goAwayLinger)
	defer sc.close()
	if ctx.Done() != nil {
		// The base context's end ends every request's: their aborts fire.
		defer context.AfterFunc(ctx, func() {
			sc.mu.Lock()
			for _, st := range sc.streams {
				st.fireAbort()
			}
			// The server stops: no wait for the peer, now or later.
			sc.linger = false
			if sc.lingering {
				sc.failLocked(errClosed)
			}
			sc.mu.Unlock()
		})()
	}

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
	err := sc.flushLocked()
	sc.mu.Unlock()
	// Known to Drain from now on (its SETTINGS are out).
	s.mu.Lock()
	s.conns[sc] = struct{}{}
	draining := s.draining
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
	}()
	if draining {
		sc.mu.Lock()
		sc.goAwayLocked(http2.ErrCodeNo)
		_ = sc.flushLocked()
		sc.mu.Unlock()
	}
	if err != nil {
		return
	}
	// The first frame must be the client's SETTINGS (RFC 9113 3.4).
	f, err := sc.readFrame()
	if sf, ok := f.(*http2.SettingsFrame); err != nil || !ok || sf.IsAck() {
		sc.connError(http2.ErrCodeProtocol)
		return
	}
	sc.mu.Lock()
	if !sc.lingering { // (drained at once: the linger's deadline stays)
		_ = nc.SetReadDeadline(time.Time{})
	}
	sc.mu.Unlock()
	if !sc.handle(f) {
		return
	}
	if s.IdleTimeout > 0 {
		sc.idleAt = time.Now()
		sc.idle = time.AfterFunc(s.IdleTimeout, sc.idleCheck)
	}
	for {
		f, err := sc.readFrame()
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
			if _, ok := f.(*headerBlock); ok && se.StreamID > sc.maxID {
				if se.StreamID%2 == 0 {
					sc.connErrorLocked(http2.ErrCodeProtocol)
					return false
				}
				sc.maxID = se.StreamID // a stream that opened and closed
			}
			_ = sc.fr.WriteRSTStream(se.StreamID, se.Code)
			sc.noteReset(se.StreamID) // its frames in flight are ignored
		}
		return sc.flushReaderLocked()
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
	case *headerBlock:
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
	return sc.flushReaderLocked()
}

// flushReaderLocked sends what the reader queued (its answers: acks,
// resets), with a deadline; false ends the connection, also when they
// pile up behind a peer that does not read (x/net's and Envoy's flood
// defences close such a connection).
func (sc *serverConn) flushReaderLocked() bool {
	if len(sc.wbuf) > maxQueued {
		sc.connErrorLocked(http2.ErrCodeEnhanceYourCalm)
		return false
	}
	return sc.flushControlLocked() == nil
}

// maxQueued bounds the bytes queued for a peer that is not reading.
const maxQueued = 1 << 20

// goAwayLocked tells the client no stream after the last seen opens;
// the connection closes once the open ones end.
func (sc *serverConn) goAwayLocked(code http2.ErrCode) {
	if !sc.goAway {
		sc.goAway = true
		_ = sc.fr.WriteGoAway(sc.maxID, code, nil)
	}
	if len(sc.streams) == 0 {
		sc.lingerAfterFlushLocked()
	}
}

// lingerAfterFlushLocked is closeAfterFlushLocked after a graceful
// GOAWAY with no stream left: the connection is read (what arrives
// ignored or answered) until the client closes it or lingerTimeout
// passes. Closed at once, a socket with unread bytes resets the
// connection, which can discard the GOAWAY before the client reads it
// (x/net's server waits the same second, golang.org/issue/18701). A
// stopped server (its base context over) closes at once.
func (sc *serverConn) lingerAfterFlushLocked() {
	sc.linger = sc.ctx.Err() == nil
	sc.closeAfterFlushLocked()
}

// goAwayLinger is how long a connection is still read after its graceful
// GOAWAY once no stream is left, unless the client closes it first (as
// x/net's server waits: about a round trip and then some).
const goAwayLinger = time.Second

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
		sc.noteReset(st.id)
	}
	st.peerReset(code)
	st.localEnd = true
	sc.forgetLocked(st)
}

// noteReset remembers a stream this end reset, whose frames in flight
// are then ignored; the last resetMemory are kept.
func (sc *serverConn) noteReset(id uint32) {
	sc.resets[sc.nresets%resetMemory] = id
	sc.nresets++
}

// wasReset reports whether this end recently reset stream id.
func (sc *serverConn) wasReset(id uint32) bool {
	for _, r := range sc.resets[:min(sc.nresets, resetMemory)] {
		if r == id {
			return true
		}
	}
	return false
}

// resetMemory is how many of the streams it reset a connection keeps.
const resetMemory = 32

// forgetLocked drops an ended stream from the connection's count.
func (sc *serverConn) forgetLocked(st *serverStream) {
	if sc.streams[st.id] != st {
		return
	}
	delete(sc.streams, st.id)
	if len(sc.streams) > 0 {
		return
	}
	if sc.goAway && !sc.closeAfter {
		sc.lingerAfterFlushLocked() // (after a connection error it is closing)
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
