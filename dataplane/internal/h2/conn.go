// Package h2 is meshlet's HTTP/2 codec for the hop between sidecars: a
// server (Server.ServeConn) and a client connection pool (Transport) on
// x/net's Framer and HPACK, speaking to net/http's Handler and
// RoundTripper interfaces so that the router serves its requests as any
// other.
//
// Why not x/net's server and transport: they run a goroutine per stream,
// per request write and per flush, and the server writes a response's
// HEADERS and DATA as two flushes. Here the goroutine that has bytes to
// send writes them (frames queued by others meanwhile go out in the same
// write), so a small response is one write, and a stream's handler is its
// only goroutine.
package h2

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Flow-control windows this end advertises. Credit goes back once half
// of a window was consumed, so a small response costs no WINDOW_UPDATE.
const (
	streamWindow   = 1 << 20
	connWindow     = 4 << 20
	defaultWindow  = 65535 // the protocol's initial window
	maxWindow      = 1<<31 - 1
	maxFrameSize   = 16384 // what this end reads (the protocol's default)
	initialStreams = 100   // assumed of a peer until its SETTINGS arrive
)

// bufs holds the buffers of response bodies between streams (a small
// response fits one whole).
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, respBuffer); return &b }}

func getBuf() []byte { return (*bufs.Get().(*[]byte))[:0] }

// putBuf returns b to bufs, unless it grew large.
func putBuf(b []byte) {
	if cap(b) >= respBuffer && cap(b) <= 4*respBuffer {
		b = b[:0]
		bufs.Put(&b)
	}
}

// errClosed is the error of a connection this end closed.
var errClosed = errors.New("h2: connection closed")

// conn is what both ends share: the framer, the write queue, the peer's
// settings and the connection's flow-control windows. mu guards all of
// it, the streams' state and the framer's write side.
type conn struct {
	nc  net.Conn
	br  *bufio.Reader
	fr  *http2.Framer
	mu  sync.Mutex
	out sync.Cond // signalled when send windows grow, streams end or the connection fails

	wbuf    []byte // frames queued for the socket
	spare   []byte
	writing bool // a goroutine is writing wbuf out (the others queue)
	err     error
	henc    *hpack.Encoder
	hbuf    bufferWriter
	hdec    *hpack.Decoder    // the reader's, into block
	block   headerBlock       // the last header block read (readFrame)
	lower   map[string]string // canonical header keys, lower-cased
	canon   map[string]string // wire names, canonical (the reader's own)
	kept    map[string]string // values copied for the HPACK table (owned)
	keptLen int               // the bytes in kept

	sendWindow    int64 // the connection's, granted by the peer
	peerInitial   int64 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerMaxFrame  int
	peerMaxStream uint32
	recvWindow    int64 // what the peer may still send on the connection
	recvUnacked   int64 // consumed, not yet returned to the peer
	// controlTimeout is controlWriteTimeout, unless a test shortens it.
	controlTimeout time.Duration
	wakes          uint64 // signal's count
	// deadlined: the writer is the reader (a deadline on each write);
	// closeAfter: close once the writer is done.
	deadlined, closeAfter bool
	// linger: once the writer is done, keep reading for lingerTimeout
	// instead of closing (lingering: doing so).
	linger, lingering bool
	lingerTimeout     time.Duration
}

type bufferWriter struct{ b []byte }

func (w *bufferWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// queueWriter appends the framer's frames to the write queue (mu held).
type queueWriter struct{ c *conn }

func (q queueWriter) Write(p []byte) (int, error) {
	q.c.wbuf = append(q.c.wbuf, p...)
	return len(p), nil
}

func (c *conn) init(nc net.Conn, maxHeaderList uint32) {
	c.nc = nc
	c.br = bufio.NewReaderSize(nc, 16<<10)
	c.fr = http2.NewFramer(queueWriter{c}, c.br)
	c.fr.SetMaxReadFrameSize(maxFrameSize)
	// Each frame is handled before the next is read: one DATA frame
	// serves them all.
	c.fr.SetReuseFrames()
	c.fr.MaxHeaderListSize = maxHeaderList
	c.hdec = hpack.NewDecoder(4096, c.emit)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.out.L = &c.mu
	c.sendWindow = defaultWindow
	c.peerInitial = defaultWindow
	c.peerMaxFrame = maxFrameSize
	c.peerMaxStream = initialStreams
	c.recvWindow = connWindow
	c.lower = make(map[string]string)
	c.canon = make(map[string]string)
	c.kept = make(map[string]string)
}

// ourSettings queues this end's SETTINGS and the connection window's
// growth past the protocol's default (mu held).
func (c *conn) ourSettings(s ...http2.Setting) {
	s = append(s, http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.fr.MaxHeaderListSize})
	_ = c.fr.WriteSettings(s...)
	_ = c.fr.WriteWindowUpdate(0, connWindow-defaultWindow)
}

// flushLocked writes the queue out, unless another goroutine is doing so
// (it takes what was queued here too). mu is held, and released while
// writing.
func (c *conn) flushLocked() error {
	if c.writing {
		return c.err
	}
	c.writing = true
	for len(c.wbuf) > 0 && c.err == nil {
		buf := c.wbuf
		c.wbuf = c.spare[:0]
		dl := c.deadlined
		c.mu.Unlock()
		if dl {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.controlTimeoutOr()))
		}
		_, err := c.nc.Write(buf)
		c.mu.Lock()
		c.spare = buf[:0]
		if err != nil {
			c.failLocked(fmt.Errorf("h2: writing to %s: %w", c.nc.RemoteAddr(), err))
		}
		c.signal() // writers waiting for the queue to shrink
	}
	c.writing = false
	switch {
	case c.closeAfter && c.linger && c.err == nil:
		if !c.lingering {
			c.lingering = true
			_ = c.nc.SetReadDeadline(time.Now().Add(c.lingerTimeout))
		}
	case c.closeAfter:
		c.failLocked(errClosed)
	}
	return c.err
}

// closeAfterFlushLocked sends what is queued and closes the connection;
// if another goroutine is writing, that writer closes it when done. The
// last write has the control-write deadline: it may be the reader's.
func (c *conn) closeAfterFlushLocked() {
	c.closeAfter = true
	if !c.writing {
		c.deadlined = true
		if c.flushLocked() == nil { // (lingering)
			_ = c.nc.SetWriteDeadline(time.Time{})
		}
		c.deadlined = false
	}
}

func (c *conn) controlTimeoutOr() time.Duration {
	if c.controlTimeout == 0 {
		return controlWriteTimeout
	}
	return c.controlTimeout
}

// controlWriteTimeout bounds a write of the connection's reader (its
// answers to PING and SETTINGS, its window updates and resets): a peer
// that reads nothing for that long while it sends is cut off, and the
// reader never waits on it for good.
const controlWriteTimeout = 10 * time.Second

// flushControlLocked is flushLocked for the connection's reader: its own
// write, if it must make one, has a deadline (mu held).
func (c *conn) flushControlLocked() error {
	if c.writing || len(c.wbuf) == 0 {
		return c.err
	}
	c.deadlined = true
	err := c.flushLocked()
	c.deadlined = false
	if err == nil {
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	return err
}

// signal wakes every waiter on out, counting the change (mu held): a
// waiter that released mu meanwhile sees the count move and looks again
// instead of waiting for a signal that came already.
func (c *conn) signal() {
	c.wakes++
	c.out.Broadcast()
}

// failLocked records the connection's end; every waiter wakes up to it.
func (c *conn) failLocked(err error) {
	if c.err == nil {
		c.err = err
		c.wbuf = c.wbuf[:0]
		_ = c.nc.Close()
	}
	c.signal()
}

// applySettings applies a peer's SETTINGS frame in order (mu held) and
// returns the change of the initial stream window, which open streams'
// send windows take.
func (c *conn) applySettings(f *http2.SettingsFrame) (delta int64, err error) {
	err = f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta += int64(s.Val) - c.peerInitial
			c.peerInitial = int64(s.Val)
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = int(s.Val)
		case http2.SettingMaxConcurrentStreams:
			c.peerMaxStream = s.Val
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	return delta, err
}

// consumed returns n bytes of connection credit once half the window is
// used (mu held).
func (c *conn) consumed(n int64) {
	c.recvUnacked += n
	if c.recvUnacked >= connWindow/2 {
		_ = c.fr.WriteWindowUpdate(0, uint32(c.recvUnacked))
		c.recvWindow += c.recvUnacked
		c.recvUnacked = 0
	}
}

// takeData checks a DATA frame of n bytes (padding included) against the
// connection's receive window (mu held).
func (c *conn) takeData(n int64) error {
	if n > c.recvWindow {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWindow -= n
	return nil
}

// writeHeaders queues a header block as HEADERS and CONTINUATION frames
// within the peer's frame size (mu held). emit gets the encoder.
func (c *conn) writeHeaders(id uint32, end bool, emit func(enc encoder)) {
	c.hbuf.b = c.hbuf.b[:0]
	emit(c.henc)
	block := c.hbuf.b
	first := true
	for first || len(block) > 0 {
		n := min(len(block), c.peerMaxFrame)
		frag := block[:n]
		block = block[n:]
		if first {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: end, EndHeaders: len(block) == 0})
			first = false
		} else {
			_ = c.fr.WriteContinuation(id, len(block) == 0, frag)
		}
	}
}

// encodeHeader encodes h's fields, lower-cased, without the
// connection-specific ones HTTP/2 forbids (RFC 9113 8.2.2); with
// trailerPrefix only the http.TrailerPrefix keys, without it (mu held).
func (c *conn) encodeHeader(enc *hpack.Encoder, h http.Header, trailerPrefix bool) {
	for k, vv := range h {
		if trailerPrefix {
			if !strings.HasPrefix(k, http.TrailerPrefix) {
				continue
			}
			k = k[len(http.TrailerPrefix):]
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		lk := c.lowerKey(k)
		switch lk {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade", "host":
			continue
		case "te":
			// Only "trailers" is allowed in HTTP/2.
			if httpguts.HeaderValuesContainsToken(vv, "trailers") {
				_ = enc.WriteField(hpack.HeaderField{Name: "te", Value: "trailers"})
			}
			continue
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			c.writeField(enc, lk, v)
		}
	}
}

// writeField encodes one field (mu held). Credentials are never indexed
// (RFC 7541 7.1.3); a request's own ids go as literals without indexing;
// every other value the table may keep is a copy the connection owns.
func (c *conn) writeField(enc *hpack.Encoder, name, value string) {
	switch {
	case name == "authorization" || name == "proxy-authorization":
		_ = enc.WriteField(hpack.HeaderField{Name: name, Value: value, Sensitive: true})
	case perRequest(name) && len(c.hbuf.b) > 0:
		// (Not first in the block: a pending table size update, which
		// the encoder puts before its next field, must lead it.)
		c.hbuf.b = appendLiteral(c.hbuf.b, name, value)
	default:
		_ = enc.WriteField(hpack.HeaderField{Name: name, Value: c.owned(enc, name, value)})
	}
}

// perRequest says whether a field's value is new in every request (the
// ids the router sets): indexed, each would only push the others out of
// the table, and the router writes them into per-request buffers.
func perRequest(name string) bool {
	switch name {
	case "x-request-id", "traceparent", "b3", "x-b3-traceid", "x-b3-spanid", "x-b3-parentspanid":
		return true
	}
	return false
}

// keptLimit bounds the bytes of the copies a connection keeps for its
// HPACK table (the table's own default size): past it they start over.
const keptLimit = 4096

// owned is value, or a copy of it nothing else can change, where the
// encoder's table may keep it (the table holds the string itself): a
// value the router wrote into memory it reuses must not change under
// the table.
func (c *conn) owned(enc *hpack.Encoder, name, value string) string {
	if s, ok := c.kept[value]; ok {
		return s
	}
	if (hpack.HeaderField{Name: name, Value: value}).Size() > enc.MaxDynamicTableSize() {
		return value // never indexed
	}
	s := strings.Clone(value)
	if c.keptLen+len(s) > keptLimit {
		clear(c.kept)
		c.keptLen = 0
	}
	c.kept[s] = s
	c.keptLen += len(s)
	return s
}

// appendLiteral appends a literal header field without indexing with a
// new name (RFC 7541 6.2.2), which x/net's encoder does not write.
func appendLiteral(dst []byte, name, value string) []byte {
	dst = append(dst, 0)
	return appendString(appendString(dst, name), value)
}

// appendString appends an HPACK string literal (RFC 7541 5.2), Huffman
// coded where that is shorter.
func appendString(dst []byte, s string) []byte {
	if n := hpack.HuffmanEncodeLength(s); n < uint64(len(s)) {
		return hpack.AppendHuffmanString(appendInt(dst, 0x80, n), s)
	}
	return append(appendInt(dst, 0, uint64(len(s))), s...)
}

// appendInt appends i with a 7-bit prefix (RFC 7541 5.1) after the bits
// of first.
func appendInt(dst []byte, first byte, i uint64) []byte {
	const max = 1<<7 - 1
	if i < max {
		return append(dst, first|byte(i))
	}
	dst = append(dst, first|max)
	for i -= max; i >= 0x80; i >>= 7 {
		dst = append(dst, byte(i&0x7f|0x80))
	}
	return append(dst, byte(i))
}

// canonKey is a wire name in net/http's canonical form, from a bounded
// cache (CanonicalHeaderKey allocates for every lower-case name).
func (c *conn) canonKey(name string) string { return cached(c.canon, name, http.CanonicalHeaderKey) }

// lowerKey is k lower-cased, from a bounded cache (keys repeat).
func (c *conn) lowerKey(k string) string { return cached(c.lower, k, strings.ToLower) }

// cached is f(k), kept in cache while it holds fewer than 256 keys.
func cached(cache map[string]string, k string, f func(string) string) string {
	if v, ok := cache[k]; ok {
		return v
	}
	v := f(k)
	if len(cache) < 256 {
		cache[k] = v
	}
	return v
}

// headerOf converts a decoded header block's regular fields into an
// http.Header (canonical keys, as net/http's servers and transports give
// them); cookie crumbs are joined (RFC 9113 8.2.3).
func (c *conn) headerOf(f *headerBlock) http.Header {
	fields := f.RegularFields()
	h := make(http.Header, len(fields))
	// One array holds the values of the keys seen once (most of them).
	vals := make([]string, len(fields))
	var cookies []string
	for i, hf := range fields {
		if hf.Name == "cookie" {
			cookies = append(cookies, hf.Value)
			continue
		}
		k := c.canonKey(hf.Name)
		if vv, ok := h[k]; ok {
			h[k] = append(vv, hf.Value)
			continue
		}
		vals[i] = hf.Value
		h[k] = vals[i : i+1 : i+1]
	}
	if len(cookies) > 0 {
		h["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	return h
}

// declaredTrailers is the Trailer header's keys, canonical, with nil
// values (net/http's contract for Request.Trailer and Response.Trailer).
func declaredTrailers(h http.Header) http.Header {
	vv := h["Trailer"]
	if len(vv) == 0 {
		return nil
	}
	t := http.Header{}
	for _, v := range vv {
		for _, k := range strings.Split(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			switch k {
			case "", "Transfer-Encoding", "Trailer", "Content-Length":
			default:
				t[k] = nil
			}
		}
	}
	return t
}

// trailersOf is a trailing header block's fields. They are kept apart
// until the body's reader sees its end, and merged into the request's or
// response's Trailer then, on the reader's goroutine (net/http's
// contract: Trailer is read after the body's EOF).
func trailersOf(f *headerBlock) http.Header {
	t := http.Header{}
	for _, hf := range f.RegularFields() {
		k := http.CanonicalHeaderKey(hf.Name)
		t[k] = append(t[k], hf.Value)
	}
	return t
}

// mergeTrailers copies received trailers into dst (the reader's).
func mergeTrailers(dst *http.Header, t http.Header) {
	if len(t) == 0 {
		return
	}
	if *dst == nil {
		*dst = http.Header{}
	}
	for k, vv := range t {
		(*dst)[k] = append((*dst)[k], vv...)
	}
}

// writeData queues data as DATA frames of stream id within its send
// window win, the connection's and the peer's frame size (mu held),
// waiting for credit when a window is spent, and for the socket when
// much is queued behind a peer that reads slowly; *dead ends the wait.
func (c *conn) writeData(id uint32, win *int64, data []byte, end bool, dead *bool) error {
	if len(data) == 0 && !end {
		return nil
	}
	for {
		if *dead {
			return errStreamClosed
		}
		if c.err != nil {
			return c.err
		}
		n := min(len(data), c.peerMaxFrame, int(max(0, min(*win, c.sendWindow))))
		if n == 0 && len(data) > 0 || c.writing && len(c.wbuf) > maxQueued/2 {
			w := c.wakes
			if err := c.flushLocked(); err != nil {
				return err
			}
			if c.wakes == w {
				c.out.Wait()
			}
			continue
		}
		last := end && n == len(data)
		_ = c.fr.WriteData(id, last, data[:n])
		*win -= int64(n)
		c.sendWindow -= int64(n)
		data = data[n:]
		if last || len(data) == 0 && !end {
			return nil
		}
	}
}

// readPreface reads the client's connection preface.
func readPreface(r io.Reader) error {
	var buf [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		return fmt.Errorf("h2: reading the client preface: %w", err)
	}
	if string(buf[:]) != http2.ClientPreface {
		return errors.New("h2: bad client preface")
	}
	return nil
}
