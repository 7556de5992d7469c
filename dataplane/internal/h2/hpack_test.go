package h2

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/http2/hpack"
)

// byteConn counts the bytes written to a connection.
type byteConn struct {
	net.Conn
	n *atomic.Int64
}

func (c byteConn) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return c.Conn.Write(p)
}

// TestHPACKTableKeepsNoCallerMemory: the client's encoder indexes a
// request's fields (a repeated request costs fewer bytes), yet a value
// written into memory the caller reuses, as the router writes request
// ids, reaches the server as it was when each request was sent: the
// table keeps copies, and per-request ids are not indexed at all.
func TestHPACKTableKeepsNoCallerMemory(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s|%s|%s", r.Header.Get("X-Mutable"), r.Header.Get("X-Request-Id"), r.Header.Get("X-Name"))
	}), false, nil)
	var sent atomic.Int64
	tr := &Transport{IdleTimeout: time.Minute, MaxHeaderBytes: 60 << 10, Dial: func(ctx context.Context, addr string, _ any) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return byteConn{c, &sent}, nil
	}}
	t.Cleanup(tr.CloseIdleConnections)
	mutable, id := []byte("value-one-aaaa"), []byte("id-0001")
	send := func(mut, rid string) (string, int64) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+ts.addr+"/", nil)
		req.Header["X-Mutable"] = []string{mut}
		req.Header["X-Request-Id"] = []string{rid}
		req.Header["X-Name"] = []string{"meshlet"}
		before := sent.Load()
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return string(b), sent.Load() - before
	}
	reused := func(b []byte) string { return unsafe.String(&b[0], len(b)) }
	got, _ := send(reused(mutable), reused(id)) // (the connection's preface and settings)
	if want := "value-one-aaaa|id-0001|meshlet"; got != want {
		t.Fatalf("first request: the server saw %q, want %q", got, want)
	}
	got, _ = send(reused(mutable), reused(id))
	if want := "value-one-aaaa|id-0001|meshlet"; got != want {
		t.Fatalf("second request: the server saw %q, want %q", got, want)
	}
	copy(mutable, "value-two-bbbb")
	copy(id, "id-0002")
	if got, _ := send(reused(mutable), reused(id)); got != "value-two-bbbb|id-0002|meshlet" {
		t.Fatalf("after the caller's memory changed: the server saw %q", got)
	}
	if got, _ := send(strings.Clone("value-one-aaaa"), "id-0003"); got != "value-one-aaaa|id-0003|meshlet" {
		t.Fatalf("the first value again: the server saw %q", got)
	}
	// Many values through the same memory, to and from the table's
	// eviction: each reaches the server as it was sent.
	for i := range 3000 {
		v := fmt.Sprintf("value-%08d", i*7%97)
		copy(mutable, v)
		if got, _ := send(reused(mutable), "id"); got != v+"|id|meshlet" {
			t.Fatalf("request %d: the server saw %q, want %q", i, got, v)
		}
	}
	// A value sent before goes as an index; the id, never indexed, as
	// a literal each time.
	_, n1 := send(strings.Clone("a-new-value"), "id-0004")
	_, n2 := send(strings.Clone("a-new-value"), "id-0005")
	if n2 >= n1 {
		t.Fatalf("a repeated value took %d bytes, as new %d: nothing indexed", n2, n1)
	}
}

// TestAppendLiteral: the literal without indexing written by hand reads
// back with x/net's decoder as the same field, for raw and Huffman
// strings and lengths that need more than the prefix.
func TestAppendLiteral(t *testing.T) {
	for _, v := range []string{"", "a", "id-0001", strings.Repeat("z", 126), strings.Repeat("q", 127), strings.Repeat("\x01\xff", 300), strings.Repeat("ab", 5000)} {
		var got []hpack.HeaderField
		d := hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, f) })
		block := appendLiteral(nil, "x-request-id", v)
		if _, err := d.Write(block); err != nil {
			t.Fatalf("value of %d bytes: %v", len(v), err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("value of %d bytes: %v", len(v), err)
		}
		if len(got) != 1 || got[0].Name != "x-request-id" || got[0].Value != v {
			t.Fatalf("value of %d bytes read back as %d fields", len(v), len(got))
		}
		// Not indexed: a second block must name it again.
		if _, err := d.Write([]byte{0xbe}); err == nil { // index 62, the first dynamic entry
			t.Fatalf("value of %d bytes was added to the decoder's table", len(v))
		}
	}
}
