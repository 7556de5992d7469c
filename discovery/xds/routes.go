package xds

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// MeshControllerName is the controllerName of the entries meshlet writes
// in an HTTPRoute's or GRPCRoute's status.parents, one per Service
// parentRef.
const MeshControllerName gatewayv1.GatewayController = "meshlet.io/mesh"

// invalidBackendPrefix names the clusters that stand for invalid
// backends in a weighted split. No cluster has such a name, so the share
// of requests Gateway API sends to an invalid backend meets
// cluster_not_found_response_code, set to INTERNAL_SERVER_ERROR: the 500
// the spec asks for, for exactly that share.
const invalidBackendPrefix = "meshlet|invalid-backend|"

// routeKind is the kind of a Gateway API route meshlet translates.
type routeKind uint8

const (
	httpRouteKind routeKind = iota
	grpcRouteKind
)

func (k routeKind) String() string {
	if k == grpcRouteKind {
		return "GRPCRoute"
	}
	return "HTTPRoute"
}

// noBackendStatus is what a request gets when its rule has nothing to
// forward it to, and what an invalid backend's share gets: 500 for an
// HTTPRoute, as its spec says; 503 for a GRPCRoute, whose spec asks for
// UNAVAILABLE, which is what gRPC clients read a 503 as (and what the
// sidecar's local replies to gRPC requests put in grpc-status).
func (k routeKind) noBackendStatus() uint32 {
	if k == grpcRouteKind {
		return 503
	}
	return 500
}

// meshRoute is a route of either kind as translation and status read
// it: who it is, its parentRefs and status, and its rules, checked.
type meshRoute struct {
	kind       routeKind
	key        types.NamespacedName
	created    time.Time
	generation int64
	parents    []gatewayv1.ParentReference
	status     gatewayv1.RouteStatus
	rules      []ruleResult
}

// analyzeRoute checks every rule of an HTTPRoute or GRPCRoute and
// resolves its backends, once for every parent; nil for anything else.
func analyzeRoute(obj any, lookup serviceLookup, domain string) *meshRoute {
	switch r := obj.(type) {
	case *gatewayv1.HTTPRoute:
		if r == nil {
			return nil
		}
		mr := newMeshRoute(httpRouteKind, &r.ObjectMeta, r.Spec.ParentRefs, r.Status.RouteStatus)
		for i := range r.Spec.Rules {
			mr.rules = append(mr.rules, analyzeHTTPRule(r.Namespace, &r.Spec.Rules[i], lookup, domain))
		}
		return mr
	case *gatewayv1.GRPCRoute:
		if r == nil {
			return nil
		}
		mr := newMeshRoute(grpcRouteKind, &r.ObjectMeta, r.Spec.ParentRefs, r.Status.RouteStatus)
		for i := range r.Spec.Rules {
			mr.rules = append(mr.rules, analyzeGRPCRule(r.Namespace, &r.Spec.Rules[i], lookup, domain))
		}
		return mr
	}
	return nil
}

func newMeshRoute(kind routeKind, m *metav1.ObjectMeta, parents []gatewayv1.ParentReference, st gatewayv1.RouteStatus) *meshRoute {
	return &meshRoute{kind: kind, key: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, created: m.CreationTimestamp.Time,
		generation: m.Generation, parents: parents, status: st}
}

// carried says whether meshlet carries out any rule of the route: a
// route with none is not accepted, and attaches nowhere.
func (mr *meshRoute) carried() bool {
	return slices.ContainsFunc(mr.rules, func(r ruleResult) bool { return r.dropped == "" })
}

// attachedPorts are the ports of parent the route attaches to, by the
// Service parentRefs naming it; none when no rule is carried out.
func (mr *meshRoute) attachedPorts(parent types.NamespacedName, lookup serviceLookup) []int32 {
	if !mr.carried() {
		return nil
	}
	var ports []int32
	for _, ref := range mr.parents {
		if !isServiceParent(ref) || parentService(mr.key.Namespace, ref) != parent {
			continue
		}
		for _, sp := range resolveParent(mr.key.Namespace, ref, lookup).ports {
			if !slices.Contains(ports, sp.Port) {
				ports = append(ports, sp.Port)
			}
		}
	}
	return ports
}

// serviceLookup returns a Service of the listers, nil when there is none.
type serviceLookup func(types.NamespacedName) *corev1.Service

// isServiceParent says whether a parentRef names a Service (core group),
// the only parents a mesh (GAMMA) implementation attaches routes to. An
// unset group is Gateway API's default, gateway.networking.k8s.io.
func isServiceParent(ref gatewayv1.ParentReference) bool {
	return ref.Group != nil && *ref.Group == "" && ref.Kind != nil && *ref.Kind == "Service"
}

// parentService is the Service a parentRef of a route in routeNS names.
func parentService(routeNS string, ref gatewayv1.ParentReference) types.NamespacedName {
	ns := routeNS
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
}

// parentResult is how a Service parentRef attaches: to the ports listed,
// or (no ports) not at all, for reason.
type parentResult struct {
	svc     types.NamespacedName
	ports   []corev1.ServicePort
	reason  gatewayv1.RouteConditionReason
	message string
}

// resolveParent finds the Service ports a parentRef attaches to: its
// port (the Service port's number) and sectionName (the port's name),
// when set, must both match; unset, every TCP port. GEP-1294 leaves
// headless and ExternalName Services out as parents: the sidecar routes
// by the cluster IP a request is sent to, which they have none of.
func resolveParent(routeNS string, ref gatewayv1.ParentReference, lookup serviceLookup) parentResult {
	pr := parentResult{svc: parentService(routeNS, ref), reason: gatewayv1.RouteReasonNoMatchingParent}
	svc := lookup(pr.svc)
	switch {
	case svc == nil:
		pr.message = fmt.Sprintf("Service %s not found", pr.svc)
		return pr
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		pr.message = fmt.Sprintf("Service %s is of type ExternalName: not a mesh parent", pr.svc)
		return pr
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		pr.message = fmt.Sprintf("Service %s is headless: no cluster IP to route by", pr.svc)
		return pr
	}
	for _, sp := range svc.Spec.Ports {
		if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		if (ref.Port != nil && *ref.Port != sp.Port) || (ref.SectionName != nil && string(*ref.SectionName) != sp.Name) {
			continue
		}
		pr.ports = append(pr.ports, sp)
	}
	if len(pr.ports) > 0 {
		pr.reason = ""
		return pr
	}
	var want []string
	if ref.Port != nil {
		want = append(want, fmt.Sprintf("port %d", *ref.Port))
	}
	if ref.SectionName != nil {
		want = append(want, fmt.Sprintf("name %q", *ref.SectionName))
	}
	if len(want) == 0 {
		pr.message = fmt.Sprintf("Service %s has no TCP port", pr.svc)
	} else {
		pr.message = fmt.Sprintf("Service %s has no TCP port with %s", pr.svc, strings.Join(want, " and "))
	}
	return pr
}

// backendResult is one backendRef, resolved: cluster is "" when the
// backend is invalid, for reason.
type backendResult struct {
	ref      string // <namespace>/<name>
	cluster  string
	weight   uint32
	reason   gatewayv1.RouteConditionReason
	message  string
	request  headerOps
	response headerOps
}

// ruleResult is one rule of a route, checked: dropped says why meshlet
// cannot carry it out (the rule is left out), fail500 why it answers 500
// (an ExtensionRef filter, which the spec says must not be skipped).
// redirect and the fields after it are HTTPRoute's alone.
type ruleResult struct {
	name     string // the rule's name, "" when unnamed
	dropped  string
	fail500  string
	matches  []renderedMatch // a rule without matches has one, of everything
	backends []backendResult
	request  headerOps
	response headerOps
	redirect *gatewayv1.HTTPRequestRedirectFilter
	rewrite  *gatewayv1.HTTPURLRewriteFilter
	timeout  time.Duration // 0: none
	perTry   time.Duration // 0: none
	backoff  time.Duration // 0: none
	retry    *gatewayv1.HTTPRouteRetry
}

// renderedMatch is one match of a rule in Envoy's terms, with the part
// of its precedence it decides, and its path value, which HTTPRoute's
// prefix redirects and rewrites replace.
type renderedMatch struct {
	match *routev3.RouteMatch
	p     precedence
	path  string
}

func ruleName(n *gatewayv1.SectionName) string {
	if n == nil {
		return ""
	}
	return string(*n)
}

// filterParts are the parts of a filter both route kinds have (their
// type names are the same).
type filterParts struct {
	typ               string
	request, response *gatewayv1.HTTPHeaderFilter
	extensionRef      *gatewayv1.LocalObjectReference
}

// applyFilter carries out a header modifier on the rule, or notes an
// ExtensionRef, which meshlet has none of: its requests get 500, since
// the spec says such a filter must not be skipped. Any other filter is
// one meshlet cannot carry out, an error that drops the rule.
func (rr *ruleResult) applyFilter(j int, f filterParts) error {
	switch f.typ {
	case string(gatewayv1.HTTPRouteFilterRequestHeaderModifier):
		rr.request = rr.request.merge(headerFilter(f.request))
	case string(gatewayv1.HTTPRouteFilterResponseHeaderModifier):
		rr.response = rr.response.merge(headerFilter(f.response))
	case string(gatewayv1.HTTPRouteFilterExtensionRef):
		name := "<unset>"
		if e := f.extensionRef; e != nil {
			name = fmt.Sprintf("%s/%s %s", e.Group, e.Kind, e.Name)
		}
		rr.fail500 = fmt.Sprintf("filter %d: extensionRef %s is not supported: requests get 500", j, name)
	default:
		return fmt.Errorf("filter %d: type %s is not supported by meshlet", j, f.typ)
	}
	return nil
}

// backendParts are the parts of a backendRef both route kinds have.
type backendParts struct {
	ref     gatewayv1.BackendRef
	filters []filterParts
}

// resolveBackends resolves the rule's backendRefs in order; an error
// (a backend meshlet cannot carry out) drops the rule.
func (rr *ruleResult) resolveBackends(ns string, bs []backendParts, lookup serviceLookup, domain string) error {
	for j, b := range bs {
		br, err := resolveBackend(ns, b, lookup, domain)
		if err != nil {
			return fmt.Errorf("backendRef %d: %v", j, err)
		}
		rr.backends = append(rr.backends, br)
	}
	return nil
}

// headerOps are a header modifier filter's set, add and remove.
type headerOps struct {
	add    []*corev3.HeaderValueOption
	remove []string
}

func (h headerOps) empty() bool { return len(h.add) == 0 && len(h.remove) == 0 }

// merge appends o's operations to h's.
func (h headerOps) merge(o headerOps) headerOps {
	return headerOps{add: append(slices.Clip(h.add), o.add...), remove: append(slices.Clip(h.remove), o.remove...)}
}

// headerFilter renders a RequestHeaderModifier or ResponseHeaderModifier:
// set overwrites, add appends (Envoy's append actions of the same
// meaning). Names are lowercased, as HTTP/2 carries them.
func headerFilter(f *gatewayv1.HTTPHeaderFilter) headerOps {
	var h headerOps
	if f == nil {
		return h
	}
	for _, s := range []struct {
		headers []gatewayv1.HTTPHeader
		action  corev3.HeaderValueOption_HeaderAppendAction
	}{{f.Set, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}, {f.Add, corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD}} {
		for _, hd := range s.headers {
			h.add = append(h.add, &corev3.HeaderValueOption{
				// Envoy reads a value as a format string: a literal % is %%.
				Header:       &corev3.HeaderValue{Key: strings.ToLower(string(hd.Name)), Value: strings.ReplaceAll(hd.Value, "%", "%%")},
				AppendAction: s.action,
			})
		}
	}
	for _, r := range f.Remove {
		h.remove = append(h.remove, strings.ToLower(r))
	}
	return h
}

// gatewayDuration matches GEP-2257's duration format, which Go's
// time.ParseDuration reads once it matches (it also accepts more).
var gatewayDuration = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)

func parseGatewayDuration(d gatewayv1.Duration) (time.Duration, error) {
	if !gatewayDuration.MatchString(string(d)) {
		return 0, fmt.Errorf("duration %q is not in Gateway API's format (GEP-2257: 1h, 30s, 500ms)", d)
	}
	return time.ParseDuration(string(d))
}

// analyzeHTTPRule checks an HTTPRoute rule and resolves its backends.
func analyzeHTTPRule(ns string, rule *gatewayv1.HTTPRouteRule, lookup serviceLookup, domain string) ruleResult {
	rr := ruleResult{name: ruleName(rule.Name), retry: rule.Retry}
	drop := func(format string, args ...any) ruleResult {
		rr.dropped = fmt.Sprintf(format, args...)
		return rr
	}
	matches := rule.Matches
	if len(matches) == 0 {
		matches = []gatewayv1.HTTPRouteMatch{{}} // prefix "/"
	}
	for j, m := range matches {
		rm, p, err := routeMatch(m)
		if err != nil {
			return drop("match %d: %v", j, err)
		}
		rr.matches = append(rr.matches, renderedMatch{match: rm, p: p, path: pathValue(m.Path)})
	}
	for j, f := range rule.Filters {
		switch f.Type {
		case gatewayv1.HTTPRouteFilterRequestRedirect:
			if f.RequestRedirect == nil {
				return drop("filter %d: RequestRedirect without requestRedirect", j)
			}
			rr.redirect = f.RequestRedirect
		case gatewayv1.HTTPRouteFilterURLRewrite:
			if f.URLRewrite == nil {
				return drop("filter %d: URLRewrite without urlRewrite", j)
			}
			rr.rewrite = f.URLRewrite
		default:
			if err := rr.applyFilter(j, httpFilterParts(f)); err != nil {
				return drop("%v", err)
			}
		}
	}
	if rr.redirect != nil && rr.rewrite != nil {
		return drop("RequestRedirect and URLRewrite filters cannot be combined")
	}
	if err := checkRedirect(rr.redirect); err != nil {
		return drop("RequestRedirect: %v", err)
	}
	for _, p := range []*gatewayv1.HTTPPathModifier{pathOf(rr.redirect), pathOfRewrite(rr.rewrite)} {
		if err := checkPathModifier(p, rule.Matches); err != nil {
			return drop("%v", err)
		}
	}
	if t := rule.Timeouts; t != nil {
		var err error
		if t.Request != nil {
			if rr.timeout, err = parseGatewayDuration(*t.Request); err != nil {
				return drop("timeouts.request: %v", err)
			}
		}
		if t.BackendRequest != nil {
			if rr.perTry, err = parseGatewayDuration(*t.BackendRequest); err != nil {
				return drop("timeouts.backendRequest: %v", err)
			}
		}
	}
	if r := rule.Retry; r != nil {
		if r.Backoff != nil {
			var err error
			if rr.backoff, err = parseGatewayDuration(*r.Backoff); err != nil {
				return drop("retry.backoff: %v", err)
			}
		}
		if r.Attempts != nil && *r.Attempts < 0 {
			return drop("retry.attempts %d is negative", *r.Attempts)
		}
		for _, c := range r.Codes {
			if c < 400 || c > 599 {
				return drop("retry.codes: %d is not in 400-599", c)
			}
		}
	}
	bs := make([]backendParts, len(rule.BackendRefs))
	for j, b := range rule.BackendRefs {
		bs[j].ref = b.BackendRef
		for _, f := range b.Filters {
			bs[j].filters = append(bs[j].filters, httpFilterParts(f))
		}
	}
	if err := rr.resolveBackends(ns, bs, lookup, domain); err != nil {
		return drop("%v", err)
	}
	return rr
}

func httpFilterParts(f gatewayv1.HTTPRouteFilter) filterParts {
	return filterParts{typ: string(f.Type), request: f.RequestHeaderModifier, response: f.ResponseHeaderModifier, extensionRef: f.ExtensionRef}
}

func pathOf(r *gatewayv1.HTTPRequestRedirectFilter) *gatewayv1.HTTPPathModifier {
	if r == nil {
		return nil
	}
	return r.Path
}

func pathOfRewrite(r *gatewayv1.HTTPURLRewriteFilter) *gatewayv1.HTTPPathModifier {
	if r == nil {
		return nil
	}
	return r.Path
}

// checkRedirect checks the enums the CRD validates, for objects that did
// not go through it.
func checkRedirect(r *gatewayv1.HTTPRequestRedirectFilter) error {
	if r == nil {
		return nil
	}
	if r.Scheme != nil && *r.Scheme != "http" && *r.Scheme != "https" {
		return fmt.Errorf("scheme %q: want http or https", *r.Scheme)
	}
	if r.StatusCode != nil {
		if _, ok := redirectCodes[*r.StatusCode]; !ok {
			return fmt.Errorf("statusCode %d: want 301, 302, 303, 307 or 308", *r.StatusCode)
		}
	}
	return nil
}

var redirectCodes = map[int]routev3.RedirectAction_RedirectResponseCode{
	301: routev3.RedirectAction_MOVED_PERMANENTLY,
	302: routev3.RedirectAction_FOUND,
	303: routev3.RedirectAction_SEE_OTHER,
	307: routev3.RedirectAction_TEMPORARY_REDIRECT,
	308: routev3.RedirectAction_PERMANENT_REDIRECT,
}

// checkPathModifier: ReplacePrefixMatch needs exactly one match, a
// PathPrefix one (what the CRD's rules say).
func checkPathModifier(p *gatewayv1.HTTPPathModifier, matches []gatewayv1.HTTPRouteMatch) error {
	if p == nil {
		return nil
	}
	switch p.Type {
	case gatewayv1.FullPathHTTPPathModifier:
		if p.ReplaceFullPath == nil {
			return fmt.Errorf("path ReplaceFullPath without replaceFullPath")
		}
	case gatewayv1.PrefixMatchHTTPPathModifier:
		if p.ReplacePrefixMatch == nil {
			return fmt.Errorf("path ReplacePrefixMatch without replacePrefixMatch")
		}
		if len(matches) != 1 || pathType(matches[0].Path) != gatewayv1.PathMatchPathPrefix {
			return fmt.Errorf("path ReplacePrefixMatch needs exactly one PathPrefix match")
		}
	default:
		return fmt.Errorf("path modifier type %q is not supported", p.Type)
	}
	return nil
}

// resolveBackend resolves a backendRef: a Service (core group) port of
// an existing Service. An invalid backend is not an error (it gets its
// share of 500s); a filter meshlet cannot put on a weighted cluster is.
// Cross-namespace backends need no ReferenceGrant for mesh routes
// (GEP-1294, "Namespace boundaries": a route only reshapes traffic its
// clients could send to the backend anyway).
func resolveBackend(routeNS string, bp backendParts, lookup serviceLookup, domain string) (backendResult, error) {
	b := bp.ref
	key := types.NamespacedName{Namespace: routeNS, Name: string(b.Name)}
	if b.Namespace != nil && *b.Namespace != "" {
		key.Namespace = string(*b.Namespace)
	}
	br := backendResult{ref: key.String(), weight: 1}
	if b.Weight != nil {
		if *b.Weight < 0 {
			return br, fmt.Errorf("weight %d is negative", *b.Weight)
		}
		br.weight = uint32(*b.Weight)
	}
	for j, f := range bp.filters {
		switch f.typ {
		case string(gatewayv1.HTTPRouteFilterRequestHeaderModifier):
			br.request = br.request.merge(headerFilter(f.request))
		case string(gatewayv1.HTTPRouteFilterResponseHeaderModifier):
			br.response = br.response.merge(headerFilter(f.response))
		default:
			return br, fmt.Errorf("filter %d: type %s is not supported on a backendRef by meshlet", j, f.typ)
		}
	}
	group, kind := "", "Service"
	if b.Group != nil {
		group = string(*b.Group)
	}
	if b.Kind != nil {
		kind = string(*b.Kind)
	}
	if group != "" || kind != "Service" {
		br.reason = gatewayv1.RouteReasonInvalidKind
		br.message = fmt.Sprintf("backendRef %s: kind %s in group %q is not supported (want Service in the core group)", key, kind, group)
		return br, nil
	}
	br.reason = gatewayv1.RouteReasonBackendNotFound
	svc := lookup(key)
	switch {
	case b.Port == nil:
		br.message = fmt.Sprintf("backendRef %s: no port (a Service backend needs one)", key)
		return br, nil
	case svc == nil:
		br.message = fmt.Sprintf("backendRef %s: Service not found", key)
		return br, nil
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		br.message = fmt.Sprintf("backendRef %s: Service of type ExternalName has no endpoints", key)
		return br, nil
	}
	for _, sp := range svc.Spec.Ports {
		if sp.Port == *b.Port && (sp.Protocol == "" || sp.Protocol == corev1.ProtocolTCP) {
			br.cluster, br.reason = ClusterName(ServiceHost(key, domain), sp.Port), ""
			return br, nil
		}
	}
	br.message = fmt.Sprintf("backendRef %s: Service has no TCP port %d", key, *b.Port)
	return br, nil
}

func pathType(p *gatewayv1.HTTPPathMatch) gatewayv1.PathMatchType {
	if p == nil || p.Type == nil {
		return gatewayv1.PathMatchPathPrefix
	}
	return *p.Type
}

func pathValue(p *gatewayv1.HTTPPathMatch) string {
	if p == nil || p.Value == nil {
		return "/"
	}
	return *p.Value
}
