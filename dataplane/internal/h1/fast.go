package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/meshlet-dev/meshlet/config"
)

// ReadResponseFast reads the head of an upstream response from br when
// the whole head is already in br's buffer and the response is of the
// plainest kind, which is nearly every response on a keep-alive
// connection: HTTP/1.1; a status with a body (200-599 but 204 and 304) to
// a request that is not HEAD; framed by one Content-Length; no
// Transfer-Encoding, Trailer or Pragma header; every header line a valid
// name, a colon and a valid value. It returns what http.ReadResponse
// would (FuzzReadResponseFast compares the two), with a header block in
// one string, values sliced from it, and one backing array for the
// values: about half of ReadResponse's allocations.
//
// Anything else is declined (ok false) with nothing consumed, and the
// caller reads it with http.ReadResponse, which also reports the errors:
// this only ever takes a response net/http would have taken the same way.
//
// st, if not nil, holds the response, its body and its header map (an
// HTTP/1 server request's, reused: no allocation but the head's string).
func ReadResponseFast(br *bufio.Reader, req *http.Request, st *RespStore) (resp *http.Response, ok bool) {
	if req.Method == http.MethodHead {
		return nil, false
	}
	buf, end, nl, ok := bufferedHead(br)
	if !ok {
		return nil, false
	}
	// Status line: "HTTP/1.1 200 OK" or "HTTP/1.1 200".
	line := buf[:nl-1]
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return nil, false
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return nil, false
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	for _, c := range line[12:] {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, false
		}
	}
	head := string(buf[:end+2]) // the one copy: status and values are slices of it
	var hs *HeadScratch
	if st != nil {
		hs = st.Hdr
	}
	h, f, ok := parseHeaderLines(head[nl+1:], hs, false)
	if !ok || f.te || f.trailer || f.pragma || f.lengths != 1 {
		return nil, false
	}
	cl, closing := f.length, f.close
	if closing {
		delete(h, "Connection") // as net/http's response reader does
	}
	_, _ = br.Discard(end + 4)
	var body *SizedBody
	if st != nil {
		resp, body = &st.Resp, &st.Body
	} else {
		resp, body = new(http.Response), new(SizedBody)
	}
	*resp = http.Response{
		Status: head[9 : nl-1], StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: cl, Close: closing, Request: req,
	}
	if cl == 0 {
		resp.Body = http.NoBody
	} else {
		*body = SizedBody{br: br, n: cl}
		resp.Body = body
	}
	if st != nil {
		st.HopFree = !f.hop
	}
	return resp, true
}

// RespStore is the storage of the upstream response of an HTTP/1 server
// request (in the server's per-request writer): one response at a time, the next attempt's
// overwriting the last, which has been read to its end and closed.
type RespStore struct {
	Resp http.Response
	Body SizedBody
	Hdr  *HeadScratch // the server connection's, reused from request to request
	// HopFree: Resp, as read, has no hop-by-hop header to remove.
	HopFree bool
}

// ReqStore is the storage ReadRequestFast fills for an HTTP/1 server
// request (in the server's per-request writer): the server makes its one copy of the request
// (with its context) from it.
type ReqStore struct {
	Req http.Request
	URL url.URL
	Hdr *HeadScratch // the server connection's, reused from request to request
	// HopFree: Req was read here and has no hop-by-hop header to remove.
	HopFree bool
	// MaxHeaders is the listener's header-line limit (0: Envoy's
	// default, config.DefaultMaxHeadersCount): a head with more is left
	// to CheckRequestHead, which refuses it.
	MaxHeaders int
	// Blank, if set, is the request every read here starts from: an
	// empty request carrying the connection's request context
	// (the server connection's request context), which net/http gives no other way to set
	// than a copy of the request.
	Blank *http.Request
}

// HeadScratch is a header map and a backing array for its values that a
// fast reader clears and reuses, for heads of up to reuseHeaders lines; a
// longer head (or a map something grew past that) gets a new one. Only
// one head at a time uses it: the reader's caller must be done with the
// last (its map and value slices) before the next read.
type HeadScratch struct {
	h    http.Header
	vals []string
}

// countLF counts the LFs in s, up to limit+1. It finds them with
// IndexByte, as the parser does, not strings.Count: its vector code would
// be one more routine a head's parsing fetches.
func countLF(s string, limit int) (n int) {
	for n <= limit {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		n++
		s = s[i+1:]
	}
	return n
}

// reuseHeaders is the most header lines a HeadScratch is reused for.
const reuseHeaders = 16

// get returns an empty header map and n empty values; s may be nil
// (both new).
func (s *HeadScratch) get(n int) (http.Header, []string) {
	if s == nil || n > reuseHeaders {
		return make(http.Header, n), make([]string, n)
	}
	if s.h == nil || len(s.h) > reuseHeaders {
		// Sized for the usual head (a map for up to 8 keys is one group:
		// cheaper to clear); it grows for a longer one.
		s.h = make(http.Header, 8)
	} else {
		clear(s.h)
	}
	if s.vals == nil {
		s.vals = make([]string, reuseHeaders)
	}
	vals := s.vals[:n]
	clear(vals)
	return s.h, vals
}

// bufferedHead finds a head whole in br's buffer, without reading or
// consuming: buf[:end] is the head up to its blank line, buf[nl] ends the
// first line, with a CR before it. ok is false if the head is not all
// there or the first line ends in a bare LF.
func bufferedHead(br *bufio.Reader) (buf []byte, end, nl int, ok bool) {
	buf, _ = br.Peek(br.Buffered())
	if end = indexCRLFCRLF(buf); end < 0 {
		return nil, 0, 0, false
	}
	nl = bytes.IndexByte(buf, '\n') // at most end+1
	if nl < 1 || buf[nl-1] != '\r' {
		return nil, 0, 0, false
	}
	return buf, end, nl, true
}

// indexCRLFCRLF is bytes.Index(b, "\r\n\r\n"): every occurrence ends at an LF,
// so the first is at the first LF that ends one. (IndexByte's code is the
// request path's already; Index's would be its own, on every request.)
func indexCRLFCRLF(b []byte) int {
	for from := 0; ; {
		i := bytes.IndexByte(b[from:], '\n')
		if i < 0 {
			return -1
		}
		i += from
		if i >= 3 && b[i-3] == '\r' && b[i-2] == '\n' && b[i-1] == '\r' {
			return i - 3
		}
		from = i + 1
	}
}

// headerFacts is what parseHeaderLines saw of framing and routing.
type headerFacts struct {
	length  int64 // the Content-Length, if lengths is 1
	lengths int   // Content-Length lines
	te      bool  // Transfer-Encoding
	trailer bool
	pragma  bool   // net/http may add Cache-Control for it
	close   bool   // Connection holds the token close
	hosts   int    // Host lines
	host    string // the last Host line's value, a request's (not in its map)
	// hop: a hop-by-hop header (hopByHop; Connection, which may name
	// more) is there; without one forwarding has none to remove.
	hop bool
}

// parseHeaderLines parses header lines, each ending in CRLF, into a header
// map as net/http's textproto reader would, with the values sliced from
// rest and one backing array for them (map and array from s, which may be
// nil). ok is false for anything the fast
// readers leave to net/http: a line that is not a valid name, a colon and a
// valid value (folded lines, bare LF, spaces before the colon, control
// characters), more than 100 lines, a Content-Length that is not plain
// digits. A request's Host lines (request true) go to f.host, not into the
// map, as net/http moves Host to Request.Host.
//
// Not inlined: the request's and the response's head then run one copy of
// it, not two (at low load every copy is code fetched cold).
//
//go:noinline
func parseHeaderLines(rest string, s *HeadScratch, request bool) (h http.Header, f headerFacts, ok bool) {
	// Lines end at LFs; one without its CR is declined, as Index(rest,
	// "\r\n") would have left the LF in a value that then fails.
	n := countLF(rest, config.DefaultMaxHeadersCount)
	if n > config.DefaultMaxHeadersCount {
		return nil, f, false
	}
	h, vals := s.get(n)
	var names [16]string // the names so far, for a head of at most 16 lines
	nnames := 0
	for i := 0; i < n; i++ {
		eol := strings.IndexByte(rest, '\n')
		if eol < 1 || rest[eol-1] != '\r' {
			return nil, f, false
		}
		l := rest[:eol-1]
		rest = rest[eol+1:]
		colon := strings.IndexByte(l, ':')
		if colon <= 0 {
			return nil, f, false
		}
		k, valid := canonicalName(l[:colon])
		if !valid {
			return nil, f, false
		}
		v := TrimOWS(l[colon+1:])
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, f, false
		}
		switch k {
		case "Transfer-Encoding":
			f.te = true
		case "Trailer":
			f.trailer = true
		case "Pragma":
			f.pragma = true
		case "Host":
			f.hosts++
			if request {
				f.host = v
				continue
			}
		case "Content-Length":
			f.lengths++
			if f.length = ParseLength(v); f.length < 0 {
				return nil, f, false
			}
		case "Connection":
			f.hop = true
			if httpguts.HeaderValuesContainsToken([]string{v}, "close") {
				f.close = true
			}
		case "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Upgrade":
			f.hop = true
		}
		// A repeated name: found among the names so far by comparison
		// while they are few (cheaper than a map lookup per line).
		if n <= len(names) {
			if slices.Contains(names[:nnames], k) {
				h[k] = append(h[k], v)
				continue
			}
			names[nnames] = k
			nnames++
		} else if old, dup := h[k]; dup {
			h[k] = append(old, v)
			continue
		}
		vals[i] = v
		h[k] = vals[i : i+1 : i+1]
	}
	return h, f, true
}

// canonicalName is http.CanonicalHeaderKey(name) for a valid field name,
// valid false for an invalid one (httpguts.ValidHeaderFieldName): one
// pass over a name that is already canonical, as most are, where the two
// took a pass each.
func canonicalName(name string) (k string, valid bool) {
	upper := true // the next letter starts a word
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !httpguts.IsTokenRune(rune(c)) {
			return "", false
		}
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			if !httpguts.ValidHeaderFieldName(name[i:]) {
				return "", false
			}
			return http.CanonicalHeaderKey(name), true
		}
		upper = c == '-'
	}
	return name, name != ""
}

// ReadRequestFast reads a request head from br when the whole head is
// already in br's buffer and the request is of the plainest kind, which is
// most requests on a keep-alive connection: GET, HEAD, OPTIONS or DELETE;
// HTTP/1.1; an origin-form target without a fragment; one Host that is
// host[:port] (validAuthority); no body (no Content-Length or
// Transfer-Encoding, so nothing to frame); no Trailer or Pragma; every
// header line a valid name, a colon and a valid value, at most the
// store's maxHeaders of them. It returns what http.ReadRequest would
// (FuzzReadRequestFast compares the two) with fewer allocations. Anything
// else is declined (ok false) with nothing consumed, for the server to
// check (CheckRequestHead) and http.ReadRequest to read: this only takes
// heads both would take, and as net/http would.
//
// st, if not nil, holds the request and its URL; else both are new.
func ReadRequestFast(br *bufio.Reader, st *ReqStore) (req *http.Request, ok bool) {
	if st != nil {
		st.HopFree = false // a declined head is net/http's: nothing known of it
	}
	buf, end, nl, ok := bufferedHead(br)
	if !ok {
		return nil, false
	}
	head := string(buf[:end+2])
	line := head[:nl-1]
	method, rest, ok1 := strings.Cut(line, " ")
	uri, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || proto != "HTTP/1.1" || len(uri) == 0 || uri[0] != '/' || strings.IndexByte(uri, '#') >= 0 {
		return nil, false
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodDelete:
	default:
		return nil, false
	}
	var hs *HeadScratch
	if st != nil {
		hs = st.Hdr
	}
	if st != nil && st.MaxHeaders > 0 && st.MaxHeaders < config.DefaultMaxHeadersCount &&
		countLF(head[nl+1:], st.MaxHeaders) > st.MaxHeaders {
		return nil, false // (parseHeaderLines takes at most the default)
	}
	h, f, ok := parseHeaderLines(head[nl+1:], hs, true)
	if !ok || f.te || f.trailer || f.pragma || f.lengths != 0 || f.hosts != 1 {
		return nil, false
	}
	host := f.host
	if !validAuthority(host) {
		return nil, false
	}
	var u *url.URL
	if st != nil {
		req, u = &st.Req, &st.URL
	} else {
		req, u = new(http.Request), new(url.URL)
	}
	if !parseOriginForm(uri, u) {
		pu, err := url.ParseRequestURI(uri)
		if err != nil {
			return nil, false
		}
		*u = *pu
	}
	_, _ = br.Discard(end + 4)
	if st != nil && st.Blank != nil {
		*req = *st.Blank
	} else {
		*req = http.Request{}
	}
	req.Method, req.URL, req.Proto, req.ProtoMajor, req.ProtoMinor = method, u, "HTTP/1.1", 1, 1
	req.Header, req.Body, req.Host, req.RequestURI, req.Close = h, http.NoBody, host, uri, f.close
	if st != nil {
		st.HopFree = !f.hop
	}
	return req, true
}

// parseOriginForm sets u to what url.ParseRequestURI gives for an
// origin-form target ("/path?query") whose path has no percent escape and
// only bytes url.URL keeps as they are in a path (so RawPath stays empty),
// and whose query has no control character; it reports false, u untouched,
// for any other target. FuzzReadRequestFast compares the two.
func parseOriginForm(uri string, u *url.URL) bool {
	path, query, hasQuery := strings.Cut(uri, "?")
	if len(path) == 0 || path[0] != '/' {
		return false
	}
	if !plainPath(path) {
		return false
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	return true
}

// RequestTarget is req.URL.RequestURI(): the target as read
// (req.RequestURI) when it is one parseOriginForm takes and the URL still
// says the same, without net/url's escaping pass; else RequestURI().
func RequestTarget(req *http.Request) string { return TargetOf(req.URL, req.RequestURI) }

// TargetOf is u.RequestURI(): t, a target as read, when u still says
// the same (so t can come from anywhere: it is used only where it is
// what RequestURI would build); else RequestURI().
func TargetOf(u *url.URL, t string) string {
	if u.Opaque == "" && u.RawPath == "" && len(t) > 0 && t[0] == '/' {
		path, query, hasQuery := strings.Cut(t, "?")
		if path == u.Path && query == u.RawQuery && hasQuery == (u.ForceQuery || u.RawQuery != "") && plainPath(path) {
			return t
		}
	}
	return u.RequestURI()
}

// plainPath reports whether every byte of path is a plainPathByte.
func plainPath(path string) bool {
	for i := 0; i < len(path); i++ {
		if !plainPathByte[path[i]] {
			return false
		}
	}
	return true
}

// plainPathByte holds the bytes that url.URL writes unescaped in a path,
// but '%' (an escape to decode) and '?': asked of net/url itself.
var plainPathByte = func() (t [256]bool) {
	for c := 0x21; c < 0x7f; c++ {
		if c == '%' || c == '?' {
			continue
		}
		p := "/" + string(rune(c))
		t[c] = (&url.URL{Path: p}).EscapedPath() == p
	}
	return t
}()

// TrimOWS trims spaces and tabs from both ends of a header value, as
// strings.Trim(v, " \t") does, without its set building.
func TrimOWS(v string) string {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// ParseLength parses a Content-Length value as net/http does (decimal
// digits, leading zeros allowed, below 2^63); -1 if it is not one.
func ParseLength(s string) int64 {
	if s == "" || len(s) > 18 {
		return -1 // 18 digits always fit; net/http takes 19 below 2^63, rare enough to leave to it
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// SizedBody is a Content-Length body read from the connection's reader:
// io.EOF with its last bytes, io.ErrUnexpectedEOF if the connection ends
// first (as net/http's body).
type SizedBody struct {
	br *bufio.Reader
	n  int64
}

// Read reads the body's next bytes.
func (b *SizedBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	switch {
	case b.n == 0:
		err = io.EOF
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Close does nothing: the caller owns the connection.
func (b *SizedBody) Close() error { return nil }

// WriteBuffered writes to dst what the reader's buffer already holds of
// the body, consumes it, and reports whether that was the body's end; a
// failed write is returned.
func (b *SizedBody) WriteBuffered(dst io.Writer) (done bool, err error) {
	if n := int64(b.br.Buffered()); n > 0 && b.n > 0 {
		p, _ := b.br.Peek(int(min(n, b.n)))
		_, err = dst.Write(p)
		_, _ = b.br.Discard(len(p))
		b.n -= int64(len(p))
		if err != nil {
			return false, err
		}
	}
	return b.n <= 0, nil
}
