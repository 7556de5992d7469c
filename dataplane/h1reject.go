package dataplane

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/logsink"
	"github.com/meshlet-dev/meshlet/lb/accesslog"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// maxHeadersFor is a listener's header-line limit (Envoy's
// common_http_protocol_options.max_headers_count).
func maxHeadersFor(ls *listenerState) int {
	if ls != nil {
		return int(ls.cfg.MaxHeadersCount)
	}
	return config.DefaultMaxHeadersCount
}

// reject answers a request the connection refuses (Connection: close:
// what follows it on the connection cannot be trusted to be a request),
// with an access-log line and, for a protocol error, the listener's
// count; both before the answer goes out, so that a client that has its
// answer finds them there.
func (c *h1ServerConn) reject(r *h1.Reject) {
	text := http.StatusText(r.Code)
	info := c.sc.info
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	proto := r.Proto
	if proto == "" {
		proto = "HTTP/1.1"
	}
	e := accesslog.Entry{StartTime: time.Now(), Method: dash(r.Method), Path: dash(r.Target), Protocol: proto, ResponseCode: r.Code,
		Flags: r.Flags, UpstreamServiceTime: -1, Authority: r.Authority, BytesSent: uint64(len(text))}
	c.w.s.access.Load().Write(c.w.id, &e, logsink.Extra{Details: r.Details, Failure: r.Why, DownstreamPeer: info.peer})
	if r.Flags&respflag.DPE != 0 {
		c.w.s.countProtocolError(c.w.s.state.Load(), info)
	}
	_ = c.sc.SetWriteDeadline(time.Now().Add(time.Second))
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
func (c *h1ServerConn) lingerClose() {
	if c.q != nil {
		_ = c.q.FlushQueued()
	}
	if c.sc.CloseWrite() != nil {
		return
	}
	c.src.limit = -1
	_ = c.sc.SetReadDeadline(time.Now().Add(lingerTimeout))
	_, _ = io.CopyN(io.Discard, c.br, lingerBytes)
}
