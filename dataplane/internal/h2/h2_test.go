package h2

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// countingConn counts the writes to a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// testServer serves h on 127.0.0.1 with meshlet's server (or x/net's,
// bare) and counts the connections it took and its writes.
type testServer struct {
	addr   string
	conns  atomic.Int64
	writes atomic.Int64
	srv    *Server
}

func serve(t *testing.T, h http.Handler, xnet bool, tune func(*Server)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: ln.Addr().String(), srv: &Server{Handler: h, MaxHeaderBytes: 60 << 10, IdleTimeout: time.Minute}}
	if tune != nil {
		tune(ts.srv)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ts.conns.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				cc := countingConn{c, &ts.writes}
				if xnet {
					(&http2.Server{}).ServeConn(cc, &http2.ServeConnOpts{Handler: h})
				} else {
					ts.srv.ServeConn(context.Background(), cc)
				}
			}()
		}
	}()
	return ts
}

// client is meshlet's Transport dialling plain TCP, with its writes
// counted.
func client(t *testing.T, writes *atomic.Int64) *Transport {
	tr := &Transport{IdleTimeout: time.Minute, MaxHeaderBytes: 60 << 10, Dial: func(ctx context.Context, addr string, _ any) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil || writes == nil {
			return c, err
		}
		return countingConn{c, writes}, nil
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func xnetClient() http.RoundTripper {
	return &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, _, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}}
}

// echo answers a GET with a small body and a POST with its body's
// SHA-256 and length, then a trailer; "/stream" writes chunks with a
// flush after each, waiting between them for the client's go-ahead.
func echo(step chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "hello "+r.Header.Get("X-Name"))
		case "/stream":
			for i := range 3 {
				fmt.Fprintf(w, "chunk%d;", i)
				w.(http.Flusher).Flush()
				<-step
			}
		default:
			w.Header().Set("Trailer", "X-Sum")
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			fmt.Fprintf(w, "%d %x req-trailer=%s", n, h.Sum(nil), r.Trailer.Get("X-Req"))
			w.Header().Set("X-Sum", "done")
		}
	})
}

func get(t *testing.T, rt http.RoundTripper, addr, path string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	req.Header.Set("X-Name", "meshlet")
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("GET %s body: %v", path, err)
	}
	return res, string(b)
}

// post sends n bytes with a trailer and checks the echo.
func post(t *testing.T, rt http.RoundTripper, addr string, n int) {
	t.Helper()
	body := bytes.Repeat([]byte("0123456789abcdef"), n/16)
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(body)
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", "http://"+addr+"/echo", pr)
	req.ContentLength = -1
	req.Trailer = http.Header{"X-Req": {"tail"}}
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("POST %d bytes: %v", n, err)
	}
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("POST body: %v", err)
	}
	want := fmt.Sprintf("%d %x req-trailer=tail", len(body), sha256.Sum256(body))
	if string(got) != want || res.Trailer.Get("X-Sum") != "done" {
		t.Fatalf("POST %d bytes: got %q trailer %v, want %q and X-Sum: done", n, got, res.Trailer, want)
	}
}

// TestInterop runs each end against the other and against x/net's.
func TestInterop(t *testing.T) {
	for _, tc := range []struct {
		name       string
		xnetServer bool
		xnetClient bool
	}{{"meshlet-meshlet", false, false}, {"meshlet-client-xnet-server", true, false}, {"xnet-client-meshlet-server", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			step := make(chan struct{})
			ts := serve(t, echo(step), tc.xnetServer, nil)
			var rt http.RoundTripper = client(t, nil)
			if tc.xnetClient {
				rt = xnetClient()
			}
			res, body := get(t, rt, ts.addr, "/small")
			if res.StatusCode != 200 || body != "hello meshlet" || res.Header.Get("Content-Type") != "text/plain" {
				t.Fatalf("GET: %d %q %v", res.StatusCode, body, res.Header)
			}
			// More than both windows (the stream's 1 MiB, the
			// connection's 4 MiB, x/net's own), each way.
			post(t, rt, ts.addr, 6<<20)
			post(t, rt, ts.addr, 10)

			// Streaming: each chunk arrives before the next is written.
			req, _ := http.NewRequest("GET", "http://"+ts.addr+"/stream", nil)
			sres, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			for i := range 3 {
				n, err := io.ReadAtLeast(sres.Body, buf, 7)
				if err != nil || string(buf[:n]) != fmt.Sprintf("chunk%d;", i) {
					t.Fatalf("chunk %d: %q %v", i, buf[:n], err)
				}
				step <- struct{}{}
			}
			if _, err := io.ReadAll(sres.Body); err != nil {
				t.Fatal(err)
			}
			sres.Body.Close()

			// Concurrent streams on the connection.
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			for range 200 {
				wg.Go(func() {
					req, _ := http.NewRequest("GET", "http://"+ts.addr+"/small", nil)
					req.Header.Set("X-Name", "n")
					res, err := rt.RoundTrip(req)
					if err != nil {
						errs <- err
						return
					}
					b, err := io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil || string(b) != "hello n" {
						errs <- fmt.Errorf("%q %v", b, err)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestSmallExchangeOneWriteEachWay: a small request is one write, and
// its response (headers and body) one write.
func TestSmallExchangeOneWriteEachWay(t *testing.T) {
	ts := serve(t, echo(nil), false, nil)
	var cw atomic.Int64
	rt := client(t, &cw)
	get(t, rt, ts.addr, "/small") // connection set up, settings exchanged
	c0, s0 := cw.Load(), ts.writes.Load()
	const n = 20
	for range n {
		if _, body := get(t, rt, ts.addr, "/small"); body != "hello meshlet" {
			t.Fatalf("body %q", body)
		}
	}
	if c, s := cw.Load()-c0, ts.writes.Load()-s0; c != n || s != n {
		t.Fatalf("%d exchanges took %d client writes and %d server writes, want %d each", n, c, s, n)
	}
}

// TestStreamLimitOpensConnections: past the server's stream limit the
// client opens another connection instead of being refused.
func TestStreamLimitOpensConnections(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		<-release
		_, _ = io.WriteString(w, "ok")
	})
	ts := serve(t, h, false, func(s *Server) { s.MaxConcurrentStreams = 2 })
	rt := client(t, nil)
	get0 := func() error {
		req, _ := http.NewRequest("GET", "http://"+ts.addr+"/", nil)
		res, err := rt.RoundTrip(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err == nil && string(b) != "ok" {
			err = fmt.Errorf("body %q", b)
		}
		return err
	}
	// The first learns the limit (the server's SETTINGS).
	go func() { release <- struct{}{} }()
	if err := get0(); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 6)
	for range 6 {
		go func() { errs <- get0() }()
	}
	for started.Load() < 7 {
		select {
		case err := <-errs:
			t.Fatalf("a request failed while the others were held: %v", err)
		default:
		}
		runtimeYield()
	}
	close(release)
	for range 6 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := ts.conns.Load(); n != 3 {
		t.Errorf("6 concurrent requests with a limit of 2 streams took %d connections, want 3", n)
	}
}

// runtimeYield pauses a loop that polls for a state it then checks.
func runtimeYield() { time.Sleep(time.Millisecond) }

// openStreams is the number of streams open on s's connections.
func openStreams(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for sc := range s.conns {
		sc.mu.Lock()
		n += len(sc.streams)
		sc.mu.Unlock()
	}
	return n
}

// TestCancelEndsServerStream: a request whose context ends resets its
// stream: the handler's context ends.
func TestCancelEndsServerStream(t *testing.T) {
	ended := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/wait" {
			echo(nil).ServeHTTP(w, r)
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		ended <- r.Context().Err()
	})
	ts := serve(t, h, false, nil)
	rt := client(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ts.addr+"/wait", nil)
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(res.Body); err == nil {
		t.Error("a cancelled stream's body read ended without an error")
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("handler context: %v", err)
	}
	// The connection still serves.
	post(t, rt, ts.addr, 1000)
}

// TestAbortedResponseResetsStream: a handler that panics with
// http.ErrAbortHandler mid-body resets the stream; the client's body
// read fails instead of ending cleanly.
func TestAbortedResponseResetsStream(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	ts := serve(t, h, false, nil)
	rt := client(t, nil)
	req, _ := http.NewRequest("GET", "http://"+ts.addr+"/", nil)
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	var se http2.StreamError
	if !errors.As(err, &se) || se.Code != http2.ErrCodeInternal {
		t.Fatalf("body %q, error %v: want an INTERNAL_ERROR reset", b, err)
	}
	if !strings.HasPrefix("partial", string(b)) {
		t.Fatalf("body %q", b)
	}
}

// TestDrainSendsGoAway: Drain's GOAWAY lets the open stream finish and
// sends the next request on a new connection.
func TestDrainSendsGoAway(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	ts := serve(t, h, false, nil)
	rt := client(t, nil)
	get(t, rt, ts.addr, "/")
	done := make(chan string)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+ts.addr+"/slow", nil)
		res, err := rt.RoundTrip(req)
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		done <- string(b)
	}()
	for openStreams(ts.srv) != 1 {
		runtimeYield()
	}
	ts.srv.Drain()
	ts.srv.mu.Lock()
	ts.srv.draining = false // the test's next connection is served normally
	ts.srv.mu.Unlock()
	close(release)
	if got := <-done; got != "ok" {
		t.Fatalf("the stream open at the drain: %q", got)
	}
	if _, body := get(t, rt, ts.addr, "/"); body != "ok" {
		t.Fatalf("after the drain: %q", body)
	}
	if n := ts.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (a new one after the GOAWAY)", n)
	}
}

// TestEarlyAnswerToUploads: a handler that answers without reading a
// large upload gives a whole response (its RST_STREAM NO_ERROR only
// stops the upload), and what it left unread comes back to the
// connection's window: many such uploads, then an echo of more than the
// window, on one connection.
func TestEarlyAnswerToUploads(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		echo(nil).ServeHTTP(w, r)
	})
	ts := serve(t, h, false, nil)
	rt := client(t, nil)
	for i := range 10 {
		body := bytes.Repeat([]byte("x"), 2<<20)
		req, _ := http.NewRequest("POST", "http://"+ts.addr+"/refuse", bytes.NewReader(body))
		res, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "too large\n" {
			t.Fatalf("upload %d: %d %q %v", i, res.StatusCode, b, err)
		}
	}
	post(t, rt, ts.addr, 6<<20)
	if n := ts.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestHeadHasNoBody: a HEAD response carries its headers only, whatever
// the handler writes.
func TestHeadHasNoBody(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		_, _ = io.WriteString(w, "hello")
	})
	ts := serve(t, h, false, nil)
	for _, rt := range []http.RoundTripper{client(t, nil), xnetClient()} {
		req, _ := http.NewRequest("HEAD", "http://"+ts.addr+"/", nil)
		res, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || len(b) != 0 || res.Header.Get("Content-Length") != "5" {
			t.Fatalf("HEAD: body %q, %v, headers %v", b, err, res.Header)
		}
	}
}

// TestGoAwayLingers: after a graceful GOAWAY with no stream left the
// server still reads the connection (a client that had not seen the
// GOAWAY yet is answered, not reset) until the client closes it, or
// closes it itself once its linger has passed; either way with a FIN.
func TestGoAwayLingers(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	drained := func(t *testing.T, linger time.Duration) *rawPeer {
		ts := serve(t, ok, false, func(s *Server) { s.lingerTimeout = linger })
		p := dialRaw(t, ts.addr)
		p.until("the server's SETTINGS", func(f http2.Frame) bool {
			s, ok := f.(*http2.SettingsFrame)
			return ok && !s.IsAck()
		})
		for {
			ts.srv.mu.Lock()
			n := len(ts.srv.conns)
			ts.srv.mu.Unlock()
			if n == 1 {
				break
			}
			runtimeYield()
		}
		ts.srv.Drain()
		p.until("GOAWAY", goAway(http2.ErrCodeNo))
		return p
	}
	t.Run("client still talking", func(t *testing.T) {
		p := drained(t, time.Minute)
		// A stream the client opened before it read the GOAWAY, and a PING.
		if err := p.headers(1, "/late", false); err != nil {
			t.Fatal(err)
		}
		_ = p.fr.WriteData(1, true, []byte("body"))
		_ = p.fr.WritePing(false, [8]byte{7})
		p.until("the PING's answer", func(f http2.Frame) bool {
			pf, ok := f.(*http2.PingFrame)
			return ok && pf.IsAck() && pf.Data == [8]byte{7}
		})
		_ = p.c.(*net.TCPConn).CloseWrite() // the client is done: the server closes at once
		p.untilEOF()
	})
	t.Run("client silent", func(t *testing.T) {
		const linger = 50 * time.Millisecond
		p := drained(t, linger)
		since := time.Now()
		p.untilEOF()
		if d := time.Since(since); d < linger {
			t.Fatalf("closed %v after the GOAWAY, before the linger (%v) passed", d, linger)
		}
	})
}

// TestGoAwayLingerEnds: a linger ends in the two cases where nothing else
// would end it: a connection drained before its first SETTINGS frame
// (reading that frame must not clear the linger's deadline), and a
// stream that ends after the server stopped (no wait for the client).
func TestGoAwayLingerEnds(t *testing.T) {
	t.Run("drained before SETTINGS", func(t *testing.T) {
		ts := serve(t, http.NotFoundHandler(), false, func(s *Server) { s.lingerTimeout = 50 * time.Millisecond })
		ts.srv.Drain() // the connections that come later are drained at once
		p := dialRaw(t, ts.addr)
		p.until("GOAWAY", goAway(http2.ErrCodeNo))
		p.untilEOF() // (the linger, 50 ms, ends it)
	})
	t.Run("stream ends after the stop", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		release, stopped := make(chan struct{}), make(abortFunc)
		srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.(*responseWriter).WatchAbort(stopped) // fired by the server's stop
			<-release
		}), MaxHeaderBytes: 60 << 10, lingerTimeout: time.Hour}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if c, err := ln.Accept(); err == nil {
				srv.ServeConn(ctx, c)
			}
		}()
		p := dialRaw(t, ln.Addr().String())
		if err := p.headers(1, "/", true); err != nil {
			t.Fatal(err)
		}
		for openStreams(srv) != 1 {
			runtimeYield()
		}
		srv.Drain()
		p.until("GOAWAY", goAway(http2.ErrCodeNo))
		cancel() // the server stops while the stream runs...
		<-stopped
		close(release) // ...and the stream ends after it
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection still lingers 10 s after the server stopped")
		}
	})
}

// abortFunc is an Aborter that closes itself when fired.
type abortFunc chan struct{}

func (a abortFunc) Fire() {
	select {
	case <-a:
	default:
		close(a)
	}
}
