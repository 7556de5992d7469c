package h1

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

// headSeeds are request heads with what CheckRequestHead answers: 0 for
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
	{"GET / HTTP/1.0\r\n\r\n", 400, DetailMissingHost},
	{"GET http://a/x HTTP/1.0\r\n\r\n", 0, ""},
	{"GET http://a:80/x?y HTTP/1.1\r\nHost: b\r\n\r\n", 0, ""},
	{"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 0, ""},
	{"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 0, ""},
	{"GET / HTTP/1.1\r\nHost: [::1]:80\r\nX-Obs: caf\xe9\r\nX-Empty:\r\n\r\n", 0, ""},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400, DetailChunkedLength},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", 400, DetailChunkedLength},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length\t: 5\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nBad Header: 5\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\n: empty name\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n folded\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400, DetailInvalidCharacters},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400, DetailInvalidCharacters},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n", 400, DetailInvalidCharacters},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n", 0, ""},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501, DetailInvalidTE},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, DetailInvalidTE},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 501, DetailInvalidTE},
	{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \x0bchunked\r\n\r\n", 400, DetailInvalidCharacters},
	{"POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 400, DetailTENotAllowed},
	{"GET / HTTP/1.1\r\n\r\n", 400, DetailMissingHost},
	{"GET http://a/ HTTP/1.1\r\n\r\n", 400, DetailMissingHost},
	{"GET / HTTP/1.1\r\nHost:\r\n\r\n", 400, DetailInvalidAuthority},
	{"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", 400, DetailInvalidAuthority},
	{"GET / HTTP/1.1\r\nHost: a:b:c\r\n\r\n", 400, DetailInvalidAuthority},
	{"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, DetailInvalidAuthority},
	{"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, DetailInvalidAuthority},
	{"GET http://u@a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailInvalidAuthority},
	{"GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailInvalidAuthority},
	{"GET https://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailHTTPSInPlaintext},
	{"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailInvalidScheme},
	{"GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailInvalidURL},
	{"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailInvalidURL},
	{"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailFragment},
	{"GET /a?b#frag HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailFragment},
	{"GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailInvalidURL},
	{"GET /a\rb HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailInvalidURL},
	{"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, DetailCodecError},
	{"GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505, DetailCodecError},
	{"PRI * HTTP/2.0\r\n\r\n", 505, DetailCodecError},
	{"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400, DetailCodecError},
	{"GET / HTTP/11\r\nHost: a\r\n\r\n", 400, DetailCodecError},
	{"GET / http/1.1\r\nHost: a\r\n\r\n", 400, DetailCodecError},
	{"GET /\r\nHost: a\r\n\r\n", 400, DetailCodecError},
	{"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailCodecError},
	{" GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailCodecError},
	{"GET\x0b/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, DetailCodecError},
	{"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", 405, DetailUpgradeFailed},
}

func TestCheckRequestHead(t *testing.T) {
	for _, c := range headSeeds {
		rej, line := CheckRequestHead([]byte(c.head), 100)
		switch {
		case c.code == 0 && rej != nil:
			t.Errorf("%q: refused %d %s (%s), want passed", c.head, rej.Code, rej.Details, rej.Why)
		case c.code != 0 && rej == nil:
			t.Errorf("%q: passed, want %d %s", c.head, c.code, c.details)
		case rej != nil && (rej.Code != c.code || rej.Details != c.details):
			t.Errorf("%q: %d %s (%s), want %d %s", c.head, rej.Code, rej.Details, rej.Why, c.code, c.details)
		case rej != nil && (rej.Flags&respflag.DPE != 0) == (c.code == http.StatusMethodNotAllowed):
			t.Errorf("%q: flags %s", c.head, rej.Flags.Short())
		}
		if rej == nil {
			checkPassedHead(t, []byte(c.head), line)
		}
	}
	// The header-line limit, at and over it.
	head := "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: y\r\n", 9) + "\r\n"
	if rej, _ := CheckRequestHead([]byte(head), 10); rej != nil {
		t.Errorf("10 header lines, limit 10: refused %d", rej.Code)
	}
	head = "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: y\r\n", 10) + "\r\n"
	if rej, _ := CheckRequestHead([]byte(head), 10); rej == nil || rej.Code != http.StatusRequestHeaderFieldsTooLarge || rej.Details != DetailTooManyHeaders {
		t.Errorf("11 header lines, limit 10: %+v, want 431 %s", rej, DetailTooManyHeaders)
	}
}

// checkPassedHead: a head CheckRequestHead passed (with its request line
// rewritten to line, if set) reads with net/http as the raw head said:
// one version 1.x, a Host that is not empty, and the framing of its
// Content-Length or chunked Transfer-Encoding, with nothing else read.
// (net/http may still refuse it, for a target net/url refuses: the server
// then answers 400 too.)
func checkPassedHead(t *testing.T, head, line []byte) {
	t.Helper()
	n := HeadEnd(head)
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

// FuzzCheckRequestHead: whatever head CheckRequestHead passes, net/http
// reads with the same framing, a version 1.x and a Host (or refuses).
func FuzzCheckRequestHead(f *testing.F) {
	for _, c := range headSeeds {
		f.Add([]byte(c.head))
	}
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := HeadEnd(data)
		if n < 0 || n > 1<<16 || len(data) > 0 && (data[0] == '\r' || data[0] == '\n') {
			return // the server skips leading line ends and reads a head to its blank line
		}
		if rej, line := CheckRequestHead(data[:n], 100); rej == nil {
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
		if got := HeadEnd([]byte(c.in)); got != c.want {
			t.Errorf("HeadEnd(%q) = %d, want %d", c.in, got, c.want)
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
