package xds

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	secapi "istio.io/api/security/v1beta1"
)

// The RBAC filters of a workload, in the order they run: AUDIT (Envoy's
// LOG, which only marks), DENY, then ALLOW, Istio's evaluation order
// (CUSTOM, which would come first, is refused).
const (
	rbacAudit = iota
	rbacDeny
	rbacAllow
	rbacFilters
)

// workloadRBAC is what a workload's AuthorizationPolicies become: one HTTP
// and one network RBAC filter per action. A filter whose Rules are nil
// allows everything (no policy of that action applies).
type workloadRBAC struct {
	HTTP    [rbacFilters]*httprbacv3.RBAC
	Network [rbacFilters]*netrbacv3.RBAC
}

// policyRef names an AuthorizationPolicy.
type policyRef struct{ Namespace, Name string }

func (r policyRef) String() string { return r.Namespace + "/" + r.Name }

// istioPolicy is one AuthorizationPolicy's spec with its name.
type istioPolicy struct {
	Ref  policyRef
	Spec *secapi.AuthorizationPolicy
}

// rbacPolicyName is the Envoy policy name Istio gives a rule, which
// Envoy's response details and meshlet's metrics then show.
func rbacPolicyName(ref policyRef, rule int) string {
	return fmt.Sprintf("ns[%s]-policy[%s]-rule[%d]", ref.Namespace, ref.Name, rule)
}

// translateAuthorizationPolicies turns the policies that select one
// workload into its RBAC filters. A policy that cannot be translated
// (CUSTOM, a field meshlet cannot enforce) is in errs, and the workload
// then fails closed: its ALLOW filters allow nothing, as Istio does for a
// policy it cannot apply.
func translateAuthorizationPolicies(policies []istioPolicy) (out workloadRBAC, errs map[policyRef]error) {
	var httpRules, netRules [rbacFilters]*rbacv3.RBAC
	ensure := func(rules *[rbacFilters]*rbacv3.RBAC, i int) *rbacv3.RBAC {
		if rules[i] == nil {
			rules[i] = &rbacv3.RBAC{Action: [...]rbacv3.RBAC_Action{rbacv3.RBAC_LOG, rbacv3.RBAC_DENY, rbacv3.RBAC_ALLOW}[i],
				Policies: map[string]*rbacv3.Policy{}}
		}
		return rules[i]
	}
	failClosed := false
	for _, p := range policies {
		idx, err := policyAction(p.Spec)
		if err == nil {
			var hp, np map[string]*rbacv3.Policy
			hp, np, err = translatePolicy(p, idx)
			if err == nil {
				h, n := ensure(&httpRules, idx), ensure(&netRules, idx)
				for k, v := range hp {
					h.Policies[k] = v
				}
				for k, v := range np {
					n.Policies[k] = v
				}
				continue
			}
		}
		if errs == nil {
			errs = map[policyRef]error{}
		}
		errs[p.Ref] = err
		failClosed = true
	}
	if failClosed {
		// Deny everything the other filters would let through.
		httpRules[rbacAllow] = &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW}
		netRules[rbacAllow] = &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW}
	}
	for i := range rbacFilters {
		out.HTTP[i] = &httprbacv3.RBAC{Rules: httpRules[i]}
		out.Network[i] = &netrbacv3.RBAC{Rules: netRules[i], StatPrefix: "tcp."}
	}
	return out, errs
}

func policyAction(p *secapi.AuthorizationPolicy) (int, error) {
	switch p.GetAction() {
	case secapi.AuthorizationPolicy_ALLOW:
		return rbacAllow, nil
	case secapi.AuthorizationPolicy_DENY:
		return rbacDeny, nil
	case secapi.AuthorizationPolicy_AUDIT:
		return rbacAudit, nil
	case secapi.AuthorizationPolicy_CUSTOM:
		return 0, fmt.Errorf("action: CUSTOM is not supported by meshlet (no external authorizer); the workloads it selects allow nothing")
	}
	return 0, fmt.Errorf("action: %v unknown", p.GetAction())
}

// translatePolicy translates one policy's rules into Envoy policies for
// the HTTP filter and the network filter. On the network filter a rule
// naming HTTP attributes is dropped from an ALLOW or AUDIT policy and
// loses those attributes in a DENY policy (so it denies more), as Istio
// documents for TCP workloads.
func translatePolicy(p istioPolicy, action int) (httpPol, netPol map[string]*rbacv3.Policy, err error) {
	httpPol, netPol = map[string]*rbacv3.Policy{}, map[string]*rbacv3.Policy{}
	for i, r := range p.Spec.GetRules() {
		where := fmt.Sprintf("rules[%d]", i)
		name := rbacPolicyName(p.Ref, i)
		hp, err := translateRule(where, p.Ref.Namespace, r, true)
		if err != nil {
			return nil, nil, err
		}
		httpPol[name] = hp
		if ruleHasHTTP(r) && action != rbacDeny {
			continue
		}
		np, err := translateRule(where, p.Ref.Namespace, r, false)
		if err != nil {
			return nil, nil, err
		}
		netPol[name] = np
	}
	return httpPol, netPol, nil
}

// ruleHasHTTP reports whether a rule names what only HTTP has.
func ruleHasHTTP(r *secapi.Rule) bool {
	for _, t := range r.GetTo() {
		o := t.GetOperation()
		if len(o.GetHosts())+len(o.GetNotHosts())+len(o.GetMethods())+len(o.GetNotMethods())+len(o.GetPaths())+len(o.GetNotPaths()) > 0 {
			return true
		}
	}
	for _, c := range r.GetWhen() {
		if httpConditionKey(c.GetKey()) {
			return true
		}
	}
	return false
}

func httpConditionKey(k string) bool {
	return strings.HasPrefix(k, "request.headers[")
}

// translateRule builds one Envoy policy: the "to" operations (any of
// them) and the destination conditions as permissions, the "from"
// sources (any) and the source conditions as principals. With http
// false, HTTP attributes are left out.
func translateRule(where, ns string, r *secapi.Rule, http bool) (*rbacv3.Policy, error) {
	var perms []*rbacv3.Permission
	var ids []*rbacv3.Principal
	if len(r.GetTo()) > 0 {
		var ops []*rbacv3.Permission
		for i, t := range r.GetTo() {
			op, err := translateOperation(fmt.Sprintf("%s.to[%d].operation", where, i), t.GetOperation(), http)
			if err != nil {
				return nil, err
			}
			ops = append(ops, op)
		}
		perms = append(perms, orPerm(ops))
	}
	if len(r.GetFrom()) > 0 {
		var srcs []*rbacv3.Principal
		for i, f := range r.GetFrom() {
			s, err := translateSource(fmt.Sprintf("%s.from[%d].source", where, i), ns, f.GetSource())
			if err != nil {
				return nil, err
			}
			srcs = append(srcs, s)
		}
		ids = append(ids, orIDs(srcs))
	}
	for i, c := range r.GetWhen() {
		cw := fmt.Sprintf("%s.when[%d]", where, i)
		if len(c.GetValues()) == 0 && len(c.GetNotValues()) == 0 {
			return nil, fmt.Errorf("%s: values or notValues required", cw)
		}
		if httpConditionKey(c.GetKey()) && !http {
			continue
		}
		pm, pr, err := translateCondition(cw, c)
		if err != nil {
			return nil, err
		}
		if pm != nil {
			perms = append(perms, pm)
		}
		if pr != nil {
			ids = append(ids, pr)
		}
	}
	return &rbacv3.Policy{Permissions: []*rbacv3.Permission{andPerm(perms)}, Principals: []*rbacv3.Principal{andIDs(ids)}}, nil
}

func translateOperation(where string, o *secapi.Operation, http bool) (*rbacv3.Permission, error) {
	var parts []*rbacv3.Permission
	add := func(field string, values []string, not bool, one func(string) (*rbacv3.Permission, error)) error {
		if len(values) == 0 {
			return nil
		}
		var ps []*rbacv3.Permission
		for i, v := range values {
			p, err := one(v)
			if err != nil {
				return fmt.Errorf("%s.%s[%d]: %w", where, field, i, err)
			}
			ps = append(ps, p)
		}
		p := orPerm(ps)
		if not {
			p = &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: p}}
		}
		parts = append(parts, p)
		return nil
	}
	type field struct {
		name   string
		values []string
		not    bool
		one    func(string) (*rbacv3.Permission, error)
		http   bool
	}
	fields := []field{
		{"hosts", o.GetHosts(), false, hostPerm, true}, {"notHosts", o.GetNotHosts(), true, hostPerm, true},
		{"ports", o.GetPorts(), false, portPerm, false}, {"notPorts", o.GetNotPorts(), true, portPerm, false},
		{"methods", o.GetMethods(), false, methodPerm, true}, {"notMethods", o.GetNotMethods(), true, methodPerm, true},
		{"paths", o.GetPaths(), false, pathPerm, true}, {"notPaths", o.GetNotPaths(), true, pathPerm, true},
	}
	for _, f := range fields {
		if f.http && !http {
			continue
		}
		if err := add(f.name, f.values, f.not, f.one); err != nil {
			return nil, err
		}
	}
	return andPerm(parts), nil
}

func translateSource(where, ns string, s *secapi.Source) (*rbacv3.Principal, error) {
	if len(s.GetRequestPrincipals())+len(s.GetNotRequestPrincipals()) > 0 {
		return nil, fmt.Errorf("%s.requestPrincipals: not supported by meshlet (it validates no JWT; RequestAuthentication is not implemented)", where)
	}
	var parts []*rbacv3.Principal
	add := func(field string, values []string, not bool, one func(string) (*rbacv3.Principal, error)) error {
		if len(values) == 0 {
			return nil
		}
		var ps []*rbacv3.Principal
		for i, v := range values {
			p, err := one(v)
			if err != nil {
				return fmt.Errorf("%s.%s[%d]: %w", where, field, i, err)
			}
			ps = append(ps, p)
		}
		p := orIDs(ps)
		if not {
			p = &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: p}}
		}
		parts = append(parts, p)
		return nil
	}
	sa := func(v string) (*rbacv3.Principal, error) { return serviceAccountPrincipal(ns, v) }
	type field struct {
		name   string
		values []string
		not    bool
		one    func(string) (*rbacv3.Principal, error)
	}
	for _, f := range []field{
		{"principals", s.GetPrincipals(), false, principalID}, {"notPrincipals", s.GetNotPrincipals(), true, principalID},
		{"namespaces", s.GetNamespaces(), false, namespacePrincipal}, {"notNamespaces", s.GetNotNamespaces(), true, namespacePrincipal},
		{"serviceAccounts", s.GetServiceAccounts(), false, sa}, {"notServiceAccounts", s.GetNotServiceAccounts(), true, sa},
		{"trustDomains", s.GetTrustDomains(), false, trustDomainPrincipal}, {"notTrustDomains", s.GetNotTrustDomains(), true, trustDomainPrincipal},
		{"ipBlocks", s.GetIpBlocks(), false, directIP}, {"notIpBlocks", s.GetNotIpBlocks(), true, directIP},
		{"remoteIpBlocks", s.GetRemoteIpBlocks(), false, remoteIP}, {"notRemoteIpBlocks", s.GetNotRemoteIpBlocks(), true, remoteIP},
	} {
		if err := add(f.name, f.values, f.not, f.one); err != nil {
			return nil, err
		}
	}
	return andIDs(parts), nil
}

// translateCondition turns a "when" condition into a permission (of the
// destination) or a principal (of the source).
func translateCondition(where string, c *secapi.Condition) (*rbacv3.Permission, *rbacv3.Principal, error) {
	key := c.GetKey()
	perm := func(one func(string) (*rbacv3.Permission, error)) (*rbacv3.Permission, *rbacv3.Principal, error) {
		var parts []*rbacv3.Permission
		for _, set := range []struct {
			values []string
			not    bool
			field  string
		}{{c.GetValues(), false, "values"}, {c.GetNotValues(), true, "notValues"}} {
			if len(set.values) == 0 {
				continue
			}
			var ps []*rbacv3.Permission
			for i, v := range set.values {
				p, err := one(v)
				if err != nil {
					return nil, nil, fmt.Errorf("%s.%s[%d]: %w", where, set.field, i, err)
				}
				ps = append(ps, p)
			}
			p := orPerm(ps)
			if set.not {
				p = &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: p}}
			}
			parts = append(parts, p)
		}
		return andPerm(parts), nil, nil
	}
	id := func(one func(string) (*rbacv3.Principal, error)) (*rbacv3.Permission, *rbacv3.Principal, error) {
		var parts []*rbacv3.Principal
		for _, set := range []struct {
			values []string
			not    bool
			field  string
		}{{c.GetValues(), false, "values"}, {c.GetNotValues(), true, "notValues"}} {
			if len(set.values) == 0 {
				continue
			}
			var ps []*rbacv3.Principal
			for i, v := range set.values {
				p, err := one(v)
				if err != nil {
					return nil, nil, fmt.Errorf("%s.%s[%d]: %w", where, set.field, i, err)
				}
				ps = append(ps, p)
			}
			p := orIDs(ps)
			if set.not {
				p = &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: p}}
			}
			parts = append(parts, p)
		}
		return nil, andIDs(parts), nil
	}
	switch {
	case strings.HasPrefix(key, "request.headers[") && strings.HasSuffix(key, "]"):
		name := key[len("request.headers[") : len(key)-1]
		if name == "" {
			return nil, nil, fmt.Errorf("%s.key: %q names no header", where, key)
		}
		return perm(func(v string) (*rbacv3.Permission, error) { return headerPerm(name, v, false), nil })
	case key == "source.ip":
		return id(directIP)
	case key == "remote.ip":
		return id(remoteIP)
	case key == "source.namespace":
		return id(namespacePrincipal)
	case key == "source.principal":
		return id(principalID)
	case key == "destination.ip":
		return perm(destinationIP)
	case key == "destination.port":
		return perm(portPerm)
	case key == "connection.sni":
		return perm(func(v string) (*rbacv3.Permission, error) {
			return &rbacv3.Permission{Rule: &rbacv3.Permission_RequestedServerName{RequestedServerName: istioString(v, false)}}, nil
		})
	case strings.HasPrefix(key, "request.auth."):
		return nil, nil, fmt.Errorf("%s.key: %q: not supported by meshlet (it validates no JWT)", where, key)
	}
	return nil, nil, fmt.Errorf("%s.key: %q: not supported by meshlet (request.headers[…], source.ip, remote.ip, source.namespace, source.principal, destination.ip, destination.port, connection.sni)", where, key)
}

// istioString is Istio's string match: "*" any non-empty value, "p*" a
// prefix, "*s" a suffix, anything else the exact value.
func istioString(v string, ignoreCase bool) *matcherv3.StringMatcher {
	m := &matcherv3.StringMatcher{IgnoreCase: ignoreCase}
	switch {
	case v == "*":
		m.IgnoreCase = false
		m.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}
	case strings.HasPrefix(v, "*"):
		m.MatchPattern = &matcherv3.StringMatcher_Suffix{Suffix: v[1:]}
	case strings.HasSuffix(v, "*"):
		m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: v[:len(v)-1]}
	default:
		m.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: v}
	}
	return m
}

func headerPerm(name, v string, ignoreCase bool) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{Name: name,
		HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: istioString(v, ignoreCase)}}}}
}

func hostPerm(v string) (*rbacv3.Permission, error) { return headerPerm(":authority", v, true), nil }

func methodPerm(v string) (*rbacv3.Permission, error) { return headerPerm(":method", v, false), nil }

func pathPerm(v string) (*rbacv3.Permission, error) {
	if v != "*" && !strings.HasPrefix(v, "/") && !strings.HasPrefix(v, "*") {
		return nil, fmt.Errorf("%q: a path starts with / (or is *, or *suffix)", v)
	}
	if strings.Contains(strings.Trim(v, "*"), "*") {
		// Istio's {*} and {**} path templates are not translated.
		return nil, fmt.Errorf("%q: * only at the start or the end", v)
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
		Rule: &matcherv3.PathMatcher_Path{Path: istioString(v, false)}}}}, nil
}

func portPerm(v string) (*rbacv3.Permission, error) {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("%q: not a port", v)
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: uint32(n)}}, nil
}

func destinationIP(v string) (*rbacv3.Permission, error) {
	c, err := cidrRange(v)
	if err != nil {
		return nil, err
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationIp{DestinationIp: c}}, nil
}

func directIP(v string) (*rbacv3.Principal, error) {
	c, err := cidrRange(v)
	if err != nil {
		return nil, err
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_DirectRemoteIp{DirectRemoteIp: c}}, nil
}

func remoteIP(v string) (*rbacv3.Principal, error) {
	c, err := cidrRange(v)
	if err != nil {
		return nil, err
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_RemoteIp{RemoteIp: c}}, nil
}

// cidrRange reads an ipBlocks value: an address or a CIDR.
func cidrRange(v string) (*corev3.CidrRange, error) {
	if a, err := netip.ParseAddr(v); err == nil {
		return &corev3.CidrRange{AddressPrefix: a.String(), PrefixLen: wrapperspb.UInt32(uint32(a.BitLen()))}, nil
	}
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return nil, fmt.Errorf("%q: not an IP address or CIDR", v)
	}
	return &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}, nil
}

func authenticated(m *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: m}}}
}

func rbacRegex(re string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}
}

// principalID is a principals value: <trust domain>/ns/<ns>/sa/<sa>,
// matched against the peer's SPIFFE ID (Istio adds the spiffe:// scheme).
func principalID(v string) (*rbacv3.Principal, error) {
	switch {
	case v == "*":
		return authenticated(istioString("*", false)), nil
	case strings.HasPrefix(v, "*"):
		return authenticated(istioString(v, false)), nil
	}
	return authenticated(istioString("spiffe://"+strings.TrimPrefix(v, "spiffe://"), false)), nil
}

// namespacePrincipal matches peers of a namespace by their SPIFFE ID's
// /ns/<namespace>/ segment.
func namespacePrincipal(v string) (*rbacv3.Principal, error) {
	var seg string
	switch {
	case v == "*":
		return authenticated(istioString("*", false)), nil
	case strings.HasPrefix(v, "*"):
		seg = `[^/]*` + regexp.QuoteMeta(v[1:])
	case strings.HasSuffix(v, "*"):
		seg = regexp.QuoteMeta(v[:len(v)-1]) + `[^/]*`
	default:
		seg = regexp.QuoteMeta(v)
	}
	return authenticated(rbacRegex(`spiffe://[^/]+/ns/` + seg + `/sa/[^/]+`)), nil
}

// serviceAccountPrincipal matches "<namespace>/<name>", or "<name>" in
// the policy's own namespace, in any trust domain.
func serviceAccountPrincipal(ns, v string) (*rbacv3.Principal, error) {
	sns, name, ok := strings.Cut(v, "/")
	if !ok {
		sns, name = ns, v
	}
	if sns == "" || name == "" || strings.ContainsAny(v, "*") || strings.Count(v, "/") > 1 {
		return nil, fmt.Errorf("%q: want <namespace>/<service account> or <service account>", v)
	}
	return authenticated(rbacRegex(`spiffe://[^/]+/ns/` + regexp.QuoteMeta(sns) + `/sa/` + regexp.QuoteMeta(name))), nil
}

func trustDomainPrincipal(v string) (*rbacv3.Principal, error) {
	if v == "*" {
		return authenticated(istioString("*", false)), nil
	}
	if strings.Contains(v, "/") || v == "" {
		return nil, fmt.Errorf("%q: not a trust domain", v)
	}
	return authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://" + v + "/"}}), nil
}

func orPerm(ps []*rbacv3.Permission) *rbacv3.Permission {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: ps}}}
}

func andPerm(ps []*rbacv3.Permission) *rbacv3.Permission {
	switch len(ps) {
	case 0:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	case 1:
		return ps[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: slices.Clone(ps)}}}
}

func orIDs(ps []*rbacv3.Principal) *rbacv3.Principal {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ps}}}
}

func andIDs(ps []*rbacv3.Principal) *rbacv3.Principal {
	switch len(ps) {
	case 0:
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
	case 1:
		return ps[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: slices.Clone(ps)}}}
}
