package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// rawUpstream answers each request read on a connection with reply(n),
// n counting requests over all connections, and closes the connection
// after it when closeAfter is true (without saying so in the response,
// like an upstream whose idle timeout fires right after answering). It
// counts connections and reports each close in closed.
func rawUpstream(t *testing.T, reply func(n int64) string, closeAfter bool) (addr string, conns *atomic.Int64, closed chan struct{}) {
	conns, closed = &atomic.Int64{}, make(chan struct{}, 100)
	var reqs atomic.Int64
	addr = serveTCP(t, "127.0.0.12", func(c net.Conn) {
		conns.Add(1)
		defer func() { closed <- struct{}{} }()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, reply(reqs.Add(1))); err != nil || closeAfter {
				return
			}
		}
	})
	return addr, conns, closed
}

func okReply(int64) string { return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" }

// Sequential requests share one upstream connection.
func TestH1PoolReusesConnections(t *testing.T) {
	addr, conns, _ := rawUpstream(t, okReply, false)
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(addr, "a"))))
	client := &http.Client{Transport: &http.Transport{}}
	for i := 0; i < 20; i++ {
		if code, body, _ := get(t, client, s, "/reuse"); code != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 sequential requests used %d upstream connections, want 1", n)
	}
	if n := stat(t, s, "cluster.echo.upstream_cx_total"); n != 1 {
		t.Errorf("upstream_cx_total = %d, want 1", n)
	}
}

// An upstream that closes each connection after its response: the pooled
// connection is found closed, and the next request goes on a new one with
// no failure (GET: retried after the failed write or read; POST without a
// body: the idle connection is checked before use).
func TestH1PoolUpstreamClosedIdleConnection(t *testing.T) {
	addr, conns, closed := rawUpstream(t, okReply, true)
	s, logs := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(addr, "a"))))
	client := &http.Client{Transport: &http.Transport{}}
	send := func(method string) {
		t.Helper()
		req, _ := http.NewRequest(method, proxyURL(s)+"/"+strings.ToLower(method), nil)
		req.Host = "echo"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("%s: %d %q", method, resp.StatusCode, b)
		}
		<-closed // the upstream has closed this connection
	}
	send("GET")
	send("GET")
	send("POST")
	send("GET")
	if n := conns.Load(); n != 4 {
		t.Errorf("upstream connections %d, want 4 (one per request)", n)
	}
	waitFor(t, "the 4 access-log lines", func() bool { return len(logs.Lines()) >= 4 })
	for _, l := range logs.Lines() {
		if strings.Contains(l, " UC ") || strings.Contains(l, " 503 ") {
			t.Errorf("a request failed on a connection the upstream had closed: %s", l)
		}
	}
}

// A connection idle for the cluster's idle timeout is closed by the proxy.
func TestH1PoolIdleTimeout(t *testing.T) {
	addr, _, closed := rawUpstream(t, okReply, false)
	c := testCluster("echo", endpoint(addr, "a"))
	c.IdleTimeout = 200 * time.Millisecond
	s, _ := startServer(t, testConfig(noRetry, c))
	start := time.Now()
	if code, _, _ := get(t, &http.Client{Transport: &http.Transport{}}, s, "/idle"); code != 200 {
		t.Fatalf("got %d", code)
	}
	select {
	case <-closed:
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Errorf("closed after %v, before the idle timeout", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the idle upstream connection was not closed")
	}
	if n := stat(t, s, "cluster.echo.upstream_cx_active"); n != 0 {
		t.Errorf("upstream_cx_active = %d after the idle close", n)
	}
}

// Informational responses (103 Early Hints) are skipped; chunked bodies
// and their trailers reach the client; the connection is reused after.
func TestH1PoolEarlyHintsAndTrailers(t *testing.T) {
	addr, conns, _ := rawUpstream(t, func(n int64) string {
		return "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n" +
			"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: 42\r\n\r\n"
	}, false)
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(addr, "a"))))
	client := &http.Client{Transport: &http.Transport{}}
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/chunked", nil)
		req.Host = "echo"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hello world" || resp.Trailer.Get("X-Checksum") != "42" {
			t.Fatalf("got %d %q trailer %v", resp.StatusCode, b, resp.Trailer)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("upstream connections %d, want 1", n)
	}
}

// A client that goes away while the body streams: the upstream connection
// is closed, not pooled (its unread rest would be the next response), and
// the next request gets a new connection and the right answer.
func TestH1PoolClientGoneMidBody(t *testing.T) {
	var n atomic.Int64
	addr, conns, closed := rawUpstream(t, func(int64) string {
		if n.Add(1) == 1 {
			// Headers and 16 KiB of a 1 MiB body, then nothing.
			return "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n" + strings.Repeat("x", 16<<10)
		}
		return okReply(0)
	}, false)
	s, logs := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(addr, "a"))))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL(s)+"/stall", nil)
	req.Host = "echo"
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8<<10)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || buf[0] != 'x' {
		t.Fatalf("the first 8 KiB: %v", err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream connection of the abandoned response was not closed")
	}
	logs.waitLine(t, `"GET /stall HTTP/1.1" 200 DC `)
	if code, body, _ := get(t, &http.Client{Transport: &http.Transport{}}, s, "/next"); code != 200 || body != "ok" {
		t.Fatalf("next request: %d %q", code, body)
	}
	if c := conns.Load(); c != 2 {
		t.Errorf("upstream connections %d, want 2 (the abandoned one is not reused)", c)
	}
}

// An upstream whose connection ends mid-body: the client's response is cut
// off and the access log says UC with Envoy's detail for a reset after the
// response started.
func TestHTTPUpstreamResetMidBody(t *testing.T) {
	addr, _, _ := rawUpstream(t, func(int64) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n" + strings.Repeat("x", 16<<10)
	}, true)
	s, logs := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(addr, "a"))))
	// The client over HTTP/1.1 (meshlet's server) and HTTP/2 prior
	// knowledge (x/net/http2's server, where the route timeout has a
	// context of its own).
	h2c := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	for _, tc := range []struct {
		proto string
		rt    http.RoundTripper
	}{{"HTTP/1.1", &http.Transport{}}, {"HTTP/2.0", h2c}} {
		req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/cut", nil)
		req.Host = "echo"
		resp, err := (&http.Client{Transport: tc.rt}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || len(b) >= 1<<20 {
			t.Errorf("%s: a cut-off body read whole: %d bytes, %v", tc.proto, len(b), err)
		}
		logs.waitLine(t, `"GET /cut `+tc.proto+`" 200 UC `, "upstream_reset_after_response_started{connection_termination}")
	}
}

// A sized body that trickles: what has arrived reaches the client without
// waiting for the rest (Envoy forwards data as it comes).
func TestHTTPTricklingBodyIsForwarded(t *testing.T) {
	// The first half of each response body must reach the client while
	// the upstream holds back the rest: a sized body on the pool (GET),
	// one on the fallback transport (POST with a body), a chunked one.
	for _, tc := range []struct {
		name, method, head, first, rest string
	}{
		{"sized", http.MethodGet, "Content-Length: 10\r\n", "hello", "world"},
		{"sized-fallback", http.MethodPost, "Content-Length: 10\r\n", "hello", "world"},
		{"chunked", http.MethodGet, "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n", "5\r\nworld\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rest := make(chan struct{})
			addr := serveTCP(t, "127.0.0.12", func(c net.Conn) {
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, "HTTP/1.1 200 OK\r\n"+tc.head+"\r\n"+tc.first)
				<-rest
				io.WriteString(c, tc.rest)
			})
			s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(addr, "a"))))
			var body io.Reader
			if tc.method == http.MethodPost {
				body = strings.NewReader("upload")
			}
			req, _ := http.NewRequest(tc.method, proxyURL(s)+"/trickle", body)
			req.Host = "echo"
			got := make(chan string, 1)
			go func() {
				resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
				if err != nil {
					got <- err.Error()
					return
				}
				defer resp.Body.Close()
				b := make([]byte, 5)
				io.ReadFull(resp.Body, b)
				got <- string(b)
				io.ReadAll(resp.Body)
			}()
			select {
			case b := <-got:
				if b != "hello" {
					t.Errorf("first bytes %q", b)
				}
			case <-time.After(3 * time.Second):
				t.Error("the first half of the body did not reach the client before the rest was sent")
			}
			close(rest)
		})
	}
}

// writeRequestHead must put on the wire what Request.Write would, for the
// requests it takes.
func TestWriteRequestHeadMatchesRequestWrite(t *testing.T) {
	mk := func(method, target string, h http.Header) *http.Request {
		req, err := http.NewRequest(method, target, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, vv := range h {
			req.Header[k] = vv
		}
		return req
	}
	cases := []*http.Request{
		mk(http.MethodGet, "http://echo/a/b?x=1&y=%2F", http.Header{"X-Request-Id": {"r1"}, "Accept": {"a", "b"}}),
		mk(http.MethodPost, "http://echo:8080/form", http.Header{"User-Agent": {"curl/8"}}),
		mk(http.MethodDelete, "http://10.96.0.10/item/7", http.Header{"User-Agent": {""}, "X-Sp": {"  padded\t"}}),
		mk(http.MethodGet, "http://[fd00::1]:80/", nil),
		mk(http.MethodPut, "http://echo/p%20q", nil),
		// a head longer than the writer's buffer (built past its free space)
		mk(http.MethodGet, "http://echo/big", http.Header{"X-Big": {strings.Repeat("v", 5000)}, "X-After": {"a"}}),
	}
	// Each with no target known, the target as read, and one the URL no
	// longer says (a rewritten path): the line is the URL's each time.
	var targets []string
	for _, req := range cases {
		targets = append(targets, "", req.URL.RequestURI(), "/elsewhere?z=1")
	}
	for i, target := range targets {
		req := cases[i/3]
		var ours, theirs bytes.Buffer
		bw := bufio.NewWriter(&ours)
		if !writeRequestHead(bw, req, nil, target) {
			t.Fatalf("%s %s: not taken", req.Method, req.URL)
		}
		bw.Flush()
		if err := req.Write(&theirs); err != nil {
			t.Fatal(err)
		}
		a, err := http.ReadRequest(bufio.NewReader(&ours))
		if err != nil {
			t.Fatalf("%s %s: ours does not parse: %v\n%s", req.Method, req.URL, err, ours.String())
		}
		b, err := http.ReadRequest(bufio.NewReader(&theirs))
		if err != nil {
			t.Fatal(err)
		}
		if a.Method != b.Method || a.RequestURI != b.RequestURI || a.Host != b.Host || a.ContentLength != b.ContentLength ||
			!reflect.DeepEqual(a.Header, b.Header) {
			t.Errorf("%s %s:\nours   %s %s %s %d %v\ntheirs %s %s %s %d %v", req.Method, req.URL,
				a.Method, a.RequestURI, a.Host, a.ContentLength, a.Header, b.Method, b.RequestURI, b.Host, b.ContentLength, b.Header)
		}
	}
	// Left to Request.Write: a body, CONNECT, Connection: close, values
	// it would have to clean.
	withBody, _ := http.NewRequest(http.MethodPost, "http://echo/", strings.NewReader("x"))
	connect := mk(http.MethodConnect, "http://echo:443", nil)
	closing := mk(http.MethodGet, "http://echo/", nil)
	closing.Close = true
	folded := mk(http.MethodGet, "http://echo/", http.Header{"X-Folded": {"one\r\ntwo"}})
	nul := mk(http.MethodGet, "http://echo/", http.Header{"X-Nul": {"a\x00b"}})
	for _, req := range []*http.Request{withBody, connect, closing, folded, nul} {
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		if writeRequestHead(bw, req, nil, "") || bw.Buffered() > 0 {
			t.Errorf("%s %s (close %v): taken", req.Method, req.URL, req.Close)
		}
	}
}

// Request bodies, sized or chunked, reach the upstream whole and framed
// as sent, each on a connection of its own that is not kept (the fallback
// Transport would pool one before looking for bytes after its response);
// a bodiless request after them still uses the pool.
func TestH1PoolUploads(t *testing.T) {
	u := startHostileUpstream(t, func(req *http.Request, body string) (string, bool) {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body)+3, "up:"+body), false
	})
	s, _ := startServer(t, httpOnly(testConfig(noRetry, testCluster("echo", endpoint(u.addr, "a")))))
	rc := dialRawClient(t, s)
	big := strings.Repeat("0123456789", 10<<10)
	for i, tc := range []struct{ raw, body string }{
		{"POST /sized HTTP/1.1\r\nHost: echo\r\nContent-Length: 5\r\n\r\nhello", "hello"},
		{"POST /chunked HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", "hello"},
		{"PUT /big HTTP/1.1\r\nHost: echo\r\nContent-Length: " + strconv.Itoa(len(big)) + "\r\n\r\n" + big, big},
		{"GET /after HTTP/1.1\r\nHost: echo\r\n\r\n", ""},
	} {
		resp, body, err := rc.send("POST", tc.raw)
		if err != nil || resp.StatusCode != 200 || body != "up:"+tc.body {
			t.Fatalf("request %d: %v %q", i, err, trim(body))
		}
	}
	reqs := u.requests()
	if len(reqs) != 4 {
		t.Fatalf("the upstream got %d requests, want 4", len(reqs))
	}
	seen := map[int64]string{}
	for i, r := range reqs {
		if prev, ok := seen[int64(r.conn)]; ok && i < 3 {
			t.Errorf("request %d %s on upstream connection %d, which already carried %s: an upload's connection was reused", i, r.req.URL, r.conn, prev)
		}
		seen[int64(r.conn)] = r.req.URL.String()
	}
	if r := reqs[0]; r.body != "hello" || !strings.Contains(r.raw, "\r\nContent-Length: 5\r\n") || !strings.HasSuffix(r.raw, "\r\n\r\nhello") {
		t.Errorf("sized upload reached the upstream as %q", r.raw)
	}
	if r := reqs[1]; r.body != "hello" || !strings.Contains(r.raw, "\r\nTransfer-Encoding: chunked\r\n") || !strings.HasSuffix(r.raw, "0\r\n\r\n") {
		t.Errorf("chunked upload reached the upstream as %q", r.raw)
	}
	if r := reqs[2]; r.body != big {
		t.Errorf("big upload reached the upstream with %d bytes, want %d", len(r.body), len(big))
	}
}

// An upstream that answers before the request body is all there (a 413
// or 401 for an upload it refuses): the answer reaches the client at once,
// without waiting for the rest of the body, and the next request works.
func TestH1PoolAnswerBeforeUpload(t *testing.T) {
	fastHTTP1Only(t, "net/http reads what is left of the upload (up to 256 KiB) before it sends an answer that came first (h1Fallback)")
	addr := serveTCP(t, "127.0.0.12", func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.ContentLength > 0 {
				// The answer goes out before the body is read.
				if _, err := io.WriteString(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 3\r\n\r\nbig"); err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				continue
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	s, _ := startServer(t, httpOnly(testConfig(noRetry, testCluster("echo", endpoint(addr, "a")))))
	rc := dialRawClient(t, s)
	// A tenth of the body, and nothing more.
	if _, err := io.WriteString(rc.c, "POST /early HTTP/1.1\r\nHost: echo\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 10000)); err != nil {
		t.Fatal(err)
	}
	_ = rc.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: http.MethodPost})
	if err != nil {
		t.Fatalf("no early answer while the body is unfinished: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || string(b) != "big" {
		t.Fatalf("early answer: %d %q %v %v", resp.StatusCode, b, err, resp.Header)
	}
	if code, body, _ := get(t, &http.Client{Transport: &http.Transport{}}, s, "/next"); code != 200 || body != "ok" {
		t.Fatalf("next request: %d %q", code, body)
	}
}
