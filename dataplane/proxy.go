package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// proxy sends a routed request upstream through the router (route) and
// copies the response back: the HTTP work of Envoy's router filter. The
// request is the handler's own and is changed in place (no copy per
// request, as httputil.ReverseProxy makes, with its headers):
//
//   - hop-by-hop headers go (Connection and the headers it names,
//     Proxy-Connection, Keep-Alive, Proxy-Authenticate,
//     Proxy-Authorization, TE but "trailers", Trailer,
//     Transfer-Encoding, Upgrade), in both directions; an Upgrade
//     (WebSocket) request keeps "Connection: Upgrade" and its Upgrade;
//   - X-Forwarded-For and the other end-to-end headers pass unchanged, as
//     through an Envoy sidecar (use_remote_address false);
//   - no User-Agent is added to a request that had none;
//   - informational responses (1xx but 101) are not forwarded.
//
// Response bodies reach the client as they arrive: a sized body flushes
// what was written before a read that may wait for the upstream (a
// response that arrived whole goes out in one write); a stream (no
// Content-Length, or Server-Sent Events) after every write, its headers at
// once. Trailers follow the body. A body that breaks off after the
// headers went out aborts the downstream response (http.ErrAbortHandler:
// the connection or stream is reset, and serveRequest flags why).
func (w *worker) proxy(rw http.ResponseWriter, req *http.Request, ex *activeStream) {
	if req.ContentLength == 0 {
		req.Body = nil
	}
	req.Close = false
	ex.target, req.RequestURI = req.RequestURI, ""
	req.URL.Scheme = "http"
	req.URL.Host = "upstream" // route sets the host per attempt
	h := req.Header
	// A head the fast readers took without a hop-by-hop header has
	// nothing to remove (nor an Upgrade or a TE).
	hw := ex.h1
	var upType string
	if hw == nil || !hw.rw.HopFree() {
		upType = upgradeType(h)
		if upType != "" {
			upType = dropH2CUpgrade(h, upType)
		}
		if upType != "" && !printable(upType) {
			ex.details = "invalid_upgrade"
			http.Error(rw, "invalid Upgrade header", http.StatusBadRequest)
			return
		}
		teTrailers := httpguts.HeaderValuesContainsToken(h["Te"], "trailers")
		removeHopByHop(h)
		if teTrailers {
			h.Set("Te", "trailers")
		}
		if upType != "" {
			h.Set("Connection", "Upgrade")
			h.Set("Upgrade", upType)
		}
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = noUserAgent // written as none
	}

	res, err := w.route(req, ex)
	if err != nil {
		w.proxyError(rw, ex, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		w.switchProtocols(rw, req, res, upType, ex)
		return
	}
	ex.applyResponseHeaders(res.Header)
	if isTrailersOnly(res) {
		// A gRPC trailers-only response: status in the only HEADERS
		// frame, no body. Sent as headers alone (a separate empty end
		// of stream would be rejected by gRPC clients).
		dst := rw.Header()
		for k, v := range res.Header {
			dst[k] = v
		}
		rw.WriteHeader(res.StatusCode)
		res.Body.Close()
		return
	}

	if hw == nil || res != &hw.conn.store.Resp || !hw.conn.store.HopFree {
		removeHopByHop(res.Header)
	}
	if !adoptHeader(ex, res.Header) {
		dst := rw.Header()
		for k, vv := range res.Header {
			if len(dst[k]) == 0 {
				dst[k] = vv // the response is ours: share its values
			} else {
				dst[k] = append(dst[k], vv...)
			}
		}
	}
	dst := rw.Header()
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		dst.Add("Trailer", strings.Join(keys, ", "))
	}
	rw.WriteHeader(res.StatusCode)
	stream := res.ContentLength < 0 || isEventStream(h1.Get(res.Header, "Content-Type"))
	if stream || announced > 0 {
		// Headers at once; trailers need a chunked response, which an
		// early flush forces.
		ex.sw.Flush()
	}
	if err := w.copyBody(ex.sw, res.Body, stream); err != nil {
		res.Body.Close()
		panic(http.ErrAbortHandler)
	}
	res.Body.Close()
	if len(res.Trailer) > 0 {
		if len(res.Trailer) == announced {
			for k, vv := range res.Trailer {
				dst[k] = append(dst[k], vv...)
			}
		} else {
			// Trailers the upstream did not announce.
			for k, vv := range res.Trailer {
				k = http.TrailerPrefix + k
				for _, v := range vv {
					dst.Add(k, v)
				}
			}
		}
	}
}

// headerAdopter is a downstream writer that takes the upstream
// response's header map as its own (internal/h2's; the fast HTTP/1
// server's writer is reached through the request's stream).
type headerAdopter interface{ AdoptHeader(h http.Header) bool }

// adoptHeader hands h, the upstream response's header map (the router's
// to give), to the downstream writer if it takes one and has none yet.
func adoptHeader(ex *activeStream, h http.Header) bool {
	if ex.h1 != nil {
		return ex.h1.rw.AdoptHeader(h)
	}
	a, ok := ex.sw.ResponseWriter.(headerAdopter)
	return ok && a.AdoptHeader(h)
}

// copyBody copies a response body downstream with the flushes proxy
// describes. What a sized HTTP/1.1 body has in its connection's buffer is
// written from there (no copy through a buffer of the pool), which is
// all of a small response.
func (w *worker) copyBody(dst *statusWriter, body io.Reader, stream bool) error {
	hb, _ := body.(*h1Body)
	var buf []byte
	defer func() {
		if buf != nil {
			w.bufs.Put(buf)
		}
	}()
	for {
		if hb != nil && !stream {
			done, err := hb.writeBuffered(dst)
			if done || err != nil {
				return err
			}
		}
		if !stream && !bodyReady(body) {
			dst.Flush()
		}
		if buf == nil {
			buf = w.bufs.Get()
		}
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
			if stream {
				dst.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// bodyReady reports whether a body's next Read returns without waiting for
// the upstream (a sized HTTP/1.1 body with bytes in the connection's
// buffer).
func bodyReady(body io.Reader) bool {
	switch b := body.(type) {
	case *h1Body:
		return b.ready()
	case interface{ Ready() bool }: // the mesh's HTTP/2 (internal/h2)
		return b.Ready()
	}
	return false
}

// switchProtocols completes an Upgrade: the upstream's 101 goes to the
// client, then bytes are copied both ways until either side ends or the
// request is cancelled.
func (w *worker) switchProtocols(rw http.ResponseWriter, req *http.Request, res *http.Response, reqUp string, ex *activeStream) {
	fail := func(msg string) {
		res.Body.Close()
		ex.details = "upgrade_failed"
		w.localReply(rw, ex, http.StatusBadGateway, msg)
	}
	resUp := upgradeType(res.Header)
	if !printable(resUp) {
		fail("upstream switched to an invalid protocol")
		return
	}
	if !strings.EqualFold(reqUp, resUp) {
		fail(fmt.Sprintf("upstream switched to protocol %q when %q was requested", resUp, reqUp))
		return
	}
	up, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		fail("upstream connection is not writable after 101")
		return
	}
	dst := rw.Header()
	for k, vv := range res.Header {
		dst[k] = append(dst[k], vv...)
	}
	conn, brw, err := http.NewResponseController(rw).Hijack()
	if err != nil {
		fail("cannot switch protocols on this downstream connection")
		return
	}
	defer conn.Close()
	defer up.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-req.Context().Done():
			up.Close()
		case <-stop:
		}
	}()
	res.Header = dst
	res.Body = nil
	if err := res.Write(brw); err != nil {
		return
	}
	if err := brw.Flush(); err != nil {
		return
	}
	// net/http's hijack leaves what it read past the request in brw (the
	// fast server's conn reads its own buffer first).
	var down io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		down = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), conn)
	}
	errc := make(chan error, 2)
	go halfCopy(up, countingReader{down, &ex.upgraded}, errc)
	go halfCopy(conn, countingReader{up, &ex.upgraded}, errc)
	if err := <-errc; err == nil {
		<-errc
	}
	if errors.Is(context.Cause(req.Context()), errStreamIdleTimeout) {
		ex.flags |= respflag.SI
		ex.details = detailStreamIdleTimeout
	}
}

var errCopyDone = errors.New("upgraded stream copy done")

// halfCopy copies one direction of an upgraded stream; at the source's
// end it half-closes the destination (nil: the other direction goes on),
// or reports errCopyDone where it cannot, which ends the stream.
func halfCopy(dst io.Writer, src io.Reader, errc chan<- error) {
	if _, err := io.Copy(dst, src); err != nil {
		errc <- err
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		errc <- cw.CloseWrite()
		return
	}
	errc <- errCopyDone
}

// noUserAgent is the User-Agent value net/http writes as no header (one
// shared slice: header values are replaced or appended to, never changed
// in place).
var noUserAgent = []string{""}

// dropH2CUpgrade strips an HTTP/1 request's offer to upgrade to h2c (the
// h2c token of Upgrade, and HTTP2-Settings), as Envoy's HTTP/1 codec does:
// the proxy speaks HTTP/1 or prior-knowledge HTTP/2 to its upstreams
// itself, and an upstream taking the offer would switch the client's
// connection to a protocol the proxy does not serve. It returns what
// remains of the upgrade ("" when h2c was all; Connection's Upgrade and
// HTTP2-Settings tokens then go with the other hop-by-hop headers).
func dropH2CUpgrade(h http.Header, upType string) string {
	if !containsFold(upType, "h2c") {
		return upType
	}
	var rest []string
	found := false
	for tok := range strings.SplitSeq(upType, ",") {
		switch tok = strings.TrimSpace(tok); {
		case strings.EqualFold(tok, "h2c"):
			found = true
		case tok != "":
			rest = append(rest, tok)
		}
	}
	if !found {
		return upType // h2c only inside another protocol's name
	}
	delete(h, "Http2-Settings")
	return strings.Join(rest, ", ")
}

// upgradeType is the protocol an Upgrade asks for, if Connection says so.
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h1.Get(h, "Upgrade")
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// hopByHop are the headers of one connection (RFC 9110, 7.6.1), plus the
// ones proxies have always treated so.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes the hop-by-hop headers and those Connection names.
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for sf := range strings.SplitSeq(v, ",") {
			if sf = strings.TrimSpace(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
}

// isTrailersOnly is a gRPC response carrying its status in its headers
// alone.
func isTrailersOnly(res *http.Response) bool {
	return res.ProtoMajor == 2 && h1.Get(res.Header, "Grpc-Status") != "" && (res.Body == http.NoBody || res.ContentLength == 0)
}
