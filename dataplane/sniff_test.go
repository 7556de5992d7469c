package dataplane

import (
	"strings"
	"testing"
)

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
		k, done := sniffPrefix([]byte(c.in))
		if k != c.want || done != c.done {
			t.Errorf("sniffPrefix(%q) = %v %v, want %v %v", c.in, k, done, c.want, c.done)
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
		if k := sniffEnd([]byte(c.in)); k != c.want {
			t.Errorf("sniffEnd(%q) = %v, want %v", tail(c.in, 40), k, c.want)
		}
	}
}
