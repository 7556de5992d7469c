package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/meshlet-dev/meshlet/config"
)

// responseSeeds are upstream responses the fast reader must take exactly as
// net/http does, or leave to it.
var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\nDate: Tue, 01 Dec 2026 12:00:00 GMT\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n", // the next response stays buffered
	"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 3\r\nx-envoy-overloaded: true\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\n1234567",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive, Close\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nX-Spaces:   padded value \t \r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nX-Empty:\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nX-Obs: caf\xe9\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",                     // truncated body
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", // left to net/http
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
	"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\n\r\nuntil close",
	"HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\nX: y\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nBad Name: v\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nName : v\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 1 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nx",
	"HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 20 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1  200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 O\x01K\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 600 Custom\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nTrailer: X-T\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n", // head not whole
	"",
	// repeated names, in any case: found among the names so far (up to
	// 16 lines) or in the map (more)
	"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\nX-B: 3\r\nX-a: 4\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Many: m\r\nx-other: o\r\n", 9) + "Content-Length: 1\r\n\r\nx",
}

// checkResponseFast reads data with ReadResponseFast (into st, if not
// nil) and, if it took the response, with http.ReadResponse, and fails on
// any difference: the head, the body and its end, and what is left on the
// connection.
func checkResponseFast(t *testing.T, data []byte, method string, st *RespStore) (took bool) {
	req, _ := http.NewRequest(method, "http://upstream/", nil)
	br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
	_, _ = br.Peek(1) // buffer what has arrived, as the pool's Peek does
	before := br.Buffered()
	fast, ok := ReadResponseFast(br, req, st)
	if !ok {
		if br.Buffered() != before {
			t.Fatalf("declined %q but consumed %d bytes", data, before-br.Buffered())
		}
		return false
	}
	std, err := http.ReadResponse(bufio.NewReaderSize(bytes.NewReader(data), 4096), req)
	if err != nil {
		t.Fatalf("took %q, which net/http rejects: %v", data, err)
	}
	type head struct {
		Status                string
		StatusCode            int
		Proto                 string
		ProtoMajor, ProtoMinr int
		Header                http.Header
		ContentLength         int64
		TransferEncoding      []string
		Close                 bool
		Trailer               http.Header
	}
	h := func(r *http.Response) head {
		return head{r.Status, r.StatusCode, r.Proto, r.ProtoMajor, r.ProtoMinor, r.Header, r.ContentLength, r.TransferEncoding, r.Close, r.Trailer}
	}
	if a, b := h(fast), h(std); !reflect.DeepEqual(a, b) {
		t.Fatalf("response %q:\nfast    %+v\nnet/http %+v", data, a, b)
	}
	if (fast.Body == http.NoBody) != (std.Body == http.NoBody) {
		t.Fatalf("response %q: NoBody fast %v, net/http %v", data, fast.Body == http.NoBody, std.Body == http.NoBody)
	}
	// net/http's reader consumed the same head: read the rest through both.
	stdBr := bufio.NewReaderSize(bytes.NewReader(data), 4096)
	std, _ = http.ReadResponse(stdBr, req)
	fb, ferr := io.ReadAll(fast.Body)
	sb, serr := io.ReadAll(std.Body)
	if !bytes.Equal(fb, sb) || errors.Is(ferr, io.ErrUnexpectedEOF) != errors.Is(serr, io.ErrUnexpectedEOF) || (ferr == nil) != (serr == nil) {
		t.Fatalf("response %q body: fast %q %v, net/http %q %v", data, fb, ferr, sb, serr)
	}
	sameRest(t, data, br, stdBr)
	return true
}

// sameRest fails unless both readers have the same bytes left after the
// head (and body) of data.
func sameRest(t *testing.T, data []byte, fast, std *bufio.Reader) {
	t.Helper()
	fr, _ := io.ReadAll(fast)
	sr, _ := io.ReadAll(std)
	if !bytes.Equal(fr, sr) {
		t.Fatalf("%q: left on the connection fast %q, net/http %q", data, fr, sr)
	}
}

// newRespStore is a server request's response storage, as the server
// makes it.
func newRespStore() *RespStore { return &RespStore{Hdr: &HeadScratch{}} }

func TestReadResponseFast(t *testing.T) {
	took := map[string]bool{}
	st := newRespStore() // reused by every seed, as by a connection's requests
	for _, s := range responseSeeds {
		took[s] = checkResponseFast(t, []byte(s), http.MethodGet, nil)
		if checkResponseFast(t, []byte(s), http.MethodGet, st) != took[s] {
			t.Errorf("response %q: taken with storage %v, without %v", s, !took[s], took[s])
		}
		if checkResponseFast(t, []byte(s), http.MethodHead, st) {
			t.Errorf("took a response to HEAD: %q", s)
		}
	}
	// The common shapes must take the fast path, or it is dead code.
	for _, s := range responseSeeds[:11] {
		if !took[s] {
			t.Errorf("declined a plain response: %q", s)
		}
	}
	for _, s := range []string{responseSeeds[12], responseSeeds[14], responseSeeds[16], responseSeeds[20], responseSeeds[22]} {
		if took[s] {
			t.Errorf("took a response it must leave to net/http: %q", s)
		}
	}
}

// FuzzReadResponseFast: whatever the fast reader takes, net/http takes the
// same way (run on its seeds by go test; `go test -fuzz` explores).
func FuzzReadResponseFast(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s))
	}
	st := newRespStore()
	f.Fuzz(func(t *testing.T, data []byte) {
		checkResponseFast(t, data, http.MethodGet, nil)
		// Storage left as an earlier response (a seed) filled it.
		seed := responseSeeds[len(data)%11]
		checkResponseFast(t, []byte(seed), http.MethodGet, st)
		checkResponseFast(t, data, http.MethodGet, st)
		if strings.HasPrefix(string(data), "HTTP/1.1 ") {
			checkResponseFast(t, data, http.MethodPost, st)
		}
	})
}

// requestSeeds are downstream requests the fast reader must take exactly as
// net/http does, or leave to it.
var requestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /path?q=1&r=%20x HTTP/1.1\r\nHost: svc.ns.svc.cluster.local:8080\r\nUser-Agent: fortio.org/fortio-1.68.2\r\nAccept: */*\r\n\r\n",
	"HEAD /h HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
	"DELETE /d HTTP/1.1\r\nhost: a\r\nx-request-id: 1\r\nX-Request-Id: 2\r\n\r\nGET /next HTTP/1.1\r\n", // pipelined
	"OPTIONS /o HTTP/1.1\r\nHost: a\r\nX-Pad:  v \t\r\nX-Empty:\r\n\r\n",
	"GET /caf%C3%A9 HTTP/1.1\r\nHost: [::1]:80\r\nX-Obs: caf\xe9\r\nExpect: 100-continue\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", // left to net/http from here
	"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
	"GET / x HTTP/1.1\r\nHost: a\r\n\r\n",
	"get / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n",
	"GET / HTTP/1.1\r\nX-Fold: a\r\n b\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
	"GET / HTTP/1.1\r\n Host: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nTrailer: X\r\n\r\n",
	"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a?b#c HTTP/1.1\r\nHost: a\r\n\r\n", // net/http takes these; the server refuses them (CheckRequestHead)
	"GET /a#c HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost:\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a:b:c\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n", // head not whole
	"",
}

// checkRequestFast reads data with ReadRequestFast (into st, if not nil)
// and, if it took the request, with http.ReadRequest, and fails on any
// difference.
func checkRequestFast(t *testing.T, data []byte, st *ReqStore) (took bool) {
	br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
	_, _ = br.Peek(1)
	before := br.Buffered()
	fast, ok := ReadRequestFast(br, st)
	if !ok {
		if br.Buffered() != before {
			t.Fatalf("declined %q but consumed %d bytes", data, before-br.Buffered())
		}
		return false
	}
	stdBr := bufio.NewReaderSize(bytes.NewReader(data), 4096)
	std, err := http.ReadRequest(stdBr)
	if err != nil {
		t.Fatalf("took %q, which net/http rejects: %v", data, err)
	}
	type head struct {
		Method                string
		URL                   *url.URL
		Proto                 string
		ProtoMajor, ProtoMinr int
		Header                http.Header
		Host, RequestURI      string
		ContentLength         int64
		TransferEncoding      []string
		Close                 bool
		Trailer               http.Header
		NoBody                bool
	}
	h := func(r *http.Request) head {
		return head{r.Method, r.URL, r.Proto, r.ProtoMajor, r.ProtoMinor, r.Header, r.Host, r.RequestURI, r.ContentLength,
			r.TransferEncoding, r.Close, r.Trailer, r.Body == http.NoBody}
	}
	if a, b := h(fast), h(std); !reflect.DeepEqual(a, b) {
		t.Fatalf("request %q:\nfast    %+v\nnet/http %+v", data, a, b)
	}
	sameRest(t, data, br, stdBr)
	// What the fast reader takes, the server's check of the heads it
	// declines would pass as it is: the fast path skips no refusal.
	// (net/http takes more than both: a fragment, an empty Host.)
	limit := config.DefaultMaxHeadersCount
	if st != nil && st.MaxHeaders > 0 {
		limit = st.MaxHeaders
	}
	if rej, line := CheckRequestHead(data[:HeadEnd(data)], limit); rej != nil || line != nil {
		t.Fatalf("took %q, which the server's check refuses (%+v) or rewrites (%q)", data, rej, line)
	}
	return true
}

func TestReadRequestFast(t *testing.T) {
	st := new(ReqStore) // reused, as by a connection's requests
	for i, s := range requestSeeds {
		took := checkRequestFast(t, []byte(s), nil)
		if plain := i < 7; took != plain {
			t.Errorf("request %q: fast path took it %v, want %v", s, took, plain)
		}
		if checkRequestFast(t, []byte(s), st) != took {
			t.Errorf("request %q: taken with storage %v, without %v", s, !took, took)
		}
	}
	// A listener's header-line limit below the default: a head at it is
	// taken, one over it left to the server's check (which answers 431).
	limited := &ReqStore{MaxHeaders: 3}
	if !checkRequestFast(t, []byte(requestSeeds[1]), limited) {
		t.Errorf("declined 3 header lines with a limit of 3: %q", requestSeeds[1])
	}
	four := "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"
	if checkRequestFast(t, []byte(four), limited) {
		t.Errorf("took 4 header lines with a limit of 3: %q", four)
	}
}

// TestParseOriginForm: the targets parsed without net/url are parsed as
// net/url does, and the others are left to it.
func TestParseOriginForm(t *testing.T) {
	for _, c := range []struct {
		uri  string
		fast bool
	}{
		{"/", true}, {"/a/b.c-d_e~f", true}, {"/p?q=1&r=2", true}, {"/p?", true}, {"/p?a?b", true},
		{"/p?q=a%20b", true}, {"/a:b@c;d=e,f+g$h&i", true}, {"/a!b", false}, {"/a(b)", false},
		{"/caf%C3%A9", false}, {"/a b", false}, {"/a#b", false}, {"/a\"b", false}, {"/\x80", false},
		{"/p?q\x7f", false}, {"*", false}, {"http://a/", false}, {"?q", false},
	} {
		var u url.URL
		got := parseOriginForm(c.uri, &u)
		if got != c.fast {
			t.Errorf("%q: parsed without net/url %v, want %v", c.uri, got, c.fast)
		}
		if !got {
			continue
		}
		want, err := url.ParseRequestURI(c.uri)
		if err != nil || !reflect.DeepEqual(&u, want) {
			t.Errorf("%q: %+v, net/url %+v (%v)", c.uri, u, want, err)
		}
	}
}

// TestRequestTarget: the target written upstream and logged is
// URL.RequestURI()'s, whether the request came through the fast reader
// or net/http's, and after its URL was changed.
func TestRequestTarget(t *testing.T) {
	for _, uri := range []string{
		"/", "/a/b.c-d_e~f", "/p?q=1&r=2", "/p?", "/p?a?b", "/a:b@c;d=e", "/a!b", "/a(b)", "/caf%C3%A9",
		"/a%2Fb", "/%41", "//x/y", "*", "http://h/p?q", "/a%20b?c",
	} {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + uri + " HTTP/1.1\r\nHost: h\r\n\r\n")))
		if err != nil {
			t.Fatalf("%q: %v", uri, err)
		}
		if got, want := RequestTarget(req), req.URL.RequestURI(); got != want {
			t.Errorf("%q read by net/http: %q, want %q", uri, got, want)
		}
		var u url.URL
		if parseOriginForm(uri, &u) {
			fast := &http.Request{URL: &u, RequestURI: uri}
			if got, want := RequestTarget(fast), u.RequestURI(); got != want || got != uri {
				t.Errorf("%q read fast: %q, want %q", uri, got, want)
			}
		}
		req.URL.Path += "x"
		req.URL.RawQuery = "changed"
		if got, want := RequestTarget(req), req.URL.RequestURI(); got != want {
			t.Errorf("%q, URL changed: %q, want %q", uri, got, want)
		}
	}
	// Every target of up to six bytes over the bytes that matter.
	var walk func(uri string)
	walk = func(uri string) {
		if u, err := url.ParseRequestURI(uri); err == nil {
			req := &http.Request{URL: u, RequestURI: uri}
			if got, want := RequestTarget(req), u.RequestURI(); got != want {
				t.Fatalf("%q: %q, want %q", uri, got, want)
			}
		}
		if len(uri) < 6 {
			for _, c := range "/a%?!2F" {
				walk(uri + string(c))
			}
		}
	}
	walk("/")
}

// TestFastReaderAllocations: with a server request's storage the response
// head costs one allocation (its string), and so does the request head
// with the connection's header scratch (four without: its string, the
// header map's two and its values); the storage is reused.
func TestFastReaderAllocations(t *testing.T) {
	resp := []byte(responseSeeds[0])
	st := newRespStore()
	req, _ := http.NewRequest(http.MethodGet, "http://upstream/", nil)
	r := bytes.NewReader(resp)
	br := bufio.NewReaderSize(r, 4096)
	if n := testing.AllocsPerRun(100, func() {
		r.Reset(resp)
		br.Reset(r)
		_, _ = br.Peek(1)
		if _, ok := ReadResponseFast(br, req, st); !ok {
			t.Fatal("declined")
		}
	}); n != 1 {
		t.Errorf("response head: %v allocations, want 1", n)
	}
	in := []byte(requestSeeds[1])
	rst := new(ReqStore)
	r = bytes.NewReader(in)
	requestAllocs := func() float64 {
		return testing.AllocsPerRun(100, func() {
			r.Reset(in)
			br.Reset(r)
			_, _ = br.Peek(1)
			if _, ok := ReadRequestFast(br, rst); !ok {
				t.Fatal("declined")
			}
		})
	}
	if n := requestAllocs(); n > 4 {
		t.Errorf("request head: %v allocations, want at most 4", n)
	}
	rst.Hdr = new(HeadScratch)
	if n := requestAllocs(); n != 1 {
		t.Errorf("request head with a header scratch: %v allocations, want 1", n)
	}
}

// FuzzReadRequestFast: whatever the fast reader takes, net/http takes the
// same way (run on its seeds by go test; `go test -fuzz` explores).
func FuzzReadRequestFast(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	st, reused := new(ReqStore), &ReqStore{Hdr: new(HeadScratch)}
	limited := &ReqStore{Hdr: new(HeadScratch), MaxHeaders: 3}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRequestFast(t, data, nil)
		checkRequestFast(t, data, st)
		checkRequestFast(t, data, reused)  // the scratch of earlier inputs, cleared
		checkRequestFast(t, data, limited) // a listener's max_headers_count below the default
	})
}

// TestBlankLineIndex compares indexCRLFCRLF with bytes.Index on every string of up to
// eight bytes of CR, LF and one other byte.
func TestBlankLineIndex(t *testing.T) {
	alphabet := []byte("\r\na")
	var b []byte
	var walk func(n int)
	walk = func(n int) {
		if got, want := indexCRLFCRLF(b), bytes.Index(b, []byte("\r\n\r\n")); got != want {
			t.Fatalf("indexCRLFCRLF(%q) = %d, bytes.Index %d", b, got, want)
		}
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			b = append(b, c)
			walk(n - 1)
			b = b[:len(b)-1]
		}
	}
	walk(8)
}

// TestCountLF checks countLF against strings.Count on every string of
// LFs and one other byte up to 7 bytes, at limits below, at and above
// the count.
func TestCountLF(t *testing.T) {
	var b []byte
	var walk func(n int)
	walk = func(n int) {
		want := strings.Count(string(b), "\n")
		for limit := 0; limit <= 8; limit++ {
			if got := countLF(string(b), limit); got != min(want, limit+1) {
				t.Fatalf("countLF(%q, %d) = %d, want %d", b, limit, got, min(want, limit+1))
			}
		}
		if n == 0 {
			return
		}
		for _, c := range []byte("\na") {
			b = append(b, c)
			walk(n - 1)
			b = b[:len(b)-1]
		}
	}
	walk(7)
}

// TestCanonicalName checks canonicalName against ValidHeaderFieldName
// and CanonicalHeaderKey on every string of up to 4 bytes over an
// alphabet of both cases, digits, '-', a separator, a space, a control
// byte and a high byte.
func TestCanonicalName(t *testing.T) {
	const alphabet = "aZz0-_:( \x01\x80"
	var walk func(s string)
	walk = func(s string) {
		k, valid := canonicalName(s)
		wantValid := httpguts.ValidHeaderFieldName(s)
		if valid != wantValid || valid && k != http.CanonicalHeaderKey(s) {
			t.Fatalf("canonicalName(%q) = %q, %v; want %q, %v", s, k, valid, http.CanonicalHeaderKey(s), wantValid)
		}
		if len(s) >= 4 {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			walk(s + alphabet[i:i+1])
		}
	}
	walk("")
	for _, s := range []string{"Content-Length", "content-length", "X-Request-Id", "x-REQUEST-id", "Host", "TE", "Te", "-a-", "A--b"} {
		walk(s)
	}
}
