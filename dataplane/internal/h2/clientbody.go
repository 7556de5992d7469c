package h2

import (
	"io"
	"net/http"

	"golang.org/x/net/http2"
)

// responseBody is a response's body, fed by the connection's read loop.
type responseBody struct {
	cs       *clientStream
	trailers http.Header // received, for the response's Trailer at EOF
	pending
	err    error
	closed bool
}

// pending is a body's received bytes that were not read yet (mu held).
type pending struct {
	buf []byte
	off int
}

// take copies into p what it holds of the pending bytes; false if there
// are none.
func (b *pending) take(p []byte) (int, bool) {
	if b.off >= len(b.buf) {
		return 0, false
	}
	n := copy(p, b.buf[b.off:])
	b.off += n
	if b.off == len(b.buf) {
		b.buf, b.off = b.buf[:0], 0
	}
	return n, true
}

func (b *responseBody) Read(p []byte) (int, error) {
	cs := b.cs
	cc := cs.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for {
		if n, ok := b.take(p); ok {
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
	cc.mu.Unlock()
	cs.endBodyWriter()
	cc.mu.Lock() // (for the deferred unlock)
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
