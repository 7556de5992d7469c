package authz

import (
	"net/http"
	"net/netip"
	"testing"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// bytesSource hands out fuzz bytes, zero once they run out.
type bytesSource struct{ b []byte }

func (s *bytesSource) next() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

var (
	fuzzPrincipals = []string{"spiffe://td/ns/a/sa/x", "spiffe://td/ns/b/sa/y", ""}
	fuzzPaths      = []string{"/", "/public/a", "/admin"}
	fuzzMethods    = []string{"GET", "POST"}
	fuzzPorts      = []uint32{8080, 9090}
)

func (s *bytesSource) permission(depth int) *rbacv3.Permission {
	switch k := s.next() % 7; {
	case k == 0 || depth > 3:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	case k == 1:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{Name: ":method",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Exact{Exact: fuzzMethods[int(s.next())%len(fuzzMethods)]}}}}}}
	case k == 2:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{
			Path: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: fuzzPaths[int(s.next())%len(fuzzPaths)]}}}}}}
	case k == 3:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: fuzzPorts[int(s.next())%len(fuzzPorts)]}}
	case k == 4:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: s.permission(depth + 1)}}
	case k == 5:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{
			Rules: []*rbacv3.Permission{s.permission(depth + 1), s.permission(depth + 1)}}}}
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{
		Rules: []*rbacv3.Permission{s.permission(depth + 1), s.permission(depth + 1)}}}}
}

func (s *bytesSource) principal(depth int) *rbacv3.Principal {
	switch k := s.next() % 5; {
	case k == 0 || depth > 3:
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
	case k == 1:
		id := fuzzPrincipals[int(s.next())%len(fuzzPrincipals)]
		var pn *matcherv3.StringMatcher
		if id != "" {
			pn = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: id}}
		}
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: pn}}}
	case k == 2:
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_DirectRemoteIp{DirectRemoteIp: cidrOf("10.0.0.0", uint32(s.next()%33))}}
	case k == 3:
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: s.principal(depth + 1)}}
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{
		Ids: []*rbacv3.Principal{s.principal(depth + 1), s.principal(depth + 1)}}}}
}

// FuzzDecide checks the chain's verdict against the filters' own matches
// for random policies and requests: a DENY match always denies, an
// enforcing ALLOW filter with no match denies, a LOG filter never does,
// and nothing else denies.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 1, 0, 2, 2, 1, 0, 0, 3, 1, 1, 5, 2})
	f.Add([]byte{2, 0, 3, 1, 4, 2, 1, 1, 0, 1, 9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &bytesSource{b: data}
		var chain Chain
		for range int(s.next()%4) + 1 {
			cfg := &httprbacv3.RBAC{}
			if s.next()%4 != 0 {
				r := &rbacv3.RBAC{Action: rbacv3.RBAC_Action(s.next() % 3), Policies: map[string]*rbacv3.Policy{}}
				for i := range int(s.next() % 3) {
					r.Policies[string(rune('a'+i))] = &rbacv3.Policy{
						Permissions: []*rbacv3.Permission{s.permission(0)}, Principals: []*rbacv3.Principal{s.principal(0)}}
				}
				cfg.Rules = r
			}
			fl, err := Compile(cfg)
			if err != nil {
				t.Fatalf("generated config refused: %v", err)
			}
			chain = append(chain, fl)
		}
		id := fuzzPrincipals[int(s.next())%len(fuzzPrincipals)]
		in := &Input{Authenticated: id != "", Principal: id, Source: netip.AddrFrom4([4]byte{10, s.next() % 2, 0, 1}),
			Destination: netip.AddrPortFrom(netip.MustParseAddr("10.9.0.1"), uint16(fuzzPorts[int(s.next())%2])),
			HTTP:        true, Method: fuzzMethods[int(s.next())%2], Path: fuzzPaths[int(s.next())%3], Query: "q", Header: http.Header{}}

		d := chain.Decide(in, nil)
		wantAllowed, denier := true, -1
		for i, fl := range chain {
			if !fl.Enforcing {
				continue
			}
			m := fl.Match(in)
			if (fl.Action == Deny && m >= 0) || (fl.Action == Allow && m < 0) {
				wantAllowed, denier = false, i
				break
			}
		}
		if d.Allowed != wantAllowed || d.Filter != denier {
			t.Fatalf("decision %+v, want allowed %v by filter %d", d, wantAllowed, denier)
		}
		if !d.Allowed {
			fl := chain[d.Filter]
			if fl.Action == Log {
				t.Fatal("a LOG filter denied")
			}
			if fl.Action == Allow && d.Policy != NoPolicy {
				t.Fatalf("ALLOW filter denied naming policy %q", d.Policy)
			}
			if fl.Action == Deny && d.Policy != fl.Policies[fl.Match(in)].Name {
				t.Fatalf("DENY named %q, matched %q", d.Policy, fl.Policies[fl.Match(in)].Name)
			}
		}
		// A DENY filter that matches denies wherever it stands, unless an
		// earlier filter already denied.
		for i, fl := range chain {
			if fl.Enforcing && fl.Action == Deny && fl.Match(in) >= 0 && d.Allowed {
				t.Fatalf("filter %d's DENY matched and the request was allowed", i)
			}
		}
	})
}
