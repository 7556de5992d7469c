package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// A generated x-request-id shares its writer's memory: a request whose copy went to
// another transport (here an h2c cluster with a per-try timeout, whose
// HPACK table keeps the strings it encoded) must leave the next request a
// new writer, or the table sees the id change under it (wrong ids, then a
// panic in the transport). Found in review; 3000 requests on one connection.
func TestGeneratedRequestIDOutlivesTheWriter(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		mu.Lock()
		seen[id]++
		mu.Unlock()
		io.WriteString(w, id)
	})
	l, err := net.Listen("tcp", "127.0.0.11:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: echo, Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	cl := testCluster("echo", endpoint(l.Addr().String(), "a"))
	cl.Protocol = config.UpstreamHTTP2
	s, _ := startServer(t, testConfig(retry.Policy{PerTryTimeout: 5 * time.Second}, cl))
	c := dialProxy(t, s)
	br := bufio.NewReader(c)
	dups := 0
	for i := range 3000 {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /r%d HTTP/1.1\r\nHost: echo\r\n\r\n", i)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		mu.Lock()
		if seen[string(body)] > 1 {
			dups++
			if dups < 4 {
				t.Errorf("request %d: upstream saw x-request-id %q %d times", i, body, seen[string(body)])
			}
		}
		mu.Unlock()
	}
	if dups > 0 {
		t.Errorf("%d requests reached the upstream with an earlier request's id", dups)
	}
}
