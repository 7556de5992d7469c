package xds

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshlet-dev/meshlet/authz"
	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/discovery"
	"github.com/meshlet-dev/meshlet/discovery/adsclient"
	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
)

// policySidecar is an ADS client subscribed to the inbound policies.
type policySidecar struct {
	c  *adsclient.Client
	mu sync.Mutex
	in []adsclient.Inbound
}

func startPolicySidecar(t *testing.T, addr, nodeID string, delta bool) *policySidecar {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s := &policySidecar{}
	s.c, err = adsclient.New(adsclient.Options{Conn: conn, Node: &corev3.Node{Id: nodeID}, Delta: delta,
		Extensions: meshmeta.InboundExtensionNames,
		OnInbound:  func(in adsclient.Inbound) { s.mu.Lock(); s.in = append(s.in, in); s.mu.Unlock() },
		Logger:     slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	return s
}

func (s *policySidecar) last() (adsclient.Inbound, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.in) == 0 {
		return adsclient.Inbound{}, false
	}
	return s.in[len(s.in)-1], true
}

// waitInbound waits for a delivered policy for which cond holds.
func (s *policySidecar) waitInbound(t *testing.T, what string, cond func(adsclient.Inbound) bool) adsclient.Inbound {
	t.Helper()
	var in adsclient.Inbound
	waitFor(t, what, func() bool {
		var ok bool
		in, ok = s.last()
		return ok && cond(in)
	})
	return in
}

func allows(in adsclient.Inbound, r *authz.Input) bool {
	return in.Authz != nil && in.Authz.HTTP.Decide(r, nil).Allowed
}

func peerAuthFromYAML(t *testing.T, ns, name, spec string, age int) *securityv1.PeerAuthentication {
	t.Helper()
	p := &securityv1.PeerAuthentication{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		CreationTimestamp: metav1.NewTime(time.Unix(1e9-int64(age), 0))}}
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Spec.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	return p
}

func authzPolicyFromYAML(t *testing.T, ns, name, spec string) *securityv1.AuthorizationPolicy {
	t.Helper()
	ip := policyFromYAML(t, ns, name, spec)
	ap := &securityv1.AuthorizationPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	proto.Merge(&ap.Spec, ip.Spec)
	return ap
}

func TestPoliciesOverADS(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, delta bool) {
		cp := startControlPlane(t, "127.0.0.1:0", Options{}, func(s *Server) {
			mesh(s)
			web := pod("default", "web-a", "web", "n-a", true)
			web.Labels = map[string]string{"app": "web"}
			s.UpsertPod(web)
		})
		web := startPolicySidecar(t, cp.addr, "web-a.default", delta)
		other := startPolicySidecar(t, cp.addr, "other-b.default", delta)
		select {
		case <-web.c.Ready():
		case <-time.After(waitTimeout):
			t.Fatalf("not ready: %+v", web.c.Stats())
		}
		sleep := request(peer(sleepID), "GET", "/public/a")
		in := web.waitInbound(t, "no policies", func(in adsclient.Inbound) bool { return in.MTLS != nil })
		if in.MTLS.Mode != config.MTLSPermissive || !allows(in, request(peer(""), "POST", "/")) {
			t.Fatalf("no policies: mode %s, allows %v", in.MTLS.Mode, allows(in, request(peer(""), "POST", "/")))
		}

		// Mesh-wide PERMISSIVE, namespace STRICT, and a workload policy
		// with UNSET (inherits) and a PERMISSIVE port.
		cp.srv.UpsertPeerAuthentication(peerAuthFromYAML(t, DefaultRootNamespace, "mesh", "mtls: {mode: PERMISSIVE}", 3))
		cp.srv.UpsertPeerAuthentication(peerAuthFromYAML(t, "default", "ns", "mtls: {mode: STRICT}", 2))
		cp.srv.UpsertPeerAuthentication(peerAuthFromYAML(t, "default", "web",
			"selector: {matchLabels: {app: web}}\nportLevelMtls:\n  9090: {mode: PERMISSIVE}", 1))
		in = web.waitInbound(t, "STRICT", func(in adsclient.Inbound) bool { return in.MTLS.Mode == config.MTLSStrict })
		if in.MTLS.Ports[9090].Mode != config.MTLSPermissive || len(in.MTLS.Ports) != 1 {
			t.Errorf("port level: %+v", in.MTLS.Ports)
		}
		other.waitInbound(t, "STRICT for the namespace", func(in adsclient.Inbound) bool {
			return in.MTLS.Mode == config.MTLSStrict && len(in.MTLS.Ports) == 0
		})

		// An ALLOW for the web workload, a DENY for the namespace.
		cp.srv.UpsertAuthorizationPolicy(authzPolicyFromYAML(t, "default", "allow-sleep", `
selector: {matchLabels: {app: web}}
rules:
- from: [{source: {principals: ["cluster.local/ns/foo/sa/sleep"]}}]
  to: [{operation: {methods: ["GET"], paths: ["/public/*"]}}]`))
		cp.srv.UpsertAuthorizationPolicy(authzPolicyFromYAML(t, "default", "deny-admin",
			"action: DENY\nrules:\n- to: [{operation: {paths: [\"/public/admin\"]}}]"))
		in = web.waitInbound(t, "the ALLOW policy", func(in adsclient.Inbound) bool { return !allows(in, request(peer(otherID), "GET", "/public/a")) })
		if !allows(in, sleep) || allows(in, request(peer(sleepID), "GET", "/public/admin")) {
			t.Error("web: sleep's GET denied, or the DENY ignored")
		}
		in = other.waitInbound(t, "the DENY policy", func(in adsclient.Inbound) bool { return !allows(in, request(peer(""), "GET", "/public/admin")) })
		if !allows(in, request(peer(otherID), "POST", "/x")) {
			t.Error("other: the ALLOW policy of web applies")
		}

		// The pod's annotation wins over every PeerAuthentication.
		p, _ := cp.srv.src.pods.Pods("default").Get("web-a")
		p = p.DeepCopy()
		p.Annotations[MTLSModeAnnotation] = "PERMISSIVE"
		cp.srv.UpsertPod(p)
		web.waitInbound(t, "the annotation", func(in adsclient.Inbound) bool {
			return in.MTLS.Mode == config.MTLSPermissive && len(in.MTLS.Ports) == 0
		})

		// A policy that cannot be enforced: its workloads allow nothing.
		cp.srv.UpsertAuthorizationPolicy(authzPolicyFromYAML(t, "default", "custom",
			"action: CUSTOM\nprovider: {name: ext}\nselector: {matchLabels: {app: web}}\nrules:\n- {}"))
		web.waitInbound(t, "fail closed", func(in adsclient.Inbound) bool { return !allows(in, sleep) })
		if in, _ := other.last(); !allows(in, request(peer(otherID), "POST", "/x")) {
			t.Error("other: fails closed for a policy that does not select it")
		}

		// All deleted: everything allowed again.
		for _, n := range []string{"allow-sleep", "deny-admin", "custom"} {
			cp.srv.DeleteAuthorizationPolicy(nn("default", n))
		}
		web.waitInbound(t, "policies removed", func(in adsclient.Inbound) bool {
			return allows(in, request(peer(""), "GET", "/public/admin"))
		})
	})
}

// A status write (same generation) is no policy change; a spec change,
// an add or a delete is.
func TestSpecUnchanged(t *testing.T) {
	p := func(gen int64) *securityv1.AuthorizationPolicy {
		return &securityv1.AuthorizationPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", Generation: gen}}
	}
	for _, c := range []struct {
		old, cur any
		want     bool
	}{
		{p(2), p(2), true}, {p(2), p(3), false}, {nil, p(1), false}, {p(1), nil, false}, {p(0), p(0), false},
	} {
		if got := specUnchanged(c.old, c.cur); got != c.want {
			t.Errorf("specUnchanged(%v, %v) = %v", c.old, c.cur, got)
		}
	}
}

// A PeerAuthentication that sets a port to DISABLE makes clients reach the
// pods it selects in plaintext there (Istio's auto mTLS): the client
// sidecar's endpoint loses its meshed metadata, and gets it back when the
// policy goes. A namespace-wide DISABLE reaches every port of every pod.
func TestPeerAuthenticationDisableTowardsClients(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, delta bool) {
		cp := startControlPlane(t, "127.0.0.1:0", Options{}, func(s *Server) {
			mesh(s)
			echo := pod("default", "echo-a", "echo", "", true)
			echo.Labels = map[string]string{"app": "echo"}
			s.UpsertPod(echo)
		})
		a := startSidecar(t, cp.addr, "web-a.default", delta, nil)
		a.waitReady(t)
		meshed := func(addr string) string {
			return endpointsOf(byName(a.c.Clusters())[echoCluster])[addr].Metadata[discovery.MeshedMetadataKey]
		}
		eq(t, meshed("10.0.1.1:8080"), "true")

		cp.srv.UpsertPeerAuthentication(peerAuthFromYAML(t, "default", "echo-plain",
			"selector: {matchLabels: {app: echo}}\nportLevelMtls:\n  8080: {mode: DISABLE}", 1))
		waitFor(t, "echo-a's port 8080 in plaintext", func() bool { return meshed("10.0.1.1:8080") == "" })
		if id := endpointsOf(byName(a.c.Clusters())[echoCluster])["10.0.1.1:8080"].Metadata[discovery.IdentityMetadataKey]; id != "" {
			t.Errorf("a plaintext endpoint still names identity %q", id)
		}
		// Not web's pods, which the policy does not select.
		local := endpointsOf(byName(a.c.Clusters())[meshmeta.LocalClusterName])
		eq(t, local["10.0.2.1:8080"].Metadata[discovery.MeshedMetadataKey], "true")

		cp.srv.DeletePeerAuthentication(nn("default", "echo-plain"))
		waitFor(t, "echo-a meshed again", func() bool { return meshed("10.0.1.1:8080") == "true" })

		cp.srv.UpsertPeerAuthentication(peerAuthFromYAML(t, "default", "ns-plain", "mtls: {mode: DISABLE}", 1))
		webMeshed := func() string {
			return endpointsOf(byName(a.c.Clusters())[meshmeta.LocalClusterName])["10.0.2.1:8080"].Metadata[discovery.MeshedMetadataKey]
		}
		waitFor(t, "every meshed pod of the namespace in plaintext", func() bool { return meshed("10.0.1.1:8080") == "" && webMeshed() == "" })

		// A STRICT workload policy over the namespace's DISABLE: echo-a
		// takes mTLS again (its sidecar refuses plaintext), web stays
		// plaintext.
		cp.srv.UpsertPeerAuthentication(peerAuthFromYAML(t, "default", "echo-strict", "selector: {matchLabels: {app: echo}}\nmtls: {mode: STRICT}", 1))
		waitFor(t, "STRICT over DISABLE", func() bool { return meshed("10.0.1.1:8080") == "true" && webMeshed() == "" })
		cp.srv.DeletePeerAuthentication(nn("default", "echo-strict"))
		waitFor(t, "the STRICT policy gone", func() bool { return meshed("10.0.1.1:8080") == "" })

		// The pod annotation overrides STRICT or PERMISSIVE only: a
		// DISABLE written on the pod after injection is ignored, and
		// PERMISSIVE wins over the namespace's DISABLE.
		p, _ := cp.srv.src.pods.Pods("default").Get("echo-a")
		p = p.DeepCopy()
		p.Annotations[MTLSModeAnnotation] = "PERMISSIVE"
		cp.srv.UpsertPod(p)
		waitFor(t, "the PERMISSIVE annotation", func() bool { return meshed("10.0.1.1:8080") == "true" })
		cp.srv.DeletePeerAuthentication(nn("default", "ns-plain"))
		cp.srv.UpsertPeerAuthentication(peerAuthFromYAML(t, "other", "plain", "mtls: {mode: DISABLE}", 1)) // DISABLE in play elsewhere
		p = p.DeepCopy()
		p.Annotations[MTLSModeAnnotation] = "DISABLE"
		cp.srv.UpsertPod(p)
		waitFor(t, "web meshed again", func() bool { return webMeshed() == "true" })
		cp.srv.mu.Lock()
		plaintext := cp.srv.plaintextLocked()(nn("default", "echo-a"), 8080)
		cp.srv.mu.Unlock()
		eq(t, plaintext, false)
		eq(t, meshed("10.0.1.1:8080"), "true")
	})
}
