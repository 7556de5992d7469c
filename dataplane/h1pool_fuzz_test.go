package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// FuzzH1PoolReuse sends a sequence of requests through the real proxy
// (one worker: one pool, every idle connection a candidate for the next
// request) to a real upstream that answers each with the response its
// plan says: valid framing or not, bytes after it or not, HEAD, 204 and
// 304 with and without a body where none may be, a 103 first. Each
// request carries its own id, which the upstream echoes in X-Id and the
// body. The invariants: a client gets its own response, as RFC 9112
// frames it, or an error (a 5xx of the proxy's own, a closed
// connection), never another request's bytes; a response that is clean
// (valid framing, nothing after it) reaches its client; and no request
// reaches the upstream on a connection after a response that was not
// clean.
func FuzzH1PoolReuse(f *testing.F) {
	// Seeds: three bytes a request (fuzzPlan).
	seq := func(steps ...[3]byte) []byte {
		var b []byte
		for _, s := range steps {
			b = append(b, s[:]...)
		}
		return b
	}
	const (
		get, head, post           = 0, 1, 2
		info, onBodiless, closing = 0x10, 0x20, 0x40
		s200, s204, s304, s404    = 0, 2, 3, 4 // status selectors
	)
	st := func(status, framing byte) byte { return status + 5*framing }
	ex := func(extra, size byte) byte { return extra + 4*size }
	clean := [3]byte{get, st(s200, framingCL), ex(0, 2)}
	for _, s := range [][]byte{
		seq(clean, clean, clean),
		// A response after a Content-Length body; garbage after one
		// larger than the reader's buffer (left on the socket).
		seq([3]byte{get, st(s200, framingCL), ex(1, 2)}, clean, clean),
		seq([3]byte{get, st(s200, framingCL), ex(2, 4)}, clean, clean),
		// A body on a HEAD response, after a 204, after a 304; HEAD, 304
		// and chunked: no body.
		seq([3]byte{head | onBodiless, st(s200, framingCL), ex(1, 2)}, clean, clean),
		seq([3]byte{get, st(s204, framingCL), ex(1, 0)}, clean),
		seq([3]byte{get | onBodiless, st(s304, framingCL), ex(0, 2)}, clean),
		seq([3]byte{head, st(s304, framingChunked), ex(0, 3)}, clean),
		// Content-Length and chunked; two Content-Lengths; an invalid
		// one; Content-Length or chunked on a 204.
		seq([3]byte{get, st(s200, framingCLTE), ex(1, 2)}, clean),
		seq([3]byte{get, st(s200, framingTwoCL), ex(0, 2)}, clean),
		seq([3]byte{get, st(s404, framingBadCL), ex(0, 2)}, clean),
		seq([3]byte{get, st(s204, framingCL), ex(0, 2)}, clean),
		seq([3]byte{get, st(s204, framingChunked), ex(0, 0)}, clean),
		// A 103, then chunked with bytes after; a body to the
		// connection's end.
		seq([3]byte{get | info, st(s200, framingChunked), ex(1, 3)}, clean),
		seq([3]byte{get | closing, st(s200, framingNone), ex(2, 2)}, clean),
		// Uploads, sized and chunked.
		seq([3]byte{post, st(s200, framingCL), ex(1, 1)}, [3]byte{post, st(s200, framingChunked), ex(0, 2)}, clean),
		// The start of a response after a body, then HEAD.
		seq([3]byte{get | onBodiless, st(s200, framingCL), ex(3, 2)}, [3]byte{head, st(s200, framingCL), ex(0, 2)}, clean),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		plans := decodeFuzzPlans(data)
		if len(plans) == 0 {
			return
		}
		up := startFuzzUpstream(t, plans)
		cfg := httpOnly(testConfig(noRetry, testCluster("echo", endpoint(up.addr, "a"))))
		cfg.AccessLog.Path = "off"
		s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: io.Discard, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown()
		var rc *rawClient
		defer func() {
			if rc != nil {
				rc.c.Close() // before the drain, which would wait for it
			}
		}()
		for i, p := range plans {
			id := fmt.Sprintf("r%d", i)
			if rc == nil {
				rc = dialRawClient(t, s)
			}
			body := ""
			if p.method == http.MethodPost {
				body = "up-" + id
			}
			resp, got, err := rc.do(p.method, "/f/"+id, body)
			raw, isClean := p.response(id)
			want, wantBody := p.status, p.expectBody(id)
			switch {
			case err != nil && isClean:
				t.Fatalf("request %d (%+v): clean response %q failed: %v", i, p, trim(raw), err)
			case err != nil:
				// An error is an answer; the connection may be gone.
				rc.c.Close()
				rc = nil
			case resp.Header.Get("X-Id") == "" && resp.StatusCode >= 500 && !isClean:
				// The proxy's own error.
				if resp.Close {
					rc.c.Close()
					rc = nil
				}
			case resp.Header.Get("X-Id") != id || resp.StatusCode != want || got != wantBody:
				t.Fatalf("request %d (%+v) to an upstream answering %q got %d X-Id %q body %q, want %d %q %q",
					i, p, trim(raw), resp.StatusCode, resp.Header.Get("X-Id"), trim(got), want, id, trim(wantBody))
			}
		}
		if v := up.violations(); len(v) > 0 {
			t.Fatalf("requests on a connection after a response that was not clean:\n%s", strings.Join(v, "\n"))
		}
	})
}

// Framings of a fuzzed response.
const (
	framingCL      = iota // one Content-Length
	framingChunked        // Transfer-Encoding: chunked
	framingCLTE           // both
	framingTwoCL          // two different Content-Lengths
	framingBadCL          // an invalid Content-Length
	framingNone           // to the connection's end (Connection: close)
	numFramings
)

// fuzzPlan is what the upstream answers to one request.
type fuzzPlan struct {
	method string
	status int
	info   bool // a 103 Early Hints first
	// onBodiless: a body even where none may be (HEAD, 204, 304).
	onBodiless bool
	closing    bool // Connection: close, and the upstream closes
	framing    int
	size       int
	// extra follows the response: 0 nothing, 1 a whole response, 2
	// garbage, 3 the start of a response.
	extra int
}

// decodeFuzzPlans reads three bytes a plan: method and flags; status and
// framing; what follows and the body size.
func decodeFuzzPlans(data []byte) []fuzzPlan {
	var plans []fuzzPlan
	for len(data) >= 3 && len(plans) < 16 {
		b0, b1, b2 := data[0], data[1], data[2]
		data = data[3:]
		p := fuzzPlan{
			method:     [...]string{http.MethodGet, http.MethodHead, http.MethodPost}[int(b0&0x0f)%3],
			info:       b0&0x10 != 0,
			onBodiless: b0&0x20 != 0,
			closing:    b0&0x40 != 0,
			status:     [...]int{200, 200, 204, 304, 404}[b1%5],
			framing:    int(b1/5) % numFramings,
			extra:      int(b2 % 4),
			size:       [...]int{0, 2, 5, 3000, 17000}[int(b2/4)%5],
		}
		if p.framing == framingNone {
			p.closing = true
		}
		plans = append(plans, p)
	}
	return plans
}

// body is the plan's body for request id, made of id.
func (p fuzzPlan) body(id string) string {
	return strings.Repeat(id+".", p.size/(len(id)+1)+1)[:p.size]
}

func (p fuzzPlan) bodiless() bool {
	return p.method == http.MethodHead || p.status == http.StatusNoContent || p.status == http.StatusNotModified
}

// response is the upstream's raw answer to request id, in one write, and
// whether it is clean: valid framing (as checkFraming and net/http take
// it), no byte after it.
func (p fuzzPlan) response(id string) (raw string, clean bool) {
	var b strings.Builder
	clean = true
	if p.info {
		b.WriteString("HTTP/1.1 103 Early Hints\r\nX-Id: " + id + "\r\n\r\n")
	}
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nX-Id: %s\r\n", p.status, http.StatusText(p.status), id)
	if p.closing {
		b.WriteString("Connection: close\r\n")
	}
	body := p.body(id)
	chunked := false
	switch p.framing {
	case framingCL:
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
		clean = clean && !(p.status == http.StatusNoContent && len(body) > 0)
	case framingChunked:
		b.WriteString("Transfer-Encoding: chunked\r\n")
		chunked = true
		clean = clean && p.status != http.StatusNoContent
	case framingCLTE:
		fmt.Fprintf(&b, "Content-Length: %d\r\nTransfer-Encoding: chunked\r\n", len(body))
		chunked, clean = true, false
	case framingTwoCL:
		fmt.Fprintf(&b, "Content-Length: %d\r\nContent-Length: %d\r\n", len(body), len(body)+1)
		clean = false
	case framingBadCL:
		fmt.Fprintf(&b, "Content-Length: 0x%d\r\n", len(body))
		clean = false
	}
	b.WriteString("\r\n")
	if !p.bodiless() || p.onBodiless {
		start := b.Len()
		if chunked {
			if len(body) > 0 {
				fmt.Fprintf(&b, "%x\r\n%s\r\n", len(body), body)
			}
			b.WriteString("0\r\n\r\n")
		} else {
			b.WriteString(body)
		}
		if p.bodiless() && b.Len() > start {
			clean = false // bytes after a response that has no body
		}
	}
	if e := p.extraBytes(); e != "" {
		b.WriteString(e)
		if p.framing != framingNone || p.bodiless() {
			clean = false
		}
	}
	return b.String(), clean
}

func (p fuzzPlan) extraBytes() string {
	switch p.extra {
	case 1:
		return injected
	case 2:
		return "garbage\r\n"
	case 3:
		return "HTTP/1.1 200 OK\r\nX-Id: injected\r\nContent-Len"
	}
	return ""
}

// expectBody is the body request id's client gets when the response is
// delivered, as RFC 9112 frames it.
func (p fuzzPlan) expectBody(id string) string {
	switch {
	case p.bodiless():
		return ""
	case p.framing == framingNone:
		return p.body(id) + p.extraBytes() // to the connection's end
	}
	return p.body(id)
}

// fuzzUpstream answers /f/r<i> with plans[i]'s response and notes every
// request that comes on a connection after an answer that was not clean.
type fuzzUpstream struct {
	addr string
	mu   sync.Mutex
	bad  []string
}

func startFuzzUpstream(t *testing.T, plans []fuzzPlan) *fuzzUpstream {
	u := &fuzzUpstream{}
	l, err := net.Listen("tcp", "127.0.0.14:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	u.addr = l.Addr().String()
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				u.serve(c, plans)
			})
		}
	})
	return u
}

func (u *fuzzUpstream) serve(c net.Conn, plans []fuzzPlan) {
	br := bufio.NewReader(c)
	dirty := ""
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if dirty != "" {
			u.mu.Lock()
			u.bad = append(u.bad, fmt.Sprintf("%s %s after %q", req.Method, req.URL, dirty))
			u.mu.Unlock()
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		var i int
		if _, err := fmt.Sscanf(req.URL.Path, "/f/r%d", &i); err != nil || i < 0 || i >= len(plans) {
			return
		}
		p := plans[i]
		raw, clean := p.response(fmt.Sprintf("r%d", i))
		if _, err := io.WriteString(c, raw); err != nil || p.closing {
			return
		}
		if !clean {
			dirty = trim(raw)
		}
	}
}

func (u *fuzzUpstream) violations() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.bad...)
}
