package dataplane

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
)

// protoKind is what a connection speaks, as detect sniffs it.
type protoKind uint8

const (
	kindTCP protoKind = iota
	kindHTTP1
	kindHTTP2
	kindTLS
)

var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// detect sniffs the first bytes: a TLS ClientHello, HTTP/2 prior
// knowledge, an HTTP/1.x request line, or else opaque TCP. It reads until
// it can tell (a request line to its end, up to the buffer's size) or the
// client has sent nothing more within timeout (a server-first protocol, or
// a client that has not said enough: see sniffEnd); timedOut says the
// timeout ended it. Unlike Envoy's listener_filters_timeout, which closes
// the connection unless continue_on_listener_filters_timeout is set,
// meshlet always goes on, inbound too: an app's server-first protocol
// reached by a client without a sidecar needs it, and what bounds a silent
// client is then the TCP proxy's idle timeout (tcp_idle_timeout).
func detect(c *net.TCPConn, br *bufio.Reader, timeout time.Duration) (kind protoKind, timedOut bool) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	for want := 1; ; {
		_, err := br.Peek(want)
		b, _ := br.Peek(br.Buffered())
		if k, done := sniffPrefix(b); done {
			return k, false
		}
		if err != nil || len(b) == br.Size() {
			return sniffEnd(b), errors.Is(err, os.ErrDeadlineExceeded)
		}
		want = len(b) + 1
	}
}

// sniffPrefix decides as soon as the first bytes b allow (done).
func sniffPrefix(b []byte) (k protoKind, done bool) {
	if len(b) >= 1 && b[0] == 0x16 { // a TLS handshake record?
		switch {
		case len(b) == 1:
			return kindTCP, false
		case b[1] == 0x03:
			return kindTLS, true
		}
		return kindTCP, true
	}
	if bytes.HasPrefix(h2Preface, b) && len(b) < len(h2Preface) {
		return kindTCP, false // the preface so far
	}
	if bytes.HasPrefix(b, h2Preface) {
		return kindHTTP2, true
	}
	switch h1.ScanRequestLine(b) {
	case h1.LineWhole:
		return kindHTTP1, true
	case h1.LineNot:
		return kindTCP, true
	}
	return kindTCP, false
}

// sniffEnd decides on the bytes b that arrived before the detection
// timeout, the client's end of stream or a full buffer: the start of a
// request line as far as its target (a token method and a separator) is
// HTTP/1 (a long target, or a client that sends its request line in
// pieces); anything else is opaque TCP.
func sniffEnd(b []byte) protoKind {
	if k, done := sniffPrefix(b); done {
		return k
	}
	if r := h1.ScanRequestLine(b); r == h1.LineTarget || r == h1.LineWhole {
		return kindHTTP1
	}
	return kindTCP
}

// sniffedConn replays the sniffed bytes before reading the socket.
type sniffedConn struct {
	*net.TCPConn
	r    *bufio.Reader
	w    io.Writer // the socket's raw writes (rawio.IO)
	info connInfo
}

func (c *sniffedConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *sniffedConn) Write(p []byte) (int, error) { return c.w.Write(p) }
