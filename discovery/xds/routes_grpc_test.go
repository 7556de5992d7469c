package xds

import (
	"net/http"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	exactM = gatewayv1.GRPCMethodMatchExact
	regexM = gatewayv1.GRPCMethodMatchRegularExpression
)

func regexPath(re string) *routev3.RouteMatch {
	return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}
}

// matchesPath says whether a route alone matches a request's path.
func matchesPath(t *testing.T, r *routev3.Route, path string) bool {
	t.Helper()
	return firstMatch(t, []*routev3.Route{r}, path, nil) != ""
}

// TestGRPCRouteMatches: each method match as a path match (exact, the
// service's prefix, an expression), regular expressions grouped so that
// an alternation stays within its part, headers as HTTPRoute's; a rule
// without matches matches everything.
func TestGRPCRouteMatches(t *testing.T) {
	hdrRegex := gatewayv1.GRPCHeaderMatchRegularExpression
	r := grpcRoute("shop", "g", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)},
		grule(nil, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "shop.Cart", "Add")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "shop.Cart", "")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "", "Watch")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(regexM, `shop\.(Cart|Order)`, "Get.*")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(regexM, "a|b", "")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(regexM, "", "List|Scan")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{{Headers: []gatewayv1.GRPCHeaderMatch{{Name: "X-Tenant", Value: "a"},
			{Type: &hdrRegex, Name: "x-user", Value: "u[0-9]+"}, {Name: "x-TENANT", Value: "ignored"}}}}, gto("", "v1", 80, nil)),
	)
	s := routeServer(t, shop(), r)
	rs := routesOf(t, onlyRC(t, s, "c.other", echo80))
	byName := map[string]*routev3.Route{}
	for _, rt := range rs {
		byName[rt.GetName()] = rt
	}
	protoEq(t, "no match", byName["shop/g/0"].GetMatch(), &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}})
	protoEq(t, "Exact service and method", byName["shop/g/1"].GetMatch(), &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/shop.Cart/Add"}})
	protoEq(t, "Exact service", byName["shop/g/2"].GetMatch(), &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/shop.Cart/"}})
	protoEq(t, "Exact method", byName["shop/g/3"].GetMatch(), regexPath("/[^/]+/Watch"))
	protoEq(t, "RegularExpression", byName["shop/g/4"].GetMatch(), regexPath(`/(?:shop\.(Cart|Order))/(?:Get.*)`))
	protoEq(t, "headers", byName["shop/g/7"].GetMatch(), &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
		Headers: []*routev3.HeaderMatcher{exactHeader("x-tenant", "a"), regexHeader("x-user", "u[0-9]+")}})

	for _, tc := range []struct {
		rule, path string
		want       bool
	}{
		{"shop/g/2", "/shop.Cart/Add", true}, {"shop/g/2", "/shop.CartX/Add", false}, {"shop/g/2", "/shop.Cart", false},
		{"shop/g/3", "/any.Svc/Watch", true}, {"shop/g/3", "/a/b/Watch", false}, {"shop/g/3", "/any.Svc/WatchAll", false},
		{"shop/g/4", "/shop.Order/GetAll", true}, {"shop/g/4", "/shopXCart/Get", false}, {"shop/g/4", "/shop.Cart/Put", false},
		// The alternation stays within the service: "/a" alone, or "b"
		// anywhere, does not match.
		{"shop/g/5", "/a/M", true}, {"shop/g/5", "/b/M", true}, {"shop/g/5", "/a", false}, {"shop/g/5", "/x/b/M", false},
		{"shop/g/6", "/s.S/Scan", true}, {"shop/g/6", "/s.S/List", true}, {"shop/g/6", "/List", false},
		{"shop/g/0", "/anything.At/All", true},
	} {
		if got := matchesPath(t, byName[tc.rule], tc.path); got != tc.want {
			t.Errorf("%s on %s: %v, want %v (%v)", tc.rule, tc.path, got, tc.want, byName[tc.rule].GetMatch())
		}
	}
	// The most characters of service first, then of method, then the
	// most headers (a regular expression counts its own characters).
	eq(t, routeNames(rs), []string{"shop/g/4", "shop/g/1", "shop/g/2", "shop/g/5", "shop/g/6", "shop/g/3", "shop/g/7", "shop/g/0"})
}

// TestGRPCRoutePrecedence: across two GRPCRoutes of one Service, the
// GRPCRoute order (service, method, headers); equal matches go to the
// older route, then the first by namespace/name, then rule order.
func TestGRPCRoutePrecedence(t *testing.T) {
	parents := []gatewayv1.ParentReference{svcRef("", "echo", 0)}
	hdr := func(names ...string) []gatewayv1.GRPCHeaderMatch {
		var hs []gatewayv1.GRPCHeaderMatch
		for _, n := range names {
			hs = append(hs, gatewayv1.GRPCHeaderMatch{Name: gatewayv1.GRPCHeaderName(n), Value: "x"})
		}
		return hs
	}
	withHeaders := func(m gatewayv1.GRPCRouteMatch, names ...string) gatewayv1.GRPCRouteMatch {
		m.Headers = hdr(names...)
		return m
	}
	old := grpcRoute("shop", "old", 0, parents,
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "pkg.Svc", "")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "pkg.Svc", "Get")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{{Headers: hdr("ha")}}, gto("", "v1", 80, nil)),
	)
	newer := grpcRoute("shop", "new", 10, parents,
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "pkg.Svc", "Get")}, gto("", "v2", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "pkg.SvcLonger", "")}, gto("", "v2", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{withHeaders(method(exactM, "pkg.Svc", ""), "ha", "hb")}, gto("", "v2", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "", "List")}, gto("", "v2", 80, nil)),
	)
	bTie := grpcRoute("shop", "b-tie", 20, parents, grule([]gatewayv1.GRPCRouteMatch{method(exactM, "pkg.Tie", "")}, gto("", "v1", 80, nil)))
	aTie := grpcRoute("shop", "a-tie", 20, parents, grule([]gatewayv1.GRPCRouteMatch{method(exactM, "pkg.Tie", "")}, gto("", "v1", 80, nil)))
	s := routeServer(t, shop(), newer, bTie, old, aTie)
	rs := routesOf(t, onlyRC(t, s, "c.other", echo80))
	eq(t, routeNames(rs), []string{
		"shop/new/1",   // service pkg.SvcLonger (12)
		"shop/old/1",   // pkg.Svc (7), method Get: older
		"shop/new/0",   // the same, newer
		"shop/new/2",   // pkg.Svc, 2 headers
		"shop/old/0",   // pkg.Svc
		"shop/a-tie/0", // pkg.Tie (7), as old as b-tie: by name
		"shop/b-tie/0",
		"shop/new/3", // method List only
		"shop/old/2", // one header
	})
	for _, tc := range []struct {
		path    string
		headers map[string]string
		want    string
	}{
		{"/pkg.Svc/Get", nil, "shop/old/1"},
		{"/pkg.Svc/Get", map[string]string{"ha": "x", "hb": "x"}, "shop/old/1"}, // service and method before headers
		{"/pkg.Svc/Put", map[string]string{"ha": "x", "hb": "x"}, "shop/new/2"},
		{"/pkg.Svc/Put", nil, "shop/old/0"},
		{"/pkg.SvcLonger/Get", nil, "shop/new/1"},
		{"/x.Y/List", map[string]string{"ha": "x"}, "shop/new/3"},
		{"/x.Y/Other", map[string]string{"ha": "x"}, "shop/old/2"},
		{"/x.Y/Other", nil, ""}, // 404 NR: no rule matches everything
	} {
		if got := firstMatch(t, rs, tc.path, tc.headers); got != tc.want {
			t.Errorf("%s %v: route %q, want %q", tc.path, tc.headers, got, tc.want)
		}
	}
}

// TestGRPCRouteFiltersAndBackends: header modifiers on the rule and on a
// backendRef; RequestMirror, a backendRef filter meshlet cannot put on a
// weighted cluster and invalid method matches drop their rule; an
// ExtensionRef answers 500; an invalid backend's share, and a rule with
// nothing to forward to, answer 503 (gRPC's UNAVAILABLE, as the spec
// asks); no timeout; the Service's retry policy.
func TestGRPCRouteFiltersAndBackends(t *testing.T) {
	m := func(name string) []gatewayv1.GRPCRouteMatch {
		return []gatewayv1.GRPCRouteMatch{method(exactM, "f.S", name)}
	}
	headers := grule(m("Headers"), gto("", "v1", 80, nil), gto("", "v2", 80, ptr(int32(3))))
	headers.Filters = []gatewayv1.GRPCRouteFilter{
		{Type: gatewayv1.GRPCRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{
			Set: []gatewayv1.HTTPHeader{{Name: "X-Set", Value: "1"}}, Add: []gatewayv1.HTTPHeader{{Name: "x-add", Value: "2"}}, Remove: []string{"X-Gone"}}},
		{Type: gatewayv1.GRPCRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{
			Add: []gatewayv1.HTTPHeader{{Name: "x-resp", Value: "3"}}}},
	}
	headers.BackendRefs[1].Filters = []gatewayv1.GRPCRouteFilter{
		{Type: gatewayv1.GRPCRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{
			Set: []gatewayv1.HTTPHeader{{Name: "X-Backend", Value: "v2"}}}},
		{Type: gatewayv1.GRPCRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{Remove: []string{"X-Internal"}}},
	}
	mirror := grule(m("Mirror"), gto("", "v1", 80, nil))
	mirror.Filters = []gatewayv1.GRPCRouteFilter{{Type: gatewayv1.GRPCRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: to("", "v2", 80, nil).BackendObjectReference}}}
	ext := grule(m("Ext"), gto("", "v1", 80, nil))
	ext.Filters = []gatewayv1.GRPCRouteFilter{{Type: gatewayv1.GRPCRouteFilterExtensionRef,
		ExtensionRef: &gatewayv1.LocalObjectReference{Group: "example.com", Kind: "Auth", Name: "a"}}}
	backendMirror := grule(m("BackendMirror"), gto("", "v1", 80, nil))
	backendMirror.BackendRefs[0].Filters = mirror.Filters
	r := grpcRoute("shop", "f", 0, []gatewayv1.ParentReference{svcRef("", "echo", 80)},
		headers,
		mirror,
		ext,
		grule(m("Share"), gto("", "v1", 80, nil), gto("", "gone", 80, nil)),
		grule(m("Dead"), gto("", "gone", 80, nil)),
		grule(m("None")),
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "", "a/b")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(exactM, "", "")}, gto("", "v1", 80, nil)),
		grule([]gatewayv1.GRPCRouteMatch{method(regexM, "(", "")}, gto("", "v1", 80, nil)),
		backendMirror,
		grule(m("Elsewhere"), gto("billing", "pay", 80, nil)),
	)
	svcs := append(shop(), service("billing", "pay", nil, "http:80"))
	svcs[0].Annotations = map[string]string{AnnotationRetries: "4", AnnotationRetryOn: "5xx,reset"}
	s := routeServer(t, svcs, r)
	got := map[string]*routev3.Route{}
	for _, rt := range routesOf(t, onlyRC(t, s, "c.other", echo80)) {
		got[rt.GetMatch().GetPath()] = rt
	}
	eq(t, len(got), 6) // rules 1 and 6 to 9 dropped
	h := got["/f.S/Headers"]
	protoEq(t, "rule headers", &routev3.Route{RequestHeadersToAdd: h.GetRequestHeadersToAdd(), RequestHeadersToRemove: h.GetRequestHeadersToRemove(),
		ResponseHeadersToAdd: h.GetResponseHeadersToAdd()},
		&routev3.Route{
			RequestHeadersToAdd: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: "x-set", Value: "1"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
				{Header: &corev3.HeaderValue{Key: "x-add", Value: "2"}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD}},
			RequestHeadersToRemove: []string{"x-gone"},
			ResponseHeadersToAdd: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: "x-resp", Value: "3"}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD}},
		})
	eq(t, weightedOf(h), []string{v1c + ":value:1", v2c + ":value:3"})
	b := h.GetRoute().GetWeightedClusters().GetClusters()[1]
	protoEq(t, "backend request header", b.GetRequestHeadersToAdd()[0], &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: "x-backend", Value: "v2"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})
	eq(t, b.GetResponseHeadersToRemove(), []string{"x-internal"})
	protoEq(t, "no timeout", h.GetRoute().GetTimeout(), durationpb.New(0))
	protoEq(t, "the Service's retry policy", h.GetRoute().GetRetryPolicy(), &routev3.RetryPolicy{RetryOn: "5xx,reset", NumRetries: wrapperspb.UInt32(4)})

	eq(t, got["/f.S/Ext"].GetDirectResponse().GetStatus(), uint32(http.StatusInternalServerError))
	eq(t, weightedOf(got["/f.S/Share"]), []string{v1c + ":value:1", invalidBackendPrefix + "shop/gone:value:1"})
	// Unset: the sidecar's default for a cluster it lacks, 503.
	eq(t, got["/f.S/Share"].GetRoute().GetClusterNotFoundResponseCode(), routev3.RouteAction_SERVICE_UNAVAILABLE)
	for _, p := range []string{"/f.S/Dead", "/f.S/None"} {
		eq(t, got[p].GetDirectResponse().GetStatus(), uint32(http.StatusServiceUnavailable))
	}
	eq(t, got["/f.S/Elsewhere"].GetRoute().GetCluster(), ClusterName(ServiceHost(nn("billing", "pay"), ""), 80))
}

// TestGRPCRouteWinsOverHTTPRoute: on a Service port with both kinds
// attached, only the GRPCRoutes apply (GEP-1294); the HTTPRoute keeps the
// ports no GRPCRoute takes, and gets its port back when the GRPCRoute
// goes. Kinds compete within one audience only: a producer GRPCRoute
// leaves a namespace's consumer HTTPRoute alone. A GRPCRoute that is not
// accepted takes nothing.
func TestGRPCRouteWinsOverHTTPRoute(t *testing.T) {
	httpProd := httpRoute("shop", "web", 0, []gatewayv1.ParentReference{svcRef("", "echo", 0)}, rule(nil, to("", "v1", 80, nil)))
	grpcProd := grpcRoute("shop", "api", 10, []gatewayv1.ParentReference{svcRef("", "echo", 80)}, grule(nil, gto("", "v2", 80, nil)))
	mirror := grule(nil, gto("", "v2", 80, nil))
	mirror.Filters = []gatewayv1.GRPCRouteFilter{{Type: gatewayv1.GRPCRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: to("", "v2", 80, nil).BackendObjectReference}}}
	dead := grpcRoute("shop", "dead", 0, []gatewayv1.ParentReference{svcRef("", "echo", 8080)}, mirror)
	httpCons := httpRoute("web", "cons", 0, []gatewayv1.ParentReference{svcRef("shop", "echo", 80)}, rule(nil, to("shop", "v1", 80, nil)))
	httpCons2 := httpRoute("web2", "cons", 0, []gatewayv1.ParentReference{svcRef("shop", "echo", 80)}, rule(nil, to("shop", "v1", 80, nil)))
	grpcCons2 := grpcRoute("web2", "cons", 5, []gatewayv1.ParentReference{svcRef("shop", "echo", 80)}, grule(nil, gto("shop", "v2", 80, nil)))
	s := routeServer(t, shop(), httpProd, grpcProd, dead, httpCons, httpCons2, grpcCons2)

	_, rcs := groupFor(t, s, "c.other")
	eq(t, routeNames(routesOf(t, rcs[echo80])), []string{"shop/api/0"})
	eq(t, routeNames(routesOf(t, rcs[echo8080])), []string{"shop/web/0"})
	_, rcs = groupFor(t, s, "c.web")
	eq(t, routeNames(routesOf(t, rcs[echo80])), []string{"web/cons/0"})
	_, rcs = groupFor(t, s, "c.web2")
	rs := routesOf(t, rcs[echo80])
	eq(t, [2]any{routeNames(rs), rs[0].GetRoute().GetCluster()}, [2]any{[]string{"web2/cons/0"}, v2c})

	s.DeleteGRPCRoute(nn("shop", "api"))
	s.rebuild()
	_, rcs = groupFor(t, s, "c.other")
	eq(t, routeNames(routesOf(t, rcs[echo80])), []string{"shop/web/0"})
}
