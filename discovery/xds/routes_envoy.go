package xds

// The Envoy side of route translation: matches in precedence order, and
// the RouteConfiguration a Service port's routes render into (actions,
// redirects, rewrites, retries). routes.go reads and checks the Gateway
// API objects this renders.

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
	"github.com/meshlet-dev/meshlet/lb/retry"
)

// precedence orders the matches of every rule attached to one parent
// port (of one route kind: the kinds never share a parent port), first
// match first. specificity is what the kind's spec ranks matches by,
// most significant first, larger first:
//
//   - HTTPRoute (HTTPRouteRule.matches): exact path, then the longest
//     prefix, then a method, then the most header matches, then the most
//     query parameter matches. Regular expressions, whose place the spec
//     leaves to implementations, come between exact paths and prefixes
//     (the longest first), so that a catch-all prefix "/" never hides
//     them: {path rank (3 exact, 2 regex, 1 prefix), path length, method
//     (1), headers, query parameters}.
//   - GRPCRoute (GRPCRouteRule.matches): the most characters in the
//     service, then in the method, then the most header matches
//     (hostnames, first in its list, mean nothing in a mesh): {service
//     length, method length, headers}.
//
// Ties go to the oldest route, then the first by namespace/name, then
// rule and match order, as both specs say.
type precedence struct {
	specificity [5]int
	created     time.Time
	route       string // namespace/name
	rule, match int
}

func comparePrecedence(a, b precedence) int {
	return cmp.Or(
		-slices.Compare(a.specificity[:], b.specificity[:]),
		a.created.Compare(b.created),
		cmp.Compare(a.route, b.route),
		cmp.Compare(a.rule, b.rule),
		cmp.Compare(a.match, b.match),
	)
}

// routeMatch renders one HTTPRouteMatch, with the parts of its
// precedence it decides. Header names are case-insensitive in Gateway API
// and query parameter names are not: of several entries with one name,
// only the first counts, as the spec says.
func routeMatch(m gatewayv1.HTTPRouteMatch) (*routev3.RouteMatch, precedence, error) {
	var p precedence
	var rank, length, method int
	rm := &routev3.RouteMatch{}
	v := pathValue(m.Path)
	switch t := pathType(m.Path); t {
	case gatewayv1.PathMatchExact:
		rm.PathSpecifier = &routev3.RouteMatch_Path{Path: v}
		rank, length = 3, len(v)
	case gatewayv1.PathMatchPathPrefix:
		// A trailing "/" is ignored; what is left matches whole
		// segments, as Envoy's path_separated_prefix does.
		v = strings.TrimSuffix(v, "/")
		if v == "" {
			rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/"}
			rank, length = 1, 1
		} else {
			rm.PathSpecifier = &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: v}
			rank, length = 1, len(v)
		}
	case gatewayv1.PathMatchRegularExpression:
		re, err := regexMatcher(v)
		if err != nil {
			return nil, p, fmt.Errorf("path: %w", err)
		}
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: re}
		rank, length = 2, len(v)
	default:
		return nil, p, fmt.Errorf("path type %q is not supported", t)
	}
	for _, h := range m.Headers {
		if err := headerMatch(rm, string(h.Name), h.Type == nil || *h.Type == gatewayv1.HeaderMatchExact,
			h.Type != nil && *h.Type == gatewayv1.HeaderMatchRegularExpression, h.Value); err != nil {
			return nil, p, err
		}
	}
	headers := len(rm.Headers)
	if m.Method != nil {
		rm.Headers = append(rm.Headers, &routev3.HeaderMatcher{Name: ":method",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Exact{Exact: string(*m.Method)}}}})
		method = 1
	}
	seenQ := map[string]bool{}
	for _, q := range m.QueryParams {
		if seenQ[string(q.Name)] {
			continue
		}
		seenQ[string(q.Name)] = true
		sm, err := stringMatcher(q.Type == nil || *q.Type == gatewayv1.QueryParamMatchExact,
			q.Type != nil && *q.Type == gatewayv1.QueryParamMatchRegularExpression, q.Value)
		if err != nil {
			return nil, p, fmt.Errorf("query parameter %s: %w", q.Name, err)
		}
		rm.QueryParameters = append(rm.QueryParameters, &routev3.QueryParameterMatcher{Name: string(q.Name),
			QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{StringMatch: sm}})
	}
	p.specificity = [5]int{rank, length, method, headers, len(rm.QueryParameters)}
	return rm, p, nil
}

// headerMatch adds a header match to rm, unless one of the same name
// (case-insensitive) is there: of several entries with one name only
// the first counts, as both route kinds' specs say. Names are
// lowercased, as HTTP/2 carries them.
func headerMatch(rm *routev3.RouteMatch, name string, exact, regex bool, value string) error {
	lower := strings.ToLower(name)
	if slices.ContainsFunc(rm.Headers, func(h *routev3.HeaderMatcher) bool { return h.GetName() == lower }) {
		return nil
	}
	sm, err := stringMatcher(exact, regex, value)
	if err != nil {
		return fmt.Errorf("header %s: %w", name, err)
	}
	rm.Headers = append(rm.Headers, &routev3.HeaderMatcher{Name: lower,
		HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: sm}})
	return nil
}

// stringMatcher renders an exact or regular-expression value match; any
// other type is unsupported.
func stringMatcher(exact, regex bool, v string) (*matcherv3.StringMatcher, error) {
	switch {
	case exact:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}, nil
	case regex:
		re, err := regexMatcher(v)
		if err != nil {
			return nil, err
		}
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: re}}, nil
	}
	return nil, fmt.Errorf("match type not supported (want Exact or RegularExpression)")
}

// regexMatcher renders an RE2 expression, checked as the sidecar checks
// it (config.CompileRegex: Go's regexp is RE2 too, and the program size
// limit), so that a route the sidecar would refuse is refused here, in
// its status. The engine is left unset: Envoy's default is google_re2,
// and setting it is deprecated.
func regexMatcher(re string) (*matcherv3.RegexMatcher, error) {
	if _, err := config.CompileRegex(re); err != nil {
		return nil, fmt.Errorf("regular expression %q: %v", re, err)
	}
	return &matcherv3.RegexMatcher{Regex: re}, nil
}

// parentPort is what one Service port, as a parent, gives the routes
// attached to it: the name of its cluster (and RouteConfiguration), its
// number (a redirect's default port) and the retry policy its
// annotations give the cluster.
type parentPort struct {
	cluster string
	port    int32
	retry   *routev3.RetryPolicy
}

// newParentPort reads a translated Service port.
func newParentPort(sc ServiceCluster) parentPort {
	pp := parentPort{cluster: sc.Cluster.GetName(), port: sc.Port,
		retry: &routev3.RetryPolicy{RetryOn: retry.DefaultOn.String(), NumRetries: wrapperspb.UInt32(1)}}
	if a := sc.Cluster.GetMetadata().GetTypedFilterMetadata()[meshmeta.RouteMetadataKey]; a != nil {
		var ra routev3.RouteAction
		if a.UnmarshalTo(&ra) == nil && ra.GetRetryPolicy() != nil {
			pp.retry = ra.GetRetryPolicy()
		}
	}
	return pp
}

// buildRouteConfiguration renders the routes attached to one parent port,
// all of one kind, into its RouteConfiguration: one virtual host for
// every domain (the sidecar chose the parent by the request's
// destination address) whose routes are every match of every carried
// rule, in precedence order.
func buildRouteConfiguration(pp parentPort, routes []*meshRoute) *routev3.RouteConfiguration {
	type entry struct {
		p precedence
		r *routev3.Route
	}
	var entries []entry
	for _, mr := range routes {
		key := mr.key.String()
		for i, rr := range mr.rules {
			if rr.dropped != "" {
				continue
			}
			name := fmt.Sprintf("%s/%d", key, i)
			if rr.name != "" {
				name += "/" + rr.name
			}
			for j, m := range rr.matches {
				p := m.p
				p.created, p.route, p.rule, p.match = mr.created, key, i, j
				r := &routev3.Route{Name: name, Match: m.match}
				setAction(r, pp, mr.kind, rr, m.path)
				entries = append(entries, entry{p, r})
			}
		}
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return comparePrecedence(a.p, b.p) })
	vh := &routev3.VirtualHost{Name: pp.cluster, Domains: []string{"*"}}
	for _, e := range entries {
		vh.Routes = append(vh.Routes, e.r)
	}
	return &routev3.RouteConfiguration{Name: pp.cluster, VirtualHosts: []*routev3.VirtualHost{vh}}
}

// setAction fills a route's action and its rule-level header changes;
// path is the match's path value.
func setAction(r *routev3.Route, pp parentPort, kind routeKind, rr ruleResult, path string) {
	r.RequestHeadersToAdd, r.RequestHeadersToRemove = rr.request.add, rr.request.remove
	r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = rr.response.add, rr.response.remove
	if rr.fail500 == "" && rr.redirect != nil {
		r.Action = &routev3.Route_Redirect{Redirect: redirectAction(rr.redirect, pp.port, path)}
		return
	}
	var valid, invalid uint32
	for _, b := range rr.backends {
		if b.cluster == "" {
			invalid += b.weight
		} else {
			valid += b.weight
		}
	}
	// A filter that cannot be skipped; every backend invalid, all
	// weights 0, no backend at all: nothing to forward to.
	switch {
	case rr.fail500 != "":
		r.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 500}}
		return
	case valid == 0:
		r.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: kind.noBackendStatus()}}
		return
	}
	ra := &routev3.RouteAction{Timeout: durationpb.New(rr.timeout), RetryPolicy: retryPolicy(pp, rr.retry, rr)}
	var weighted []*routev3.WeightedCluster_ClusterWeight
	single := ""
	for _, b := range rr.backends {
		if b.weight == 0 {
			continue // carries no traffic
		}
		name := b.cluster
		if name == "" {
			name = invalidBackendPrefix + b.ref
		}
		single = name
		weighted = append(weighted, &routev3.WeightedCluster_ClusterWeight{Name: name, Weight: wrapperspb.UInt32(b.weight),
			RequestHeadersToAdd: b.request.add, RequestHeadersToRemove: b.request.remove,
			ResponseHeadersToAdd: b.response.add, ResponseHeadersToRemove: b.response.remove})
	}
	if len(weighted) == 1 && invalid == 0 && backendHeadersEmpty(rr.backends) {
		ra.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: single}
	} else {
		ra.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: weighted}}
	}
	if invalid > 0 && kind.noBackendStatus() == 500 {
		// (503, a GRPCRoute's, is the default.)
		ra.ClusterNotFoundResponseCode = routev3.RouteAction_INTERNAL_SERVER_ERROR
	}
	if rw := rr.rewrite; rw != nil {
		if rw.Hostname != nil {
			ra.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: string(*rw.Hostname)}
		}
		if p := rw.Path; p != nil {
			switch p.Type {
			case gatewayv1.FullPathHTTPPathModifier:
				// The whole path (Envoy's regex_rewrite leaves the
				// query string alone) becomes the literal; a backslash
				// is the substitution's escape character.
				ra.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: "^/.*$"},
					Substitution: strings.ReplaceAll(*p.ReplaceFullPath, `\`, `\\`)}
			case gatewayv1.PrefixMatchHTTPPathModifier:
				prefixRewrite(ra, *p.ReplacePrefixMatch, path)
			}
		}
	}
	r.Action = &routev3.Route_Route{Route: ra}
}

func backendHeadersEmpty(bs []backendResult) bool {
	for _, b := range bs {
		if b.weight > 0 && (!b.request.empty() || !b.response.empty()) {
			return false
		}
	}
	return true
}

// prefixRewrite replaces the matched PathPrefix with repl as Gateway
// API's table says (HTTPPathModifier.replacePrefixMatch): both are whole
// segments, trailing slashes ignored. Envoy's prefix_rewrite replaces
// the matched characters, which gives the table's result when neither
// ends in "/"; a replacement of "/" or "" must turn "/foo", "/foo/" and
// "/foo/bar" into "/", "/" and "/bar", which one prefix cannot, so it is
// a regex_rewrite of the prefix and any slashes after it into "/".
func prefixRewrite(ra *routev3.RouteAction, repl, path string) {
	prefix := strings.TrimSuffix(path, "/")
	repl = strings.TrimRight(repl, "/")
	switch {
	case prefix == "":
		// Matched by prefix "/": the replacement goes before the
		// request's first segment.
		ra.PrefixRewrite = repl + "/"
	case repl == "":
		ra.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{
			Pattern: &matcherv3.RegexMatcher{Regex: "^" + regexp.QuoteMeta(prefix) + "/*"}, Substitution: "/"}
	default:
		ra.PrefixRewrite = repl
	}
}

// redirectAction renders a RequestRedirect. Its port, when unset, is the
// well-known port of the scheme it sets, else the parent's port (a
// Gateway's listener port, for a mesh the Service port the request was
// sent to), as the spec says; the sidecar leaves the port out of
// Location when it is the scheme's own.
func redirectAction(f *gatewayv1.HTTPRequestRedirectFilter, parentPort int32, path string) *routev3.RedirectAction {
	ra := &routev3.RedirectAction{ResponseCode: routev3.RedirectAction_FOUND} // the CRD's default, 302
	if f.StatusCode != nil {
		ra.ResponseCode = redirectCodes[*f.StatusCode]
	}
	port := uint32(parentPort)
	if f.Scheme != nil {
		ra.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: *f.Scheme}
		port = 80
		if *f.Scheme == "https" {
			port = 443
		}
	}
	if f.Port != nil {
		port = uint32(*f.Port)
	}
	ra.PortRedirect = port
	if f.Hostname != nil {
		ra.HostRedirect = string(*f.Hostname)
	}
	if p := f.Path; p != nil {
		switch p.Type {
		case gatewayv1.FullPathHTTPPathModifier:
			ra.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: *p.ReplaceFullPath}
		case gatewayv1.PrefixMatchHTTPPathModifier:
			// Envoy's prefix_rewrite, with the prefix trimmed as the
			// match is: exact for a non-empty replacement; for "" or
			// "/", "/" (an empty prefix_rewrite would be none), which
			// turns /foo/bar into //bar, as Envoy does.
			repl := strings.TrimRight(*p.ReplacePrefixMatch, "/")
			if strings.TrimSuffix(path, "/") == "" || repl == "" {
				repl += "/"
			}
			ra.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: repl}
		}
	}
	return ra
}

// retryPolicy is a rule's retry policy: its retry stanza (GEP-1731:
// connection failures and refused streams, as Istio retries, plus the
// codes listed; the number of attempts, else the port's; the back-off),
// else the policy of the parent port; the backend request timeout
// bounds each try.
func retryPolicy(pp parentPort, r *gatewayv1.HTTPRouteRetry, rr ruleResult) *routev3.RetryPolicy {
	rp := proto.Clone(pp.retry).(*routev3.RetryPolicy)
	if r != nil {
		on := retry.DefaultOn.String()
		rp.RetriableStatusCodes = nil
		for _, c := range r.Codes {
			rp.RetriableStatusCodes = append(rp.RetriableStatusCodes, uint32(c))
		}
		if len(rp.RetriableStatusCodes) > 0 {
			on += ",retriable-status-codes"
		}
		rp.RetryOn = on
		if r.Attempts != nil {
			rp.NumRetries = wrapperspb.UInt32(uint32(*r.Attempts))
		}
		rp.RetryBackOff = nil
		if rr.backoff > 0 {
			rp.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(rr.backoff)}
		}
	}
	if rr.perTry > 0 {
		rp.PerTryTimeout = durationpb.New(rr.perTry)
	}
	return rp
}
