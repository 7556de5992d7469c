package h2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// respBuffer is what a response buffers before its first frame goes
// out: a small response is sent whole, headers and body in one write.
const respBuffer = 16 << 10

var errStreamClosed = errors.New("h2: stream closed")

// serverStream is one request's stream on a server connection. Its state
// is guarded by the connection's mu.
type serverStream struct {
	sc     *serverConn
	id     uint32
	req    *http.Request
	ctx    context.Context
	cancel context.CancelCauseFunc // ends ctx
	// abort is fired when ctx ends (WatchAbort); guarded by amu, not the
	// connection's mu, which the timeouts' alarms must not wait for.
	amu   sync.Mutex
	abort Aborter

	recvWindow  int64 // what the client may still send on the stream
	recvUnacked int64
	declared    int64 // the request's content-length, -1 if none
	received    int64
	body        requestBody

	sendWindow  int64
	remoteEnd   bool // the client ended its side (END_STREAM)
	localEnd    bool // this side ended (END_STREAM or RST_STREAM)
	reset       bool // either side reset the stream
	handlerDone bool
	rw          responseWriter
	wTimer      *time.Timer
	rTimer      *time.Timer
}

// serve runs the stream's handler and ends the stream after it.
func (st *serverStream) serve() {
	sc := st.sc
	st.rw.st = st
	defer func() {
		r := recover()
		if r != nil && r != http.ErrAbortHandler && sc.srv.Log != nil {
			buf := make([]byte, 16<<10)
			buf = buf[:runtime.Stack(buf, false)]
			sc.srv.Log.Error("http2: panic serving", "peer", sc.remote, "panic", fmt.Sprint(r), "stack", string(buf))
		}
		if r == nil {
			_ = st.rw.send(nil, true)
		}
		if st.rw.buf != nil {
			putBuf(st.rw.buf)
			st.rw.buf = nil
		}
		sc.mu.Lock()
		st.handlerDone = true
		if st.wTimer != nil {
			st.wTimer.Stop()
		}
		if st.rTimer != nil {
			st.rTimer.Stop()
		}
		switch {
		case r != nil:
			sc.resetLocked(st, http2.ErrCodeInternal)
		case !st.remoteEnd && !st.reset:
			// The response is whole; the client may stop sending
			// (RFC 9113 8.1).
			_ = sc.fr.WriteRSTStream(st.id, http2.ErrCodeNo)
			sc.noteReset(st.id)
			st.reset = true
			sc.forgetLocked(st)
		default:
			sc.forgetLocked(st)
		}
		// What the handler left unread comes back to the client, and
		// a transport still reading the body (its own goroutine) stops.
		st.body.dropLocked()
		st.amu.Lock()
		st.abort = nil
		st.amu.Unlock()
		sc.handlers--
		sc.startQueuedLocked()
		_ = sc.flushLocked()
		sc.mu.Unlock()
		st.cancel(context.Canceled)
	}()
	sc.srv.Handler.ServeHTTP(&st.rw, st.req)
}

// peerReset ends the stream at once (mu held): its request's context
// ends and its body and writes fail.
func (st *serverStream) peerReset(code http2.ErrCode) {
	if st.reset {
		return
	}
	st.reset = true
	if st.body.err == nil {
		st.body.err = http2.StreamError{StreamID: st.id, Code: code}
	}
	if st.cancel != nil {
		st.cancel(context.Canceled)
	}
	st.fireAbort()
	st.body.dropLocked()
	st.sc.signal()
}

// endBody ends the request body (mu held): its length must be the
// declared one.
func (st *serverStream) endBody() error {
	st.remoteEnd = true
	st.sc.signal()
	if st.declared >= 0 && st.received != st.declared {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	return nil
}

// requestBody is a request's body: what the client sent and the handler
// has not read.
type requestBody struct {
	st       *serverStream
	trailers http.Header // received, for the request's Trailer at EOF
	pending
	err    error
	closed bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	st := b.st
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for {
		if n, ok := b.take(p); ok {
			st.credit(int64(n))
			return n, nil
		}
		switch {
		case b.err != nil:
			return 0, b.err
		case st.remoteEnd:
			mergeTrailers(&st.req.Trailer, b.trailers)
			b.trailers = nil
			return 0, io.EOF
		case b.closed:
			return 0, errStreamClosed
		case sc.err != nil:
			return 0, sc.err
		}
		sc.out.Wait()
	}
}

func (b *requestBody) Close() error {
	sc := b.st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	b.dropLocked()
	_ = sc.flushLocked()
	return nil
}

// dropLocked closes the body (mu held): what is unread is given back to
// the client's window, later data is too, and reads end.
func (b *requestBody) dropLocked() {
	if b.closed || b.st == nil {
		return
	}
	b.closed = true
	b.st.sc.consumed(int64(len(b.buf) - b.off))
	b.buf, b.off = nil, 0
	b.st.sc.signal()
}

// credit returns n consumed bytes to the client (mu held), a stream's
// window once half of it is used.
func (st *serverStream) credit(n int64) {
	sc := st.sc
	sc.consumed(n)
	st.recvUnacked += n
	if !st.remoteEnd && !st.reset && st.recvUnacked >= streamWindow/2 {
		_ = sc.fr.WriteWindowUpdate(st.id, uint32(st.recvUnacked))
		st.recvWindow += st.recvUnacked
		st.recvUnacked = 0
	}
	if len(sc.wbuf) > 0 {
		_ = sc.flushLocked()
	}
}

// responseWriter is a stream's http.ResponseWriter. It buffers up to
// respBuffer until the handler flushes or returns.
type responseWriter struct {
	st         *serverStream
	header     http.Header
	status     int
	sentHeader bool
	buf        []byte
	trailers   []string // declared in the Trailer header
}

// CancelRequest ends the request's context with cause (the first cause
// wins): a handler with timeouts of its own ends the stream's context
// instead of deriving another for each request.
func (w *responseWriter) CancelRequest(cause error) {
	w.st.cancel(cause)
	w.st.fireAbort()
}

// fireAbort fires the watched abort, if any.
func (st *serverStream) fireAbort() {
	st.amu.Lock()
	a := st.abort
	st.amu.Unlock()
	if a != nil {
		a.Fire()
	}
}

// Aborter is what cuts a handler's upstream exchange when its request
// ends early (the data plane's h1server.UpstreamAbort).
type Aborter interface{ Fire() }

// WatchAbort has a fired whenever the request's context ends while the
// handler runs (the client's reset, the connection's end or the server's,
// CancelRequest), at once if it has ended: the handler's upstream
// exchange is cut without a context.AfterFunc of its own per request.
func (w *responseWriter) WatchAbort(a Aborter) {
	st := w.st
	st.amu.Lock()
	st.abort = a
	st.amu.Unlock()
	// The base context's error is set before its end reaches the
	// connection's watch (ServeConn), which may have looked already.
	if st.ctx.Err() != nil || st.sc.ctx.Err() != nil {
		a.Fire()
	}
}

func (w *responseWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

// AdoptHeader makes h the response's header map if nothing was set in
// the writer's own yet (the router hands over the upstream response's,
// which is its to give: no copy per request); it reports whether it did.
func (w *responseWriter) AdoptHeader(h http.Header) bool {
	if len(w.header) > 0 || w.status != 0 || w.sentHeader {
		return false
	}
	w.header = h
	return true
}

func (w *responseWriter) WriteHeader(code int) {
	if w.status != 0 || code < 200 {
		return // (informational responses are not relayed)
	}
	w.status = code
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.st.req.Method == http.MethodHead || bodyless(w.status) {
		return len(p), nil // (no body, as x/net and net/http)
	}
	if !w.sentHeader && len(w.buf)+len(p) <= respBuffer {
		if w.buf == nil {
			w.buf = getBuf()
		}
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if err := w.send(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush sends the headers and what is buffered.
func (w *responseWriter) Flush() { _ = w.send(nil, false) }

// SetWriteDeadline resets the stream if the response is not over by t
// (http.ResponseController).
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	return w.st.deadline(&w.st.wTimer, t, func(st *serverStream) { st.sc.resetLocked(st, http2.ErrCodeInternal) })
}

// SetReadDeadline fails the request body's reads from t on.
func (w *responseWriter) SetReadDeadline(t time.Time) error {
	return w.st.deadline(&w.st.rTimer, t, func(st *serverStream) {
		if st.body.err == nil {
			st.body.err = os.ErrDeadlineExceeded
		}
		st.sc.signal()
	})
}

func (st *serverStream) deadline(tp **time.Timer, t time.Time, fire func(*serverStream)) error {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if *tp != nil {
		(*tp).Stop()
	}
	if t.IsZero() || st.handlerDone {
		return nil
	}
	*tp = time.AfterFunc(time.Until(t), func() {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if !st.handlerDone {
			fire(st)
			_ = sc.flushLocked()
		}
	})
	return nil
}

// send queues the headers (first time), what is buffered and p, and ends
// the stream with the trailers if end; it waits for the client's flow
// control when a window is spent.
func (w *responseWriter) send(p []byte, end bool) error {
	st := w.st
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if st.reset || st.localEnd {
		return errStreamClosed
	}
	if sc.err != nil {
		return sc.err
	}
	if !w.sentHeader {
		w.sentHeader = true
		if w.status == 0 {
			w.status = http.StatusOK
		}
		h := w.header
		w.trailers = trailerKeys(h)
		only := end && len(w.buf)+len(p) == 0 && !w.hasTrailers()
		clen := ""
		if end && h.Get("Content-Length") == "" && len(w.buf)+len(p) > 0 && !bodyless(w.status) {
			clen = strconv.Itoa(len(w.buf) + len(p))
		}
		sc.writeHeaders(st.id, only, func(enc encoder) {
			statusField(enc, w.status)
			sc.encodeHeader(enc, h, false)
			if clen != "" {
				_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: clen})
			}
			if _, ok := h["Date"]; !ok {
				_ = enc.WriteField(hpack.HeaderField{Name: "date", Value: httpDate()})
			}
		})
		if only {
			st.endedLocally()
			return sc.flushLocked()
		}
	}
	trailers := end && w.hasTrailers()
	if len(w.buf) > 0 {
		if err := st.writeData(w.buf, end && len(p) == 0 && !trailers); err != nil {
			return err
		}
		w.buf = w.buf[:0]
	}
	if len(p) > 0 || end && !trailers && !st.localEnd {
		if err := st.writeData(p, end && !trailers); err != nil {
			return err
		}
	}
	if trailers {
		sc.writeHeaders(st.id, true, func(enc encoder) {
			t := http.Header{}
			for _, k := range w.trailers {
				if vv := w.header[k]; len(vv) > 0 {
					t[k] = vv
				}
			}
			sc.encodeHeader(enc, t, false)
			sc.encodeHeader(enc, w.header, true)
		})
		st.endedLocally()
	}
	return sc.flushLocked()
}

// hasTrailers says whether the response has trailers to send: declared
// ones or http.TrailerPrefix keys.
func (w *responseWriter) hasTrailers() bool {
	if len(w.trailers) > 0 {
		return true
	}
	for k := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// writeData queues data as the stream's DATA frames (mu held).
func (st *serverStream) writeData(data []byte, end bool) error {
	err := st.sc.writeData(st.id, &st.sendWindow, data, end, &st.reset)
	if err == nil && end {
		st.endedLocally()
	}
	return err
}

// endedLocally marks the response sent whole (mu held). A stream ended
// both ways leaves the connection's count now, before the client can
// read its end, so that the client's next stream finds room.
func (st *serverStream) endedLocally() {
	st.localEnd = true
	if st.remoteEnd {
		st.sc.forgetLocked(st)
	}
}

// trailerKeys is the canonical keys the Trailer header declares.
func trailerKeys(h http.Header) []string {
	var keys []string
	for k := range declaredTrailers(h) {
		keys = append(keys, k)
	}
	return keys
}

func bodyless(code int) bool { return code == http.StatusNoContent || code == http.StatusNotModified }

type encoder = *hpack.Encoder

// statusField encodes :status.
func statusField(enc encoder, code int) {
	v := ""
	switch code {
	case 200:
		v = "200"
	default:
		v = strconv.Itoa(code)
	}
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: v})
}

// httpDate is the Date header's value, formatted once a second.
func httpDate() string {
	now := time.Now().Unix()
	if d := dateCache.Load(); d != nil && d.sec == now {
		return d.s
	}
	d := &cachedDate{sec: now, s: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}

type cachedDate struct {
	sec int64
	s   string
}

var dateCache atomic.Pointer[cachedDate]
