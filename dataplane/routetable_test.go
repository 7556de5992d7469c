package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/meshlet-dev/meshlet/config"
)

// mirror answers 200 naming itself and echoing what it received: the
// path and query, the host, and every request header as "Got-<name>".
func mirror(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", name)
		w.Header().Set("Got-Path", r.URL.RequestURI())
		w.Header().Set("Got-Host", r.Host)
		for k, vv := range r.Header {
			w.Header()["Got-"+k] = vv
		}
		w.Header().Set("X-Upstream-Drop", "gone")
		fmt.Fprint(w, name)
	})
}

// tableConfig is testConfig whose route to 10.96.0.10:80 is a route
// table over clusters v1 and v2.
func tableConfig(t *testing.T, rules []config.RouteRule) *config.Config {
	t.Helper()
	v1 := testCluster("v1", endpoint(upstream(t, "127.0.0.1", mirror("v1")), "a"))
	v2 := testCluster("v2", endpoint(upstream(t, "127.0.0.1", mirror("v2")), "a"))
	cfg := testConfig(noRetry, testCluster("echo", endpoint(upstream(t, "127.0.0.1", mirror("echo")), "a")), v1, v2)
	r := &cfg.Listeners[0].Routes[0]
	r.Hosts, r.RouteConfig, r.Rules = nil, "outbound|80||echo", rules
	return cfg
}

func one(cluster string) []config.WeightedBackend {
	return []config.WeightedBackend{{Cluster: cluster, Weight: 1}}
}

// do sends a request through the proxy and returns the response (body
// read and closed).
func do(t *testing.T, s *Server, method, target string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, proxyURL(s)+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "echo"
	for k, vv := range header {
		req.Header[k] = vv
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, target, err)
	}
	return resp, string(b)
}

// TestRouteTableMatchesAndActions runs a route table through the proxy:
// each kind of match picks its rule, first match wins, and each action
// (backend with header changes and rewrites, redirect, direct response,
// a backend that names no cluster, no rule at all) answers as Envoy
// would.
func TestRouteTableMatchesAndActions(t *testing.T) {
	rules := []config.RouteRule{
		{Name: "exact", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/exact"}, Backends: one("v1")},
		{Name: "v2-by-header", Match: config.RouteMatch{PathKind: config.PathSeparatedPrefix, Path: "/v2",
			Headers: []config.StringMatch{{Name: "x-version", Exact: "two"}}},
			Backends: []config.WeightedBackend{{Cluster: "v2", Weight: 1,
				RequestHeaders:  config.HeaderMutation{Set: []config.Header{{Name: "X-Backend", Value: "b2"}}},
				ResponseHeaders: config.HeaderMutation{Add: []config.Header{{Name: "X-Resp-Backend", Value: "rb2"}}}}},
			RequestHeaders: config.HeaderMutation{Set: []config.Header{{Name: "x-set", Value: "s"}}, Add: []config.Header{{Name: "X-Add", Value: "a"}},
				Remove: []string{"x-drop"}},
			ResponseHeaders: config.HeaderMutation{Set: []config.Header{{Name: "X-Resp", Value: "r"}}, Remove: []string{"X-Upstream-Drop"}}},
		{Name: "regex", Match: config.RouteMatch{PathKind: config.PathRegex, Path: "/re/[0-9]+"}, Backends: one("v1"),
			RegexRewrite: &config.RegexRewrite{Pattern: "^/re/([0-9]+)$", Substitution: `/num/\1`}},
		{Name: "method-query", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/q",
			Headers: []config.StringMatch{{Name: ":method", Exact: "POST"}}, Query: []config.StringMatch{{Name: "q", Regex: "[0-9]"}}},
			Backends: one("v2")},
		{Name: "rewrite", Match: config.RouteMatch{PathKind: config.PathSeparatedPrefix, Path: "/rewrite"}, Backends: one("v1"),
			PrefixRewrite: "/new", HostRewrite: "rewritten.example"},
		{Name: "redirect", Match: config.RouteMatch{PathKind: config.PathSeparatedPrefix, Path: "/redirect"},
			Redirect: &config.Redirect{Scheme: "https", Host: "example.org", PrefixRewrite: "/moved", Code: http.StatusFound}},
		{Name: "redirect-port", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/port"},
			Redirect: &config.Redirect{Port: 8443, Path: "/elsewhere"}},
		{Name: "direct", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/direct"}, DirectStatus: http.StatusInternalServerError},
		{Name: "missing", Match: config.RouteMatch{PathKind: config.PathSeparatedPrefix, Path: "/missing"}, Backends: one("nope"),
			ClusterNotFoundStatus: http.StatusInternalServerError},
		{Name: "exact-shadowed", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/exact"}, Backends: one("v2")},
	}
	s, logs := startServer(t, tableConfig(t, rules))

	cases := []struct {
		name, method, target string
		header               http.Header
		code                 int
		upstream             string            // X-Upstream of the answer ("" for none)
		want                 map[string]string // response headers
		absent               []string          // response headers that must not be there
	}{
		{name: "exact, first match wins", target: "/exact", code: 200, upstream: "v1"},
		{name: "exact is exact", target: "/exact/", code: 404},
		{name: "header and separated prefix", target: "/v2/deep?x=1", header: http.Header{"X-Version": {"two"}, "X-Drop": {"d"}, "X-Add": {"first"}},
			code: 200, upstream: "v2", want: map[string]string{"Got-Path": "/v2/deep?x=1", "Got-X-Set": "s", "Got-X-Backend": "b2",
				"X-Resp": "r", "X-Resp-Backend": "rb2"},
			absent: []string{"Got-X-Drop", "X-Upstream-Drop"}},
		{name: "separated prefix is not a string prefix", target: "/v2x", header: http.Header{"X-Version": {"two"}}, code: 404},
		{name: "header value must match", target: "/v2", header: http.Header{"X-Version": {"Two"}}, code: 404},
		{name: "header absent", target: "/v2", code: 404},
		{name: "regex and regex rewrite", target: "/re/42", code: 200, upstream: "v1", want: map[string]string{"Got-Path": "/num/42"}},
		{name: "regex matches the whole path", target: "/re/42/x", code: 404},
		{name: "method and query", method: http.MethodPost, target: "/q?a=b&q=7", code: 200, upstream: "v2"},
		{name: "method must match", target: "/q?q=7", code: 404},
		{name: "query must match", method: http.MethodPost, target: "/q?q=x", code: 404},
		{name: "prefix and host rewrite", target: "/rewrite/a/b?c=d", code: 200, upstream: "v1",
			want: map[string]string{"Got-Path": "/new/a/b?c=d", "Got-Host": "rewritten.example"}},
		{name: "redirect with scheme, host and prefix", target: "/redirect/x?y=z", code: http.StatusFound,
			want: map[string]string{"Location": "https://example.org/moved/x?y=z"}},
		{name: "redirect with port and path", target: "/port", code: http.StatusMovedPermanently,
			want: map[string]string{"Location": "http://echo:8443/elsewhere"}},
		{name: "direct response", target: "/direct", code: http.StatusInternalServerError},
		{name: "backend with no cluster", target: "/missing", code: http.StatusInternalServerError},
		{name: "no rule", target: "/other", code: http.StatusNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := c.method
			if method == "" {
				method = http.MethodGet
			}
			resp, _ := do(t, s, method, c.target, c.header)
			if resp.StatusCode != c.code {
				t.Fatalf("%s %s: status %d, want %d (headers %v)", method, c.target, resp.StatusCode, c.code, resp.Header)
			}
			if got := resp.Header.Get("X-Upstream"); got != c.upstream {
				t.Errorf("%s %s: answered by %q, want %q", method, c.target, got, c.upstream)
			}
			for k, v := range c.want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s %s: %s = %q, want %q", method, c.target, k, got, v)
				}
			}
			for _, k := range c.absent {
				if v, ok := resp.Header[k]; ok {
					t.Errorf("%s %s: %s = %q, want none", method, c.target, k, v)
				}
			}
		})
	}
	// X-Add appended to the client's own value.
	resp, _ := do(t, s, http.MethodGet, "/v2", http.Header{"X-Version": {"two"}, "X-Add": {"first"}})
	if got := resp.Header.Values("Got-X-Add"); strings.Join(got, ",") != "first,a" {
		t.Errorf("X-Add reached the backend as %q, want first then a", got)
	}
	logs.waitLine(t, "GET /other", " 404 NR ", "route_not_found")
	logs.waitLine(t, "GET /rewrite/a/b?c=d", " 200 ") // as received, not as rewritten
	logs.waitLine(t, "GET /re/42 ", " 200 ")
	logs.waitLine(t, "GET /missing", " 500 NC ", "cluster_not_found")
	logs.waitLine(t, "GET /direct", " 500 - ", "direct_response")
}

// TestRouteTableSplitsByWeight sends requests to a weighted split: the
// shares follow the weights, a backend of weight 0 gets nothing, and the
// share of a backend that names no cluster is answered 500.
func TestRouteTableSplitsByWeight(t *testing.T) {
	rules := []config.RouteRule{{
		Name: "split", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/"},
		Backends: []config.WeightedBackend{{Cluster: "v1", Weight: 1}, {Cluster: "v2", Weight: 2}, {Cluster: "echo", Weight: 0},
			{Cluster: "invalid", Weight: 1}},
		ClusterNotFoundStatus: http.StatusInternalServerError,
	}}
	s, _ := startServer(t, tableConfig(t, rules))
	const n = 800
	counts := map[string]int{}
	for range n {
		resp, _ := do(t, s, http.MethodGet, "/", nil)
		switch resp.StatusCode {
		case 200:
			counts[resp.Header.Get("X-Upstream")]++
		case 500:
			counts["500"]++
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if counts["echo"] != 0 {
		t.Errorf("the backend of weight 0 got %d requests", counts["echo"])
	}
	// Binomial: 4 standard deviations of n*p around n*p.
	for name, share := range map[string]float64{"v1": 0.25, "v2": 0.5, "500": 0.25} {
		mean := n * share
		sd := 4 * math.Sqrt(n*share*(1-share))
		if got := float64(counts[name]); got < mean-sd || got > mean+sd {
			t.Errorf("%s got %v of %d requests, want %v ± %.0f (all: %v)", name, got, n, mean, sd, counts)
		}
	}
}

// TestRouteTableEmpty: a destination whose route configuration has no
// rules (or was removed while still named) answers every request 404,
// as Envoy's empty route table, while TCP to it still reaches the
// route's cluster.
func TestRouteTableEmpty(t *testing.T) {
	s, logs := startServer(t, tableConfig(t, nil))
	resp, _ := do(t, s, http.MethodGet, "/anything", nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, want 404", resp.StatusCode)
	}
	logs.waitLine(t, "GET /anything", " 404 NR ")
}

// TestRouteTableReload swaps a route table on a running server: the
// next request follows the new rules.
func TestRouteTableReload(t *testing.T) {
	cfg := tableConfig(t, []config.RouteRule{{Name: "to-v1", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/"}, Backends: one("v1")}})
	s, _ := startServer(t, cfg)
	if resp, _ := do(t, s, http.MethodGet, "/", nil); resp.Header.Get("X-Upstream") != "v1" {
		t.Fatalf("before the reload: answered by %q, want v1", resp.Header.Get("X-Upstream"))
	}
	next := *cfg
	next.Listeners = append([]config.Listener(nil), cfg.Listeners...)
	next.Listeners[0].Routes = append([]config.Route(nil), cfg.Listeners[0].Routes...)
	next.Listeners[0].Routes[0].Rules = []config.RouteRule{{Name: "to-v2", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/"}, Backends: one("v2")}}
	if err := s.Reload(&next); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if resp, _ := do(t, s, http.MethodGet, "/", nil); resp.Header.Get("X-Upstream") != "v2" {
		t.Fatalf("after the reload: answered by %q, want v2", resp.Header.Get("X-Upstream"))
	}
}

// TestRouteTableHostileRequests sends what an attacker sends at a route
// table with a deny rule (a direct 403 for /admin) in front of a
// catch-all backend: dot segments, encoded letters, a query crafted to
// slip past a query match, a request target not in origin form, while a
// legitimate client's requests all succeed alongside. Each answer is the
// one Envoy with Istio's path normalization gives.
func TestRouteTableHostileRequests(t *testing.T) {
	rules := []config.RouteRule{
		{Name: "deny-admin", Match: config.RouteMatch{PathKind: config.PathSeparatedPrefix, Path: "/admin"}, DirectStatus: http.StatusForbidden,
			ResponseHeaders: config.HeaderMutation{Set: []config.Header{{Name: "X-Denied", Value: "yes"}}}},
		{Name: "deny-debug", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/",
			Query: []config.StringMatch{{Name: "debug", Exact: "1"}}}, DirectStatus: http.StatusForbidden},
		{Name: "all", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/"}, Backends: one("v1")},
	}
	s, _ := startServer(t, tableConfig(t, rules))

	stop := make(chan struct{})
	legit := make(chan error, 1)
	go func() {
		client := &http.Client{}
		n := 0
		for {
			select {
			case <-stop:
				if n == 0 {
					legit <- fmt.Errorf("the legitimate client sent nothing")
					return
				}
				legit <- nil
				return
			default:
			}
			req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/shop/items?page=2", nil)
			req.Host = "echo"
			resp, err := client.Do(req)
			if err != nil {
				legit <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Got-Path") != "/shop/items?page=2" {
				legit <- fmt.Errorf("legitimate request: %d, upstream saw %q", resp.StatusCode, resp.Header.Get("Got-Path"))
				return
			}
			n++
		}
	}()

	for _, c := range []struct {
		target   string
		code     int
		upstream string // the path the backend saw, for a 200
	}{
		{"/admin", 403, ""},
		{"/admin/users", 403, ""},
		{"/x/../admin", 403, ""},
		{"/x/%2e%2e/admin", 403, ""},
		{"/./admin/", 403, ""},
		{"/%61dmin", 403, ""},
		{"/%61dmin/../admin/x", 403, ""},
		{"/../../admin", 403, ""},
		{"/administrator", 200, "/administrator"},
		{"/admin%2Fx", 200, "/admin%2Fx"}, // escaped slashes kept, as Istio's default
		{"/ADMIN", 200, "/ADMIN"},         // paths are case-sensitive
		{"/a/b/../c?q=1", 200, "/a/c?q=1"},
		{"/q?debug=1", 403, ""},
		{"/q?x=1&debug=1&debug=0", 403, ""},
		{"/q?debug=0&debug=1", 200, "/q?debug=0&debug=1"},         // the first occurrence counts
		{"/q?de%62ug=1", 200, "/q?de%62ug=1"},                     // undecoded, as Envoy
		{"/q?debug=%31", 200, "/q?debug=%31"},                     // undecoded, as Envoy
		{"/q?bad=%zz&debug=1", 403, ""},                           // a malformed pair hides nothing
		{"/q?" + strings.Repeat("&", 10001) + "debug=1", 403, ""}, // nor do many pairs
	} {
		resp, _ := do(t, s, http.MethodGet, c.target, nil)
		if resp.StatusCode != c.code {
			t.Errorf("GET %.60s: %d, want %d", c.target, resp.StatusCode, c.code)
			continue
		}
		if c.code == 403 && resp.Header.Get("X-Denied") != "yes" && strings.HasPrefix(c.target, "/") && !strings.HasPrefix(c.target, "/q") {
			t.Errorf("GET %s: the rule's response header is missing from its direct response", c.target)
		}
		if c.code == 200 && resp.Header.Get("Got-Path") != c.upstream {
			t.Errorf("GET %.60s: the backend saw %q, want %q", c.target, resp.Header.Get("Got-Path"), c.upstream)
		}
	}
	// Not origin form: OPTIONS * and an absolute-form target.
	conn := dialProxy(t, s)
	fmt.Fprint(conn, "OPTIONS * HTTP/1.1\r\nHost: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("OPTIONS *: %d, want 404 (no path for a rule to match)", resp.StatusCode)
	}
	close(stop)
	if err := <-legit; err != nil {
		t.Error(err)
	}
}

// TestRouteTableRedirectPorts: a redirect's Location keeps the request's
// port, drops it for a new host or a scheme change from its default, and
// leaves out a scheme's default port; the rule's response headers come
// with it, and a path part never lacks its "/".
func TestRouteTableRedirectPorts(t *testing.T) {
	rules := []config.RouteRule{
		{Name: "keep", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/keep"}, Redirect: &config.Redirect{Path: "/kept"},
			ResponseHeaders: config.HeaderMutation{Set: []config.Header{{Name: "X-Resp", Value: "r"}}}},
		{Name: "host", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/host"}, Redirect: &config.Redirect{Host: "www.example.org"}},
		{Name: "tls", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/tls"}, Redirect: &config.Redirect{Scheme: "https"}},
		{Name: "443", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/443"}, Redirect: &config.Redirect{Scheme: "https", Port: 443}},
		{Name: "v6", Match: config.RouteMatch{PathKind: config.PathExact, Path: "/v6"}, Redirect: &config.Redirect{Host: "[::1]", Port: 8443}},
		{Name: "prefix", Match: config.RouteMatch{PathKind: config.PathSeparatedPrefix, Path: "/old"}, Redirect: &config.Redirect{PrefixRewrite: ".evil.example"}},
		{Name: "whole", Match: config.RouteMatch{PathKind: config.PathRegex, Path: "/rr/.*"}, Redirect: &config.Redirect{PrefixRewrite: "/new"}},
	}
	s, _ := startServer(t, tableConfig(t, rules))
	for _, c := range []struct{ host, target, location string }{
		{"echo:8080", "/keep?a=b", "http://echo:8080/kept?a=b"},
		{"echo:8080", "/host", "http://www.example.org/host"},
		{"echo:80", "/tls", "https://echo/tls"},
		{"echo:8080", "/tls", "https://echo:8080/tls"},
		{"echo", "/443", "https://echo/443"},
		{"[fd00::1]:8080", "/keep", "http://[fd00::1]:8080/kept"},
		{"echo", "/v6", "http://[::1]:8443/v6"},
		{"echo", "/old/x", "http://echo/.evil.example/x"},
		{"echo", "/rr/a?b=c", "http://echo/new?b=c"},
	} {
		req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+c.target, nil)
		req.Host = c.host
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Location"); got != c.location {
			t.Errorf("Host %s, GET %s: Location %q, want %q", c.host, c.target, got, c.location)
		}
		if c.target == "/keep?a=b" && resp.Header.Get("X-Resp") != "r" {
			t.Errorf("the redirect lacks its rule's response header")
		}
	}
}

// TestRouteTableHTTP2 runs a route table for HTTP/2 requests (prior
// knowledge, x/net/http2's server): the header match and the rule's
// response header hold; a gRPC request no rule matches gets a
// trailers-only UNIMPLEMENTED, and one whose backend names no cluster
// UNAVAILABLE (Envoy's mappings of 404 and 503), not an HTTP status a
// gRPC client cannot read.
func TestRouteTableHTTP2(t *testing.T) {
	rules := []config.RouteRule{
		{Name: "v2", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/", Headers: []config.StringMatch{{Name: "x-version", Exact: "two"}}},
			Backends: one("v2"), ResponseHeaders: config.HeaderMutation{Set: []config.Header{{Name: "X-Resp", Value: "r"}}}},
		{Name: "gone", Match: config.RouteMatch{PathKind: config.PathPrefix, Path: "/svc.Gone/"}, Backends: one("nope")},
	}
	s, _ := startServer(t, tableConfig(t, rules))
	h2c := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	client := &http.Client{Transport: h2c}
	send := func(path string, h http.Header) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, proxyURL(s)+path, strings.NewReader(""))
		req.Host = "echo"
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST %s over HTTP/2: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp := send("/x", http.Header{"X-Version": {"two"}})
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "v2" || resp.Header.Get("X-Resp") != "r" {
		t.Errorf("HTTP/2 through the table: %s %d, upstream %q, X-Resp %q", resp.Proto, resp.StatusCode, resp.Header.Get("X-Upstream"), resp.Header.Get("X-Resp"))
	}
	grpc := http.Header{"Content-Type": {"application/grpc"}, "Te": {"trailers"}}
	for path, want := range map[string]string{"/svc.Other/Call": "12", "/svc.Gone/Call": "14"} {
		resp := send(path, grpc)
		if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != want {
			t.Errorf("gRPC %s: %d grpc-status %q, want 200 with grpc-status %s", path, resp.StatusCode, resp.Header.Get("Grpc-Status"), want)
		}
	}
}

// TestRouteTableOpaqueTCP: a destination with a route table still
// carries opaque TCP (a client that speaks no HTTP) to its route's
// cluster; tables route only HTTP.
func TestRouteTableOpaqueTCP(t *testing.T) {
	echoTCP := serveTCP(t, "127.0.0.1", func(c net.Conn) { io.Copy(c, c) })
	cfg := tableConfig(t, nil)
	cfg.Clusters[0] = testCluster("echo", endpoint(echoTCP, "a"))
	cfg.Listeners[0].DetectionTimeout = 50 * time.Millisecond
	s, _ := startServer(t, cfg)
	conn := dialProxy(t, s)
	// Bytes that are no HTTP: the sidecar proxies them as TCP.
	buf := make([]byte, 5)
	if _, err := conn.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x01}); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, buf); err != nil || buf[0] != 0x16 {
		t.Fatalf("opaque TCP through a destination with a route table: %q, %v", buf, err)
	}
}
