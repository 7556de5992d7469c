package dataplane

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
)

// rawExchange writes raw bytes to the proxy's outbound listener and reads
// until the proxy closes the connection, as it must for each request given
// here (an error, HTTP/1.0 or Connection: close), or 2 s pass.
func rawExchange(t *testing.T, s *Server, raw string) string {
	t.Helper()
	c := dialProxy(t, s)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	if rawio.IsDeadline(err) { // (a reset is a close too: a 431 leaves the rest unread)
		t.Errorf("the server did not close the connection: %v; read %q", err, tail(string(b), 200))
	}
	return string(b)
}

// Malformed requests get 400 and oversized headers 431, each with an
// access-log line flagged DPE, and the connection closes.
func TestH1ServerBadRequests(t *testing.T) {
	fastHTTP1Only(t, "Envoy's refusals of malformed heads, with their response code details in the access log")
	s, logs := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(upstream(t, "127.0.0.11", named("a")), "a"))))
	if got := rawExchange(t, s, "GET / HTTP/1.1\r\nHost: echo\r\nBad Header Line\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 400 ") {
		t.Errorf("malformed header: %q", got)
	}
	logs.waitLine(t, `"GET / HTTP/1.1" 400 DPE `, "http1.codec_error", `"malformed header line 'Bad Header Line'"`)
	big := "GET / HTTP/1.1\r\nHost: echo\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n"
	if got := rawExchange(t, s, big); !strings.HasPrefix(got, "HTTP/1.1 431 ") {
		t.Errorf("70 KiB header: %q", tail(got, 200))
	}
	logs.waitLine(t, `"- - HTTP/1.1" 431 DPE `)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Framing: HTTP/1.0 gets its answer and a close; HEAD gets headers only;
// two pipelined requests get two answers in order; a chunked upload
// arrives whole; a request asking for 100 Continue gets it before its body
// is read.
func TestH1ServerFraming(t *testing.T) {
	echo := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s body=%q", r.Method, r.URL.Path, b)
	}))
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(echo, "a"))))

	got := rawExchange(t, s, "GET /old HTTP/1.0\r\nHost: echo\r\n\r\n")
	if testHTTP1Server == HTTP1ServerNetHTTP {
		// net/http's codec answers HTTP/1.0 in HTTP/1.0 and closes
		// without saying so (rawExchange saw the close).
		if !strings.HasPrefix(got, "HTTP/1.0 200 ") || !strings.HasSuffix(got, `GET /old body=""`) {
			t.Errorf("HTTP/1.0: %q", got)
		}
	} else if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.Contains(got, "Connection: close") || !strings.HasSuffix(got, `GET /old body=""`) {
		t.Errorf("HTTP/1.0: %q", got)
	}
	got = rawExchange(t, s, "HEAD /h HTTP/1.1\r\nHost: echo\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.HasSuffix(got, "\r\n\r\n") {
		t.Errorf("HEAD: %q", got)
	}
	got = rawExchange(t, s, "GET /one HTTP/1.1\r\nHost: echo\r\n\r\nGET /two HTTP/1.1\r\nHost: echo\r\nConnection: close\r\n\r\n")
	if i, j := strings.Index(got, `GET /one body=""`), strings.Index(got, `GET /two body=""`); i < 0 || j < i {
		t.Errorf("pipelined: %q", got)
	}
	got = rawExchange(t, s, "POST /up HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	if !strings.HasSuffix(got, `POST /up body="hello world"`) {
		t.Errorf("chunked upload: %q", got)
	}

	// 100-continue: the body is sent only once the proxy says so.
	c := dialProxy(t, s)
	io.WriteString(c, "POST /ask HTTP/1.1\r\nHost: echo\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("before the body: %q %v", line, err)
	}
	br.ReadString('\n')
	io.WriteString(c, "abc")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != `POST /ask body="abc"` {
		t.Errorf("after 100 Continue: %d %q", resp.StatusCode, b)
	}
}

// curl, a real client, through the proxy: a large upload (curl sends
// Expect: 100-continue above 1 MiB) and a keep-alive reuse.
func TestH1ServerCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed (.ci/run installs it): %v", err)
	}
	echo := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d\n", n)
	}))
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(echo, "a"))))
	body := bytes.Repeat([]byte("x"), 3<<20)
	cmd := exec.Command("curl", "-sS", "-H", "Host: echo", "--data-binary", "@-", proxyURL(s)+"/up", proxyURL(s)+"/up")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "3145728\n") {
		t.Fatalf("curl upload: %v %q", err, out)
	}
}

// A request that asked for 100 Continue and got a final answer instead
// (no route) is not waited for: the connection closes after the answer.
func TestH1ServerExpectContinueRefused(t *testing.T) {
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(upstream(t, "127.0.0.11", named("a")), "a"))))
	start := time.Now()
	got := rawExchange(t, s, "POST /x HTTP/1.1\r\nHost: nowhere\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 404 ") || strings.Contains(got, "100 Continue") {
		t.Errorf("answer: %q", got)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the connection stayed open %v waiting for a body the client would not send", d)
	}
}

// A body the handler did not read (no route) is skipped: the next request
// on the connection is answered, not parsed out of the body.
func TestH1ServerUnreadBodySkipped(t *testing.T) {
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(upstream(t, "127.0.0.11", named("a")), "a"))))
	got := rawExchange(t, s, "POST /x HTTP/1.1\r\nHost: nowhere\r\nContent-Length: 5\r\n\r\nGET /"+
		"GET /again HTTP/1.1\r\nHost: nowhere\r\nConnection: close\r\n\r\n")
	if strings.Count(got, "HTTP/1.1 404 ") != 2 || strings.Contains(got, " 400 ") {
		t.Errorf("two answers expected: %q", got)
	}
}

// TestH1RequestHeadersPerRequest: the requests of one keep-alive
// connection reach the upstream each with its own headers, none left
// from the one before, with an HTTP/1.1 upstream (the request header map
// is the connection's, reused) and an h2c one (whose transport may read
// the map after the request, so each request gets a new one). Header
// counts vary around the reused map's limit.
func TestH1RequestHeadersPerRequest(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pads := 0
		for k := range r.Header {
			if strings.HasPrefix(k, "X-Pad-") {
				pads++
			}
		}
		fmt.Fprintf(w, "%s|%s|%d|%s", r.Header.Get("X-Seq"), r.Header.Get("X-Even"), pads, r.URL.Path)
	})
	for _, proto := range []string{"http1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.11:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: echo, Protocols: new(http.Protocols)}
			srv.Protocols.SetHTTP1(true)
			srv.Protocols.SetUnencryptedHTTP2(true)
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { srv.Close() })
			cl := testCluster("echo", endpoint(l.Addr().String(), "a"))
			if proto == "h2c" {
				cl.Protocol = config.UpstreamHTTP2
			}
			s, _ := startServer(t, testConfig(noRetry, cl))
			c := dialProxy(t, s)
			br := bufio.NewReader(c)
			for i := range 40 {
				var b strings.Builder
				fmt.Fprintf(&b, "GET /r%d HTTP/1.1\r\nHost: echo\r\nX-Seq: %d\r\n", i, i)
				even := ""
				if i%2 == 0 {
					even = fmt.Sprint(i)
					fmt.Fprintf(&b, "X-Even: %s\r\n", even)
				}
				pads := (i * 7) % 21 // 0-20 more lines: 3-23 in all
				for k := range pads {
					fmt.Fprintf(&b, "X-Pad-%d: %d\r\n", k, i)
				}
				b.WriteString("\r\n")
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.WriteString(c, b.String()); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, body, err)
				}
				if want := fmt.Sprintf("%d|%s|%d|/r%d", i, even, pads, i); string(body) != want {
					t.Errorf("request %d: the upstream saw %q, want %q", i, body, want)
				}
			}
		})
	}
}

// One keep-alive connection's requests share its writer and, while
// nothing can still hold it, its request context (h1server.Writer,
// Conn.reqCtxKept). Each request must still get its own route timeout and
// client-gone watch: an earlier request's alarm (the clock lists it until
// its next tick) never cuts a later one short, a timed-out or cancelled
// context is not reused, and a request with a body leaves the next one a
// new writer.
func TestH1ConnectionReusesRequestState(t *testing.T) {
	fastHTTP1Only(t, "the writer and request context a keep-alive connection's requests share are the fast server's internals (the fallback closes the connection after a route timeout)")
	gone := make(chan struct{}, 1) // the request the client leaves during arrived
	up := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone" {
			gone <- struct{}{}
		}
		if ms := r.URL.Query().Get("ms"); ms != "" {
			d, _ := time.ParseDuration(ms + "ms")
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "ok %s %d", r.URL.Path, len(body))
	}))
	const timeout = time.Second // on the worker clock (>= clock.PreciseBelow)
	cfg := testConfig(noRetry, testCluster("echo", endpoint(up, "a")))
	cfg.Listeners[0].Routes[0].Timeout = timeout
	s, logs := startServer(t, cfg)
	c := dialProxy(t, s)
	br := bufio.NewReader(c)
	send := func(req string) (*http.Response, string) {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatalf("write %q: %v", req, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response to %q: %v", req, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res, string(b)
	}
	get := func(path string) (int, string) {
		t.Helper()
		res, body := send("GET " + path + " HTTP/1.1\r\nHost: echo\r\n\r\n")
		return res.StatusCode, body
	}
	quick := func(n int, tag string) {
		t.Helper()
		for i := range n {
			p := fmt.Sprintf("/%s%d", tag, i)
			if code, body := get(p); code != 200 || body != "ok "+p+" 0" {
				t.Fatalf("%s: %d %q", p, code, body)
			}
		}
	}
	slowOK := func(ms int) {
		t.Helper()
		p := fmt.Sprintf("/slow?ms=%d", ms)
		start := time.Now()
		if code, body := get(p); code != 200 || body != "ok /slow 0" {
			t.Fatalf("%s after %v: %d %q (an earlier request's timeout cut it?)", p, time.Since(start), code, body)
		}
	}
	quick(50, "a")
	slowOK(600) // the 50 stopped alarms before it must not fire on it
	// The route timeout still fires on the shared writer and context.
	start := time.Now()
	if code, body := get("/slow?ms=3000"); code != 504 || body != "upstream request timeout" {
		t.Fatalf("a request over the route timeout got %d %q", code, body)
	}
	if d := time.Since(start); d < timeout {
		t.Errorf("the %v route timeout fired after %v", timeout, d)
	}
	logs.waitLine(t, `"GET /slow?ms=3000 HTTP/1.1" 504 UT `)
	// The timed-out context is not reused: what follows succeeds.
	quick(20, "b")
	slowOK(600)
	// A request with a body, then bodiless ones (a new writer).
	res, body := send("POST /post HTTP/1.1\r\nHost: echo\r\nContent-Length: 5\r\n\r\nhello")
	if res.StatusCode != 200 || body != "ok /post 5" {
		t.Fatalf("POST: %d %q", res.StatusCode, body)
	}
	quick(20, "c")
	slowOK(600)
	// The client-gone watch still works after many requests: the client
	// leaves during a slow request (DC).
	if _, err := io.WriteString(c, "GET /gone?ms=2000 HTTP/1.1\r\nHost: echo\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the request the client leaves never reached the upstream")
	}
	c.Close()
	logs.waitLine(t, `"GET /gone?ms=2000 HTTP/1.1" 0 DC `)
}

// A connection the fast server takes from dispatch writes through the raw
// socket that queues a response's last bytes for the next read (Linux):
// the server is handed the socket's raw I/O, not the plain connection.
func TestH1ServerQueuesOnTheRawSocket(t *testing.T) {
	fastHTTP1Only(t, "the queued writes are the fast server's")
	if runtime.GOOS != "linux" {
		t.Skip("raw socket I/O (rawio.Queuer) is Linux's only")
	}
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(upstream(t, "127.0.0.11", named("a")), "a"))))
	c := dialProxy(t, s)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /one HTTP/1.1\r\nHost: echo\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("through the proxy: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	// The connection is kept alive and waits for its next request.
	served, queuing := 0, 0
	for _, w := range s.workers {
		served += w.h1.Len()
		queuing += w.h1.Queuing()
	}
	if served != 1 || queuing != 1 {
		t.Errorf("fast-server connections: %d, of which %d queue their writes; want 1 and 1", served, queuing)
	}
}
