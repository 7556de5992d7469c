package xds

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// cluster names of the test services in namespace shop.
var (
	echo80   = ClusterName(ServiceHost(nn("shop", "echo"), ""), 80)
	echo8080 = ClusterName(ServiceHost(nn("shop", "echo"), ""), 8080)
	v1c      = ClusterName(ServiceHost(nn("shop", "v1"), ""), 80)
	v2c      = ClusterName(ServiceHost(nn("shop", "v2"), ""), 80)
)

// shop is the parent echo (ports 80 and 8080) and backends v1 and v2.
func shop() []*corev1.Service {
	return []*corev1.Service{
		service("shop", "echo", nil, "http:80", "admin:8080"),
		service("shop", "v1", nil, "http:80"),
		service("shop", "v2", nil, "http:80"),
	}
}

// onlyRC returns the RouteConfiguration a client in client's namespace
// gets for cluster, checking that the cluster names it.
func onlyRC(t *testing.T, s *Server, nodeID, cluster string) *routev3.RouteConfiguration {
	t.Helper()
	cs, rcs := groupFor(t, s, nodeID)
	if got := routeConfigOf(cs[cluster]); got != cluster {
		t.Fatalf("cluster %s names route config %q, want its own name", cluster, got)
	}
	return rcs[cluster]
}

func exactHeader(name, v string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}}}
}

func regexHeader(name, re string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}}}
}

// TestRouteMatches: every path type, headers (names lowercased, a
// repeated name ignored), the method as :method, query parameters.
func TestRouteMatches(t *testing.T) {
	hdrExact, hdrRegex := gatewayv1.HeaderMatchExact, gatewayv1.HeaderMatchRegularExpression
	qRegex := gatewayv1.QueryParamMatchRegularExpression
	r := httpRoute("shop", "m", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)},
		rule(nil, to("", "v1", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/exact")}, to("", "v1", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchPathPrefix, "/pre/")}, to("", "v1", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchPathPrefix, "/")}, to("", "v1", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchRegularExpression, "/re/[0-9]+")}, to("", "v1", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{{
			Headers: []gatewayv1.HTTPHeaderMatch{{Name: "X-Version", Value: "v2"}, {Type: &hdrRegex, Name: "x-user", Value: "a.*"},
				{Type: &hdrExact, Name: "x-VERSION", Value: "ignored"}},
			Method: ptr(gatewayv1.HTTPMethodPost),
			QueryParams: []gatewayv1.HTTPQueryParamMatch{{Name: "debug", Value: "1"}, {Type: &qRegex, Name: "id", Value: "[a-f]+"},
				{Name: "debug", Value: "ignored"}},
		}}, to("", "v1", 80, nil)),
	)
	s := routeServer(t, shop(), r)
	rs := routesOf(t, onlyRC(t, s, "c.other", echo80))
	byName := map[string]*routev3.RouteMatch{}
	for _, rt := range rs {
		byName[rt.GetName()] = rt.GetMatch()
	}
	protoEq(t, "no match", byName["shop/m/0"], &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}})
	protoEq(t, "Exact", byName["shop/m/1"], &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/exact"}})
	protoEq(t, "PathPrefix with a trailing /", byName["shop/m/2"],
		&routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/pre"}})
	protoEq(t, "PathPrefix /", byName["shop/m/3"], &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}})
	protoEq(t, "RegularExpression", byName["shop/m/4"],
		&routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "/re/[0-9]+"}}})
	protoEq(t, "headers, method, query", byName["shop/m/5"], &routev3.RouteMatch{
		PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
		Headers:       []*routev3.HeaderMatcher{exactHeader("x-version", "v2"), regexHeader("x-user", "a.*"), exactHeader(":method", "POST")},
		QueryParameters: []*routev3.QueryParameterMatcher{
			{Name: "debug", QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{
				StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "1"}}}},
			{Name: "id", QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{
				StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "[a-f]+"}}}}},
		},
	})
	// Exact first, then the regex, then the longest prefix; of the
	// prefixes "/", the one with a method and headers first, then rule
	// order.
	eq(t, routeNames(rs), []string{"shop/m/1", "shop/m/4", "shop/m/2", "shop/m/5", "shop/m/0", "shop/m/3"})
}

// TestRoutePrecedence: across two producer routes of one Service, the
// Gateway API order; equal matches go to the older route, then to the
// first by namespace/name; within a route, rule then match order.
func TestRoutePrecedence(t *testing.T) {
	parents := []gatewayv1.ParentReference{svcRef("", "echo", 0)}
	get := ptr(gatewayv1.HTTPMethodGet)
	hdr := func(n int) []gatewayv1.HTTPHeaderMatch {
		var hs []gatewayv1.HTTPHeaderMatch
		for i := range n {
			hs = append(hs, gatewayv1.HTTPHeaderMatch{Name: gatewayv1.HTTPHeaderName("h" + string(rune('a'+i))), Value: "x"})
		}
		return hs
	}
	prefix := func(v string) *gatewayv1.HTTPPathMatch {
		return &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchPathPrefix), Value: ptr(v)}
	}
	// "new" is newer than "old"; "b-tie" and "a-tie" are as old as each
	// other, newer than "old".
	old := httpRoute("shop", "old", 0, parents,
		rule([]gatewayv1.HTTPRouteMatch{{Path: prefix("/a")}}, to("", "v1", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{{Path: prefix("/a"), QueryParams: []gatewayv1.HTTPQueryParamMatch{{Name: "q", Value: "1"}}},
			{Path: prefix("/a"), Headers: hdr(1)}}, to("", "v1", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{{Path: prefix("/same")}}, to("", "v1", 80, nil)),
	)
	newer := httpRoute("shop", "new", 10, parents,
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/a")}, to("", "v2", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{{Path: prefix("/a/b")}}, to("", "v2", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{{Path: prefix("/a"), Method: get}}, to("", "v2", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{{Path: prefix("/a"), Headers: hdr(2)}}, to("", "v2", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{{Path: prefix("/same")}}, to("", "v2", 80, nil)),
	)
	bTie := httpRoute("shop", "b-tie", 20, parents, rule([]gatewayv1.HTTPRouteMatch{{Path: prefix("/tie")}}, to("", "v1", 80, nil)))
	aTie := httpRoute("shop", "a-tie", 20, parents, rule([]gatewayv1.HTTPRouteMatch{{Path: prefix("/tie")}}, to("", "v1", 80, nil)))
	s := routeServer(t, shop(), newer, bTie, old, aTie)
	rs := routesOf(t, onlyRC(t, s, "c.other", echo80))
	eq(t, routeNames(rs), []string{
		"shop/new/0",   // exact /a
		"shop/old/2",   // the longest prefix, /same (5), older
		"shop/new/4",   // /same, newer
		"shop/new/1",   // /a/b (4), older than the /tie routes
		"shop/a-tie/0", // /tie (4), as old as b-tie: by name
		"shop/b-tie/0",
		"shop/new/2", // /a with a method
		"shop/new/3", // /a, 2 headers
		"shop/old/1", // /a, 1 header (the rule's second match)
		"shop/old/1", // /a, 1 query parameter (its first)
		"shop/old/0", // /a
	})
	eq(t, [2]int{len(rs[8].GetMatch().GetHeaders()), len(rs[9].GetMatch().GetQueryParameters())}, [2]int{1, 1})
	// Every sidecar gets it: producer routes apply to all clients.
	cs, _ := groupFor(t, s, "c.shop")
	eq(t, routeConfigOf(cs[echo80]), echo80)
}

// TestConsumerRouteOverride: a consumer route (in the client's namespace,
// for a Service of another) replaces the Service's producer routes for
// that namespace's sidecars only, on every port of the Service; other
// namespaces keep the producer routes and share one group.
func TestConsumerRouteOverride(t *testing.T) {
	producer := httpRoute("shop", "prod", 0, []gatewayv1.ParentReference{svcRef("", "echo", 0)},
		rule(nil, to("", "v1", 80, nil)))
	consumer := httpRoute("web", "cons", 0, []gatewayv1.ParentReference{svcRef("shop", "echo", 80)},
		rule(nil, to("shop", "v2", 80, nil)))
	s := routeServer(t, shop(), producer, consumer)

	webCS, webRC := groupFor(t, s, "web-0.web")
	eq(t, routeConfigOf(webCS[echo80]), echo80)
	rt := routesOf(t, webRC[echo80])
	eq(t, routeNames(rt), []string{"web/cons/0"})
	eq(t, rt[0].GetRoute().GetCluster(), v2c)
	// Port 8080 has only the producer route, which web's sidecars no
	// longer get: the consumer routes replace the Service's.
	eq(t, routeConfigOf(webCS[echo8080]), "")
	if _, ok := webRC[echo8080]; ok {
		t.Fatalf("web's sidecars got the producer routes of port 8080")
	}

	for _, node := range []string{"a.shop", "b.other"} {
		cs, rcs := groupFor(t, s, node)
		for _, c := range []string{echo80, echo8080} {
			eq(t, routeConfigOf(cs[c]), c)
			eq(t, routeNames(routesOf(t, rcs[c])), []string{"shop/prod/0"})
		}
	}
	s.mu.Lock()
	p := &proxyState{}
	eq(t, [3]string{s.consumerNamespaceLocked("a.shop", p), s.consumerNamespaceLocked("b.other", p), s.consumerNamespaceLocked("w.web", p)},
		[3]string{"", "", "web"})
	s.mu.Unlock()

	// Without the producer route, other clients get no routes at all.
	s.DeleteHTTPRoute(nn("shop", "prod"))
	s.rebuild()
	cs, rcs := groupFor(t, s, "b.other")
	eq(t, [2]any{routeConfigOf(cs[echo80]), len(rcs)}, [2]any{"", 0})
	_, rcs = groupFor(t, s, "w.web")
	eq(t, routeNames(routesOf(t, rcs[echo80])), []string{"web/cons/0"})
}

// TestParentRefPort: a parentRef's port (the Service port number) and
// sectionName (its name) restrict the route to that port.
func TestParentRefPort(t *testing.T) {
	byPort := httpRoute("shop", "p", 0, []gatewayv1.ParentReference{svcRef("", "echo", 8080)}, rule(nil, to("", "v1", 80, nil)))
	named := svcRef("", "echo", 0)
	named.SectionName = ptr(gatewayv1.SectionName("http"))
	byName := httpRoute("shop", "n", 0, []gatewayv1.ParentReference{named}, rule(nil, to("", "v2", 80, nil)))
	none := httpRoute("shop", "none", 0, []gatewayv1.ParentReference{svcRef("", "echo", 9999)}, rule(nil, to("", "v2", 80, nil)))
	s := routeServer(t, shop(), byPort, byName, none)
	_, rcs := groupFor(t, s, "c.other")
	eq(t, routeNames(routesOf(t, rcs[echo8080])), []string{"shop/p/0"})
	eq(t, routeNames(routesOf(t, rcs[echo80])), []string{"shop/n/0"})
	eq(t, len(rcs), 2)
}

// weightedOf returns a route's weighted clusters as name:weight.
func weightedOf(r *routev3.Route) []string {
	var out []string
	for _, c := range r.GetRoute().GetWeightedClusters().GetClusters() {
		out = append(out, c.GetName()+":"+c.GetWeight().String())
	}
	return out
}

// TestRouteBackends: weights (default 1, 0 left out), a single backend as
// cluster, invalid backends as a 500 share, all invalid or all weights 0
// as a direct 500, backend filters on their weighted cluster, and a
// cross-namespace backend without a ReferenceGrant.
func TestRouteBackends(t *testing.T) {
	kindRef := to("", "v1", 80, nil)
	kindRef.Kind = ptr(gatewayv1.Kind("ServiceImport"))
	withHeaders := to("", "v2", 80, ptr(int32(3)))
	withHeaders.Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
		RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-Backend", Value: "v2"}}}},
		{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{Remove: []string{"Server"}}}}
	r := httpRoute("shop", "b", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)},
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/single")}, to("", "v1", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/split")}, to("", "v1", 80, ptr(int32(90))), to("", "v2", 80, ptr(int32(10)))),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/invalid-share")}, to("", "v1", 80, nil), to("", "gone", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/weight0")}, to("", "v1", 80, ptr(int32(0))), to("", "v2", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/all0")}, to("", "v1", 80, ptr(int32(0))), to("", "v2", 80, ptr(int32(0)))),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/all-invalid")}, to("", "v1", 81, nil), kindRef),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/filters")}, to("", "v1", 80, nil), withHeaders),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/elsewhere")}, to("billing", "pay", 80, nil)),
		rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/none")}),
	)
	svcs := append(shop(), service("billing", "pay", nil, "http:80"))
	s := routeServer(t, svcs, r)
	got := map[string]*routev3.Route{}
	for _, rt := range routesOf(t, onlyRC(t, s, "c.other", echo80)) {
		got[rt.GetMatch().GetPath()] = rt
	}
	eq(t, got["/single"].GetRoute().GetCluster(), v1c)
	eq(t, got["/single"].GetRoute().GetClusterNotFoundResponseCode(), routev3.RouteAction_SERVICE_UNAVAILABLE) // unset
	eq(t, weightedOf(got["/split"]), []string{v1c + ":value:90", v2c + ":value:10"})
	eq(t, weightedOf(got["/invalid-share"]), []string{v1c + ":value:1", invalidBackendPrefix + "shop/gone:value:1"})
	eq(t, got["/invalid-share"].GetRoute().GetClusterNotFoundResponseCode(), routev3.RouteAction_INTERNAL_SERVER_ERROR)
	eq(t, got["/weight0"].GetRoute().GetCluster(), v2c)
	for _, p := range []string{"/all0", "/all-invalid", "/none"} {
		eq(t, got[p].GetDirectResponse().GetStatus(), uint32(http.StatusInternalServerError))
	}
	f := got["/filters"].GetRoute().GetWeightedClusters().GetClusters()
	eq(t, len(f), 2)
	protoEq(t, "backend request header", f[1].GetRequestHeadersToAdd()[0], &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: "x-backend", Value: "v2"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})
	eq(t, [2]any{f[1].GetResponseHeadersToRemove(), len(f[0].GetRequestHeadersToAdd())}, [2]any{[]string{"server"}, 0})
	eq(t, got["/elsewhere"].GetRoute().GetCluster(), ClusterName(ServiceHost(nn("billing", "pay"), ""), 80))
}

// TestRouteRedirect: the scheme's well-known port when the scheme is set
// and the port is not, else the parent Service port; 302 by default;
// the path as a full replacement or a prefix.
func TestRouteRedirect(t *testing.T) {
	redirect := func(path string, f gatewayv1.HTTPRequestRedirectFilter, m ...gatewayv1.HTTPRouteMatch) gatewayv1.HTTPRouteRule {
		if m == nil {
			m = []gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, path)}
		}
		return gatewayv1.HTTPRouteRule{Matches: m, Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestRedirect, RequestRedirect: &f}}}
	}
	r := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", "echo", 0)},
		redirect("/https", gatewayv1.HTTPRequestRedirectFilter{Scheme: ptr("https")}),
		redirect("/http", gatewayv1.HTTPRequestRedirectFilter{Scheme: ptr("http"), StatusCode: ptr(301)}),
		redirect("/port", gatewayv1.HTTPRequestRedirectFilter{Scheme: ptr("https"), Port: ptr(int32(8443)), StatusCode: ptr(308)}),
		redirect("/host", gatewayv1.HTTPRequestRedirectFilter{Hostname: ptr(gatewayv1.PreciseHostname("example.com")), StatusCode: ptr(303),
			Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.FullPathHTTPPathModifier, ReplaceFullPath: ptr("/new")}}),
		redirect("", gatewayv1.HTTPRequestRedirectFilter{StatusCode: ptr(307),
			Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/v2/")}},
			pathMatch(gatewayv1.PathMatchPathPrefix, "/v1")),
	)
	s := routeServer(t, shop(), r)
	for _, tc := range []struct {
		cluster string
		want    map[string]*routev3.RedirectAction
	}{
		{echo80, map[string]*routev3.RedirectAction{
			"shop/r/0": {SchemeRewriteSpecifier: &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: "https"}, PortRedirect: 443,
				ResponseCode: routev3.RedirectAction_FOUND},
			"shop/r/1": {SchemeRewriteSpecifier: &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: "http"}, PortRedirect: 80,
				ResponseCode: routev3.RedirectAction_MOVED_PERMANENTLY},
			"shop/r/2": {SchemeRewriteSpecifier: &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: "https"}, PortRedirect: 8443,
				ResponseCode: routev3.RedirectAction_PERMANENT_REDIRECT},
			"shop/r/3": {HostRedirect: "example.com", PortRedirect: 80, ResponseCode: routev3.RedirectAction_SEE_OTHER,
				PathRewriteSpecifier: &routev3.RedirectAction_PathRedirect{PathRedirect: "/new"}},
			"shop/r/4": {PortRedirect: 80, ResponseCode: routev3.RedirectAction_TEMPORARY_REDIRECT,
				PathRewriteSpecifier: &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: "/v2"}},
		}},
		// No scheme, no port: the Service port the request was sent to.
		{echo8080, map[string]*routev3.RedirectAction{
			"shop/r/3": {HostRedirect: "example.com", PortRedirect: 8080, ResponseCode: routev3.RedirectAction_SEE_OTHER,
				PathRewriteSpecifier: &routev3.RedirectAction_PathRedirect{PathRedirect: "/new"}},
		}},
	} {
		for _, rt := range routesOf(t, onlyRC(t, s, "c.other", tc.cluster)) {
			if want, ok := tc.want[rt.GetName()]; ok {
				protoEq(t, tc.cluster+" "+rt.GetName(), rt.GetRedirect(), want)
			}
		}
	}
}

// rewritten applies a route's path rewrite to a request path as Envoy
// does: prefix_rewrite replaces what the path specifier matched,
// regex_rewrite substitutes every match of its pattern (RE2's \N, with
// \\ a backslash).
func rewritten(t *testing.T, r *routev3.Route, path string) string {
	t.Helper()
	ra := r.GetRoute()
	if re := ra.GetRegexRewrite(); re != nil {
		sub := strings.ReplaceAll(re.GetSubstitution(), `\\`, "\x00")
		sub = strings.ReplaceAll(strings.ReplaceAll(sub, "$", "$$"), "\x00", `\`)
		return regexp.MustCompile(re.GetPattern().GetRegex()).ReplaceAllString(path, sub)
	}
	if p := ra.GetPrefixRewrite(); p != "" {
		m := r.GetMatch()
		matched := m.GetPrefix() + m.GetPathSeparatedPrefix()
		if !strings.HasPrefix(path, matched) {
			t.Fatalf("%s does not match %s", path, matched)
		}
		return p + path[len(matched):]
	}
	return path
}

// TestRouteRewrite: URLRewrite's hostname and both path modifiers, the
// prefix one checked against Gateway API's table (HTTPPathModifier).
func TestRouteRewrite(t *testing.T) {
	rewrite := func(match string, f gatewayv1.HTTPURLRewriteFilter) gatewayv1.HTTPRouteRule {
		return gatewayv1.HTTPRouteRule{Matches: []gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchPathPrefix, match)},
			Filters:     []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterURLRewrite, URLRewrite: &f}},
			BackendRefs: []gatewayv1.HTTPBackendRef{to("", "v1", 80, nil)}}
	}
	prefix := func(match, repl string) gatewayv1.HTTPRouteRule {
		return rewrite(match, gatewayv1.HTTPURLRewriteFilter{Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr(repl)}})
	}
	// One route per table case, each its own parent so that precedence
	// plays no part.
	cases := []struct{ path, match, repl, want string }{
		{"/foo/bar", "/foo", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo", "/xyz/", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz/", "/xyz/bar"},
		{"/foo", "/foo", "/xyz", "/xyz"},
		{"/foo/", "/foo", "/xyz", "/xyz/"},
		{"/foo/bar", "/foo", "", "/bar"},
		{"/foo/", "/foo", "", "/"},
		{"/foo", "/foo", "", "/"},
		{"/foo/", "/foo", "/", "/"},
		{"/foo", "/foo", "/", "/"},
		{"/bar", "/", "/xyz", "/xyz/bar"},
	}
	for i, tc := range cases {
		svc := service("shop", "p"+string(rune('a'+i)), nil, "http:80")
		r := httpRoute("shop", "r", 0, []gatewayv1.ParentReference{svcRef("", svc.Name, 0)}, prefix(tc.match, tc.repl))
		s := routeServer(t, append(shop(), svc), r)
		rt := routesOf(t, onlyRC(t, s, "c.other", ClusterName(ServiceHost(nn("shop", svc.Name), ""), 80)))[0]
		if got := rewritten(t, rt, tc.path); got != tc.want {
			t.Errorf("%s with prefix %q replaced by %q: %q, want %q (%v)", tc.path, tc.match, tc.repl, got, tc.want, rt.GetRoute())
		}
	}

	r := httpRoute("shop", "full", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)},
		rewrite("/", gatewayv1.HTTPURLRewriteFilter{Hostname: ptr(gatewayv1.PreciseHostname("internal.example")),
			Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.FullPathHTTPPathModifier, ReplaceFullPath: ptr(`/new\path`)}}))
	s := routeServer(t, shop(), r)
	rt := routesOf(t, onlyRC(t, s, "c.other", echo80))[0]
	eq(t, rt.GetRoute().GetHostRewriteLiteral(), "internal.example")
	for _, p := range []string{"/", "/a/b/c", "/x"} {
		eq(t, rewritten(t, rt, p), `/new\path`)
	}
}

// TestRouteTimeoutsAndRetry: the request timeout (0s, none, by default),
// the backend request timeout on each try, GEP-1731's retry, and the
// Service port's retry policy when a rule has none.
func TestRouteTimeoutsAndRetry(t *testing.T) {
	d := func(s string) *gatewayv1.Duration { v := gatewayv1.Duration(s); return &v }
	plain := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/plain")}, to("", "v1", 80, nil))
	timed := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/timed")}, to("", "v1", 80, nil))
	timed.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: d("10s"), BackendRequest: d("2s")}
	retried := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/retry")}, to("", "v1", 80, nil))
	retried.Retry = &gatewayv1.HTTPRouteRetry{Codes: []gatewayv1.HTTPRouteRetryStatusCode{503, 502}, Attempts: ptr(3), Backoff: d("100ms")}
	retried.Timeouts = &gatewayv1.HTTPRouteTimeouts{BackendRequest: d("1s")}
	bare := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/bare-retry")}, to("", "v1", 80, nil))
	bare.Retry = &gatewayv1.HTTPRouteRetry{}
	r := httpRoute("shop", "t", 0, []gatewayv1.ParentReference{svcRef("", "echo", 0)}, plain, timed, retried, bare)
	svcs := shop()
	svcs[0].Annotations = map[string]string{AnnotationRetries: "4", AnnotationRetryOn: "5xx,reset", AnnotationTimeout: "3s"}
	// echo8080 of a Service without retry annotations: meshlet's default.
	other := service("shop", "plain", nil, "http:80")
	s := routeServer(t, append(svcs, other), r, httpRoute("shop", "t2", 0, []gatewayv1.ParentReference{svcRef("", "plain", 0)}, plain))

	got := map[string]*routev3.RouteAction{}
	for _, rt := range routesOf(t, onlyRC(t, s, "c.other", echo80)) {
		got[rt.GetMatch().GetPath()] = rt.GetRoute()
	}
	protoEq(t, "no timeouts", got["/plain"].GetTimeout(), durationpb.New(0))
	protoEq(t, "annotations' retry policy", got["/plain"].GetRetryPolicy(), &routev3.RetryPolicy{RetryOn: "5xx,reset", NumRetries: wrapperspb.UInt32(4)})
	protoEq(t, "request timeout", got["/timed"].GetTimeout(), durationpb.New(10*time.Second))
	protoEq(t, "backend request timeout", got["/timed"].GetRetryPolicy(), &routev3.RetryPolicy{RetryOn: "5xx,reset", NumRetries: wrapperspb.UInt32(4),
		PerTryTimeout: durationpb.New(2 * time.Second)})
	protoEq(t, "retry", got["/retry"].GetRetryPolicy(), &routev3.RetryPolicy{RetryOn: "connect-failure,refused-stream,retriable-status-codes",
		NumRetries: wrapperspb.UInt32(3), RetriableStatusCodes: []uint32{503, 502}, PerTryTimeout: durationpb.New(time.Second),
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(100 * time.Millisecond)}})
	protoEq(t, "retry without codes or attempts", got["/bare-retry"].GetRetryPolicy(),
		&routev3.RetryPolicy{RetryOn: "connect-failure,refused-stream", NumRetries: wrapperspb.UInt32(4)})

	rt := routesOf(t, onlyRC(t, s, "c.other", ClusterName(ServiceHost(nn("shop", "plain"), ""), 80)))[0]
	protoEq(t, "meshlet's default policy", rt.GetRoute().GetRetryPolicy(), &routev3.RetryPolicy{RetryOn: "connect-failure,refused-stream", NumRetries: wrapperspb.UInt32(1)})
}

// TestRouteFilters: header modifiers on the route; a filter meshlet
// cannot carry out drops its rule; an ExtensionRef answers 500.
func TestRouteFilters(t *testing.T) {
	headers := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/headers")}, to("", "v1", 80, nil))
	headers.Filters = []gatewayv1.HTTPRouteFilter{
		{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{
			Set: []gatewayv1.HTTPHeader{{Name: "X-Set", Value: "1"}}, Add: []gatewayv1.HTTPHeader{{Name: "x-add", Value: "2"}}, Remove: []string{"X-Gone"}}},
		{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{
			Add: []gatewayv1.HTTPHeader{{Name: "x-resp", Value: "3"}}, Remove: []string{"x-internal"}}},
	}
	mirror := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/mirror")}, to("", "v1", 80, nil))
	mirror.Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: to("", "v2", 80, nil).BackendObjectReference}}}
	ext := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchExact, "/ext")}, to("", "v1", 80, nil))
	ext.Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterExtensionRef,
		ExtensionRef: &gatewayv1.LocalObjectReference{Group: "example.com", Kind: "Auth", Name: "a"}}}
	badRegex := rule([]gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchRegularExpression, "/(")}, to("", "v1", 80, nil))
	s := routeServer(t, shop(), httpRoute("shop", "f", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, headers, mirror, ext, badRegex))
	rs := routesOf(t, onlyRC(t, s, "c.other", echo80))
	eq(t, routeNames(rs), []string{"shop/f/0", "shop/f/2"}) // /headers, /ext (shorter): rules 1 and 3 dropped
	h := rs[0]
	protoEq(t, "request headers", &routev3.Route{RequestHeadersToAdd: h.GetRequestHeadersToAdd(), RequestHeadersToRemove: h.GetRequestHeadersToRemove(),
		ResponseHeadersToAdd: h.GetResponseHeadersToAdd(), ResponseHeadersToRemove: h.GetResponseHeadersToRemove()},
		&routev3.Route{
			RequestHeadersToAdd: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: "x-set", Value: "1"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
				{Header: &corev3.HeaderValue{Key: "x-add", Value: "2"}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD}},
			RequestHeadersToRemove: []string{"x-gone"},
			ResponseHeadersToAdd: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: "x-resp", Value: "3"}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD}},
			ResponseHeadersToRemove: []string{"x-internal"},
		})
	eq(t, rs[1].GetDirectResponse().GetStatus(), uint32(500))

	// A route whose every rule is dropped is not attached at all.
	s = routeServer(t, shop(), httpRoute("shop", "dead", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, mirror))
	cs, rcs := groupFor(t, s, "c.other")
	eq(t, [2]any{routeConfigOf(cs[echo80]), len(rcs)}, [2]any{"", 0})
}
