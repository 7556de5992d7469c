package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
)

// Hostile upstreams: a real TCP server that answers with raw bytes which
// break HTTP/1.1's framing on purpose, driven through the real proxy by
// raw-socket clients. Whatever one upstream response carries after its
// end must never become another request's response: the pooled
// connection it came on is closed, and every other client, before and
// while it happens, gets its own answer.

// hostileUpstream is a real upstream that reads each request with
// net/http's parser and answers it with what reply returns, in one write
// (so whatever follows a response is on the proxy's socket when the
// response is). It records every request with its connection and raw
// bytes.
type hostileUpstream struct {
	addr     string
	accepted atomic.Int64
	mu       sync.Mutex
	reqs     []upstreamRequest
	ended    map[int64]chan struct{} // by connection: closed when it ends
}

// upstreamRequest is one request as it reached the upstream.
type upstreamRequest struct {
	conn int64  // the connection's number, in accept order from 1
	raw  string // exactly the bytes of this request
	req  *http.Request
	body string
}

// upstreamReply is the raw bytes for one request, and whether the upstream
// closes its connection after writing them.
type upstreamReply func(req *http.Request, body string) (raw string, closeAfter bool)

// recordingReader keeps a copy of what it reads.
type recordingReader struct {
	r io.Reader
	b []byte
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.b = append(r.b, p[:n]...)
	return n, err
}

func startHostileUpstream(t testing.TB, reply upstreamReply) *hostileUpstream {
	t.Helper()
	u := &hostileUpstream{ended: map[int64]chan struct{}{}}
	u.addr = serveTCP(t, "127.0.0.13", func(c net.Conn) {
		n := u.accepted.Add(1)
		ended := make(chan struct{})
		u.mu.Lock()
		u.ended[n] = ended
		u.mu.Unlock()
		defer close(ended)
		rec := &recordingReader{r: c}
		br := bufio.NewReader(rec)
		off := 0
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			end := len(rec.b) - br.Buffered()
			u.mu.Lock()
			u.reqs = append(u.reqs, upstreamRequest{conn: n, raw: string(rec.b[off:end]), req: req, body: string(body)})
			u.mu.Unlock()
			off = end
			raw, closeAfter := reply(req, string(body))
			if _, err := io.WriteString(c, raw); err != nil || closeAfter {
				return
			}
		}
	})
	return u
}

// requests returns the requests received so far.
func (u *hostileUpstream) requests() []upstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

// waitEnded waits until connection n has ended (the proxy closed it).
func (u *hostileUpstream) waitEnded(t *testing.T, n int64) {
	t.Helper()
	u.mu.Lock()
	ended := u.ended[n]
	u.mu.Unlock()
	if ended == nil {
		t.Fatalf("no upstream connection %d", n)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatalf("upstream connection %d still open: the proxy kept it", n)
	}
}

// injected is a whole response an upstream slips in after its answer:
// pooled with the connection, it would be the next request's response.
const injected = "HTTP/1.1 200 OK\r\nX-Id: injected\r\nContent-Length: 8\r\n\r\nINJECTED"

// legitReply answers /legit/<id> with <id> in X-Id and the body.
func legitReply(req *http.Request, _ string) string {
	id := strings.TrimPrefix(req.URL.Path, "/legit/")
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Id: %s\r\nContent-Length: %d\r\n\r\n%s", id, len(id), id)
}

// httpOnly makes cfg's listener HTTP only: on a busy machine a client's
// first bytes can come after the protocol detection timeout, which would
// have an auto listener take the connection for TCP.
func httpOnly(cfg *config.Config) *config.Config {
	cfg.Listeners[0].Protocol = config.ProtocolHTTP
	return cfg
}

// rawClient is a client's own connection to the proxy's listener, on
// which it writes requests byte by byte as given and reads responses with
// net/http's parser.
type rawClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRawClient(t testing.TB, s *Server) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(proxyURL(s), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A bound on a test that would hang, not a synchronisation.
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{c: c, br: bufio.NewReader(c)}
}

// do sends method target (a body as a Content-Length body) and reads the
// response and its body.
func (rc *rawClient) do(method, target, body string) (*http.Response, string, error) {
	head := method + " " + target + " HTTP/1.1\r\nHost: echo\r\n"
	if body != "" {
		head += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	return rc.send(method, head+"\r\n"+body)
}

// send writes raw, a request of method, and reads its response.
func (rc *rawClient) send(method, raw string) (*http.Response, string, error) {
	if _, err := io.WriteString(rc.c, raw); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// legit sends GET /legit/id on its own connection and checks that the
// answer is id's own.
func legit(t *testing.T, s *Server, id string) {
	t.Helper()
	resp, body, err := dialRawClient(t, s).do("GET", "/legit/"+id, "")
	switch {
	case err != nil:
		t.Errorf("legitimate request %s: %v", id, err)
	case resp.StatusCode != 200 || resp.Header.Get("X-Id") != id || body != id:
		t.Errorf("legitimate request %s got another's answer: %d X-Id %q body %q", id, resp.StatusCode, resp.Header.Get("X-Id"), body)
	}
}

// hostileResponse is one misbehaving response and what the client that
// asked for it must get.
type hostileResponse struct {
	name   string
	method string
	body   string // the request body (POST)
	reply  string // the upstream's raw bytes, answer and what follows
	// What the hostile request's client gets.
	code     int
	respBody string
	header   map[string]string
	// upe: the response is refused as Envoy refuses it (502, UPE).
	upe bool
}

var bigBody = strings.Repeat("b", 16<<10)

var hostileResponses = []hostileResponse{{
	// What follows a Content-Length body is another response: the client
	// gets the body, the connection is closed.
	name: "bytes after a Content-Length body", method: "GET",
	reply: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + injected,
	code:  200, respBody: "hello",
}, {
	name: "garbage after a Content-Length body", method: "GET",
	reply: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello, and more\r\n",
	code:  200, respBody: "hello",
}, {
	// A body larger than the reader's buffer is read past it straight
	// from the socket, which keeps what follows: found when the
	// connection is next taken from the pool.
	name: "bytes after a body left on the socket", method: "GET",
	reply: "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(bigBody)) + "\r\n\r\n" + bigBody + injected,
	code:  200, respBody: bigBody,
}, {
	// A response to HEAD ends with its head (RFC 9112, 6.3): its
	// Content-Length is the GET's, the bytes after it are not its body.
	name: "body on a HEAD response", method: "HEAD",
	reply: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + injected,
	code:  200, respBody: "", header: map[string]string{"Content-Length": "5"},
}, {
	name: "body after a 204", method: "GET",
	reply: "HTTP/1.1 204 No Content\r\n\r\n" + injected,
	code:  204, respBody: "",
}, {
	name: "body after a 304", method: "GET",
	reply: "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nEtag: \"e\"\r\n\r\nhello" + injected,
	code:  304, respBody: "", header: map[string]string{"Etag": `"e"`},
}, {
	name: "bytes after a chunked body's end", method: "GET",
	reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + injected,
	code:  200, respBody: "hello",
}, {
	// Read as Content-Length this is a 5-byte body and an injected
	// response; read as chunked, one response: smuggling material.
	name: "Content-Length and Transfer-Encoding", method: "GET",
	reply: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5\r\nhello\r\n" + fmt.Sprintf("%x\r\n%s\r\n", len(injected), injected) + "0\r\n\r\n",
	upe: true,
}, {
	name: "two different Content-Lengths", method: "GET",
	reply: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 13\r\n\r\nhello" + injected,
	upe:   true,
}, {
	name: "invalid Content-Length", method: "GET",
	reply: "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello" + injected,
	upe:   true,
}, {
	name: "Content-Length on a 204", method: "GET",
	reply: "HTTP/1.1 204 No Content\r\nContent-Length: " + strconv.Itoa(len(injected)) + "\r\n\r\n" + injected,
	upe:   true,
}, {
	name: "Transfer-Encoding on a 204", method: "GET",
	reply: "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + injected,
	upe:   true,
}, {
	// An informational response has no body: its bytes are the start
	// of the final response, which then does not parse.
	name: "body on a 103", method: "GET",
	reply: "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nhello" + injected,
	upe:   true,
}, {
	// A request with a (small) body: the pool sends it too.
	name: "bytes after the answer to an upload", method: "POST", body: "upload",
	reply: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + injected,
	code:  200, respBody: "hello",
}}

// upeBody is Envoy's local reply to an upstream protocol error.
const upeBody = "upstream connect error or disconnect/reset before headers. reset reason: protocol error"

func TestHostileUpstreamResponses(t *testing.T) {
	for _, tc := range hostileResponses {
		t.Run(tc.name, func(t *testing.T) { testHostileResponse(t, tc) })
	}
}

func testHostileResponse(t *testing.T, tc hostileResponse) {
	u := startHostileUpstream(t, func(req *http.Request, body string) (string, bool) {
		if strings.HasPrefix(req.URL.Path, "/hostile/") {
			return tc.reply, false
		}
		return legitReply(req, body), false
	})
	s, logs := startServer(t, httpOnly(testConfig(noRetry, testCluster("echo", endpoint(u.addr, "a")))))
	var hostileSent atomic.Int64
	var legitSent []string
	var legitMu sync.Mutex

	// checkHostile sends one hostile request on rc and checks its answer,
	// then a legitimate one on the same connection: the hostile answer
	// was framed right downstream too.
	checkHostile := func(rc *rawClient, id string) {
		t.Helper()
		n := hostileSent.Add(1)
		resp, body, err := rc.do(tc.method, "/hostile/"+strconv.FormatInt(n, 10), tc.body)
		if err != nil {
			t.Errorf("hostile request: %v", err)
			return
		}
		wantCode, wantBody := tc.code, tc.respBody
		if tc.upe {
			wantCode, wantBody = http.StatusBadGateway, upeBody
		}
		if resp.StatusCode != wantCode || body != wantBody {
			t.Errorf("hostile request got %d %q, want %d %q", resp.StatusCode, trim(body), wantCode, trim(wantBody))
		}
		for k, v := range tc.header {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("hostile request's %s %q, want %q", k, got, v)
			}
		}
		legitMu.Lock()
		legitSent = append(legitSent, id)
		legitMu.Unlock()
		resp, body, err = rc.do("GET", "/legit/"+id, "")
		switch {
		case err != nil:
			t.Errorf("the hostile client's next request %s on its connection: %v", id, err)
		case resp.StatusCode != 200 || body != id:
			t.Errorf("the hostile client's next request %s on its connection got %d %q", id, resp.StatusCode, trim(body))
		}
	}
	sendLegit := func(id string) {
		legitMu.Lock()
		legitSent = append(legitSent, id)
		legitMu.Unlock()
		legit(t, s, id)
	}

	checkHostile(dialRawClient(t, s), "after-hostile")
	if t.Failed() {
		return
	}
	// Legitimate clients on new connections (each lands on a worker by
	// its address) until both workers have dialled a new upstream
	// connection after the hostile one: the hostile request's worker
	// has then had the chance to reuse its connection.
	for i := 0; u.accepted.Load() < 3; i++ {
		if i == 200 {
			t.Fatalf("%d upstream connections after 200 requests: one worker never dialled again", u.accepted.Load())
		}
		sendLegit(fmt.Sprintf("seq-%d", i))
	}
	u.waitEnded(t, 1)
	if n := stat(t, s, "cluster.echo.upstream_cx_protocol_error"); n != 1 {
		t.Errorf("upstream_cx_protocol_error %d after one hostile answer, want 1", n)
	}

	// Hostile and legitimate clients at once.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				sendLegit(fmt.Sprintf("conc-%d-%d", g, i))
			}
		})
	}
	wg.Go(func() {
		for i := range 10 {
			checkHostile(dialRawClient(t, s), fmt.Sprintf("conc-hostile-%d", i))
		}
	})
	wg.Wait()

	// What reached the upstream: each request once, whole, alone in its
	// bytes; nothing more on a connection after a hostile answer.
	reqs := u.requests()
	var got []string
	hostileConns := map[int64]bool{}
	for _, r := range reqs {
		got = append(got, r.req.Method+" "+r.req.URL.Path)
		if r.req.Host != "echo" {
			t.Errorf("upstream request %s %s with Host %q", r.req.Method, r.req.URL, r.req.Host)
		}
		again, err := http.ReadRequest(bufio.NewReader(strings.NewReader(r.raw)))
		if err != nil {
			t.Errorf("upstream request %s %s: its bytes do not parse: %v\n%q", r.req.Method, r.req.URL, err, r.raw)
			continue
		}
		b, _ := io.ReadAll(again.Body)
		if again.URL.Path != r.req.URL.Path || string(b) != r.body {
			t.Errorf("upstream request bytes %q are not %s %s", r.raw, r.req.Method, r.req.URL)
		}
		if strings.HasPrefix(r.req.URL.Path, "/hostile/") {
			if r.body != tc.body {
				t.Errorf("upstream got body %q for the hostile request, sent %q", r.body, tc.body)
			}
			if hostileConns[r.conn] {
				t.Errorf("upstream connection %d carried two hostile requests", r.conn)
			}
			hostileConns[r.conn] = true
			continue
		}
		if hostileConns[r.conn] {
			t.Errorf("upstream connection %d carried %s %s after a hostile answer", r.conn, r.req.Method, r.req.URL)
		}
	}
	var want []string
	for i := int64(1); i <= hostileSent.Load(); i++ {
		want = append(want, tc.method+" /hostile/"+strconv.FormatInt(i, 10))
	}
	for _, id := range legitSent {
		want = append(want, "GET /legit/"+id)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the upstream got %d requests, the clients sent %d:\ngot  %q\nwant %q", len(got), len(want), got, want)
	}
	if tc.upe {
		logs.waitLine(t, `"`+tc.method+` /hostile/1 HTTP/1.1" 502 UPE `, "upstream_reset_before_response_started{protocol_error}")
	}
}

// The fallback Transport (requests the pool does not write: here a body
// with trailers) never reuses a connection, so what follows one of its
// responses reaches no other request either. net/http's Transport would
// pool the connection before it looks for bytes after the response, and
// a request waiting for a connection then takes them as its answer.
func TestHostileUpstreamFallbackTransport(t *testing.T) {
	u := startHostileUpstream(t, func(req *http.Request, body string) (string, bool) {
		if strings.HasPrefix(req.URL.Path, "/hostile/") {
			return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + injected, false
		}
		id := strings.TrimPrefix(req.URL.Path, "/legit/")
		if body != "up-"+id || req.Trailer.Get("X-Sum") != id {
			id = "wrong-upload"
		}
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Id: %s\r\nContent-Length: %d\r\n\r\n%s", id, len(id), id), false
	})
	s, _ := startServer(t, httpOnly(testConfig(noRetry, testCluster("echo", endpoint(u.addr, "a")))))
	withTrailer := func(path, body, sum string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: echo\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\nX-Sum: %s\r\n\r\n", len(body), body, sum)
	}
	var sent atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 20 {
			sent.Add(1)
			resp, body, err := dialRawClient(t, s).send("POST", withTrailer(fmt.Sprintf("/hostile/%d", i), "x", "x"))
			if err != nil || resp.StatusCode != 200 || body != "hello" {
				t.Errorf("hostile upload %d: %v %q", i, err, body)
			}
		}
	})
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				id := fmt.Sprintf("%d-%d", g, i)
				sent.Add(1)
				resp, body, err := dialRawClient(t, s).send("POST", withTrailer("/legit/"+id, "up-"+id, id))
				if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Id") != id || body != id {
					t.Errorf("upload %s got another's answer: %v X-Id %q body %q", id, err, resp.Header.Get("X-Id"), body)
				}
			}
		})
	}
	wg.Wait()
	conns := map[int64]bool{}
	reqs := u.requests()
	for _, r := range reqs {
		if conns[r.conn] {
			t.Errorf("the fallback reused upstream connection %d", r.conn)
		}
		conns[r.conn] = true
	}
	if int64(len(reqs)) != sent.Load() {
		t.Errorf("the upstream got %d requests, the clients sent %d", len(reqs), sent.Load())
	}
}

// trim shortens a long body for a message.
func trim(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%s...(%d bytes)", s[:64], len(s))
	}
	return s
}
