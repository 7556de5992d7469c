package xds

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	secapi "istio.io/api/security/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/meshlet-dev/meshlet/authz"
)

// policyFromYAML reads an AuthorizationPolicy's spec as Istio's docs
// write it.
func policyFromYAML(t *testing.T, ns, name, spec string) istioPolicy {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	var p secapi.AuthorizationPolicy
	if err := p.UnmarshalJSON(js); err != nil {
		t.Fatalf("%s: %v", spec, err)
	}
	return istioPolicy{Ref: policyRef{ns, name}, Spec: &p}
}

// chains translates policies and compiles what the control plane sends,
// as the sidecar does.
func chains(t *testing.T, ps ...istioPolicy) (httpChain, netChain authz.Chain, errs map[policyRef]error) {
	t.Helper()
	w, errs := translateAuthorizationPolicies(ps)
	for i := range rbacFilters {
		h, err := authz.Compile(w.HTTP[i])
		if err != nil {
			t.Fatalf("HTTP filter %d does not compile: %v", i, err)
		}
		n, err := authz.CompileNetwork(w.Network[i])
		if err != nil {
			t.Fatalf("network filter %d does not compile: %v", i, err)
		}
		httpChain, netChain = append(httpChain, h), append(netChain, n)
	}
	return httpChain, netChain, errs
}

func peer(id string) *authz.Input {
	return &authz.Input{Authenticated: id != "", Principal: id, Source: netip.MustParseAddr("10.1.2.3"),
		Destination: netip.MustParseAddrPort("10.9.0.1:8080")}
}

func request(in *authz.Input, method, path string) *authz.Input {
	r := *in
	r.HTTP, r.Method, r.Authority, r.Scheme = true, method, "echo.default:8080", "http"
	r.Path, r.Query, _ = strings.Cut(path, "?")
	r.Header = http.Header{}
	return &r
}

const (
	sleepID = "spiffe://cluster.local/ns/foo/sa/sleep"
	otherID = "spiffe://cluster.local/ns/bar/sa/other"
)

func TestAuthorizationIstioExamples(t *testing.T) {
	type want struct {
		in      *authz.Input
		allowed bool
		policy  string // when denied
	}
	cases := []struct {
		name   string
		specs  []string
		checks []want
		tcp    []want
	}{
		{
			name:  "allow-nothing",
			specs: []string{`{}`},
			checks: []want{
				{request(peer(sleepID), "GET", "/"), false, "none"},
				{request(peer(""), "GET", "/"), false, "none"},
			},
			tcp: []want{{peer(sleepID), false, "none"}},
		},
		{
			name:  "deny-all",
			specs: []string{"action: DENY\nrules:\n- {}"},
			checks: []want{
				{request(peer(sleepID), "GET", "/"), false, "ns[foo]-policy[p0]-rule[0]"},
			},
			tcp: []want{{peer(sleepID), false, "ns[foo]-policy[p0]-rule[0]"}},
		},
		{
			name:  "allow-all",
			specs: []string{"rules:\n- {}"},
			checks: []want{
				{request(peer(""), "POST", "/x"), true, ""},
			},
			tcp: []want{{peer(""), true, ""}},
		},
		{
			name:  "namespace-scoped allow",
			specs: []string{"action: ALLOW\nrules:\n- from:\n  - source:\n      namespaces: [\"foo\"]"},
			checks: []want{
				{request(peer(sleepID), "GET", "/"), true, ""},
				{request(peer(otherID), "GET", "/"), false, "none"},
				{request(peer(""), "GET", "/"), false, "none"},
				// A namespace is a whole segment, not a prefix.
				{request(peer("spiffe://cluster.local/ns/foobar/sa/x"), "GET", "/"), false, "none"},
			},
			tcp: []want{{peer(sleepID), true, ""}, {peer(otherID), false, "none"}},
		},
		{
			name: "principal and path prefix",
			specs: []string{`
rules:
- from:
  - source:
      principals: ["cluster.local/ns/foo/sa/sleep"]
  to:
  - operation:
      methods: ["GET"]
      paths: ["/public/*"]`},
			checks: []want{
				{request(peer(sleepID), "GET", "/public/a"), true, ""},
				{request(peer(sleepID), "GET", "/public/a?x=/private"), true, ""},
				{request(peer(sleepID), "GET", "/private"), false, "none"},
				{request(peer(sleepID), "GET", "/public"), false, "none"},
				{request(peer(sleepID), "POST", "/public/a"), false, "none"},
				{request(peer(otherID), "GET", "/public/a"), false, "none"},
			},
			// An ALLOW rule naming HTTP attributes is dropped for TCP:
			// nothing is left to allow.
			tcp: []want{{peer(sleepID), false, "none"}},
		},
		{
			name:  "ipBlocks",
			specs: []string{"rules:\n- from:\n  - source:\n      ipBlocks: [\"10.1.0.0/16\", \"192.168.7.7\"]\n      notIpBlocks: [\"10.1.9.0/24\"]"},
			checks: []want{
				{request(peer(""), "GET", "/"), true, ""},
				{request(&authz.Input{Source: netip.MustParseAddr("10.2.0.1")}, "GET", "/"), false, "none"},
				{request(&authz.Input{Source: netip.MustParseAddr("10.1.9.4")}, "GET", "/"), false, "none"},
				{request(&authz.Input{Source: netip.MustParseAddr("192.168.7.7")}, "GET", "/"), true, ""},
			},
			tcp: []want{{peer(""), true, ""}, {&authz.Input{Source: netip.MustParseAddr("10.2.0.1")}, false, "none"}},
		},
		{
			name: "deny wins over allow",
			specs: []string{
				"rules:\n- from:\n  - source:\n      principals: [\"*\"]",
				"action: DENY\nrules:\n- to:\n  - operation:\n      methods: [\"POST\"]",
			},
			checks: []want{
				{request(peer(sleepID), "GET", "/"), true, ""},
				{request(peer(sleepID), "POST", "/"), false, "ns[foo]-policy[p1]-rule[0]"},
				{request(peer(""), "GET", "/"), false, "none"},
			},
			// DENY with only HTTP attributes denies all TCP.
			tcp: []want{{peer(sleepID), false, "ns[foo]-policy[p1]-rule[0]"}},
		},
		{
			name:  "deny with ports and methods on TCP",
			specs: []string{"action: DENY\nrules:\n- to:\n  - operation:\n      ports: [\"8080\"]\n      methods: [\"GET\"]"},
			checks: []want{
				{request(peer(sleepID), "POST", "/"), true, ""},
				{request(peer(sleepID), "GET", "/"), false, "ns[foo]-policy[p0]-rule[0]"},
			},
			tcp: []want{
				{peer(sleepID), false, "ns[foo]-policy[p0]-rule[0]"},
				{&authz.Input{Destination: netip.MustParseAddrPort("10.9.0.1:9090")}, true, ""},
			},
		},
		{
			name: "when conditions",
			specs: []string{`
rules:
- when:
  - key: request.headers[x-token]
    values: ["good*"]
  - key: source.principal
    notValues: ["cluster.local/ns/bar/*"]
  - key: destination.port
    values: ["8080"]`},
			checks: []want{
				{func() *authz.Input {
					r := request(peer(sleepID), "GET", "/")
					r.Header.Set("X-Token", "good-1")
					return r
				}(), true, ""},
				{request(peer(sleepID), "GET", "/"), false, "none"},
				{func() *authz.Input {
					r := request(peer(otherID), "GET", "/")
					r.Header.Set("X-Token", "good-1")
					return r
				}(), false, "none"},
			},
		},
		{
			name:  "hosts ignore case",
			specs: []string{"rules:\n- to:\n  - operation:\n      hosts: [\"Echo.default:8080\", \"*.example.com\"]"},
			checks: []want{
				{request(peer(""), "GET", "/"), true, ""},
				{func() *authz.Input { r := request(peer(""), "GET", "/"); r.Authority = "api.EXAMPLE.com"; return r }(), true, ""},
				{func() *authz.Input { r := request(peer(""), "GET", "/"); r.Authority = "evil.com"; return r }(), false, "none"},
			},
		},
		{
			name:  "audit never denies",
			specs: []string{"action: AUDIT\nrules:\n- {}"},
			checks: []want{
				{request(peer(""), "GET", "/"), true, ""},
			},
			tcp: []want{{peer(""), true, ""}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ps []istioPolicy
			for i, s := range tc.specs {
				ps = append(ps, policyFromYAML(t, "foo", "p"+string(rune('0'+i)), s))
			}
			hc, nc, errs := chains(t, ps...)
			if len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			for i, c := range tc.checks {
				d := hc.Decide(c.in, nil)
				if d.Allowed != c.allowed || (!d.Allowed && d.Policy != c.policy) {
					t.Errorf("HTTP check %d (%s %s from %q): allowed %v policy %q, want %v %q", i, c.in.Method, c.in.Path, c.in.Principal, d.Allowed, d.Policy, c.allowed, c.policy)
				}
			}
			for i, c := range tc.tcp {
				d := nc.Decide(c.in, nil)
				if d.Allowed != c.allowed || (!d.Allowed && d.Policy != c.policy) {
					t.Errorf("TCP check %d (from %q): allowed %v policy %q, want %v %q", i, c.in.Principal, d.Allowed, d.Policy, c.allowed, c.policy)
				}
			}
		})
	}
}

func TestAuthorizationFailsClosed(t *testing.T) {
	for _, spec := range []string{
		"action: CUSTOM\nprovider:\n  name: ext\nrules:\n- {}",
		"rules:\n- from:\n  - source:\n      requestPrincipals: [\"*\"]",
		"rules:\n- when:\n  - key: request.auth.claims[iss]\n    values: [\"x\"]",
		"rules:\n- to:\n  - operation:\n      ports: [\"http\"]",
		"rules:\n- to:\n  - operation:\n      paths: [\"/a/*/b\"]",
		"rules:\n- from:\n  - source:\n      ipBlocks: [\"10.0.0.0/33\"]",
	} {
		ok := policyFromYAML(t, "foo", "ok", "rules:\n- {}")
		bad := policyFromYAML(t, "foo", "bad", spec)
		hc, nc, errs := chains(t, ok, bad)
		if errs[bad.Ref] == nil || len(errs) != 1 {
			t.Errorf("%q: errors %v, want one for foo/bad", spec, errs)
			continue
		}
		if !strings.Contains(errs[bad.Ref].Error(), "rules") && !strings.Contains(errs[bad.Ref].Error(), "action") {
			t.Errorf("%q: error %q names no field", spec, errs[bad.Ref])
		}
		if d := hc.Decide(request(peer(sleepID), "GET", "/"), nil); d.Allowed {
			t.Errorf("%q: HTTP allowed beside a policy that did not translate", spec)
		}
		if d := nc.Decide(peer(sleepID), nil); d.Allowed {
			t.Errorf("%q: TCP allowed beside a policy that did not translate", spec)
		}
	}
}

func TestAuthorizationNoPolicies(t *testing.T) {
	hc, nc, _ := chains(t)
	if d := hc.Decide(request(peer(""), "DELETE", "/"), nil); !d.Allowed {
		t.Error("no policy: HTTP denied")
	}
	if d := nc.Decide(peer(""), nil); !d.Allowed {
		t.Error("no policy: TCP denied")
	}
}
