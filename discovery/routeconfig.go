package discovery

import (
	"fmt"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/meshlet-dev/meshlet/config"
)

// TranslateRouteConfiguration translates an Envoy v3 RouteConfiguration
// (RDS) into the rules of a route table. meshlet routes by original
// destination, so the configuration has exactly one virtual host, whose
// domains include "*". The routes keep their order (first match wins).
// What is read, per Envoy message:
//
//   - Route: name, match, route / redirect / direct_response (status
//     only), request_headers_to_add / _remove, response_headers_to_add /
//     _remove;
//   - RouteMatch: prefix, path, path_separated_prefix, safe_regex,
//     headers and query_parameters with an exact or safe_regex
//     string_match, case_sensitive true;
//   - RouteAction: cluster or weighted_clusters (name, weight and the four
//     header lists of each), cluster_not_found_response_code, timeout
//     (default config.DefaultRouteTimeout, 0s none), retry_policy
//     (TranslateRetryPolicy), prefix_rewrite, regex_rewrite,
//     host_rewrite_literal;
//   - RedirectAction: scheme_redirect or https_redirect, host_redirect,
//     port_redirect, path_redirect or prefix_rewrite, response_code;
//   - HeaderValueOption: header, append_action (APPEND_IF_EXISTS_OR_ADD,
//     OVERWRITE_IF_EXISTS_OR_ADD).
//
// Anything else is an error naming the field, as for clusters.
func TranslateRouteConfiguration(rc *routev3.RouteConfiguration) ([]config.RouteRule, error) {
	rules, err := translateRouteConfiguration(rc)
	if err != nil {
		return nil, fmt.Errorf("discovery: route configuration %q: %w", rc.GetName(), err)
	}
	return rules, nil
}

func translateRouteConfiguration(rc *routev3.RouteConfiguration) ([]config.RouteRule, error) {
	var p path
	if err := rejectUnsupported(p, rc, "name", "virtual_hosts"); err != nil {
		return nil, err
	}
	if err := validateProto(p, rc); err != nil {
		return nil, err
	}
	if len(rc.GetVirtualHosts()) != 1 {
		return nil, p.field("virtual_hosts").errorf("%d virtual hosts (meshlet routes by destination: want exactly one)", len(rc.GetVirtualHosts()))
	}
	vp := p.field("virtual_hosts").index(0)
	vh := rc.GetVirtualHosts()[0]
	if err := rejectUnsupported(vp, vh, "name", "domains", "routes"); err != nil {
		return nil, err
	}
	if !containsString(vh.GetDomains(), "*") {
		return nil, vp.field("domains").errorf("%q lacks \"*\" (meshlet routes by destination, not by host)", vh.GetDomains())
	}
	rules := make([]config.RouteRule, 0, len(vh.GetRoutes()))
	for i, r := range vh.GetRoutes() {
		rp := vp.field("routes").index(i)
		rule, err := translateRoute(rp, r)
		if err != nil {
			return nil, err
		}
		// The rest (weights summing to 0, a rewrite without a prefix
		// match) is config's to say, below the route's path.
		if err := config.ValidateRule(string(rp), &rule); err != nil {
			return nil, err
		}
		rules = append(rules, rule)
	}
	return rules, nil
}

func translateRoute(p path, r *routev3.Route) (config.RouteRule, error) {
	out := config.RouteRule{Name: r.GetName()}
	if err := rejectUnsupported(p, r, "name", "match", "route", "redirect", "direct_response",
		"request_headers_to_add", "request_headers_to_remove", "response_headers_to_add", "response_headers_to_remove"); err != nil {
		return out, err
	}
	var err error
	if out.Match, err = translateRouteMatch(p.field("match"), r.GetMatch()); err != nil {
		return out, err
	}
	if out.RequestHeaders, err = headerMutation(p, "request_headers", r.GetRequestHeadersToAdd(), r.GetRequestHeadersToRemove()); err != nil {
		return out, err
	}
	if out.ResponseHeaders, err = headerMutation(p, "response_headers", r.GetResponseHeadersToAdd(), r.GetResponseHeadersToRemove()); err != nil {
		return out, err
	}
	switch a := r.GetAction().(type) {
	case *routev3.Route_Route:
		err = translateRouteAction(p.field("route"), a.Route, &out)
	case *routev3.Route_Redirect:
		out.Redirect, err = translateRedirect(p.field("redirect"), a.Redirect)
	case *routev3.Route_DirectResponse:
		dp := p.field("direct_response")
		if err := rejectUnsupported(dp, a.DirectResponse, "status"); err != nil {
			return out, err
		}
		out.DirectStatus = int(a.DirectResponse.GetStatus())
	default:
		return out, p.errorf("no action (want route, redirect or direct_response)")
	}
	return out, err
}

func translateRouteMatch(p path, m *routev3.RouteMatch) (config.RouteMatch, error) {
	var out config.RouteMatch
	if m == nil {
		return out, p.errorf("required")
	}
	if err := rejectUnsupported(p, m, "prefix", "path", "safe_regex", "path_separated_prefix", "headers", "query_parameters", "case_sensitive"); err != nil {
		return out, err
	}
	if cs := m.GetCaseSensitive(); cs != nil && !cs.GetValue() {
		return out, p.field("case_sensitive").errorf("false not supported by meshlet")
	}
	switch ps := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		out.PathKind, out.Path = config.PathPrefix, ps.Prefix
	case *routev3.RouteMatch_Path:
		out.PathKind, out.Path = config.PathExact, ps.Path
	case *routev3.RouteMatch_PathSeparatedPrefix:
		out.PathKind, out.Path = config.PathSeparatedPrefix, ps.PathSeparatedPrefix
	case *routev3.RouteMatch_SafeRegex:
		re, err := regexString(p.field("safe_regex"), ps.SafeRegex)
		if err != nil {
			return out, err
		}
		out.PathKind, out.Path = config.PathRegex, re
	default:
		return out, p.errorf("no path specifier (want prefix, path, path_separated_prefix or safe_regex)")
	}
	for i, h := range m.GetHeaders() {
		hp := p.field("headers").index(i)
		if err := rejectUnsupported(hp, h, "name", "string_match"); err != nil {
			return out, err
		}
		if n := h.GetName(); strings.HasPrefix(n, ":") && n != ":method" && n != ":authority" {
			return out, hp.field("name").errorf("%q not supported by meshlet (pseudo-headers: :method and :authority)", n)
		}
		sm, err := stringMatch(hp.field("string_match"), h.GetName(), h.GetStringMatch())
		if err != nil {
			return out, err
		}
		out.Headers = append(out.Headers, sm)
	}
	for i, q := range m.GetQueryParameters() {
		qp := p.field("query_parameters").index(i)
		if err := rejectUnsupported(qp, q, "name", "string_match"); err != nil {
			return out, err
		}
		sm, err := stringMatch(qp.field("string_match"), q.GetName(), q.GetStringMatch())
		if err != nil {
			return out, err
		}
		out.Query = append(out.Query, sm)
	}
	return out, nil
}

// stringMatch reads an exact or safe_regex StringMatcher for name.
func stringMatch(p path, name string, m *matcherv3.StringMatcher) (config.StringMatch, error) {
	out := config.StringMatch{Name: name}
	if m == nil {
		return out, p.errorf("required (meshlet matches a value, not presence)")
	}
	if err := rejectUnsupported(p, m, "exact", "safe_regex"); err != nil {
		return out, err
	}
	switch mp := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		out.Exact = mp.Exact
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexString(p.field("safe_regex"), mp.SafeRegex)
		if err != nil {
			return out, err
		}
		out.Regex = re
	default:
		return out, p.errorf("no pattern (want exact or safe_regex)")
	}
	return out, nil
}

// regexString reads a RegexMatcher: RE2 syntax, which Go's regexp
// implements, within config.MaxRegexProgramSize.
func regexString(p path, m *matcherv3.RegexMatcher) (string, error) {
	if err := rejectUnsupported(p, m, "regex", "google_re2"); err != nil {
		return "", err
	}
	//nolint:staticcheck // google_re2 is deprecated, and still what a control plane may send
	if m.GetGoogleRe2().GetMaxProgramSize() != nil {
		return "", p.field("google_re2").field("max_program_size").errorf("not supported by meshlet (the limit is %d)", config.MaxRegexProgramSize)
	}
	if _, err := config.CompileRegex(m.GetRegex()); err != nil {
		return "", p.field("regex").errorf("%q: %v", m.GetRegex(), err)
	}
	return m.GetRegex(), nil
}

func translateRouteAction(p path, a *routev3.RouteAction, out *config.RouteRule) error {
	if err := rejectUnsupported(p, a, "cluster", "weighted_clusters", "cluster_not_found_response_code", "timeout",
		"retry_policy", "prefix_rewrite", "regex_rewrite", "host_rewrite_literal"); err != nil {
		return err
	}
	switch cs := a.GetClusterSpecifier().(type) {
	case *routev3.RouteAction_Cluster:
		out.Backends = []config.WeightedBackend{{Cluster: cs.Cluster, Weight: 1}}
	case *routev3.RouteAction_WeightedClusters:
		wp := p.field("weighted_clusters")
		var total uint64
		if err := rejectUnsupported(wp, cs.WeightedClusters, "clusters"); err != nil {
			return err
		}
		for i, cw := range cs.WeightedClusters.GetClusters() {
			cp := wp.field("clusters").index(i)
			if err := rejectUnsupported(cp, cw, "name", "weight", "request_headers_to_add", "request_headers_to_remove",
				"response_headers_to_add", "response_headers_to_remove"); err != nil {
				return err
			}
			b := config.WeightedBackend{Cluster: cw.GetName(), Weight: cw.GetWeight().GetValue()}
			var err error
			if b.RequestHeaders, err = headerMutation(cp, "request_headers", cw.GetRequestHeadersToAdd(), cw.GetRequestHeadersToRemove()); err != nil {
				return err
			}
			if b.ResponseHeaders, err = headerMutation(cp, "response_headers", cw.GetResponseHeadersToAdd(), cw.GetResponseHeadersToRemove()); err != nil {
				return err
			}
			out.Backends = append(out.Backends, b)
			total += uint64(b.Weight)
		}
		if total == 0 {
			return wp.field("clusters").errorf("the weights sum to 0 (Envoy refuses it too)")
		}
	default:
		return p.errorf("no cluster (want cluster or weighted_clusters)")
	}
	switch a.GetClusterNotFoundResponseCode() {
	case routev3.RouteAction_SERVICE_UNAVAILABLE:
		out.ClusterNotFoundStatus = http.StatusServiceUnavailable
	case routev3.RouteAction_NOT_FOUND:
		out.ClusterNotFoundStatus = http.StatusNotFound
	case routev3.RouteAction_INTERNAL_SERVER_ERROR:
		out.ClusterNotFoundStatus = http.StatusInternalServerError
	}
	var err error
	if out.Timeout, err = optDuration(p.field("timeout"), a.GetTimeout(), config.DefaultRouteTimeout); err != nil {
		return err
	}
	if out.Retry, err = translateRetryPolicy(p.field("retry_policy"), a.GetRetryPolicy()); err != nil {
		return err
	}
	out.PrefixRewrite = a.GetPrefixRewrite()
	if rr := a.GetRegexRewrite(); rr != nil {
		rp := p.field("regex_rewrite")
		if err := rejectUnsupported(rp, rr, "pattern", "substitution"); err != nil {
			return err
		}
		re, err := regexString(rp.field("pattern"), rr.GetPattern())
		if err != nil {
			return err
		}
		out.RegexRewrite = &config.RegexRewrite{Pattern: re, Substitution: rr.GetSubstitution()}
	}
	out.HostRewrite = a.GetHostRewriteLiteral()
	return nil
}

func translateRedirect(p path, r *routev3.RedirectAction) (*config.Redirect, error) {
	if err := rejectUnsupported(p, r, "scheme_redirect", "https_redirect", "host_redirect", "port_redirect",
		"path_redirect", "prefix_rewrite", "response_code"); err != nil {
		return nil, err
	}
	out := &config.Redirect{Host: r.GetHostRedirect(), Port: r.GetPortRedirect(), Path: r.GetPathRedirect(), PrefixRewrite: r.GetPrefixRewrite()}
	if r.GetHttpsRedirect() {
		out.Scheme = "https"
	} else if s := r.GetSchemeRedirect(); s != "" {
		out.Scheme = s
	}
	switch r.GetResponseCode() {
	case routev3.RedirectAction_MOVED_PERMANENTLY:
		out.Code = http.StatusMovedPermanently
	case routev3.RedirectAction_FOUND:
		out.Code = http.StatusFound
	case routev3.RedirectAction_SEE_OTHER:
		out.Code = http.StatusSeeOther
	case routev3.RedirectAction_TEMPORARY_REDIRECT:
		out.Code = http.StatusTemporaryRedirect
	case routev3.RedirectAction_PERMANENT_REDIRECT:
		out.Code = http.StatusPermanentRedirect
	}
	return out, nil
}

// headerMutation reads a <field>_to_add / <field>_to_remove pair.
func headerMutation(p path, field string, add []*corev3.HeaderValueOption, remove []string) (config.HeaderMutation, error) {
	var out config.HeaderMutation
	out.Remove = append(out.Remove, remove...)
	for i, o := range add {
		op := p.field(field + "_to_add").index(i)
		if err := rejectUnsupported(op, o, "header", "append_action"); err != nil {
			return out, err
		}
		hp := op.field("header")
		if err := rejectUnsupported(hp, o.GetHeader(), "key", "value"); err != nil {
			return out, err
		}
		value, err := headerValue(o.GetHeader().GetValue())
		if err != nil {
			return out, hp.field("value").errorf("%q: %v", o.GetHeader().GetValue(), err)
		}
		if value == "" {
			continue // Envoy adds no empty value without keep_empty_value
		}
		h := config.Header{Name: o.GetHeader().GetKey(), Value: value}
		switch o.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			out.Add = append(out.Add, h)
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			out.Set = append(out.Set, h)
		default:
			return out, op.field("append_action").errorf("%s not supported by meshlet (want APPEND_IF_EXISTS_OR_ADD or OVERWRITE_IF_EXISTS_OR_ADD)", o.GetAppendAction())
		}
	}
	return out, nil
}

// headerValue reads a HeaderValue's value, which Envoy reads as an
// access-log format string: %% is a percent sign; meshlet expands no
// %COMMAND%, so any other percent sign is refused rather than sent as is.
func headerValue(v string) (string, error) {
	if !strings.Contains(v, "%") {
		return v, nil
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b.WriteByte(v[i])
			continue
		}
		if i+1 < len(v) && v[i+1] == '%' {
			b.WriteByte('%')
			i++
			continue
		}
		return "", fmt.Errorf("a %%COMMAND%% (meshlet expands none; write a percent sign as %%%%)")
	}
	return b.String(), nil
}
