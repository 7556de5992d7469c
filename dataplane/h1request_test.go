package dataplane

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// headSeeds are request heads with what checkRequestHead answers: 0 for
// a head it passes.
var headSeeds = []struct {
	head    string
	code    int
	details string
}{
	{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0, ""},
	{"POST /p HTTP/1.1\r\nHost: a:8080\r\nContent-Length: 5\r\n\r\n", 0, ""},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 0, ""},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", 0, ""},
	{"PROPFIND /dav HTTP/1.1\r\nHost: a\r\nDepth: 1\r\n\r\n", 0, ""},
	{"GET\t/tab\tHTTP/1.1\r\nHost: a\r\n\r\n", 0, ""},
	{"GET  /two  HTTP/1.1\r\nHost: a\r\n\r\n", 0, ""},
	{"GET / HTTP/1.1\nHost: a\n\n", 0, ""},
	{"GET / HTTP/1.0\r\n\r\n", 400, detailMissingHost},
	{"GET http://a/x HTTP/1.0\r\n\r\n", 0, ""},
	{"GET http://a:80/x?y HTTP/1.1\r\nHost: b\r\n\r\n", 0, ""},
	{"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 0, ""},
	{"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 0, ""},
	{"GET / HTTP/1.1\r\nHost: [::1]:80\r\nX-Obs: caf\xe9\r\nX-Empty:\r\n\r\n", 0, ""},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400, detailChunkedLength},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", 400, detailChunkedLength},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length\t: 5\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nBad Header: 5\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\n: empty name\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n folded\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400, detailInvalidCharacters},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400, detailInvalidCharacters},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n", 400, detailInvalidCharacters},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n", 0, ""},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501, detailInvalidTE},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, detailInvalidTE},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 501, detailInvalidTE},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \x0bchunked\r\n\r\n", 400, detailInvalidCharacters},
	{"POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 400, detailTENotAllowed},
	{"GET / HTTP/1.1\r\n\r\n", 400, detailMissingHost},
	{"GET http://a/ HTTP/1.1\r\n\r\n", 400, detailMissingHost},
	{"GET / HTTP/1.1\r\nHost:\r\n\r\n", 400, detailInvalidAuthority},
	{"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", 400, detailInvalidAuthority},
	{"GET / HTTP/1.1\r\nHost: a:b:c\r\n\r\n", 400, detailInvalidAuthority},
	{"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, detailInvalidAuthority},
	{"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, detailInvalidAuthority},
	{"GET http://u@a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailInvalidAuthority},
	{"GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailInvalidAuthority},
	{"GET https://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailHTTPSInPlaintext},
	{"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailInvalidScheme},
	{"GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailInvalidURL},
	{"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailInvalidURL},
	{"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailFragment},
	{"GET /a?b#frag HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailFragment},
	{"GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailInvalidURL},
	{"GET /a\rb HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailInvalidURL},
	{"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, detailCodecError},
	{"GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505, detailCodecError},
	{"PRI * HTTP/2.0\r\n\r\n", 505, detailCodecError},
	{"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400, detailCodecError},
	{"GET / HTTP/11\r\nHost: a\r\n\r\n", 400, detailCodecError},
	{"GET / http/1.1\r\nHost: a\r\n\r\n", 400, detailCodecError},
	{"GET /\r\nHost: a\r\n\r\n", 400, detailCodecError},
	{"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailCodecError},
	{" GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailCodecError},
	{"GET\x0b/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, detailCodecError},
	{"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", 405, detailUpgradeFailed},
}

func TestCheckRequestHead(t *testing.T) {
	for _, c := range headSeeds {
		rej, line := checkRequestHead([]byte(c.head), 100)
		switch {
		case c.code == 0 && rej != nil:
			t.Errorf("%q: refused %d %s (%s), want passed", c.head, rej.code, rej.details, rej.why)
		case c.code != 0 && rej == nil:
			t.Errorf("%q: passed, want %d %s", c.head, c.code, c.details)
		case rej != nil && (rej.code != c.code || rej.details != c.details):
			t.Errorf("%q: %d %s (%s), want %d %s", c.head, rej.code, rej.details, rej.why, c.code, c.details)
		case rej != nil && (rej.flags&respflag.DPE != 0) == (c.code == http.StatusMethodNotAllowed):
			t.Errorf("%q: flags %s", c.head, rej.flags.Short())
		}
		if rej == nil {
			checkPassedHead(t, []byte(c.head), line)
		}
	}
	// The header-line limit, at and over it.
	head := "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: y\r\n", 9) + "\r\n"
	if rej, _ := checkRequestHead([]byte(head), 10); rej != nil {
		t.Errorf("10 header lines, limit 10: refused %d", rej.code)
	}
	head = "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: y\r\n", 10) + "\r\n"
	if rej, _ := checkRequestHead([]byte(head), 10); rej == nil || rej.code != http.StatusRequestHeaderFieldsTooLarge || rej.details != detailTooManyHeaders {
		t.Errorf("11 header lines, limit 10: %+v, want 431 %s", rej, detailTooManyHeaders)
	}
}

// checkPassedHead: a head checkRequestHead passed (with its request line
// rewritten to line, if set) reads with net/http as the raw head said:
// one version 1.x, a Host that is not empty, and the framing of its
// Content-Length or chunked Transfer-Encoding, with nothing else read.
// (net/http may still refuse it, for a target net/url refuses: the server
// then answers 400 too.)
func checkPassedHead(t *testing.T, head, line []byte) {
	t.Helper()
	n := headEnd(head)
	if n < 0 {
		t.Fatalf("%q: passed without a blank line", head)
	}
	in := head[:n]
	if line != nil {
		in = append(append([]byte(nil), line...), in[bytes.IndexByte(in, '\n')+1:]...)
	}
	const body = "0\r\n\r\n"
	br := bufio.NewReader(io.MultiReader(bytes.NewReader(in), strings.NewReader(body)))
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.ProtoMajor != 1 || req.Host == "" {
		t.Fatalf("%q: passed; net/http reads version %d.%d, Host %q", head, req.ProtoMajor, req.ProtoMinor, req.Host)
	}
	var cl int64
	chunked := false
	for _, l := range strings.Split(string(in), "\n")[1:] {
		name, value, _ := strings.Cut(strings.TrimSuffix(l, "\r"), ":")
		switch strings.ToLower(name) {
		case "content-length":
			cl, _ = strconv.ParseInt(strings.Trim(value, " \t"), 10, 64)
		case "transfer-encoding":
			chunked = true
		}
	}
	switch {
	case chunked && (req.ContentLength != -1 || len(req.TransferEncoding) != 1 || req.TransferEncoding[0] != "chunked"):
		t.Fatalf("%q: chunked, net/http frames it %d %q", head, req.ContentLength, req.TransferEncoding)
	case !chunked && (req.ContentLength != cl || req.TransferEncoding != nil):
		t.Fatalf("%q: Content-Length %d, net/http frames it %d %q", head, cl, req.ContentLength, req.TransferEncoding)
	}
	if chunked {
		if b, err := io.ReadAll(req.Body); err != nil || len(b) != 0 {
			t.Fatalf("%q: the empty chunked body read %q %v", head, b, err)
		}
		if rest, _ := io.ReadAll(br); len(rest) != 0 {
			t.Fatalf("%q: %q left after the chunked body", head, rest)
		}
	} else if cl == 0 {
		if rest, _ := io.ReadAll(br); string(rest) != body {
			t.Fatalf("%q: without a body, %q left, want the next bytes %q", head, rest, body)
		}
	}
}

// FuzzCheckRequestHead: whatever head checkRequestHead passes, net/http
// reads with the same framing, a version 1.x and a Host (or refuses).
func FuzzCheckRequestHead(f *testing.F) {
	for _, c := range headSeeds {
		f.Add([]byte(c.head))
	}
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := headEnd(data)
		if n < 0 || n > 1<<16 || len(data) > 0 && (data[0] == '\r' || data[0] == '\n') {
			return // the server skips leading line ends and reads a head to its blank line
		}
		if rej, line := checkRequestHead(data[:n], 100); rej == nil {
			checkPassedHead(t, data[:n], line)
		}
	})
}

func TestHeadEnd(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"GET / HTTP/1.1\r\n\r\n", 18}, {"GET / HTTP/1.1\n\n", 16}, {"GET / HTTP/1.1\n\r\nX", 17},
		{"GET / HTTP/1.1\r\nA: b\r\n\r\nbody", 24}, {"GET / HTTP/1.1\r\n", -1}, {"GET / HTTP/1.1\r\n\r", -1},
		{"GET / HTTP/1.1\r\nA: b\r\r\n\r\n", 25}, {"", -1}, {"\n", -1},
	} {
		if got := headEnd([]byte(c.in)); got != c.want {
			t.Errorf("headEnd(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestValidAuthority(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"a", true}, {"echo", true}, {"svc.ns.svc.cluster.local:8080", true}, {"10.0.0.1", true}, {"10.0.0.1:80", true},
		{"[::1]", true}, {"[::1]:443", true}, {"a:", true}, {"[::1]:", true}, {"[2001:db8::1]:65535", true}, {"a%20b", true}, {"a-b_c~d!$&'()*+,;=", true},
		{"", false}, {":80", false}, {"a:65536", false}, {"a:123456", false}, {"a:8x", false},
		{"a@b", false}, {"a/b", false}, {"a b", false}, {"a:b:c", false}, {"[::1", false}, {"[::1]x", false},
		{"[1.2.3.4]", false}, {"[fe80::1%25eth0]", false}, {"a%2", false}, {"a%zz", false},
		{"caf\xe9", false}, {"a\x00", false}, {"[]", false},
	} {
		if got := validAuthority(c.in); got != c.ok {
			t.Errorf("validAuthority(%q) = %v, want %v", c.in, got, c.ok)
		}
	}
}

// TestSniffRequestLine: the first bytes of a connection are HTTP/1 when
// they start a request line (any token method, a target, any
// HTTP/<digit>.<digit>), even after empty lines or with tabs; TLS and
// HTTP/2 prior knowledge are told apart; anything else is opaque TCP.
func TestSniffRequestLine(t *testing.T) {
	for _, c := range []struct {
		in   string
		want protoKind
		done bool
	}{
		{"GET / HTTP/1.1\r\n", kindHTTP1, true},
		{"PROPFIND /dav HTTP/1.1\r\nHost: a\r\n", kindHTTP1, true},
		{"PURGE /x HTTP/1.1\r\n", kindHTTP1, true},
		{"M-SEARCH * HTTP/1.1\r\n", kindHTTP1, true},
		{"get / HTTP/1.0\n", kindHTTP1, true},
		{"\r\nGET / HTTP/1.1\r\n", kindHTTP1, true},
		{"\r\n\r\nPOST /p HTTP/1.1\r\n", kindHTTP1, true},
		{"GET\t/\tHTTP/1.1\r\n", kindHTTP1, true},
		{"GET / HTTP/2.0\r\n", kindHTTP1, true}, // the server answers 505
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", kindHTTP2, true},
		{"PRI * HTTP/2.0\r\n\r\nSX", kindHTTP1, true}, // not the preface: a request line (505)
		{"PRI * HTTP/2.0\r\n", kindTCP, false},        // the preface so far
		{"\x16\x03\x01\x02\x00", kindTLS, true},
		{"\x16", kindTCP, false},
		{"\x16\x01", kindTCP, true},
		{"GET / HTTP/1.1", kindTCP, false},
		{"GET /path", kindTCP, false},
		{"GET", kindTCP, false},
		{"SSH-2.0-OpenSSH_9.6\r\n", kindTCP, true},
		{"220 banner\r\n", kindTCP, true},
		{"GET / HTTP/1.1 \r\n", kindTCP, true},
		{"GET / HTTP/1.1\rX", kindTCP, true},
		{"GET / HTTPS/1.1\r\n", kindTCP, true},
		{"GET / HTTP/x.1\r\n", kindTCP, true},
		{"GET /\x00 HTTP/1.1\r\n", kindTCP, true},
		{"G(T / HTTP/1.1\r\n", kindTCP, true},
		{" GET / HTTP/1.1\r\n", kindTCP, true},
		{"*1\r\n$4\r\nPING\r\n", kindTCP, true},
		{"\x00\x00\x00\x08\x04\xd2\x16\x2f", kindTCP, true},
	} {
		k, done := classifyPrefix([]byte(c.in))
		if k != c.want || done != c.done {
			t.Errorf("classifyPrefix(%q) = %v %v, want %v %v", c.in, k, done, c.want, c.done)
		}
	}
	// What is known when the client stops sending (or the buffer is
	// full): a request line as far as its target is HTTP/1.
	for _, c := range []struct {
		in   string
		want protoKind
	}{
		{"GET /path", kindHTTP1}, {"GET / HTTP/1.1", kindHTTP1}, {"PROPFIND ", kindHTTP1}, {"GET", kindTCP},
		{"", kindTCP}, {"\r\n", kindTCP}, {"PRI * HTTP/2.0\r\n", kindHTTP1}, {"\x16", kindTCP},
		{"GET /" + strings.Repeat("a", 4090), kindHTTP1},
	} {
		if k := classifyEnd([]byte(c.in)); k != c.want {
			t.Errorf("classifyEnd(%q) = %v, want %v", tail(c.in, 40), k, c.want)
		}
	}
}
