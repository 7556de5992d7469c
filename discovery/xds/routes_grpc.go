package xds

import (
	"fmt"
	"regexp"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// analyzeGRPCRule checks a GRPCRoute rule and resolves its backends. A
// GRPCRoute rule has fewer parts than an HTTPRoute's (no redirects,
// rewrites, timeouts or retries): what it has is carried out as for
// HTTPRoute, on the HTTP/2 requests gRPC is made of.
func analyzeGRPCRule(ns string, rule *gatewayv1.GRPCRouteRule, lookup serviceLookup, domain string) ruleResult {
	rr := ruleResult{name: ruleName(rule.Name)}
	drop := func(format string, args ...any) ruleResult {
		rr.dropped = fmt.Sprintf(format, args...)
		return rr
	}
	matches := rule.Matches
	if len(matches) == 0 {
		matches = []gatewayv1.GRPCRouteMatch{{}} // every request
	}
	for j, m := range matches {
		rm, p, err := grpcMatch(m)
		if err != nil {
			return drop("match %d: %v", j, err)
		}
		rr.matches = append(rr.matches, renderedMatch{match: rm, p: p})
	}
	for j, f := range rule.Filters {
		if err := rr.applyFilter(j, grpcFilterParts(f)); err != nil {
			return drop("%v", err)
		}
	}
	bs := make([]backendParts, len(rule.BackendRefs))
	for j, b := range rule.BackendRefs {
		bs[j].ref = b.BackendRef
		for _, f := range b.Filters {
			bs[j].filters = append(bs[j].filters, grpcFilterParts(f))
		}
	}
	if err := rr.resolveBackends(ns, bs, lookup, domain); err != nil {
		return drop("%v", err)
	}
	return rr
}

func grpcFilterParts(f gatewayv1.GRPCRouteFilter) filterParts {
	return filterParts{typ: string(f.Type), request: f.RequestHeaderModifier, response: f.ResponseHeaderModifier, extensionRef: f.ExtensionRef}
}

// What the GRPCRoute CRD lets an Exact service and method be (its
// validation rules), checked again for objects that did not go through
// it: above all, no "/", which would change what the path matches.
var (
	grpcExactService = regexp.MustCompile(`^(?i)\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$`)
	grpcExactMethod  = regexp.MustCompile(`^[A-Za-z_][A-Za-z_0-9]*$`)
)

// grpcMatch renders one GRPCRouteMatch, with the parts of its precedence
// it decides. gRPC sends a call as a POST to /<service>/<method>, so the
// method match is a path match:
//
//   - Exact service and method: the path /service/method;
//   - Exact service alone: the prefix /service/;
//   - Exact method alone: the expression /[^/]+/method;
//   - RegularExpression: the expression /(service)/(method), an unset
//     part matching one path segment ([^/]+); RE2, matched against the
//     whole path, as Envoy's safe_regex is.
//
// No method match matches every path, "/". Headers match as HTTPRoute's
// do.
func grpcMatch(m gatewayv1.GRPCRouteMatch) (*routev3.RouteMatch, precedence, error) {
	var p precedence
	rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	var service, method string
	if mm := m.Method; mm != nil {
		if mm.Service != nil {
			service = *mm.Service
		}
		if mm.Method != nil {
			method = *mm.Method
		}
		typ := gatewayv1.GRPCMethodMatchExact
		if mm.Type != nil {
			typ = *mm.Type
		}
		if service == "" && method == "" {
			return nil, p, fmt.Errorf("method match with neither service nor method (one of them must be set)")
		}
		switch typ {
		case gatewayv1.GRPCMethodMatchExact:
			if service != "" && !grpcExactService.MatchString(service) {
				return nil, p, fmt.Errorf("service %q is not a gRPC service name (want %s)", service, grpcExactService)
			}
			if method != "" && !grpcExactMethod.MatchString(method) {
				return nil, p, fmt.Errorf("method %q is not a gRPC method name (want %s)", method, grpcExactMethod)
			}
			switch {
			case method == "":
				rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/" + service + "/"}
			case service == "":
				re, err := regexMatcher("/[^/]+/" + regexp.QuoteMeta(method))
				if err != nil {
					return nil, p, err
				}
				rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: re}
			default:
				rm.PathSpecifier = &routev3.RouteMatch_Path{Path: "/" + service + "/" + method}
			}
		case gatewayv1.GRPCMethodMatchRegularExpression:
			for _, part := range []struct{ what, re string }{{"service", service}, {"method", method}} {
				if _, err := regexp.Compile(part.re); err != nil {
					return nil, p, fmt.Errorf("%s: regular expression %q: %v", part.what, part.re, err)
				}
			}
			re, err := regexMatcher("/" + segmentRegex(service) + "/" + segmentRegex(method))
			if err != nil {
				return nil, p, err
			}
			rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: re}
		default:
			return nil, p, fmt.Errorf("method match type %q is not supported", typ)
		}
	}
	for _, h := range m.Headers {
		if err := headerMatch(rm, string(h.Name), h.Type == nil || *h.Type == gatewayv1.GRPCHeaderMatchExact,
			h.Type != nil && *h.Type == gatewayv1.GRPCHeaderMatchRegularExpression, h.Value); err != nil {
			return nil, p, err
		}
	}
	p.specificity = [5]int{len(service), len(method), len(rm.Headers)}
	return rm, p, nil
}

// segmentRegex is a part of a RegularExpression method match as a group
// of its own (so that an alternation stays inside it), or any one path
// segment when unset.
func segmentRegex(re string) string {
	if re == "" {
		return "[^/]+"
	}
	return "(?:" + re + ")"
}
