package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// Review of c846c66: a stalled upload on a route with retries (its body
// is buffered for a retry before anything goes upstream) must end as any
// stalled upload does: 408 "stream timeout", flag SI. It must not get an
// empty 200 (the handler returning without a response) nor be logged as
// a client that went away (DC).
func TestReviewStreamIdleStalledRetryBufferedUploadH1(t *testing.T) {
	u := newStallUpstream(t, "127.0.0.11")
	cfg := streamConfig(u, 300*time.Millisecond, 0)
	cfg.Listeners[0].Routes[0].Retry = retry.Policy{RetryOn: retry.DefaultOn, NumRetries: 1}
	s, logs := startServer(t, cfg)
	c, br := rawRequest(t, s, "POST /upload HTTP/1.1\r\nHost: echo\r\nContent-Length: 1000\r\n\r\n0123456789")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a stalled upload: %v (log: %s)", err, logs)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled upload on a retrying route: %d %q, want 408 \"stream timeout\" (log: %s)", resp.StatusCode, body, logs)
	}
	logs.waitLine(t, `"POST /upload HTTP/1.1" 408 SI `, "stream_idle_timeout")
}

// The same over HTTP/2: the stream must get 408, not an empty 200.
func TestReviewStreamIdleStalledRetryBufferedUploadH2(t *testing.T) {
	u := newStallUpstream(t, "127.0.0.11")
	cfg := streamConfig(u, 300*time.Millisecond, 0)
	cfg.Listeners[0].Routes[0].Retry = retry.Policy{RetryOn: retry.DefaultOn, NumRetries: 1}
	s, logs := startServer(t, cfg)
	h := dialH2(t, s)
	h.buf.Reset()
	for _, f := range []struct{ k, v string }{{":method", "POST"}, {":scheme", "http"}, {":authority", "echo"},
		{":path", "/upload"}, {"content-length", "1000"}} {
		h.enc.WriteField(hf(f.k, f.v))
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.buf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteData(1, false, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := h.until(t, func(f http2.Frame) bool {
		if mh, ok := f.(*http2.MetaHeadersFrame); ok && mh.StreamID == 1 {
			status = mh.PseudoValue("status")
			return true
		}
		return false
	}); err != nil {
		t.Fatalf("no response: %v", err)
	}
	if status != "408" {
		t.Fatalf("stalled HTTP/2 upload on a retrying route: status %s, want 408 (log: %s)", status, logs)
	}
}

func hf(k, v string) hpack.HeaderField { return hpack.HeaderField{Name: k, Value: v} }

// wsEchoUpstream upgrades a websocket request and echoes lines until its
// client goes; each stream that ended sends on ended (when not nil).
func wsEchoUpstream(t *testing.T, ended chan<- struct{}) string {
	return upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				if ended != nil {
					ended <- struct{}{}
				}
				return
			}
			brw.WriteString("echo:" + line)
			brw.Flush()
		}
	}))
}

func wsDial(t *testing.T, s *Server) (net.Conn, *bufio.Reader) {
	c := dialProxy(t, s)
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: echo\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade response %v %v", resp, err)
	}
	return c, br
}

// An upgraded stream with traffic more often than the stream idle timeout
// lives on; a silent one is closed, and (as the docs say) it is logged and
// counted as a stream idle timeout (SI, downstream_rq_idle_timeout).
func TestReviewStreamIdleUpgraded(t *testing.T) {
	ended := make(chan struct{}, 2)
	cfg := testConfig(noRetry, testCluster("echo", endpoint(wsEchoUpstream(t, ended), "a")))
	cfg.Listeners[0].StreamIdleTimeout = 300 * time.Millisecond
	cfg.Listeners[0].Routes[0].Timeout = 0
	s, logs := startServer(t, cfg)

	// Busy: a message every 100 ms for 1.5 s.
	c, br := wsDial(t, s)
	for i := range 15 {
		fmt.Fprintf(c, "m%d\n", i)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if line, err := br.ReadString('\n'); line != fmt.Sprintf("echo:m%d\n", i) {
			t.Fatalf("busy upgraded stream, message %d: %q %v", i, line, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.Close()
	<-ended

	// Silent: closed by the proxy, on both sides.
	c2, _ := wsDial(t, s)
	if err := readClosed(t, c2); err == nil {
		t.Fatal("silent upgraded stream kept")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream side of the silent upgraded stream still open")
	}
	logs.waitLine(t, `"GET /ws HTTP/1.1" 101 SI `, "stream_idle_timeout")
	waitStat(t, s, "http.outbound.downstream_rq_idle_timeout", 1)
}

// A client's stalled uploads are the client's fault, not the upstream
// host's: Envoy's stream idle timeout resets the downstream stream and
// reports nothing to outlier detection. Here each one reaches the
// detector as a local-origin timeout (a 504 outside split mode), so five
// stalled uploads in a row eject a perfectly healthy host and the next
// legitimate request finds no healthy upstream.
func TestReviewStalledUploadsDoNotEjectHealthyHost(t *testing.T) {
	u := newStallUpstream(t, "127.0.0.11")
	cfg := streamConfig(u, 200*time.Millisecond, 0)
	od := lb.DefaultOutlierConfig()
	od.Interval = 50 * time.Millisecond
	od.MaxEjectionPercent = 100
	cfg.Clusters[0].Outlier = &od
	s, logs := startServer(t, cfg)
	for i := range od.Consecutive5xx {
		c, br := rawRequest(t, s, "POST /upload HTTP/1.1\r\nHost: echo\r\nContent-Length: 1000\r\n\r\n0123456789")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("stalled upload %d: %v", i, err)
		}
		resp.Body.Close()
		c.Close()
	}
	time.Sleep(200 * time.Millisecond) // a few detector intervals
	if f := hostFlags(s, "echo", u.addr); f != "healthy" {
		t.Errorf("host that answered every request it got: %q after %d stalled client uploads", f, od.Consecutive5xx)
	}
	if code, body, _ := get(t, http.DefaultClient, s, "/legit"); code != 200 {
		t.Errorf("legitimate request after the stalled uploads: %d %q (log: %s)", code, body, logs)
	}
}

// The same through the rapid-reset window the new defence leaves open: an
// HTTP/2 client resets five streams, each once its request reached the
// upstream (five premature resets are far from the 250 that close a
// connection). Each reset is reported to outlier detection as the host's
// timeout, and the healthy host is ejected.
func TestReviewClientResetsDoNotEjectHealthyHost(t *testing.T) {
	u := newStallUpstream(t, "127.0.0.11")
	cfg := streamConfig(u, 0, 0)
	od := lb.DefaultOutlierConfig()
	od.Interval = 50 * time.Millisecond
	od.MaxEjectionPercent = 100
	cfg.Clusters[0].Outlier = &od
	s, _ := startServer(t, cfg)
	h := dialH2(t, s)
	go func() {
		for {
			if _, err := h.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	for i := range od.Consecutive5xx {
		id := uint32(2*i + 1)
		before := u.requests.Load()
		h.headers(t, id, "/stall")
		waitFor(t, "the request upstream", func() bool { return u.requests.Load() > before })
		h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		waitFor(t, "the upstream request to end", func() bool { return u.ended.Load() > before })
	}
	time.Sleep(200 * time.Millisecond)
	if f := hostFlags(s, "echo", u.addr); f != "healthy" {
		t.Errorf("healthy host: %q after %d client resets", f, od.Consecutive5xx)
	}
}

// A client that waits for its 100 Continue before sending its body (as
// Expect: 100-continue asks) on a route with retries: the proxy reads the
// body to buffer it for a retry before anything goes upstream, and sends
// its 100 Continue only as a request goes upstream. Neither side moves
// until the client gives up waiting (curl: 1 s; some clients: never) or,
// since c846c66, the stream idle timeout answers 408.
func TestReviewExpectContinueOnRetryingRoute(t *testing.T) {
	u := newStallUpstream(t, "127.0.0.11")
	cfg := streamConfig(u, 0, 0)
	cfg.Listeners[0].Routes[0].Retry = retry.Policy{RetryOn: retry.DefaultOn, NumRetries: 1}
	s, _ := startServer(t, cfg)
	c, br := rawRequest(t, s, "POST /upload HTTP/1.1\r\nHost: echo\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("waiting for 100 Continue: %q %v", line, err)
	}
}

// An HTTP/2 stream or upgraded connection that lives long (a gRPC watch,
// a WebSocket) keeps its stream idle alarm listed on the worker's clock,
// due up to 75 s (a quarter of 5m) ahead; the clock then ticks every
// clock.Tick (40 wake-ups a second) for as long as the stream lives,
// where before c846c66 a stream on a route without a timeout (the inbound
// default) left an idle sidecar's clock stopped. Ticks that find nothing
// due are the cost the worker clock (internal/clock) was written to avoid.
func TestReviewClockIdlesWithFarAlarm(t *testing.T) {
	w := &worker{}
	si := &streamIdle{w: w, s: &httpScratch{}}
	si.arm(5 * time.Minute)
	defer si.stop()
	time.Sleep(clock.Linger + 100*time.Millisecond) // past the linger
	seen := map[time.Time]bool{}
	end := time.Now().Add(time.Second)
	for time.Now().Before(end) {
		if next, running := w.clock.NextWake(); running {
			seen[next] = true
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(seen) > 2 {
		t.Errorf("the clock woke about %d times in a second with one alarm due in %v", len(seen), si.every)
	}
}
