package authz

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	exprv1 "google.golang.org/genproto/googleapis/api/expr/v1alpha1"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func cidrOf(addr string, bits uint32) *corev3.CidrRange {
	return &corev3.CidrRange{AddressPrefix: addr, PrefixLen: wrapperspb.UInt32(bits)}
}

func anyPrincipal() []*rbacv3.Principal {
	return []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Any{Any: true}}}
}

func allowWith(perm *rbacv3.Permission) *httprbacv3.RBAC {
	return &httprbacv3.RBAC{Rules: &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW, Policies: map[string]*rbacv3.Policy{
		"p": {Permissions: []*rbacv3.Permission{perm}, Principals: anyPrincipal()}}}}
}

func headerPerm(h *routev3.HeaderMatcher) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: h}}
}

func TestCompileRefusesWhatItCannotEnforce(t *testing.T) {
	cases := []struct {
		name string
		cfg  *httprbacv3.RBAC
		want string
	}{
		{"shadow rules", &httprbacv3.RBAC{ShadowRules: &rbacv3.RBAC{}}, "shadow_rules: not supported"},
		{"condition", &httprbacv3.RBAC{Rules: &rbacv3.RBAC{Policies: map[string]*rbacv3.Policy{
			"p": {Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}}, Principals: anyPrincipal(),
				Condition: &exprv1.Expr{}}}}}, "rules.policies[p].condition: not supported"},
		{"metadata", allowWith(&rbacv3.Permission{Rule: &rbacv3.Permission_Metadata{Metadata: &matcherv3.MetadataMatcher{}}}),
			"rules.policies[p].permissions[0]: metadata not supported"},
		{"no principals", &httprbacv3.RBAC{Rules: &rbacv3.RBAC{Policies: map[string]*rbacv3.Policy{
			"p": {Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}}}}}}, "needs at least one permission and one principal"},
		{"bad regex", allowWith(headerPerm(&routev3.HeaderMatcher{Name: "x", HeaderMatchSpecifier: &routev3.HeaderMatcher_SafeRegexMatch{
			SafeRegexMatch: &matcherv3.RegexMatcher{Regex: "(a"}}})), "safe_regex_match.regex"},
		{"huge regex", allowWith(headerPerm(&routev3.HeaderMatcher{Name: "x", HeaderMatchSpecifier: &routev3.HeaderMatcher_SafeRegexMatch{
			SafeRegexMatch: &matcherv3.RegexMatcher{Regex: strings.Repeat("a{1,9}", 30)}}})), "program size"},
		{"range match", allowWith(headerPerm(&routev3.HeaderMatcher{Name: "x", HeaderMatchSpecifier: &routev3.HeaderMatcher_RangeMatch{}})),
			"range_match: not supported"},
		{"bad cidr", allowWith(&rbacv3.Permission{Rule: &rbacv3.Permission_DestinationIp{DestinationIp: cidrOf("10.0.0.0", 40)}}),
			"destination_ip.prefix_len"},
		{"empty and", allowWith(&rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{}}}),
			"and_rules.rules: empty"},
	}
	for _, c := range cases {
		_, err := Compile(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to say %q", c.name, err, c.want)
		}
	}
	deep := &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	for range MaxDepth + 2 {
		deep = &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: deep}}
	}
	if _, err := Compile(allowWith(deep)); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("deep tree: %v", err)
	}
	_, err := CompileNetwork(&netrbacv3.RBAC{Rules: allowWith(headerPerm(&routev3.HeaderMatcher{Name: "x"})).Rules})
	if err == nil || !strings.Contains(err.Error(), "network filter sees no HTTP headers") {
		t.Errorf("network filter with a header: %v", err)
	}
}

func TestHeaderMatchesAsEnvoy(t *testing.T) {
	exact := func(v string) *routev3.HeaderMatcher_StringMatch {
		return &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}}
	}
	cases := []struct {
		name   string
		h      *routev3.HeaderMatcher
		header http.Header
		want   bool
	}{
		{"exact", &routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: exact("1")}, http.Header{"X-A": {"1"}}, true},
		{"values joined", &routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: exact("1,2")}, http.Header{"X-A": {"1", "2"}}, true},
		{"missing", &routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: exact("")}, http.Header{}, false},
		{"missing as empty", &routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: exact(""), TreatMissingHeaderAsEmpty: true}, http.Header{}, true},
		{"missing inverted", &routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: exact("1"), InvertMatch: true}, http.Header{}, false},
		{"inverted", &routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: exact("1"), InvertMatch: true}, http.Header{"X-A": {"2"}}, true},
		{"absent wanted", &routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: false}}, http.Header{}, true},
		{"present", &routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}, http.Header{"X-A": {""}}, true},
		{"ignore case", &routev3.HeaderMatcher{Name: ":authority", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: ".Example.com"}, IgnoreCase: true}}}, nil, true},
		{"regex whole value", &routev3.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_SafeRegexMatch{
			SafeRegexMatch: &matcherv3.RegexMatcher{Regex: "GE"}}}, nil, false},
	}
	for _, c := range cases {
		f, err := Compile(allowWith(headerPerm(c.h)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		in := &Input{HTTP: true, Method: "GET", Authority: "api.example.COM", Header: c.header}
		if got := f.Match(in) == 0; got != c.want {
			t.Errorf("%s: matched %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPoliciesInNameOrder(t *testing.T) {
	anyPerm := []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}}
	f, err := Compile(&httprbacv3.RBAC{Rules: &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: map[string]*rbacv3.Policy{
		"b": {Permissions: anyPerm, Principals: anyPrincipal()}, "a": {Permissions: anyPerm, Principals: anyPrincipal()},
		"c": {Permissions: anyPerm, Principals: anyPrincipal()}}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // map order would vary
		if d := (Chain{f}).Decide(&Input{}, nil); d.Allowed || d.Policy != "a" {
			t.Fatalf("decision %+v, want denied by a", d)
		}
	}
}

// BenchmarkDecide10 is bench/pair.sh's 10-policy ALLOW filter deciding a
// request that only the last policy matches.
func BenchmarkDecide10(b *testing.B) {
	pols := map[string]*rbacv3.Policy{}
	for i := range 9 {
		pols[fmt.Sprintf("p%d", i)] = &rbacv3.Policy{
			Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: []*rbacv3.Permission{
				headerPerm(&routev3.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "POST"}}}}),
				{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: fmt.Sprintf("/admin%d/", i)}}}}}},
			}}}}},
			Principals: []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
				PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: fmt.Sprintf("spiffe://cluster.local/ns/other/sa/s%d", i)}}}}}},
		}
	}
	pols["p9"] = &rbacv3.Policy{
		Permissions: []*rbacv3.Permission{headerPerm(&routev3.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "GET"}}}})},
		Principals: []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
			PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "spiffe://cluster.local/ns/bench/sa/client"}}}}}},
	}
	f, err := Compile(&httprbacv3.RBAC{Rules: &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW, Policies: pols}})
	if err != nil {
		b.Fatal(err)
	}
	chain := Chain{f}
	in := &Input{HTTP: true, Method: "GET", Path: "/x", Authenticated: true, Principal: "spiffe://cluster.local/ns/bench/sa/client", Header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		if !chain.Decide(in, nil).Allowed {
			b.Fatal("denied")
		}
	}
}
