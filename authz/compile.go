package authz

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshlet-dev/meshlet/internal/re2"
)

// MaxDepth bounds how deeply and_rules, or_rules and not_rule nest: a
// control plane needs a handful, and a deeper tree would only cost
// stack on every request.
const MaxDepth = 32

// Compile checks an HTTP RBAC filter's configuration and compiles it. An
// error names the field, as "rules.policies[p].permissions[0].header".
func Compile(c *httprbacv3.RBAC) (*Filter, error) {
	if err := only(c, "rules", "rules_stat_prefix", "track_per_rule_stats"); err != nil {
		return nil, err
	}
	return compileRules(c.GetRules(), true)
}

// CompileNetwork checks a network RBAC filter's configuration and
// compiles it; a policy naming HTTP attributes (headers, paths) is
// refused, as Envoy refuses it for a network filter.
func CompileNetwork(c *netrbacv3.RBAC) (*Filter, error) {
	if err := only(c, "rules", "stat_prefix", "enforcement_type"); err != nil {
		return nil, err
	}
	if c.GetEnforcementType() != netrbacv3.RBAC_ONE_TIME_ON_FIRST_BYTE {
		return nil, fmt.Errorf("enforcement_type: %v not supported (meshlet decides once per connection)", c.GetEnforcementType())
	}
	return compileRules(c.GetRules(), false)
}

func compileRules(r *rbacv3.RBAC, http bool) (*Filter, error) {
	if r == nil {
		return &Filter{}, nil // no rules: allows everything
	}
	if err := only(r, "action", "policies"); err != nil {
		return nil, fmt.Errorf("rules.%w", err)
	}
	f := &Filter{Enforcing: true}
	switch r.GetAction() {
	case rbacv3.RBAC_ALLOW:
		f.Action = Allow
	case rbacv3.RBAC_DENY:
		f.Action = Deny
	case rbacv3.RBAC_LOG:
		f.Action = Log
	default:
		return nil, fmt.Errorf("rules.action: %v not supported", r.GetAction())
	}
	names := make([]string, 0, len(r.GetPolicies()))
	for name := range r.GetPolicies() {
		names = append(names, name)
	}
	slices.Sort(names)
	c := compiler{http: http}
	for _, name := range names {
		p := r.GetPolicies()[name]
		where := fmt.Sprintf("rules.policies[%s]", name)
		if err := only(p, "permissions", "principals"); err != nil {
			return nil, fmt.Errorf("%s.%w", where, err)
		}
		if len(p.GetPermissions()) == 0 || len(p.GetPrincipals()) == 0 {
			return nil, fmt.Errorf("%s: needs at least one permission and one principal", where)
		}
		pol := Policy{Name: name}
		for i, pm := range p.GetPermissions() {
			m, err := c.permission(fmt.Sprintf("%s.permissions[%d]", where, i), pm, 0)
			if err != nil {
				return nil, err
			}
			pol.permissions = append(pol.permissions, m)
		}
		for i, pr := range p.GetPrincipals() {
			m, err := c.principal(fmt.Sprintf("%s.principals[%d]", where, i), pr, 0)
			if err != nil {
				return nil, err
			}
			pol.principals = append(pol.principals, m)
		}
		f.Policies = append(f.Policies, pol)
	}
	return f, nil
}

type compiler struct{ http bool }

func (c compiler) permission(where string, p *rbacv3.Permission, depth int) (matcher, error) {
	if depth > MaxDepth {
		return matcher{}, fmt.Errorf("%s: nested deeper than %d", where, MaxDepth)
	}
	if p == nil {
		return matcher{}, fmt.Errorf("%s: required", where)
	}
	switch r := p.GetRule().(type) {
	case *rbacv3.Permission_Any:
		if !r.Any {
			return matcher{}, fmt.Errorf("%s.any: must be true", where)
		}
		return matcher{kind: kindAny}, nil
	case *rbacv3.Permission_AndRules:
		return c.permissionSet(where+".and_rules", kindAnd, r.AndRules.GetRules(), depth)
	case *rbacv3.Permission_OrRules:
		return c.permissionSet(where+".or_rules", kindOr, r.OrRules.GetRules(), depth)
	case *rbacv3.Permission_NotRule:
		m, err := c.permission(where+".not_rule", r.NotRule, depth+1)
		return matcher{kind: kindNot, children: []matcher{m}}, err
	case *rbacv3.Permission_Header:
		return c.header(where+".header", r.Header)
	case *rbacv3.Permission_UrlPath:
		return c.urlPath(where+".url_path", r.UrlPath)
	case *rbacv3.Permission_DestinationIp:
		pf, err := cidr(where+".destination_ip", r.DestinationIp.GetAddressPrefix(), r.DestinationIp.GetPrefixLen().GetValue(), r.DestinationIp.GetPrefixLen() != nil)
		return matcher{kind: kindDestinationIP, prefix: pf}, err
	case *rbacv3.Permission_DestinationPort:
		if r.DestinationPort > 65535 {
			return matcher{}, fmt.Errorf("%s.destination_port: %d is not a port", where, r.DestinationPort)
		}
		return matcher{kind: kindDestinationPort, lo: r.DestinationPort}, nil
	case *rbacv3.Permission_DestinationPortRange:
		lo, hi := r.DestinationPortRange.GetStart(), r.DestinationPortRange.GetEnd()
		if lo < 0 || hi > 65536 || lo >= hi {
			return matcher{}, fmt.Errorf("%s.destination_port_range: [%d, %d) is not a range of ports", where, lo, hi)
		}
		return matcher{kind: kindDestinationPortRange, lo: uint32(lo), hi: uint32(hi)}, nil
	case *rbacv3.Permission_RequestedServerName:
		s, err := compileString(where+".requested_server_name", r.RequestedServerName)
		return matcher{kind: kindSNI, str: s}, err
	case nil:
		return matcher{}, fmt.Errorf("%s: no rule set", where)
	}
	return matcher{}, fmt.Errorf("%s: %s not supported by meshlet", where, setField(p))
}

func (c compiler) permissionSet(where string, kind matcherKind, rules []*rbacv3.Permission, depth int) (matcher, error) {
	if len(rules) == 0 {
		return matcher{}, fmt.Errorf("%s.rules: empty", where)
	}
	m := matcher{kind: kind}
	for i, r := range rules {
		ch, err := c.permission(fmt.Sprintf("%s.rules[%d]", where, i), r, depth+1)
		if err != nil {
			return matcher{}, err
		}
		m.children = append(m.children, ch)
	}
	return m, nil
}

func (c compiler) principal(where string, p *rbacv3.Principal, depth int) (matcher, error) {
	if depth > MaxDepth {
		return matcher{}, fmt.Errorf("%s: nested deeper than %d", where, MaxDepth)
	}
	if p == nil {
		return matcher{}, fmt.Errorf("%s: required", where)
	}
	switch id := p.GetIdentifier().(type) {
	case *rbacv3.Principal_Any:
		if !id.Any {
			return matcher{}, fmt.Errorf("%s.any: must be true", where)
		}
		return matcher{kind: kindAny}, nil
	case *rbacv3.Principal_AndIds:
		return c.principalSet(where+".and_ids", kindAnd, id.AndIds.GetIds(), depth)
	case *rbacv3.Principal_OrIds:
		return c.principalSet(where+".or_ids", kindOr, id.OrIds.GetIds(), depth)
	case *rbacv3.Principal_NotId:
		m, err := c.principal(where+".not_id", id.NotId, depth+1)
		return matcher{kind: kindNot, children: []matcher{m}}, err
	case *rbacv3.Principal_Authenticated_:
		if err := only(id.Authenticated, "principal_name"); err != nil {
			return matcher{}, fmt.Errorf("%s.authenticated.%w", where, err)
		}
		m := matcher{kind: kindAuthenticated}
		if pn := id.Authenticated.GetPrincipalName(); pn != nil {
			s, err := compileString(where+".authenticated.principal_name", pn)
			if err != nil {
				return matcher{}, err
			}
			m.str = s
		}
		return m, nil
	case *rbacv3.Principal_SourceIp: //nolint:staticcheck // deprecated for direct_remote_ip, and still sent
		pf, err := cidr(where+".source_ip", id.SourceIp.GetAddressPrefix(), id.SourceIp.GetPrefixLen().GetValue(), id.SourceIp.GetPrefixLen() != nil)
		return matcher{kind: kindSourceIP, prefix: pf}, err
	case *rbacv3.Principal_DirectRemoteIp:
		pf, err := cidr(where+".direct_remote_ip", id.DirectRemoteIp.GetAddressPrefix(), id.DirectRemoteIp.GetPrefixLen().GetValue(), id.DirectRemoteIp.GetPrefixLen() != nil)
		return matcher{kind: kindSourceIP, prefix: pf}, err
	case *rbacv3.Principal_RemoteIp:
		// No proxy in front of a sidecar is trusted to say who the client
		// is, so the remote address is the direct one (Envoy's, with no
		// trusted hops).
		pf, err := cidr(where+".remote_ip", id.RemoteIp.GetAddressPrefix(), id.RemoteIp.GetPrefixLen().GetValue(), id.RemoteIp.GetPrefixLen() != nil)
		return matcher{kind: kindSourceIP, prefix: pf}, err
	case *rbacv3.Principal_Header:
		return c.header(where+".header", id.Header)
	case *rbacv3.Principal_UrlPath:
		return c.urlPath(where+".url_path", id.UrlPath)
	case nil:
		return matcher{}, fmt.Errorf("%s: no identifier set", where)
	}
	return matcher{}, fmt.Errorf("%s: %s not supported by meshlet", where, setField(p))
}

func (c compiler) principalSet(where string, kind matcherKind, ids []*rbacv3.Principal, depth int) (matcher, error) {
	if len(ids) == 0 {
		return matcher{}, fmt.Errorf("%s.ids: empty", where)
	}
	m := matcher{kind: kind}
	for i, id := range ids {
		ch, err := c.principal(fmt.Sprintf("%s.ids[%d]", where, i), id, depth+1)
		if err != nil {
			return matcher{}, err
		}
		m.children = append(m.children, ch)
	}
	return m, nil
}

func (c compiler) header(where string, h *routev3.HeaderMatcher) (matcher, error) {
	if !c.http {
		return matcher{}, fmt.Errorf("%s: a network filter sees no HTTP headers", where)
	}
	if err := only(h, "name", "exact_match", "safe_regex_match", "present_match", "prefix_match", "suffix_match",
		"contains_match", "string_match", "invert_match", "treat_missing_header_as_empty"); err != nil {
		return matcher{}, fmt.Errorf("%s.%w", where, err)
	}
	name := h.GetName()
	if name == "" {
		return matcher{}, fmt.Errorf("%s.name: required", where)
	}
	if strings.HasPrefix(name, ":") {
		switch name = strings.ToLower(name); name {
		case ":method", ":authority", ":path", ":scheme":
		default:
			return matcher{}, fmt.Errorf("%s.name: %q not supported (pseudo-headers: :method, :authority, :path, :scheme)", where, h.GetName())
		}
	} else {
		name = textproto.CanonicalMIMEHeaderKey(name)
	}
	hm := &headerMatch{name: name, invert: h.GetInvertMatch(), missingEmpty: h.GetTreatMissingHeaderAsEmpty()}
	var err error
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		hm.present, hm.want = true, s.PresentMatch
	case *routev3.HeaderMatcher_ExactMatch:
		hm.str = &stringMatch{kind: strExact, value: s.ExactMatch}
	case *routev3.HeaderMatcher_PrefixMatch:
		hm.str = &stringMatch{kind: strPrefix, value: s.PrefixMatch}
	case *routev3.HeaderMatcher_SuffixMatch:
		hm.str = &stringMatch{kind: strSuffix, value: s.SuffixMatch}
	case *routev3.HeaderMatcher_ContainsMatch:
		hm.str = &stringMatch{kind: strContains, value: s.ContainsMatch}
	case *routev3.HeaderMatcher_SafeRegexMatch:
		hm.str, err = compileRegex(where+".safe_regex_match", s.SafeRegexMatch)
	case *routev3.HeaderMatcher_StringMatch:
		hm.str, err = compileString(where+".string_match", s.StringMatch)
	case nil:
		// Envoy: no specifier matches any present header.
		hm.present, hm.want = true, true
	}
	if err != nil {
		return matcher{}, err
	}
	return matcher{kind: kindHeader, header: hm}, nil
}

func (c compiler) urlPath(where string, p *matcherv3.PathMatcher) (matcher, error) {
	if !c.http {
		return matcher{}, fmt.Errorf("%s: a network filter sees no HTTP path", where)
	}
	if err := only(p, "path"); err != nil {
		return matcher{}, fmt.Errorf("%s.%w", where, err)
	}
	s, err := compileString(where+".path", p.GetPath())
	return matcher{kind: kindURLPath, str: s}, err
}

func compileString(where string, m *matcherv3.StringMatcher) (*stringMatch, error) {
	if m == nil {
		return nil, fmt.Errorf("%s: required", where)
	}
	if err := only(m, "exact", "prefix", "suffix", "safe_regex", "contains", "ignore_case"); err != nil {
		return nil, fmt.Errorf("%s.%w", where, err)
	}
	s := &stringMatch{ignoreCase: m.GetIgnoreCase()}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		s.kind, s.value = strExact, p.Exact
	case *matcherv3.StringMatcher_Prefix:
		s.kind, s.value = strPrefix, p.Prefix
	case *matcherv3.StringMatcher_Suffix:
		s.kind, s.value = strSuffix, p.Suffix
	case *matcherv3.StringMatcher_Contains:
		s.kind, s.value = strContains, p.Contains
	case *matcherv3.StringMatcher_SafeRegex:
		if s.ignoreCase {
			return nil, fmt.Errorf("%s.ignore_case: has no effect on safe_regex (Envoy refuses it)", where)
		}
		return compileRegex(where+".safe_regex", p.SafeRegex)
	default:
		return nil, fmt.Errorf("%s: no pattern (want exact, prefix, suffix, contains or safe_regex)", where)
	}
	if s.kind != strExact && s.value == "" {
		return nil, fmt.Errorf("%s: empty pattern", where)
	}
	if s.ignoreCase {
		s.value = strings.ToLower(s.value)
	}
	return s, nil
}

func compileRegex(where string, m *matcherv3.RegexMatcher) (*stringMatch, error) {
	if err := only(m, "regex", "google_re2"); err != nil {
		return nil, fmt.Errorf("%s.%w", where, err)
	}
	//nolint:staticcheck // google_re2 is deprecated, and still what a control plane may send
	if m.GetGoogleRe2().GetMaxProgramSize() != nil {
		return nil, fmt.Errorf("%s.google_re2.max_program_size: not supported (the limit is %d)", where, re2.MaxProgramSize)
	}
	re, err := re2.CompileFull(m.GetRegex())
	if err != nil {
		return nil, fmt.Errorf("%s.regex: %q: %v", where, m.GetRegex(), err)
	}
	return &stringMatch{kind: strRegex, re: re}, nil
}

func cidr(where, addr string, bits uint32, hasLen bool) (netip.Prefix, error) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s.address_prefix: %q: not an IP address", where, addr)
	}
	a = a.Unmap()
	if !hasLen {
		bits = 0 // Envoy: prefix_len defaults to 0
	}
	if int(bits) > a.BitLen() {
		return netip.Prefix{}, fmt.Errorf("%s.prefix_len: %d over %d bits", where, bits, a.BitLen())
	}
	return netip.PrefixFrom(a, int(bits)).Masked(), nil
}

// only fails when m sets a field not named in allowed, naming it.
func only(m proto.Message, allowed ...string) error {
	var bad string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !slices.Contains(allowed, string(fd.Name())) {
			bad = string(fd.Name())
			return false
		}
		return true
	})
	if bad != "" {
		return fmt.Errorf("%s: not supported by meshlet", bad)
	}
	return nil
}

// setField names the field a message sets (its oneof's choice).
func setField(m proto.Message) string {
	var name string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		name = string(fd.Name())
		return false
	})
	return name
}
