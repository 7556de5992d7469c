package h1server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
)

// infoKey is the tests' Options.InfoKey.
type infoKey struct{}

// testHandler is a connection's Handler: its streams run serve, and it
// counts the streams it made and records the refusals.
type testHandler struct {
	serve   func(rw *Writer, req *http.Request)
	held    atomic.Bool // every request's stream says Held
	mu      sync.Mutex
	streams int
	rejects []*h1.Reject
}

func (h *testHandler) NewStream() (Stream, *Writer) {
	h.mu.Lock()
	h.streams++
	h.mu.Unlock()
	s := &testStream{h: h}
	return s, &s.rw
}

func (h *testHandler) Rejected(r *h1.Reject) {
	h.mu.Lock()
	h.rejects = append(h.rejects, r)
	h.mu.Unlock()
}

// testStream is a testHandler's Stream.
type testStream struct {
	rw Writer
	h  *testHandler
}

func (s *testStream) Serve(req *http.Request) { s.h.serve(&s.rw, req) }
func (s *testStream) Ended()                  {}
func (s *testStream) Held() bool              { return s.h.held.Load() }
func (s *testStream) HeaderLent() bool        { return false }

// startServer serves the connections of a loopback listener with a
// Server whose requests run serve, each connection with a handler of its
// own.
func startServer(t *testing.T, serve func(rw *Writer, req *http.Request)) (*Server, string) {
	s, addr, _ := startServerWith(t, &testHandler{serve: serve})
	return s, addr
}

// startServerWith is startServer with every connection's handler h.
func startServerWith(t *testing.T, h *testHandler) (*Server, string, *testHandler) {
	t.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := New(Options{Draining: new(atomic.Bool), Clock: new(clock.Clock), Log: slog.New(slog.DiscardHandler), HTTPServer: &http.Server{},
		InfoKey: infoKey{}, MaxHeaderBytes: 60 << 10, IdleTimeout: 5 * time.Minute, TimeoutGrace: time.Second})
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := l.AcceptTCP()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Serve(new(Conn), h, ConnOptions{Context: ctx, TCP: c, Detected: bufio.NewReaderSize(rawio.IO(c), 4096), Raw: rawio.IO(c),
					RemoteAddr: c.RemoteAddr().String(), Info: "info", HeadersTimeout: 10 * time.Second, MaxHeaders: 100})
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		cancel()
		s.Drain(true)
		wg.Wait()
	})
	return s, l.Addr().String(), h
}

// dial connects to addr, closed when the test ends.
func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// A keep-alive connection's requests share one writer and stream, its
// request context carrying the connection's values, until a request
// leaves its writer possibly held (a body, or the stream says so): the
// next one gets a new stream. Each response is framed (by its size here)
// and dated.
func TestH1WriterReuse(t *testing.T) {
	h := &testHandler{}
	h.serve = func(rw *Writer, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		ctx := req.Context()
		fmt.Fprintf(rw, "%s %s %v %v %s", req.URL.Path, body, ctx.Value(infoKey{}), ctx.Value(http.ServerContextKey) != nil, req.RemoteAddr)
	}
	_, addr, _ := startServerWith(t, h)
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	send := func(raw, want string) {
		t.Helper()
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if got := string(b); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, c.LocalAddr().String()) {
			t.Errorf("%q: body %q, want %q and the client's address", raw, got, want)
		}
		if resp.ContentLength != int64(len(b)) || resp.Header.Get("Date") == "" {
			t.Errorf("%q: Content-Length %d for %d bytes, Date %q", raw, resp.ContentLength, len(b), resp.Header.Get("Date"))
		}
	}
	streams := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.streams
	}
	for range 3 {
		send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "/a  info true ")
	}
	if n := streams(); n != 1 {
		t.Errorf("three bodiless requests made %d streams, want 1", n)
	}
	send("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi", "/b hi info true ")
	send("GET /c HTTP/1.1\r\nHost: x\r\n\r\n", "/c  info true ")
	if n := streams(); n != 2 {
		t.Errorf("after a request with a body, %d streams, want 2", n)
	}
	h.held.Store(true)
	send("GET /d HTTP/1.1\r\nHost: x\r\n\r\n", "/d  info true ")
	send("GET /e HTTP/1.1\r\nHost: x\r\n\r\n", "/e  info true ")
	if n := streams(); n != 3 {
		t.Errorf("after a held request and the next, %d streams, want 3 (a stream is made when a request needs it)", n)
	}
}

// A refused request's handler hears of it (Rejected) before its answer
// goes out, and the connection closes after it.
func TestH1RejectedBeforeAnswer(t *testing.T) {
	h := &testHandler{serve: func(rw *Writer, req *http.Request) { t.Errorf("%s was served", req.URL) }}
	_, addr, _ := startServerWith(t, h)
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n")
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 400 ") {
		t.Fatalf("answer: %q %v", line, err)
	}
	h.mu.Lock()
	rejects := h.rejects
	h.mu.Unlock()
	if len(rejects) != 1 || rejects[0].Code != http.StatusBadRequest || rejects[0].Details != h1.DetailCodecError {
		t.Errorf("the handler was told of %d refusals before the answer, want one 400 %s: %+v", len(rejects), h1.DetailCodecError, rejects)
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Errorf("after the answer: %v, want the server's close", err)
	}
}

// What a client sends before it has its response (a pipelined request, its
// end of stream) arrives while the handler works, so the wait for the next
// request, which does not try a read first, is not told of it (connOut):
// the wait's check finds it. The handler holds each request until the
// client has sent what comes next, and is released over a loopback
// connection, so that it wakes through the network poller as a proxy does
// when its upstream answers: that poll also records what the client sent
// meanwhile, the edge the wait that follows then misses. The exchange stays
// under dcWatchDelay, so the client-gone watch (which would read those
// bytes itself) does not start. Under load it may: an attempt whose watch
// started counts as not having exercised the check, and one of ten must
// have.
func TestH1ServerBytesBeforeResponse(t *testing.T) {
	rl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	releaser := dial(t, rl.Addr().String())
	held, err := rl.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	got := make(chan string, 1)
	s, addr := startServer(t, func(rw *Writer, r *http.Request) {
		if r.URL.Path != "/first" {
			got <- r.URL.Path
			var b [1]byte
			if _, err := held.Read(b[:]); err != nil {
				t.Errorf("the handler's release: %v", err)
			}
		}
		io.WriteString(rw, r.URL.Path)
	})
	// arrived waits for the handler to hold a request, free lets it go.
	arrived := func(what string) {
		t.Helper()
		select {
		case <-got:
		case <-time.After(3 * time.Second):
			t.Fatalf("%s never reached the handler", what)
		}
	}
	free := func() {
		t.Helper()
		if _, err := releaser.Write([]byte{1}); err != nil {
			t.Fatalf("release the handler: %v", err)
		}
	}
	// conn opens a connection with one exchange done.
	conn := func() (*net.TCPConn, *bufio.Reader) {
		c := dial(t, addr)
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		br := bufio.NewReader(c)
		io.WriteString(c, "GET /first HTTP/1.1\r\nHost: echo\r\n\r\n")
		if body, err := readBody(br); err != nil || body != "/first" {
			t.Fatalf("first exchange: %q %v", body, err)
		}
		return c, br
	}
	pipelined := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for hc := range s.conns {
			hc.waitMu.Lock()
			p := hc.pipelined
			hc.waitMu.Unlock()
			if p {
				return true
			}
		}
		return false
	}

	// waitServer waits until cond holds of the server's end of c, so that
	// what the client sent is there before the handler answers (on a
	// system without TCP_INFO it cannot tell and goes on).
	waitServer := func(what string, c net.Conn, cond func() (bool, bool)) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); ; {
			done, ok := cond()
			if done || !ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server's socket never showed %s", what)
			}
			runtime.Gosched()
		}
	}

	// A request sent while the one before is with the handler.
	checked := false
	for attempt := 0; attempt < 10 && !checked; attempt++ {
		c, br := conn()
		io.WriteString(c, "GET /one HTTP/1.1\r\nHost: echo\r\n\r\n")
		arrived("/one")
		before, _ := serverReceived(s, c)
		two := "GET /two HTTP/1.1\r\nHost: echo\r\n\r\n"
		io.WriteString(c, two)
		waitServer("/two's bytes", c, func() (bool, bool) {
			n, ok := serverReceived(s, c)
			return n >= before+uint64(len(two)), ok
		})
		free()
		if body, err := readBody(br); err != nil || body != "/one" {
			t.Fatalf("attempt %d: /one: %q %v", attempt, body, err)
		}
		arrived("/two")
		free()
		if body, err := readBody(br); err != nil || body != "/two" {
			t.Fatalf("attempt %d: /two: %q %v", attempt, body, err)
		}
		checked = pipelined()
		c.Close()
	}
	if !checked {
		t.Error("in ten attempts no connection was found pipelined: the wait's check did not run or did not find /two")
	}

	// A client that shuts down its side after its request: it gets its
	// answer, and the connection closes at once, not after the idle
	// timeout.
	for attempt := 0; attempt < 10; attempt++ {
		c, br := conn()
		io.WriteString(c, "GET /last HTTP/1.1\r\nHost: echo\r\n\r\n")
		arrived("/last")
		_ = c.CloseWrite()
		waitServer("the client's FIN", c, func() (bool, bool) { return serverGotFIN(s, c) })
		free()
		body, err := readBody(br)
		if err != nil || body != "/last" {
			c.Close()
			continue // the client-gone watch saw the shutdown: try again
		}
		start := time.Now()
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("after the last answer: %v, want the server's close", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("the server closed %v after the answer", d)
		}
		c.Close()
		return
	}
	t.Error("in ten attempts the answer after the shutdown never came")
}

// readBody reads one response from br and returns its body.
func readBody(br *bufio.Reader) (string, error) {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
