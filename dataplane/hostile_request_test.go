package dataplane

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
)

// The hostile-input tests send exact bytes through the real proxy to a
// real upstream that records the raw bytes it receives, and check both
// ends: what reached the upstream (nothing of a refused request, no
// smuggled second request) and what the client got (the status line, the
// connection closed or kept). A well-behaved client runs alongside, and
// every one of its requests must succeed.

// recorder is an HTTP/1.1 upstream that keeps every byte it reads, per
// connection, before it parses them: whatever the proxy forwarded of a
// request the client has an answer to is recorded by then (the recorder
// records, then answers, and the proxy answers after it). It answers each
// request with its method and target, and a WebSocket upgrade with 101,
// then echoes.
type recorder struct {
	addr  string
	mu    sync.Mutex
	conns []*recConn
	// read is closed (and replaced) whenever a connection has read more.
	read chan struct{}
}

// recConn is one upstream connection's bytes; done is closed when the
// proxy has closed it.
type recConn struct {
	buf  bytes.Buffer // guarded by the recorder's mu
	done chan struct{}
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{read: make(chan struct{})}
	r.addr = serveTCP(t, "127.0.0.11", func(c net.Conn) {
		rc := &recConn{done: make(chan struct{})}
		r.mu.Lock()
		r.conns = append(r.conns, rc)
		r.mu.Unlock()
		defer close(rc.done)
		br := bufio.NewReader(readerFunc(func(p []byte) (int, error) {
			n, err := c.Read(p)
			r.mu.Lock()
			rc.buf.Write(p[:n])
			close(r.read)
			r.read = make(chan struct{})
			r.mu.Unlock()
			return n, err
		}))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
			if strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
				io.Copy(c, br)
				return
			}
			body := req.Method + " " + req.RequestURI
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
	return r
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// all is every byte the recorder has read.
func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, c := range r.conns {
		b.Write(c.buf.Bytes())
		b.WriteString("\n--- next connection ---\n")
	}
	return b.String()
}

// head returns the request head the recorder read that holds marker.
func (r *recorder) head(t *testing.T, marker string) string {
	t.Helper()
	all := r.all()
	i := strings.Index(all, marker)
	if i < 0 {
		t.Fatalf("the upstream never saw %q; it read:\n%s", marker, all)
	}
	start := 0
	if j := strings.LastIndex(all[:i], "\r\n\r\n"); j >= 0 {
		start = j + 4 // the end of what came before
	}
	end := strings.Index(all[i:], "\r\n\r\n")
	return all[start : i+end]
}

// waitClosed waits until an upstream connection has read marker (the
// proxy may still be sending when its client has the answer), then until
// the proxy has closed it.
func (r *recorder) waitClosed(t *testing.T, marker string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	var done chan struct{}
	for done == nil {
		r.mu.Lock()
		for _, c := range r.conns {
			if strings.Contains(c.buf.String(), marker) {
				done = c.done
			}
		}
		read := r.read
		r.mu.Unlock()
		if done != nil {
			break
		}
		select {
		case <-read:
		case <-timeout:
			t.Fatalf("no upstream connection read %q", marker)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the proxy kept the upstream connection that read %q open", marker)
	}
}

// flushAccessLog writes the access log's buffered lines now.
func flushAccessLog(s *Server) {
	var spare []byte
	s.access.Load().Flush(&spare)
}

// hostileCase is raw bytes to send on a new connection, the status codes
// of the answers, in order, whether the proxy must close the connection
// after them (else a probe request on it must be answered), the markers
// the upstream must and must not have read, and parts of the access-log
// line of the last answer.
type hostileCase struct {
	name    string
	raw     string
	codes   []int
	closed  bool
	reached []string
	kept    []string // never reached the upstream
	log     []string
	// lenient: valid, and served as Envoy's codec serves it, where
	// net/http's refuses it.
	lenient bool
	// after checks more of what the upstream read.
	after func(t *testing.T, rec *recorder)
}

// dpe is the access-log line of the request line (as far as the proxy
// read it) refused for a protocol error with Envoy's details.
func dpe(line string, code int, details string) []string {
	return []string{fmt.Sprintf(`"%s" %d DPE `, line, code), " " + details + " "}
}

// run sends c's bytes and checks the client's side, then the upstream's
// and the access log.
func (c hostileCase) run(t *testing.T, s *Server, logs *logBuffer, rec *recorder) {
	t.Helper()
	if c.lenient || slices.ContainsFunc(c.codes, func(code int) bool { return code >= 400 }) {
		fastHTTP1Only(t, "Envoy's codec refusals and leniencies ("+c.name+")")
	}
	conn := dialProxy(t, s)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, c.raw); err != nil {
		t.Fatalf("%s: write: %v", c.name, err)
	}
	br := bufio.NewReader(conn)
	for i, want := range c.codes {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: answer %d: %v", c.name, i+1, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != want {
			t.Fatalf("%s: answer %d: %s %q %v, want %d", c.name, i+1, resp.Status, body, err, want)
		}
		if last := i == len(c.codes)-1; last && c.closed && !resp.Close {
			t.Errorf("%s: the answer that ends the connection has no Connection: close", c.name)
		}
	}
	if c.closed {
		// A clean end of stream, not a reset, even with bytes of the
		// client's unread (the proxy's lingering close).
		if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
			t.Errorf("%s: after the answers, %q %v; want the proxy's close", c.name, rest, err)
		}
	} else {
		// The connection is kept, and in step: the next request is
		// read as one.
		probe := "/probe-" + strings.ReplaceAll(c.name, " ", "-")
		io.WriteString(conn, "GET "+probe+" HTTP/1.1\r\nHost: echo\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: the probe after the answers: %v", c.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "GET "+probe {
			t.Errorf("%s: the probe got %s %q", c.name, resp.Status, body)
		}
	}
	all := rec.all()
	for _, m := range c.reached {
		if !strings.Contains(all, m) {
			t.Errorf("%s: the upstream never read %q; it read:\n%s", c.name, m, tail(all, 2000))
		}
	}
	for _, m := range c.kept {
		if strings.Contains(all, m) {
			t.Errorf("%s: %q reached the upstream:\n%s", c.name, m, tail(all, 2000))
		}
	}
	if c.after != nil {
		c.after(t, rec)
	}
	if len(c.log) > 0 {
		flushAccessLog(s)
		found := false
		for _, l := range logs.Lines() {
			ok := true
			for _, p := range c.log {
				ok = ok && strings.Contains(l, p)
			}
			found = found || ok
		}
		if !found {
			t.Errorf("%s: no access-log line with %q in:\n%s", c.name, c.log, tail(logs.String(), 3000))
		}
	}
}

// TestHostileRequests: requests that smuggle, that a lenient parser reads
// differently from a strict one, or that the proxy does not serve are
// refused before anything reaches the upstream, the connection closed
// where its framing is in doubt, each with an access-log line; odd but
// valid requests are served; a concurrent well-behaved client is never
// disturbed.
func TestHostileRequests(t *testing.T) {
	rec := newRecorder(t)
	legitUp := upstream(t, "127.0.0.12", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "legit %s %s %d", r.Method, r.URL.Path, len(b))
	}))
	cfg := testConfig(noRetry, testCluster("echo", endpoint(rec.addr, "a")), testCluster("legit", endpoint(legitUp, "a")))
	cfg.Listeners[0].Routes = append(cfg.Listeners[0].Routes, config.Route{Name: "legit", Destination: "10.96.0.10:80",
		Hosts: []string{"legit"}, Cluster: "legit", Timeout: 5 * time.Second})
	s, logs := startServer(t, cfg)

	stop := make(chan struct{})
	started := make(chan struct{})
	legit := make(chan error, 1)
	go func() { legit <- legitClient(s, stop, started) }()
	select {
	case <-started:
	case err := <-legit:
		t.Fatalf("the well-behaved client failed before the hostile ones began: %v", err)
	}

	pad := strings.Repeat("a", 12<<10)
	chunk8k := strings.Repeat("c", 0x2000)
	cases := []hostileCase{
		// 1. Content-Length and Transfer-Encoding (RFC 9112 §6.1): 400 and
		// close, as Envoy; nothing forwarded, so no smuggled request.
		{name: "cl-te smuggle",
			raw:   "POST /cl-te HTTP/1.1\r\nHost: echo\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled-clte HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/cl-te", "/smuggled-clte"}, log: dpe("POST /cl-te HTTP/1.1", 400, h1.DetailChunkedLength)},
		{name: "te-cl smuggle",
			raw:   "POST /te-cl HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n5c\r\nGET /smuggled-tecl HTTP/1.1\r\nHost: echo\r\n\r\n0\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/te-cl", "/smuggled-tecl"}, log: dpe("POST /te-cl HTTP/1.1", 400, h1.DetailChunkedLength)},
		{name: "pipelined then cl-te",
			raw:   "GET /pipe-ok HTTP/1.1\r\nHost: echo\r\n\r\nPOST /pipe-bad HTTP/1.1\r\nHost: echo\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			codes: []int{200, 400}, closed: true, reached: []string{"GET /pipe-ok "}, kept: []string{"/pipe-bad"}, log: dpe("POST /pipe-bad HTTP/1.1", 400, h1.DetailChunkedLength)},
		// 2. Whitespace before the colon (RFC 9112 §5.1): 400, never a
		// header ignored for framing.
		{name: "space before colon",
			raw:   "POST /sp-colon HTTP/1.1\r\nHost: echo\r\nContent-Length : 44\r\n\r\nGET /smuggled-colon HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/sp-colon", "/smuggled-colon"}, log: dpe("POST /sp-colon HTTP/1.1", 400, h1.DetailCodecError)},
		{name: "tab before colon",
			raw:   "POST /tab-colon HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/tab-colon"}, log: dpe("POST /tab-colon HTTP/1.1", 400, h1.DetailCodecError)},
		{name: "space before colon past the buffer",
			raw:   "POST /sp-colon-big HTTP/1.1\r\nHost: echo\r\nX-Pad: " + pad + "\r\nContent-Length : 5\r\n\r\nhello",
			codes: []int{400}, closed: true, kept: []string{"/sp-colon-big"}, log: dpe("POST /sp-colon-big HTTP/1.1", 400, h1.DetailCodecError)},
		{name: "folded header",
			raw:   "GET /folded HTTP/1.1\r\nHost: echo\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/folded"}, log: dpe("GET /folded HTTP/1.1", 400, h1.DetailCodecError)},
		{name: "nul in a value",
			raw:   "GET /nul HTTP/1.1\r\nHost: echo\r\nX-A: a\x00b\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/nul"}, log: dpe("GET /nul HTTP/1.1", 400, h1.DetailInvalidCharacters)},
		{name: "bare cr in a value",
			raw:   "GET /bare-cr HTTP/1.1\r\nHost: echo\r\nX-A: a\rContent-Length: 5\r\n\r\nhello",
			codes: []int{400}, closed: true, kept: []string{"/bare-cr"}, log: dpe("GET /bare-cr HTTP/1.1", 400, h1.DetailInvalidCharacters)},
		{name: "two lengths",
			raw:   "POST /two-cl HTTP/1.1\r\nHost: echo\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
			codes: []int{400}, closed: true, kept: []string{"/two-cl"}, log: dpe("POST /two-cl HTTP/1.1", 400, h1.DetailCodecError)},
		{name: "signed length",
			raw:   "POST /plus-cl HTTP/1.1\r\nHost: echo\r\nContent-Length: +5\r\n\r\nhello",
			codes: []int{400}, closed: true, kept: []string{"/plus-cl"}, log: dpe("POST /plus-cl HTTP/1.1", 400, h1.DetailCodecError)},
		{name: "unknown coding",
			raw:   "POST /gzip-te HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
			codes: []int{501}, closed: true, kept: []string{"/gzip-te"}, log: dpe("POST /gzip-te HTTP/1.1", 501, h1.DetailInvalidTE)},
		{name: "two codings",
			raw:   "POST /two-te HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			codes: []int{501}, closed: true, kept: []string{"/two-te"}, log: dpe("POST /two-te HTTP/1.1", 501, h1.DetailInvalidTE)},
		{name: "coding on http/1.0",
			raw:   "POST /te-10 HTTP/1.0\r\nHost: echo\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/te-10"}, log: dpe("POST /te-10 HTTP/1.0", 400, h1.DetailTENotAllowed)},
		// 4. Host, target, version, method.
		{name: "no host",
			raw:   "GET /no-host HTTP/1.1\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/no-host"}, log: dpe("GET /no-host HTTP/1.1", 400, h1.DetailMissingHost)},
		{name: "no host http/1.0",
			raw:   "GET /no-host-10 HTTP/1.0\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/no-host-10"}, log: dpe("GET /no-host-10 HTTP/1.0", 400, h1.DetailMissingHost)},
		{name: "empty host",
			raw:   "GET /empty-host HTTP/1.1\r\nHost:\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/empty-host"}, log: dpe("GET /empty-host HTTP/1.1", 400, h1.DetailInvalidAuthority)},
		{name: "userinfo host",
			raw:   "GET /at-host HTTP/1.1\r\nHost: echo@evil\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/at-host"}, log: dpe("GET /at-host HTTP/1.1", 400, h1.DetailInvalidAuthority)},
		{name: "two hosts",
			raw:   "GET /two-hosts HTTP/1.1\r\nHost: echo\r\nHost: evil\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/two-hosts"}, log: dpe("GET /two-hosts HTTP/1.1", 400, h1.DetailInvalidAuthority)},
		{name: "fragment",
			raw:   "GET /frag?a=1#x HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/frag"}, log: dpe("GET /frag?a=1#x HTTP/1.1", 400, h1.DetailFragment)},
		{name: "https url",
			raw:   "GET https://echo/abs-https HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/abs-https"}, log: dpe("GET https://echo/abs-https HTTP/1.1", 400, h1.DetailHTTPSInPlaintext)},
		{name: "http/2.0 request line",
			raw:   "GET /v2 HTTP/2.0\r\nHost: echo\r\n\r\n",
			codes: []int{505}, closed: true, kept: []string{"/v2"}, log: dpe("GET /v2 HTTP/2.0", 505, h1.DetailCodecError)},
		{name: "http/3.1 after a request",
			raw:   "GET /v1-first HTTP/1.1\r\nHost: echo\r\n\r\nGET /v3 HTTP/3.1\r\nHost: echo\r\n\r\n",
			codes: []int{200, 505}, closed: true, reached: []string{"/v1-first"}, kept: []string{"/v3"}, log: dpe("GET /v3 HTTP/3.1", 505, h1.DetailCodecError)},
		{name: "connect",
			raw:   "CONNECT echo:443 HTTP/1.1\r\nHost: echo:443\r\n\r\n\x16\x03\x01",
			codes: []int{405}, closed: true, kept: []string{"echo:443"}, log: []string{`"CONNECT echo:443 HTTP/1.1" 405 - `, " upgrade_failed "}},
		{name: "bad method after a request",
			raw:   "GET /m-first HTTP/1.1\r\nHost: echo\r\n\r\nG(T /m-bad HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{200, 400}, closed: true, reached: []string{"/m-first"}, kept: []string{"/m-bad"}, log: dpe("G - HTTP/1.1", 400, h1.DetailCodecError)},
		{name: "trailing space after the version",
			raw:   "GET /t-first HTTP/1.1\r\nHost: echo\r\n\r\nGET /trail HTTP/1.1 \r\nHost: echo\r\n\r\n",
			codes: []int{200, 400}, closed: true, reached: []string{"/t-first"}, kept: []string{"/trail"}, log: dpe("GET /trail HTTP/1.1", 400, h1.DetailCodecError)},
		{name: "empty lines without end",
			raw:   "GET /e-first HTTP/1.1\r\nHost: echo\r\n\r\n" + strings.Repeat("\r\n", h1.MaxSkippedLineEnds),
			codes: []int{200, 400}, closed: true, reached: []string{"/e-first"}, log: dpe("- - HTTP/1.1", 400, h1.DetailCodecError)},
		// 5. The header-line limit: 100 pass, 101 get 431.
		{name: "100 header lines",
			raw:   "GET /h100 HTTP/1.1\r\nHost: echo\r\n" + strings.Repeat("X-H: v\r\n", 99) + "\r\n",
			codes: []int{200}, reached: []string{"GET /h100 "}},
		{name: "101 header lines",
			raw:   "GET /h101 HTTP/1.1\r\nHost: echo\r\n" + strings.Repeat("X-H: v\r\n", 100) + "\r\n",
			codes: []int{431}, closed: true, kept: []string{"/h101"}, log: dpe("GET /h101 HTTP/1.1", 431, h1.DetailTooManyHeaders)},
		// 6. A malformed chunked body: 400 DPE, not the upstream's 503.
		// (A first chunk larger than the upstream transport's buffer, so
		// that the upstream reads the head before the body breaks.)
		{name: "bad chunk size",
			raw:   "POST /bad-chunk HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\n\r\n2000\r\n" + chunk8k + "\r\nzz\r\nGET /smuggled-chunk HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/smuggled-chunk"},
			log:   []string{`"POST /bad-chunk HTTP/1.1" 400 DPE `, " http1.codec_error ", "request body: "},
			after: bodyCutAfter("/bad-chunk", "2000\r\n"+chunk8k+"\r\n")},
		{name: "chunk without its crlf",
			raw:   "POST /chunk-nocrlf HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\n\r\n2000\r\n" + chunk8k + "XX0\r\n\r\nGET /smuggled-nocrlf HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{400}, closed: true, kept: []string{"/smuggled-nocrlf"},
			log:   []string{`"POST /chunk-nocrlf HTTP/1.1" 400 DPE `, " http1.codec_error "},
			after: bodyCutAfter("/chunk-nocrlf", "2000\r\n"+chunk8k+"\r\n")},

		// Odd but valid: served, the connection kept.
		// 3. What sniffing took for opaque TCP, first on the connection:
		// served as HTTP (the upstream sees the proxy's X-Request-Id).
		{name: "webdav method", raw: "PROPFIND /dav HTTP/1.1\r\nHost: echo\r\nDepth: 1\r\n\r\n",
			codes: []int{200}, reached: []string{"PROPFIND /dav HTTP/1.1\r\n"}, log: []string{`"PROPFIND /dav HTTP/1.1" 200 - `},
			after: handledAsHTTP("PROPFIND /dav ")},
		{name: "purge method", raw: "PURGE /cache HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{200}, reached: []string{"PURGE /cache HTTP/1.1\r\n"}, after: handledAsHTTP("PURGE /cache ")},
		{name: "leading crlf", raw: "\r\n\r\nGET /leading-crlf HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{200}, lenient: true, reached: []string{"GET /leading-crlf HTTP/1.1\r\n"}, after: handledAsHTTP("GET /leading-crlf ")},
		{name: "tab separators", raw: "GET\t/tab-sep\tHTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{200}, lenient: true, reached: []string{"GET /tab-sep HTTP/1.1\r\n"}, after: handledAsHTTP("GET /tab-sep ")},
		{name: "tab separators past the buffer", raw: "GET\t/tab-big\tHTTP/1.1\r\nHost: echo\r\nX-Pad: " + pad + "\r\n\r\n",
			codes: []int{200}, lenient: true, reached: []string{"GET /tab-big HTTP/1.1\r\n"}},
		{name: "head past the buffer, pipelined",
			raw:   "POST /big-head HTTP/1.1\r\nHost: echo\r\nX-Pad: " + pad + "\r\nContent-Length: 5\r\n\r\nhelloGET /after-big HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{200, 200}, reached: []string{"POST /big-head ", "GET /after-big "}},
		{name: "crlf between requests", raw: "POST /crlf-1 HTTP/1.1\r\nHost: echo\r\nContent-Length: 2\r\n\r\nhi\r\nGET /crlf-2 HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{200, 200}, reached: []string{"/crlf-1", "GET /crlf-2 "}},
		{name: "bare lf lines", raw: "POST /bare-lf HTTP/1.1\nHost: echo\nContent-Length: 5\n\nhello",
			codes: []int{200}, reached: []string{"POST /bare-lf HTTP/1.1\r\n", "hello"}},
		{name: "absolute form", raw: "GET http://echo/abs HTTP/1.1\r\nHost: echo\r\n\r\n",
			codes: []int{200}, reached: []string{"GET /abs HTTP/1.1\r\n"}, after: hostIs("GET /abs ", "echo")},
		{name: "chunked with extensions and trailer",
			raw:   "POST /chunk-ok HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
			codes: []int{200}, reached: []string{"POST /chunk-ok ", "hello"}},
		// h2c upgrade offers are dropped (Envoy): the upstream sees a
		// plain request.
		{name: "h2c upgrade", raw: "GET /h2c HTTP/1.1\r\nHost: echo\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
			codes: []int{200}, reached: []string{"GET /h2c "}, after: noUpgradeOffer("GET /h2c ")},
		{name: "h2c upgrade, settings not in connection", raw: "GET /h2c-2 HTTP/1.1\r\nHost: echo\r\nConnection: Upgrade\r\nUpgrade: H2C\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
			codes: []int{200}, reached: []string{"GET /h2c-2 "}, after: noUpgradeOffer("GET /h2c-2 ")},
	}
	dpeCases := 0
	for _, c := range cases {
		if len(c.log) > 0 && strings.Contains(c.log[0], " DPE ") && testHTTP1Server != HTTP1ServerNetHTTP { // (skipped there: run)
			dpeCases++
		}
		t.Run(c.name, func(t *testing.T) { c.run(t, s, logs, rec) })
	}

	// WebSocket upgrades still go through, and the stream both ways.
	t.Run("websocket", func(t *testing.T) {
		conn := dialProxy(t, s)
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: echo\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		io.WriteString(conn, "ping over the stream\n")
		if line, err := br.ReadString('\n'); line != "ping over the stream\n" {
			t.Fatalf("over the upgraded stream: %q %v", line, err)
		}
		if h := rec.head(t, "GET /ws "); !strings.Contains(h, "Upgrade: websocket") || !strings.Contains(h, "Connection: Upgrade") {
			t.Errorf("the upstream read %q", h)
		}
	})
	// Bytes the client sent with its upgrade request (read with the
	// request, before the hijack) reach the upstream first.
	t.Run("websocket, bytes with the request", func(t *testing.T) {
		conn := dialProxy(t, s)
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, "GET /ws-early HTTP/1.1\r\nHost: echo\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\nsent with the request\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		if line, err := br.ReadString('\n'); line != "sent with the request\n" {
			t.Fatalf("over the upgraded stream: %q %v", line, err)
		}
	})

	close(stop)
	if err := <-legit; err != nil {
		t.Errorf("the well-behaved client: %v", err)
	}
	if got := stat(t, s, "http.outbound.downstream_cx_protocol_error"); got != int64(dpeCases) {
		t.Errorf("http.outbound.downstream_cx_protocol_error = %d, want %d (one per refusal flagged DPE)", got, dpeCases)
	}
}

// bodyCutAfter checks that the upstream connection that read marker got
// body after its head and no more (not the body's end, not what followed
// it), and that the proxy closed it.
func bodyCutAfter(marker, body string) func(*testing.T, *recorder) {
	return func(t *testing.T, rec *recorder) {
		rec.waitClosed(t, marker)
		all := rec.all()
		conn := all[strings.Index(all, marker):]
		conn = conn[:strings.Index(conn, "\n--- next connection ---")]
		if _, got, _ := strings.Cut(conn, "\r\n\r\n"); got != body {
			t.Errorf("the upstream read the body %q, want %q", tail(got, 100), tail(body, 100))
		}
	}
}

// handledAsHTTP checks that the request the upstream read with marker
// went through the proxy's HTTP handling (it has the X-Request-Id the
// proxy adds), not through opaque TCP.
func handledAsHTTP(marker string) func(*testing.T, *recorder) {
	return func(t *testing.T, rec *recorder) {
		if h := rec.head(t, marker); !strings.Contains(h, "\r\nX-Request-Id: ") {
			t.Errorf("the upstream read %q, not a request the proxy handled as HTTP", h)
		}
	}
}

// hostIs checks the Host of the request the upstream read with marker.
func hostIs(marker, host string) func(*testing.T, *recorder) {
	return func(t *testing.T, rec *recorder) {
		if h := rec.head(t, marker); !strings.Contains(h, "\r\nHost: "+host+"\r\n") {
			t.Errorf("the upstream read %q, want Host %s", h, host)
		}
	}
}

// noUpgradeOffer checks that the request the upstream read with marker
// has no Upgrade, HTTP2-Settings or Connection: Upgrade.
func noUpgradeOffer(marker string) func(*testing.T, *recorder) {
	return func(t *testing.T, rec *recorder) {
		h := rec.head(t, marker)
		for _, l := range strings.Split(strings.ToLower(h), "\r\n") {
			name, value, _ := strings.Cut(l, ":")
			if name == "upgrade" || name == "http2-settings" || name == "connection" && strings.Contains(value, "upgrade") {
				t.Errorf("the upstream read the upgrade offer: %q", h)
				return
			}
		}
	}
}

// legitClient sends well-formed requests (GET, a sized POST, a chunked
// POST) on two keep-alive connections until stop, and at least 100; any
// failure ends it with an error. started is closed after its first
// answer.
func legitClient(s *Server, stop, started chan struct{}) error {
	conns := make([]net.Conn, 2)
	brs := make([]*bufio.Reader, 2)
	for i := range conns {
		c, err := net.Dial("tcp", strings.TrimPrefix(proxyURL(s), "http://"))
		if err != nil {
			return err
		}
		defer c.Close()
		conns[i], brs[i] = c, bufio.NewReader(c)
	}
	deadline := time.Now().Add(60 * time.Second)
	for n := 0; n < 100_000; n++ {
		if n >= 100 {
			select {
			case <-stop:
				return nil
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still running after %d requests at the deadline", n)
		}
		c, br := conns[n%2], brs[n%2]
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		path := fmt.Sprintf("/legit-%d", n)
		var raw, want string
		switch n % 3 {
		case 0:
			raw, want = "GET "+path+" HTTP/1.1\r\nHost: legit\r\n\r\n", "legit GET "+path+" 0"
		case 1:
			raw, want = "POST "+path+" HTTP/1.1\r\nHost: legit\r\nContent-Length: 7\r\n\r\npayload", "legit POST "+path+" 7"
		default:
			raw, want = "POST "+path+" HTTP/1.1\r\nHost: legit\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n", "legit POST "+path+" 7"
		}
		if _, err := io.WriteString(c, raw); err != nil {
			return fmt.Errorf("request %d: %w", n, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("request %d: %w", n, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || string(body) != want {
			return fmt.Errorf("request %d: %s %q %v, want 200 %q", n, resp.Status, body, err, want)
		}
		if n == 0 {
			close(started)
		}
	}
	return nil
}

// TestMaxHeadersCountConfigured: a listener's max_headers_count replaces
// Envoy's default 100: at the limit the request is served (on the fast
// reader's path and net/http's), over it 431.
func TestMaxHeadersCountConfigured(t *testing.T) {
	fastHTTP1Only(t, "max_headers_count is one of the fast server's head checks; net/http counts no header lines")
	rec := newRecorder(t)
	cfg := testConfig(noRetry, testCluster("echo", endpoint(rec.addr, "a")))
	cfg.Listeners[0].MaxHeadersCount = 10
	s, logs := startServer(t, cfg)
	for _, c := range []hostileCase{
		{name: "10 lines", raw: "GET /ten HTTP/1.1\r\nHost: echo\r\n" + strings.Repeat("X-H: v\r\n", 9) + "\r\n",
			codes: []int{200}, reached: []string{"GET /ten "}},
		{name: "10 lines with a body", raw: "POST /ten-post HTTP/1.1\r\nHost: echo\r\nContent-Length: 2\r\n" + strings.Repeat("X-H: v\r\n", 8) + "\r\nhi",
			codes: []int{200}, reached: []string{"POST /ten-post "}},
		{name: "11 lines", raw: "GET /eleven HTTP/1.1\r\nHost: echo\r\n" + strings.Repeat("X-H: v\r\n", 10) + "\r\n",
			codes: []int{431}, closed: true, kept: []string{"/eleven"}, log: dpe("GET /eleven HTTP/1.1", 431, h1.DetailTooManyHeaders)},
		{name: "11 lines with a body", raw: "POST /eleven-post HTTP/1.1\r\nHost: echo\r\nContent-Length: 2\r\n" + strings.Repeat("X-H: v\r\n", 9) + "\r\nhi",
			codes: []int{431}, closed: true, kept: []string{"/eleven-post"}, log: dpe("POST /eleven-post HTTP/1.1", 431, h1.DetailTooManyHeaders)},
	} {
		c.run(t, s, logs, rec)
	}
}

// TestHTTPListenerRefusesOtherProtocols: on a listener whose protocol is
// http, bytes that cannot start a request line (a TLS ClientHello, an SSH
// banner) get 400 as soon as they arrive, not after the header timeout
// waiting for a blank line that never comes; nothing reaches the
// upstream.
func TestHTTPListenerRefusesOtherProtocols(t *testing.T) {
	fastHTTP1Only(t, "an HTTP-only listener's 400 DPE for other protocols, with its access-log line, is the fast server's; net/http answers a 400 of its own")
	rec := newRecorder(t)
	cfg := testConfig(noRetry, testCluster("echo", endpoint(rec.addr, "a")))
	cfg.Listeners[0].Protocol = config.ProtocolHTTP
	s, logs := startServer(t, cfg)
	for _, c := range []hostileCase{
		{name: "tls", raw: "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", codes: []int{400}, closed: true, log: dpe("- - HTTP/1.1", 400, h1.DetailCodecError)},
		{name: "ssh", raw: "SSH-2.0-OpenSSH_9.6\r\n", codes: []int{400}, closed: true, log: dpe("- - HTTP/1.1", 400, h1.DetailCodecError)},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, s, logs, rec) })
	}
	if all := rec.all(); all != "" {
		t.Errorf("the upstream read %q", all)
	}
}
