package h1server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// headerBuffered reports whether the read buffer holds a whole request
// header block.
func (c *Conn) headerBuffered() bool {
	b, _ := c.br.Peek(c.br.Buffered())
	return h1.HeadEnd(b) >= 0
}

// source feeds the request reader: what detection buffered, a byte the
// disconnect watcher read, then the socket, with a byte limit while
// headers are read.
type source struct {
	first   *bufio.Reader
	conn    io.Reader
	pending []byte
	limit   int // <0: none
	hit     bool
}

func (s *source) Read(p []byte) (int, error) {
	if s.limit == 0 {
		s.hit = true
		return 0, io.EOF
	}
	if s.limit > 0 && len(p) > s.limit {
		p = p[:s.limit]
	}
	var n int
	var err error
	switch {
	case len(s.pending) > 0:
		n = copy(p, s.pending)
		s.pending = s.pending[n:]
	case s.first != nil && s.first.Buffered() > 0:
		n, err = s.first.Read(p)
	default:
		s.first = nil
		n, err = s.conn.Read(p)
	}
	if s.limit > 0 {
		s.limit -= n
	}
	return n, err
}

// badRequest answers a request that could not be read: 431 for a head
// over Options.MaxHeaderBytes (http1.headers_too_large), else 400
// (http1.codec_error), flagged DPE.
func (c *Conn) badRequest(err error) {
	r := &h1.Reject{Code: http.StatusBadRequest, Details: h1.DetailCodecError, Flags: respflag.DPE, Why: err.Error()}
	if c.src.hit {
		r.Code, r.Details = http.StatusRequestHeaderFieldsTooLarge, h1.DetailHeadersTooLarge
		r.Why = "request head over " + strconv.Itoa(c.srv.o.MaxHeaderBytes) + " bytes"
	}
	c.reject(r)
}

// skipLineEnds discards the CRs and LFs buffered before the next request
// (RFC 9112 §2.2: a server ignores empty lines before a request line;
// some clients send one after a body). emptied: nothing else is buffered
// yet; tooMany: the connection sent more than h1.MaxSkippedLineEnds of them.
func (c *Conn) skipLineEnds() (emptied, tooMany bool) {
	b, _ := c.br.Peek(c.br.Buffered())
	n := 0
	for n < len(b) && (b[n] == '\r' || b[n] == '\n') {
		n++
	}
	if n == 0 {
		return false, false
	}
	_, _ = c.br.Discard(n)
	c.skipped += n
	return n == len(b), c.skipped > h1.MaxSkippedLineEnds
}

// checkHead reads the next request's head as far as its blank line and
// checks it (h1.CheckRequestHead) before net/http reads it. A head whole in
// the reader's buffer is checked there; a longer one is read out of the
// buffer and queued again ahead of the connection's other bytes
// (source.pending), as is a head whose request line is rewritten, so
// that net/http reads exactly the bytes checked. err is a read error
// (the client closed or stalled, or the head passed
// Options.MaxHeaderBytes: c.src.hit).
func (c *Conn) checkHead() (*h1.Reject, error) {
	br := c.br
	var head, collected []byte
	for head == nil {
		b, _ := br.Peek(br.Buffered())
		if collected == nil {
			if n := h1.HeadEnd(b); n >= 0 {
				head = b[:n]
				break
			}
			if h1.ScanRequestLine(b) == h1.LineNot {
				// Not a request line so far (bytes of another
				// protocol on an HTTP listener): refused now, not once
				// a head arrives.
				return &h1.Reject{Code: http.StatusBadRequest, Details: h1.DetailCodecError, Flags: respflag.DPE,
					Why: "malformed request line " + h1.QuoteInput(b)}, nil
			}
			if len(b) < br.Size() {
				if _, err := br.Peek(len(b) + 1); err != nil {
					return nil, err
				}
				continue
			}
			collected = make([]byte, 0, 2*br.Size())
		}
		collected = append(collected, b...)
		_, _ = br.Discard(len(b))
		if n := h1.HeadEnd(collected); n >= 0 {
			head = collected[:n]
			break
		}
		if _, err := br.Peek(1); err != nil {
			return nil, err
		}
	}
	rej, line := h1.CheckRequestHead(head, c.in.MaxHeaders)
	if rej != nil {
		return rej, nil
	}
	if line == nil && collected == nil {
		return nil, nil
	}
	// What was read out of the buffer, with the rewritten request line,
	// goes back ahead of the rest; the head is whole, so its byte limit
	// is done.
	if collected == nil {
		collected, _ = br.Peek(br.Buffered())
	}
	if line != nil {
		collected = append(line, collected[bytes.IndexByte(head, '\n')+1:]...)
	}
	_, _ = br.Discard(br.Buffered())
	c.src.pending = append(collected, c.src.pending...)
	c.src.limit = -1
	return nil, nil
}

// reject answers a request the connection refuses (Connection: close:
// what follows it on the connection cannot be trusted to be a request),
// once the handler was told (Handler.Rejected: its access-log line and,
// for a protocol error, the listener's count), so that a client that has
// its answer finds them there.
func (c *Conn) reject(r *h1.Reject) {
	c.h.Rejected(r)
	text := http.StatusText(r.Code)
	_ = c.tcp.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", r.Code, text, len(text), text)
	_ = c.bw.Flush()
	c.lingerClose()
}

// Bounds of lingerClose.
const (
	lingerTimeout = time.Second
	lingerBytes   = 256 << 10
)

// lingerClose ends the sending side of a connection the server closes
// while the client may still be sending (a refused request's body, the
// rest of a broken one), then reads and drops what comes, up to
// lingerBytes or lingerTimeout or the client's end: closing a socket
// with unread bytes sends a reset, which can make the client's stack
// drop the answer before the client has read it (nginx's lingering
// close; net/http's server waits instead).
func (c *Conn) lingerClose() {
	if c.q != nil {
		_ = c.q.FlushQueued()
	}
	if c.tcp.CloseWrite() != nil {
		return
	}
	c.src.limit = -1
	_ = c.tcp.SetReadDeadline(time.Now().Add(lingerTimeout))
	_, _ = io.CopyN(io.Discard, c.br, lingerBytes)
}
