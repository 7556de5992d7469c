package dataplane

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Options.HTTP1Server selects the server that holds a plaintext HTTP/1
// connection: the fast server's connection set has it, or the worker's
// net/http server (with the listener's header timeout and the fast
// server's limits) does and the fast server never sees it. The request is
// routed (the connection's facts reach it through ConnContext), and a
// drain lets the request in flight finish before it stops that server.
func TestHTTP1ServerOption(t *testing.T) {
	if _, err := New(testConfig(noRetry, testCluster("echo", endpoint("127.0.0.11:1", "a"))), Options{HTTP1Server: "fasthttp"}); err == nil ||
		!strings.Contains(err.Error(), `Options.HTTP1Server "fasthttp"`) {
		t.Fatalf("New with HTTP1Server fasthttp: %v, want an error naming the field and the value", err)
	}
	for _, name := range []string{HTTP1ServerMeshlet, HTTP1ServerNetHTTP} {
		t.Run(strings.ReplaceAll(name, "/", ""), func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			release := make(chan struct{})
			up := upstream(t, "127.0.0.11", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-release
				io.WriteString(w, "done")
			}))
			cfg := testConfig(noRetry, testCluster("echo", endpoint(up, "a")))
			cfg.Listeners[0].RequestHeadersTimeout = 7 * time.Second
			cfg.DrainTimeout = 5 * time.Second
			s, err := New(cfg, Options{HTTP1Server: name, AccessLog: io.Discard, Workers: 1})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(s.Shutdown)
			type result struct {
				code int
				body string
				err  error
			}
			done := make(chan result, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/held", nil)
				req.Host = "echo"
				resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
				if err != nil {
					done <- result{err: err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				done <- result{resp.StatusCode, string(b), err}
			}()
			select {
			case <-arrived:
			case r := <-done:
				t.Fatalf("the request ended before reaching the upstream: %d %q %v", r.code, r.body, r.err)
			}

			w := s.workers[0]
			fast := w.h1.Len()
			w.fbMu.Lock()
			fb := w.fb[7*time.Second]
			servers := len(w.fb)
			w.fbMu.Unlock()
			if name == HTTP1ServerMeshlet {
				if fast != 1 || servers != 0 {
					t.Fatalf("meshlet: the fast server holds %d connections, %d net/http servers run; want 1 and 0", fast, servers)
				}
			} else {
				if fast != 0 || servers != 1 || fb == nil {
					t.Fatalf("net/http: the fast server holds %d connections, %d net/http servers run (one for 7s: %v); want 0 and 1", fast, servers, fb != nil)
				}
				if fb.srv.ReadHeaderTimeout != 7*time.Second || fb.srv.MaxHeaderBytes != maxRequestHeaderBytes || fb.srv.IdleTimeout != h1IdleTimeout || fb.srv.ErrorLog == nil {
					t.Errorf("net/http server: ReadHeaderTimeout %v, MaxHeaderBytes %d, IdleTimeout %v, ErrorLog %v; want 7s, %d, %v and a logger",
						fb.srv.ReadHeaderTimeout, fb.srv.MaxHeaderBytes, fb.srv.IdleTimeout, fb.srv.ErrorLog, maxRequestHeaderBytes, h1IdleTimeout)
				}
			}

			// A drain waits for the request in flight, which finishes.
			drained := make(chan struct{})
			go func() { s.Drain(); close(drained) }()
			time.Sleep(100 * time.Millisecond)
			select {
			case <-drained:
				t.Fatal("the drain ended with a request in flight")
			default:
			}
			close(release)
			if r := <-done; r.err != nil || r.code != 200 || r.body != "done" {
				t.Fatalf("the request in flight during the drain: %d %q %v, want 200 done", r.code, r.body, r.err)
			}
			select {
			case <-drained:
			case <-time.After(5 * time.Second):
				t.Fatal("the drain did not end after the request")
			}
			if name == HTTP1ServerNetHTTP && w.fallback(7*time.Second) != nil {
				t.Error("the drained worker still hands connections to its net/http server")
			}
		})
	}
}
