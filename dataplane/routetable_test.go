package dataplane

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

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
