package h2

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/net/http2"
)

// headers opens a stream, or ends one with trailers (mu held).
func (sc *serverConn) headers(f *headerBlock) error {
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
			if sc.wasReset(id) {
				return nil // crossed this end's RST_STREAM (RFC 9113 5.1)
			}
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
func (sc *serverConn) newRequest(st *serverStream, f *headerBlock) (*http.Request, error) {
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
	st.ctx, st.cancel = context.WithCancelCause(sc.ctx)
	// WithContext copies (inlined, it leaves tmpl on the stack).
	tmpl := http.Request{
		Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Host: authority,
		RequestURI: path, RemoteAddr: sc.remote, Trailer: declaredTrailers(h),
	}
	req := tmpl.WithContext(st.ctx)
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
		if st == nil && sc.wasReset(id) {
			return nil // crossed this end's RST_STREAM (RFC 9113 5.1)
		}
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
		sc.consumed(int64(len(data)))
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if st.body.closed {
		sc.consumed(int64(len(data))) // nobody reads it: the credit comes back
	} else {
		st.body.buf = append(st.body.buf, data...)
	}
	sc.signal()
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
	sc.signal()
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
		sc.signal()
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
	sc.signal()
	return nil
}
