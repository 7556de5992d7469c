// Package h1 is the HTTP/1.1 wire format as the data plane reads it: the
// checks a downstream request head must pass (Envoy's HTTP/1 codec
// refusals) and the fast readers of plain request and response heads,
// which decline anything net/http's readers would read differently.
package h1

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// The downstream HTTP/1 request checks.
//
// net/http's request reader is lenient where a proxy must not be: it
// drops a Content-Length next to Transfer-Encoding and keeps the
// connection, reads "Content-Length : 5" as a header it then ignores for
// framing (the body becomes the next request), takes HTTP/1.1 without a
// Host, an empty Host, a fragment, any HTTP version. Every head the fast
// reader (ReadRequestFast) declines is therefore checked here, on its raw
// bytes, before net/http reads the same bytes: CheckRequestHead passes
// only heads whose framing both readers see alike, and answers the rest
// as Envoy's HTTP/1 codec and connection manager do (status, response
// code details, the DPE flag), closing the connection. The fast reader
// takes only heads that would pass (ReadRequestFast).

// Reject is a request refused before it reaches the handler.
type Reject struct {
	Code int // the status to answer with
	// Details is Envoy's %RESPONSE_CODE_DETAILS% for the refusal.
	Details string
	Flags   respflag.Flags
	// Why says what was wrong, naming the input; the access log's
	// failure reason.
	Why string
	// What the access log shows of the request ("" as "-").
	Method, Target, Proto, Authority string
}

// Envoy's response code details for the refusals.
const (
	DetailCodecError        = "http1.codec_error"
	DetailTooManyHeaders    = "http1.too_many_headers"
	DetailHeadersTooLarge   = "http1.headers_too_large"
	DetailInvalidCharacters = "http1.invalid_characters"
	DetailInvalidURL        = "http1.invalid_url"
	DetailInvalidTE         = "http1.invalid_transfer_encoding"
	DetailTENotAllowed      = "http1.transfer_encoding_not_allowed"
	DetailChunkedLength     = "http1.content_length_and_chunked_not_allowed"
	DetailHTTPSInPlaintext  = "http1.https_url_on_plaintext_connection"
	DetailInvalidScheme     = "http1.invalid_scheme"
	DetailFragment          = "path_normalization_failed"
	DetailMissingHost       = "missing_host_header"
	DetailInvalidAuthority  = "invalid_authority"
	DetailUpgradeFailed     = "upgrade_failed"
)

// MaxSkippedLineEnds bounds the empty lines a connection may send before
// a request (RFC 9112 §2.2 asks a server to ignore at least one).
const MaxSkippedLineEnds = 1024

// HeadEnd returns the length of the request head at the start of b,
// through the LF of its blank line (a line empty but for a CR, as
// net/http's line reader ends one), or -1 if b does not hold it all.
func HeadEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		p := i + j
		switch {
		case p+1 >= len(b):
			return -1
		case b[p+1] == '\n':
			return p + 2
		case b[p+1] == '\r':
			if p+2 >= len(b) {
				return -1
			}
			if b[p+2] == '\n' {
				return p + 3
			}
		}
		i = p + 1
	}
}

// LineScan is how far ScanRequestLine got: protocol detection reads it
// as the verdict on a connection's first bytes, the HTTP/1 server as an
// early refusal of bytes that are no request.
type LineScan uint8

// The results of ScanRequestLine.
const (
	LineNot    LineScan = iota // not a request line
	LineMore                   // a request line so far, before its target
	LineTarget                 // a request line so far, in or after its target
	LineWhole                  // a whole request line
)

// ScanRequestLine reads b as the start of an HTTP/1 request, as Envoy's
// http_inspector listener filter does: a request line is a token method,
// a request target, and HTTP/<digit>.<digit>, separated by spaces or tabs
// (RFC 9112 §3 lets a server take either), ending in CRLF or LF; empty
// lines before it are skipped (RFC 9112 §2.2). Any method (WebDAV's,
// PURGE) and any version the parser takes: the HTTP/1 server refuses
// what it does not serve (505 for a version, 405 for CONNECT) rather than
// pass it on as opaque bytes the proxy would not look at.
func ScanRequestLine(b []byte) LineScan {
	i := 0
	for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
		i++
	}
	m := i
	for i < len(b) && IsTchar(b[i]) {
		i++
	}
	switch {
	case i == len(b):
		return LineMore
	case i == m || !IsSPorHT(b[i]):
		return LineNot
	}
	for i < len(b) && IsSPorHT(b[i]) {
		i++
	}
	t := i
	for i < len(b) && (b[i] > ' ' && b[i] != 0x7f) {
		i++
	}
	switch {
	case i == len(b):
		return LineTarget
	case i == t || !IsSPorHT(b[i]):
		return LineNot
	}
	for i < len(b) && IsSPorHT(b[i]) {
		i++
	}
	const version = "HTTP/d.d"
	for j := 0; j < len(version); j, i = j+1, i+1 {
		if i == len(b) {
			return LineTarget
		}
		if version[j] == 'd' && !IsDigit(b[i]) || version[j] != 'd' && b[i] != version[j] {
			return LineNot
		}
	}
	if i < len(b) && b[i] == '\r' {
		i++
	}
	switch {
	case i == len(b):
		return LineTarget
	case b[i] == '\n':
		return LineWhole
	}
	return LineNot
}

// headParse is CheckRequestHead's state: what it has read of the head so
// far, for the refusal's access-log line.
type headParse struct {
	method, target, version []byte
	host                    []byte
}

// fail is a refusal of the head parsed so far.
func (p *headParse) fail(code int, details, why string) *Reject {
	r := &Reject{Code: code, Details: details, Flags: respflag.DPE, Why: why,
		Method: string(p.method), Target: string(p.target), Authority: string(p.host)}
	if len(p.version) == 8 {
		r.Proto = string(p.version)
	}
	return r
}

// CheckRequestHead checks a request head (head holds it through its blank
// line) before net/http reads it: the request line (a token method, a
// target, HTTP/<digit>.<digit>, separated by spaces or tabs as RFC 9112
// §3 allows), each header line (a token name, a colon right after it, a
// value without control characters), the framing headers, Host. A
// refusal says how to answer. line, when not nil, is the request line to
// read in place of the head's, with its separators made single spaces
// (net/http splits on single spaces only); the rest of the head is read
// as it is.
//
// What it refuses, as Envoy does by default (RFC 9112 and 9110 agree):
// Content-Length with Transfer-Encoding (400,
// content_length_and_chunked_not_allowed: Envoy's default, not
// allow_chunked_length; haproxy would drop the length and close
// instead: refusing never forwards a message whose framing two parsers
// may read differently); any Transfer-Encoding but one "chunked" (501),
// or one on HTTP/1.0 (400); a second or non-decimal Content-Length; a
// header line with whitespace before its colon, folded, or without a
// colon (400); more than maxHeaders header lines (431,
// http1.too_many_headers); a major version other than 1 (505); a target
// with a fragment (400, path_normalization_failed: Envoy rejects where
// Istio's configuration strips it); an https or other non-http absolute
// URL on this plaintext server; no Host where the target gives no
// authority, or any HTTP/1.1 request without one (400,
// missing_host_header); more than one Host, or one that is not
// host[:port] (400, invalid_authority); CONNECT (405: no route tunnels).
func CheckRequestHead(head []byte, maxHeaders int) (rej *Reject, line []byte) {
	var p headParse
	nl := bytes.IndexByte(head, '\n')
	reqLine := trimCR(head[:nl])
	// Request line: method, separator, target, separator, version.
	i := 0
	for i < len(reqLine) && IsTchar(reqLine[i]) {
		i++
	}
	p.method = reqLine[:i]
	s1 := i
	for i < len(reqLine) && IsSPorHT(reqLine[i]) {
		i++
	}
	normalize := i-s1 != 1 || reqLine[s1] != ' '
	t0 := i
	for i < len(reqLine) && !IsSPorHT(reqLine[i]) {
		i++
	}
	s2 := i
	for i < len(reqLine) && IsSPorHT(reqLine[i]) {
		i++
	}
	if len(p.method) == 0 || s1 == t0 || t0 == s2 || s2 == i {
		return p.fail(http.StatusBadRequest, DetailCodecError, "malformed request line "+QuoteInput(reqLine)), nil
	}
	normalize = normalize || i-s2 != 1 || reqLine[s2] != ' '
	p.target, p.version = reqLine[t0:s2], reqLine[i:]
	v := p.version
	if len(v) != 8 || string(v[:5]) != "HTTP/" || !IsDigit(v[5]) || v[6] != '.' || !IsDigit(v[7]) {
		return p.fail(http.StatusBadRequest, DetailCodecError, "malformed HTTP version "+QuoteInput(v)), nil
	}
	if v[5] != '1' {
		return p.fail(http.StatusHTTPVersionNotSupported, DetailCodecError, "HTTP version "+string(v)+" on an HTTP/1 connection"), nil
	}
	http10 := v[7] == '0'
	for _, c := range p.target {
		if c < ' ' || c == 0x7f {
			return p.fail(http.StatusBadRequest, DetailInvalidURL, "control character in request target "+QuoteInput(p.target)), nil
		}
	}

	// Header lines.
	var count, lengths, encodings, hosts int
	badTE := false
	rest := head[nl+1:]
	for {
		e := bytes.IndexByte(rest, '\n')
		l := trimCR(rest[:e])
		rest = rest[e+1:]
		if len(l) == 0 {
			break
		}
		if IsSPorHT(l[0]) {
			return p.fail(http.StatusBadRequest, DetailCodecError, "folded header line "+QuoteInput(l)), nil
		}
		n := 0
		for n < len(l) && IsTchar(l[n]) {
			n++
		}
		if n == 0 || n == len(l) || l[n] != ':' {
			return p.fail(http.StatusBadRequest, DetailCodecError, "malformed header line "+QuoteInput(l)), nil
		}
		if count++; count > maxHeaders {
			return p.fail(http.StatusRequestHeaderFieldsTooLarge, DetailTooManyHeaders,
				fmt.Sprintf("more than %d header lines", maxHeaders)), nil
		}
		name, value := l[:n], trimOWSBytes(l[n+1:])
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return p.fail(http.StatusBadRequest, DetailInvalidCharacters, "control character in header line "+QuoteInput(l)), nil
			}
		}
		switch {
		case EqualFold(name, "Host"):
			hosts++
			p.host = value
		case EqualFold(name, "Content-Length"):
			if lengths++; lengths > 1 {
				return p.fail(http.StatusBadRequest, DetailCodecError, "more than one Content-Length"), nil
			}
			if !validLength(value) {
				return p.fail(http.StatusBadRequest, DetailCodecError, "invalid Content-Length "+QuoteInput(value)), nil
			}
		case EqualFold(name, "Transfer-Encoding"):
			encodings++
			badTE = badTE || !EqualFold(value, "chunked")
		}
	}

	// Framing: one of a decimal Content-Length or a chunked body, or none.
	switch {
	case encodings > 1 || badTE:
		return p.fail(http.StatusNotImplemented, DetailInvalidTE, "Transfer-Encoding other than one chunked"), nil
	case encodings > 0 && lengths > 0:
		return p.fail(http.StatusBadRequest, DetailChunkedLength, "both Content-Length and Transfer-Encoding"), nil
	case encodings > 0 && http10:
		return p.fail(http.StatusBadRequest, DetailTENotAllowed, "Transfer-Encoding on HTTP/1.0"), nil
	}

	// Target and authority.
	if string(p.method) == http.MethodConnect {
		rej := p.fail(http.StatusMethodNotAllowed, DetailUpgradeFailed, "CONNECT: no route allows tunnelling")
		rej.Flags = 0 // a request refused, not a protocol error
		return rej, nil
	}
	if bytes.IndexByte(p.target, '#') >= 0 {
		return p.fail(http.StatusBadRequest, DetailFragment, "fragment in request target "+QuoteInput(p.target)), nil
	}
	absolute := false
	switch t := p.target; {
	case t[0] == '/':
	case string(t) == "*":
		if string(p.method) != http.MethodOptions {
			return p.fail(http.StatusBadRequest, DetailInvalidURL, "request target * with method "+QuoteInput(p.method)), nil
		}
	default:
		scheme, after, ok := bytes.Cut(t, []byte("://"))
		switch {
		case !ok:
			return p.fail(http.StatusBadRequest, DetailInvalidURL, "invalid request target "+QuoteInput(t)), nil
		case EqualFold(scheme, "https"):
			return p.fail(http.StatusBadRequest, DetailHTTPSInPlaintext, "https URL on a plaintext connection "+QuoteInput(t)), nil
		case !EqualFold(scheme, "http"):
			return p.fail(http.StatusBadRequest, DetailInvalidScheme, "scheme of request target "+QuoteInput(t)), nil
		}
		end := bytes.IndexAny(after, "/?")
		if end < 0 {
			end = len(after)
		}
		if !validAuthority(after[:end]) {
			return p.fail(http.StatusBadRequest, DetailInvalidAuthority, "invalid authority in request target "+QuoteInput(t)), nil
		}
		absolute = true
	}
	switch {
	case hosts > 1:
		return p.fail(http.StatusBadRequest, DetailInvalidAuthority, "more than one Host"), nil
	case hosts == 1 && !validAuthority(p.host):
		return p.fail(http.StatusBadRequest, DetailInvalidAuthority, "invalid Host "+QuoteInput(p.host)), nil
	case hosts == 0 && (!http10 || !absolute):
		return p.fail(http.StatusBadRequest, DetailMissingHost, "no Host"), nil
	}
	if normalize {
		line = make([]byte, 0, len(p.method)+len(p.target)+len(v)+4)
		line = append(append(append(append(append(line, p.method...), ' '), p.target...), ' '), v...)
		line = append(line, '\r', '\n')
	}
	return nil, line
}

// validLength reports whether v is a Content-Length net/http reads as
// the same number: decimal digits, below 2^63.
func validLength(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	var n uint64
	for _, c := range v {
		if !IsDigit(c) {
			return false
		}
		d := uint64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return false
		}
		n = n*10 + d
	}
	return true
}

// validAuthority reports whether a is host[:port] (RFC 9110 §7.2, RFC
// 3986 §3.2.2): a registered name of unreserved, percent-encoded and
// sub-delimiter characters, an IPv4 address (which is one), or an IPv6
// address in brackets; then an optional port of at most five digits, at
// most 65535. No user information, no path, not empty. (httpguts'
// ValidHostHeader only checks the bytes: it passes "", "a@b" and
// "a:b:c".)
func validAuthority[T string | []byte](a T) bool {
	host, port := a, a[len(a):]
	if len(a) > 0 && a[0] == '[' {
		end := -1
		for i := 1; i < len(a); i++ {
			if a[i] == ']' {
				end = i
				break
			}
		}
		if end < 0 {
			return false
		}
		ip := a[1:end]
		for i := 0; i < len(ip); i++ {
			if c := ip[i]; !isHex(c) && c != ':' && c != '.' {
				return false // no zones, no IPvFuture
			}
		}
		if addr, err := netip.ParseAddr(string(ip)); err != nil || !addr.Is6() {
			return false
		}
		host, port = a[:end+1], a[end+1:]
		if len(port) > 0 {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	} else {
		for i := 0; i < len(a); i++ {
			if a[i] == ':' {
				host, port = a[:i], a[i+1:] // an empty port is valid (RFC 3986 §3.2.3)
				break
			}
		}
		if len(host) == 0 {
			return false
		}
		for i := 0; i < len(host); i++ {
			c := host[i]
			switch {
			case regNameByte[c]:
			case c == '%' && i+2 < len(host) && isHex(host[i+1]) && isHex(host[i+2]):
				i += 2
			default:
				return false
			}
		}
	}
	if len(port) > 0 {
		if len(port) > 5 {
			return false
		}
		n := 0
		for i := 0; i < len(port); i++ {
			if !IsDigit(port[i]) {
				return false
			}
			n = n*10 + int(port[i]-'0')
		}
		if n > 65535 {
			return false
		}
	}
	return true
}

// regNameByte holds the bytes of a registered name but '%' (RFC 3986
// unreserved and sub-delims).
var regNameByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~!$&'()*+,;=" {
		t[c] = true
	}
	return t
}()

// tcharTable holds RFC 9110's tchar: the bytes of a token (methods,
// header names).
var tcharTable = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// IsTchar says whether c may appear in a token (RFC 9110 §5.6.2): a
// method or a header name.
func IsTchar(c byte) bool { return tcharTable[c] }

// IsSPorHT says whether c is a space or a tab, the separators RFC 9112
// allows in a request line.
func IsSPorHT(c byte) bool { return c == ' ' || c == '\t' }

// IsDigit says whether c is an ASCII digit.
func IsDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return IsDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// trimCR drops one CR ending a line.
func trimCR(l []byte) []byte {
	if len(l) > 0 && l[len(l)-1] == '\r' {
		return l[:len(l)-1]
	}
	return l
}

// trimOWSBytes trims spaces and tabs from both ends of a header value.
func trimOWSBytes(v []byte) []byte {
	for len(v) > 0 && IsSPorHT(v[0]) {
		v = v[1:]
	}
	for len(v) > 0 && IsSPorHT(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	return v
}

// EqualFold reports whether b is s (ASCII) in any letter case.
func EqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// QuoteInput quotes an input for an error message, cut at 64 bytes: in
// single quotes, Go's escapes for the rest, a double quote as \x22 (the
// message is logged inside double quotes).
func QuoteInput(b []byte) string {
	more := ""
	if len(b) > 64 {
		b, more = b[:64], "..."
	}
	q := strconv.Quote(string(b))
	return "'" + strings.ReplaceAll(q[1:len(q)-1], `\"`, `\x22`) + "'" + more
}

// Get is h.Get for a key already in canonical form (every key the request
// path looks up is a constant that is): the value without Header.Get's
// canonicalisation of the key on every call.
func Get(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
