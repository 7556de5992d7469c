package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
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

// TestFormatUUID checks the hand-written UUID layout against fmt's, for
// the extremes and random bits.
func TestFormatUUID(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	cases := [][2]uint64{{0, 0}, {^uint64(0), ^uint64(0)}, {0x0123456789abcdef, 0xfedcba9876543210}}
	for range 1000 {
		cases = append(cases, [2]uint64{rnd.Uint64(), rnd.Uint64()})
	}
	for _, c := range cases {
		var buf [36]byte
		formatUUID(&buf, c[0], c[1])
		want := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", c[0]>>32, c[0]>>16&0xffff, c[0]&0xffff, c[1]>>48, c[1]&(1<<48-1))
		if string(buf[:]) != want {
			t.Fatalf("formatUUID(%#x, %#x) = %q, want %q", c[0], c[1], buf, want)
		}
	}
}
