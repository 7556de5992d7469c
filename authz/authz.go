package authz

import (
	"net/http"
	"net/netip"
	"regexp"
	"strings"
)

// Action is what a filter does with the requests its policies match.
type Action uint8

// The actions of envoy.config.rbac.v3.RBAC.
const (
	// Allow lets through what a policy matches and denies the rest.
	Allow Action = iota
	// Deny denies what a policy matches.
	Deny
	// Log only marks what a policy matches (Istio's AUDIT).
	Log
)

// String is the action as Istio's AuthorizationPolicy names it, the
// action label of meshlet_authz_decisions_total.
func (a Action) String() string {
	switch a {
	case Deny:
		return "DENY"
	case Log:
		return "AUDIT"
	}
	return "ALLOW"
}

// Input is what a decision reads of a request or connection. Fields a
// policy does not name are never read, so a caller may leave out what is
// costly to get when no filter needs it (see Chain.Needs).
type Input struct {
	// Authenticated says the peer presented a certificate the handshake
	// verified; Principal is its identity (the SPIFFE ID).
	Authenticated bool
	Principal     string
	// Source is the peer's address (Envoy's direct_remote_ip; with no
	// trusted proxy in front of a sidecar, also its remote_ip).
	Source netip.Addr
	// Destination is the connection's original destination.
	Destination netip.AddrPort
	// SNI is the server name the client asked for ("" without TLS).
	SNI string
	// HTTP is set for a request; the fields below are only read then.
	HTTP bool
	// Method, Authority and Scheme are the request's pseudo-headers; Path
	// is its normalized path without the query, which url_path matchers
	// read, and Query the raw query (":path" is the two joined by "?").
	Method, Authority, Scheme, Path, Query string
	// Header are the request's headers, keys in canonical form.
	Header http.Header
}

// header returns a header's value, several joined by "," as Envoy joins
// them before matching, and whether it is present.
func (in *Input) header(name string) (string, bool) {
	switch name {
	case ":method":
		return in.Method, in.HTTP
	case ":authority":
		return in.Authority, in.HTTP
	case ":path":
		if in.Query != "" {
			return in.Path + "?" + in.Query, in.HTTP
		}
		return in.Path, in.HTTP
	case ":scheme":
		return in.Scheme, in.HTTP
	}
	vv := in.Header[name]
	switch len(vv) {
	case 0:
		return "", false
	case 1:
		return vv[0], true
	}
	return strings.Join(vv, ","), true
}

// urlPath is the path without its query or fragment.
func (in *Input) urlPath() string {
	p := in.Path
	if i := strings.IndexByte(p, '#'); i >= 0 {
		p = p[:i]
	}
	return p
}

// Filter is one compiled RBAC filter.
type Filter struct {
	// Action is what matching policies do.
	Action Action
	// Enforcing is false for a filter whose rules are absent: it allows
	// everything and counts nothing.
	Enforcing bool
	// Policies are in name order, the order in which they are tried.
	Policies []Policy
}

// Policy is one named policy: it matches when one of its permissions and
// one of its principals match.
type Policy struct {
	Name        string
	permissions []matcher
	principals  []matcher
}

// Match returns the index in f.Policies of the first policy that matches
// in, or -1.
func (f *Filter) Match(in *Input) int {
	for i := range f.Policies {
		p := &f.Policies[i]
		if anyMatch(p.permissions, in) && anyMatch(p.principals, in) {
			return i
		}
	}
	return -1
}

// Decision is a chain's verdict.
type Decision struct {
	// Allowed is false when a filter denied.
	Allowed bool
	// Filter is the index of the filter that denied (-1 when allowed),
	// Policy the name of the policy that decided there ("none" when an
	// ALLOW filter's policies all failed to match), which Envoy writes
	// into the response details as rbac_access_denied_matched_policy[…].
	Filter int
	Policy string
}

// NoPolicy names the policy of an ALLOW filter's denial that no policy
// matched, as Envoy's response details do.
const NoPolicy = "none"

// Chain is the filters of one listener in the order they run.
type Chain []*Filter

// Observer sees the outcome of each enforcing filter a decision runs.
type Observer interface {
	// Observe gets the filter's index in the chain and the index of the
	// policy that matched, -1 for none.
	Observe(filter, policy int)
}

// Decide runs the filters in order until one denies; obs, when not nil,
// sees each enforcing filter's outcome.
func (c Chain) Decide(in *Input, obs Observer) Decision {
	for i, f := range c {
		if !f.Enforcing {
			continue
		}
		m := f.Match(in)
		if obs != nil {
			obs.Observe(i, m)
		}
		switch {
		case f.Action == Deny && m >= 0:
			return Decision{Filter: i, Policy: f.Policies[m].Name}
		case f.Action == Allow && m < 0:
			return Decision{Filter: i, Policy: NoPolicy}
		}
	}
	return Decision{Allowed: true, Filter: -1}
}

// Needs reports what the chain's policies read beyond the connection:
// whether any reads the source address (so a caller parses it only
// then).
func (c Chain) Needs() (source bool) {
	for _, f := range c {
		if !f.Enforcing {
			continue
		}
		for _, p := range f.Policies {
			for _, m := range p.principals {
				source = source || m.readsSource()
			}
			for _, m := range p.permissions {
				source = source || m.readsSource()
			}
		}
	}
	return source
}

// matcherKind is what a matcher node tests.
type matcherKind uint8

const (
	kindAny matcherKind = iota
	kindAnd
	kindOr
	kindNot
	kindHeader
	kindURLPath
	kindDestinationIP
	kindDestinationPort
	kindDestinationPortRange
	kindSNI
	kindAuthenticated
	kindSourceIP
)

// matcher is one compiled Permission or Principal node.
type matcher struct {
	kind     matcherKind
	children []matcher // and, or; not has one
	str      *stringMatch
	header   *headerMatch
	prefix   netip.Prefix
	lo, hi   uint32 // port, or range [lo, hi)
}

func anyMatch(ms []matcher, in *Input) bool {
	for i := range ms {
		if ms[i].match(in) {
			return true
		}
	}
	return false
}

func (m *matcher) match(in *Input) bool {
	switch m.kind {
	case kindAny:
		return true
	case kindAnd:
		for i := range m.children {
			if !m.children[i].match(in) {
				return false
			}
		}
		return true
	case kindOr:
		return anyMatch(m.children, in)
	case kindNot:
		return !m.children[0].match(in)
	case kindHeader:
		return in.HTTP && m.header.match(in)
	case kindURLPath:
		return in.HTTP && m.str.match(in.urlPath())
	case kindDestinationIP:
		return m.prefix.Contains(in.Destination.Addr().Unmap())
	case kindDestinationPort:
		return uint32(in.Destination.Port()) == m.lo
	case kindDestinationPortRange:
		p := uint32(in.Destination.Port())
		return p >= m.lo && p < m.hi
	case kindSNI:
		return m.str.match(in.SNI)
	case kindAuthenticated:
		// Envoy: an unset principal_name matches any peer the handshake
		// verified; a set one the certificate's URI SAN.
		return in.Authenticated && (m.str == nil || m.str.match(in.Principal))
	case kindSourceIP:
		return in.Source.IsValid() && m.prefix.Contains(in.Source.Unmap())
	}
	return false
}

func (m *matcher) readsSource() bool {
	if m.kind == kindSourceIP {
		return true
	}
	for i := range m.children {
		if m.children[i].readsSource() {
			return true
		}
	}
	return false
}

// stringKind is how a stringMatch compares.
type stringKind uint8

const (
	strExact stringKind = iota
	strPrefix
	strSuffix
	strContains
	strRegex
)

// stringMatch is a compiled envoy.type.matcher.v3.StringMatcher.
type stringMatch struct {
	kind       stringKind
	value      string // lower case when ignoreCase
	ignoreCase bool
	re         *regexp.Regexp // anchored: the whole value must match
}

func (s *stringMatch) match(v string) bool {
	if s.kind == strRegex {
		return s.re.MatchString(v)
	}
	if s.ignoreCase {
		v = strings.ToLower(v)
	}
	switch s.kind {
	case strExact:
		return v == s.value
	case strPrefix:
		return strings.HasPrefix(v, s.value)
	case strSuffix:
		return strings.HasSuffix(v, s.value)
	}
	return strings.Contains(v, s.value)
}

// headerMatch is a compiled envoy.config.route.v3.HeaderMatcher.
type headerMatch struct {
	name string // canonical, or a pseudo-header
	// present is set for present_match, whose value is want.
	present, want bool
	str           *stringMatch
	invert        bool
	missingEmpty  bool // treat_missing_header_as_empty
}

// match follows Envoy's HeaderUtility::matchHeaders: a missing header
// matches only "present_match: false" (inverted: only "true"), unless
// it counts as empty.
func (h *headerMatch) match(in *Input) bool {
	v, ok := in.header(h.name)
	if !ok && !h.missingEmpty {
		if h.invert {
			return h.present && h.want
		}
		return h.present && !h.want
	}
	var m bool
	if h.present {
		m = h.want // present (or counted as empty)
	} else {
		m = h.str.match(v)
	}
	return m != h.invert
}
