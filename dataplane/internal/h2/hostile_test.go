package h2

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawPeer is a hostile client: frames written by hand, the server's read.
type rawPeer struct {
	t  *testing.T
	c  net.Conn
	fr *http2.Framer
}

func dialRaw(t *testing.T, addr string) *rawPeer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := &rawPeer{t: t, c: c, fr: http2.NewFramer(c, c)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return p
}

// headers opens stream id on path.
func (p *rawPeer) headers(id uint32, path string, end bool) error {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndStream: end, EndHeaders: true})
}

// until reads frames until match says so; it fails the test when the
// connection ends first or nothing matches within 10 s.
func (p *rawPeer) until(what string, match func(http2.Frame) bool) {
	p.t.Helper()
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			p.t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(f) {
			return
		}
	}
}

// untilEOF reads frames until the server closes the connection; it fails
// the test unless that is a FIN (io.EOF) within 10 s.
func (p *rawPeer) untilEOF() {
	p.t.Helper()
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, err := p.fr.ReadFrame(); err != nil {
			if !errors.Is(err, io.EOF) {
				p.t.Fatalf("the connection ended with %v, want the server's FIN (io.EOF)", err)
			}
			return
		}
	}
}

func goAway(code http2.ErrCode) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		return ok && g.ErrCode == code
	}
}

func rst(id uint32, code http2.ErrCode) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == id && r.ErrCode == code
	}
}

// TestHostilePeers sends what a buggy or hostile peer sends, each on a
// connection of its own, while a legitimate client's requests run on
// another: the server answers each as x/net or Envoy does, and every
// legitimate request succeeds.
func TestHostilePeers(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/block": // reads nothing, ignores its context
			<-release
		default:
			echo(nil).ServeHTTP(w, r)
		}
	})
	ts := serve(t, h, false, func(s *Server) {
		s.MaxConcurrentStreams = 8
		s.controlTimeout = time.Second // the PING flood's wait
	})

	rt := client(t, nil)
	stop := make(chan struct{})
	var ok, failed atomic.Int64
	legit := make(chan struct{})
	go func() {
		defer close(legit)
		for {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequest("GET", "http://"+ts.addr+"/small", nil)
			req.Header.Set("X-Name", "legit")
			res, err := rt.RoundTrip(req)
			if err == nil {
				var b []byte
				b, err = io.ReadAll(res.Body)
				res.Body.Close()
				if err == nil && string(b) != "hello legit" {
					err = errors.New("body " + string(b))
				}
			}
			if err != nil {
				failed.Add(1)
				t.Errorf("legitimate request: %v", err)
				continue
			}
			ok.Add(1)
		}
	}()

	t.Run("empty DATA frames", func(t *testing.T) {
		p := dialRaw(t, ts.addr)
		_ = p.headers(1, "/echo", false)
		for range 3 {
			_ = p.fr.WriteData(1, false, nil)
		}
		p.until("GOAWAY ENHANCE_YOUR_CALM", goAway(http2.ErrCodeEnhanceYourCalm))
	})
	t.Run("DATA past the stream window", func(t *testing.T) {
		p := dialRaw(t, ts.addr)
		_ = p.headers(1, "/block", false)
		chunk := make([]byte, 16<<10)
		for sent := 0; sent <= streamWindow; sent += len(chunk) {
			if err := p.fr.WriteData(1, false, chunk); err != nil {
				t.Fatal(err)
			}
		}
		p.until("RST_STREAM FLOW_CONTROL_ERROR", rst(1, http2.ErrCodeFlowControl))
	})
	t.Run("connection window overflow", func(t *testing.T) {
		p := dialRaw(t, ts.addr)
		_ = p.fr.WriteWindowUpdate(0, maxWindow)
		p.until("GOAWAY FLOW_CONTROL_ERROR", goAway(http2.ErrCodeFlowControl))
	})
	t.Run("CONTINUATION flood", func(t *testing.T) {
		p := dialRaw(t, ts.addr)
		_ = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}, EndHeaders: false})
		junk := bytes.Repeat([]byte{0x40, 0x01, 'a', 0x7f, 0x7f}, 3000) // literal fields, indexed names
		var werr error
		for i := 0; i < 2000 && werr == nil; i++ {
			werr = p.fr.WriteContinuation(1, false, junk)
		}
		// The server refuses it long before 30 MB (the header list's
		// limit is 60 KiB): it answers GOAWAY and closes, or the writes fail.
		if werr == nil {
			p.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
		}
	})
	t.Run("PING flood, nothing read", func(t *testing.T) {
		p := dialRaw(t, ts.addr)
		var werr error
		_ = p.c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for i := 0; i < 4_000_000 && werr == nil; i++ {
			werr = p.fr.WritePing(false, [8]byte{})
		}
		if werr == nil {
			t.Fatal("4 million PINGs that nobody read the answers of: the connection is still open")
		}
		var ne net.Error
		if errors.As(werr, &ne) && ne.Timeout() {
			t.Fatalf("the server stopped reading and did not close: %v", werr)
		}
	})
	t.Run("handlers behind reset streams", func(t *testing.T) {
		// Each stream is reset at once, but its handler runs on: past
		// 4 x the stream limit of waiting handlers the connection ends.
		p := dialRaw(t, ts.addr)
		var werr error
		for id := uint32(1); id < 200 && werr == nil; id += 2 {
			werr = p.headers(id, "/block", true)
			if werr == nil {
				werr = p.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		}
		if werr == nil {
			p.until("GOAWAY ENHANCE_YOUR_CALM", goAway(http2.ErrCodeEnhanceYourCalm))
		}
	})
	t.Run("streams past the limit", func(t *testing.T) {
		p := dialRaw(t, ts.addr)
		for id := uint32(1); id <= 17; id += 2 {
			_ = p.headers(id, "/block", true)
		}
		p.until("RST_STREAM REFUSED_STREAM on the ninth", rst(17, http2.ErrCodeRefusedStream))
	})
	t.Run("malformed header blocks, answers never read", func(t *testing.T) {
		// Each block draws a RST_STREAM; a peer that reads none of them
		// is cut off (the reader's write has a deadline) rather than
		// holding the reader in a write for ever.
		p := dialRaw(t, ts.addr)
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		_ = enc.WriteField(hpack.HeaderField{Name: ":bogus", Value: "1"})
		_ = p.c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		var err error
		for id := uint32(1); err == nil && id < 1<<31; id += 2 {
			err = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: true})
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the server stopped reading but kept the connection: %v", err)
		}
	})
	t.Run("malformed header block, then its body", func(t *testing.T) {
		// The stream is refused; its DATA and trailers in flight are
		// ignored (RFC 9113 5.1), and the connection serves the next.
		p := dialRaw(t, ts.addr)
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}, {"Upper", "1"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		_ = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: buf.Bytes(), EndHeaders: true})
		_ = p.fr.WriteData(1, false, []byte("body"))
		buf.Reset()
		_ = enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
		_ = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: true})
		_ = p.headers(3, "/small", true)
		p.until("the next stream's response", func(f http2.Frame) bool {
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				t.Fatalf("GOAWAY %v after a malformed stream's body", f.ErrCode)
			case *http2.RSTStreamFrame:
				if f.StreamID == 1 && f.ErrCode != http2.ErrCodeProtocol || f.StreamID == 3 {
					t.Fatalf("RST_STREAM %d %v", f.StreamID, f.ErrCode)
				}
			case *http2.MetaHeadersFrame:
				return f.StreamID == 3 && f.PseudoValue("status") == "200"
			}
			return false
		})
	})

	close(stop)
	<-legit
	if ok.Load() == 0 || failed.Load() > 0 {
		t.Fatalf("legitimate client: %d ok, %d failed", ok.Load(), failed.Load())
	}
	t.Logf("legitimate client: %d requests, all ok", ok.Load())
}

// FuzzServerFrames feeds arbitrary bytes after a valid preface and
// SETTINGS: the server must neither panic nor hang.
func FuzzServerFrames(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/small"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, []byte("body"))
	f.Add(seed.Bytes())
	_ = fr.WriteWindowUpdate(1, 1)
	_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
	_ = fr.WritePing(false, [8]byte{1})
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 9, 0, 0, 0, 0, 3})
	srv := &Server{Handler: echo(nil), MaxHeaderBytes: 16 << 10, MaxConcurrentStreams: 4}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, s := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeConn(t.Context(), s)
		}()
		go func() { _, _ = io.Copy(io.Discard, c) }()
		var pre bytes.Buffer
		pre.WriteString(http2.ClientPreface)
		_ = http2.NewFramer(&pre, nil).WriteSettings()
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write(pre.Bytes())
		_, _ = c.Write(in)
		c.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not end after its peer closed")
		}
	})
}
