package dataplane

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/meshlet-dev/meshlet/authz"
	"github.com/meshlet-dev/meshlet/config"
)

var otherID = spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/other")

func exactString(v string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
}

func principalIs(id spiffeid.ID) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
		PrincipalName: exactString(id.String())}}}
}

// testAuthz is what Istio would send for: ALLOW the client's identity
// GET /public/*, DENY any request with an x-deny header; on TCP, ALLOW the
// client's identity.
func testAuthz(t *testing.T) *config.Authz {
	t.Helper()
	allow, err := authz.Compile(&httprbacv3.RBAC{Rules: &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW, Policies: map[string]*rbacv3.Policy{
		"allow-public": {Principals: []*rbacv3.Principal{principalIs(clientID)}, Permissions: []*rbacv3.Permission{{
			Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: []*rbacv3.Permission{
				{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{Name: ":method",
					HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exactString("GET")}}}},
				{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{
					Path: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "/public/"}}}}}},
			}}}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	deny, err := authz.Compile(&httprbacv3.RBAC{Rules: &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: map[string]*rbacv3.Policy{
		"deny header": {Principals: []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Any{Any: true}}}, Permissions: []*rbacv3.Permission{{
			Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{Name: "x-deny",
				HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := authz.CompileNetwork(&netrbacv3.RBAC{StatPrefix: "tcp", Rules: &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW, Policies: map[string]*rbacv3.Policy{
		"allow-client": {Principals: []*rbacv3.Principal{principalIs(clientID)}, Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return &config.Authz{HTTP: authz.Chain{deny, allow}, Network: authz.Chain{tcp}}
}

func withAuthz(t *testing.T, s *Server, a *config.Authz) {
	t.Helper()
	cfg := *s.Config()
	cfg.Listeners = append([]config.Listener(nil), cfg.Listeners...)
	for i := range cfg.Listeners {
		cfg.Listeners[i].Authz = a
	}
	if err := s.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
}

func TestInboundRBAC(t *testing.T) {
	ca := testCA(t, 0)
	b, bLogs, httpIn, tcpIn := serverSidecar(t, identity(t, ca, webID, time.Hour), &config.InboundMTLS{
		PeerAuthorization: config.PeerAuthorization{Mode: config.MTLSStrict}})
	withAuthz(t, b, testAuthz(t))
	a, _, aTCP := clientSidecar(t, identity(t, ca, clientID, time.Hour), meshedEndpoint(httpIn, webID.String()), meshedEndpoint(tcpIn, webID.String()))
	c, _, cTCP := clientSidecar(t, identity(t, ca, otherID, time.Hour), meshedEndpoint(httpIn, webID.String()), meshedEndpoint(tcpIn, webID.String()))

	// A legitimate client runs alongside the denied ones: all its
	// requests must pass.
	var wg sync.WaitGroup
	legit := make(chan string, 1)
	wg.Go(func() {
		client := &http.Client{Timeout: 5 * time.Second}
		for i := range 200 {
			req, _ := http.NewRequest(http.MethodGet, proxyURL(a)+fmt.Sprintf("/public/legit%d", i), nil)
			req.Host = "echo"
			resp, err := client.Do(req)
			if err != nil {
				legit <- fmt.Sprintf("legitimate request %d: %v", i, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				legit <- fmt.Sprintf("legitimate request %d: %d", i, resp.StatusCode)
				return
			}
		}
	})

	cases := []struct {
		s      *Server
		method string
		path   string
		header http.Header
		code   int
		log    []string
	}{
		{a, "GET", "/public/a?x=1", nil, 200, []string{`"GET /public/a?x=1 HTTP/2.0" 200 -`}},
		{a, "POST", "/public/a", nil, 403, []string{`"POST /public/a HTTP/2.0" 403 -`, `rbac_access_denied_matched_policy[none]`, clientID.String()}},
		// The path is normalized before the check, and goes on so.
		{a, "GET", "/public/%2e%2e/admin", nil, 403, []string{`"GET /admin HTTP/2.0" 403 -`, `rbac_access_denied_matched_policy[none]`}},
		{a, "GET", "/public/b", http.Header{"X-Deny": {"1"}}, 403, []string{`"GET /public/b HTTP/2.0" 403 -`, `rbac_access_denied_matched_policy[deny_header]`}},
		{c, "GET", "/public/a", nil, 403, []string{`"GET /public/a HTTP/2.0" 403 -`, `rbac_access_denied_matched_policy[none]`, otherID.String()}},
	}
	for _, tc := range cases {
		resp, body := do(t, tc.s, tc.method, tc.path, tc.header)
		if resp.StatusCode != tc.code || (tc.code == 403 && body != rbacDeniedBody) {
			t.Errorf("%s %s: %d %q, want %d", tc.method, tc.path, resp.StatusCode, body, tc.code)
		}
		bLogs.waitLine(t, tc.log...)
	}

	// TCP: the client's identity gets through, the other's connection is
	// closed before a byte reaches the app.
	conn, err := net.DialTimeout("tcp", aTCP, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "hi\n")
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "echo: hi\n" {
		t.Errorf("allowed TCP: %q, %v", line, err)
	}
	conn.Close()
	conn, err = net.DialTimeout("tcp", cTCP, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "hi\n")
	if line, err := bufio.NewReader(conn).ReadString('\n'); err == nil {
		t.Errorf("denied TCP got %q", line)
	}
	conn.Close()
	bLogs.waitLine(t, "rbac_access_denied_matched_policy[none]", otherID.String(), "- - -") // no cluster: never proxied

	wg.Wait()
	select {
	case msg := <-legit:
		t.Error(msg)
	default:
	}
	m := metricsText(t, b)
	for _, want := range []string{
		`meshlet_authz_decisions_total{action="ALLOW",policy="allow-public",result="allowed"}`,
		`meshlet_authz_decisions_total{action="ALLOW",policy="none",result="denied"} 4`, // three requests, one connection,
		`meshlet_authz_decisions_total{action="DENY",policy="deny header",result="denied"} 1`,
		`meshlet_authz_decisions_total{action="ALLOW",policy="allow-client",result="allowed"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "meshlet_authz"))
		}
	}

	// Policies removed: everyone is let in again, with no restart.
	withAuthz(t, b, nil)
	if resp, body := do(t, c, "POST", "/private", nil); resp.StatusCode != 200 {
		t.Errorf("after removal: %d %q", resp.StatusCode, body)
	}
}

// TestInboundRBACPlaintext: on a PERMISSIVE port a plaintext client is
// unauthenticated, so a principal rule cannot let it in, on the fast
// HTTP/1 server as on HTTP/2.
func TestInboundRBACPlaintext(t *testing.T) {
	ca := testCA(t, 0)
	b, bLogs, httpIn, _ := serverSidecar(t, identity(t, ca, webID, time.Hour), nil)
	withAuthz(t, b, testAuthz(t))
	resp, err := http.Get("http://" + httpIn + "/public/a")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("plaintext: %d, want 403", resp.StatusCode)
	}
	bLogs.waitLine(t, `"GET /public/a HTTP/1.1" 403 -`, "rbac_access_denied_matched_policy[none]")
}
