package clustercheck

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshlet-dev/meshlet/internal/preflight"
)

func node(name, kernel, zone string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	n.Status.NodeInfo = corev1.NodeSystemInfo{KernelVersion: kernel, OperatingSystem: "linux"}
	if zone != "" {
		n.Labels[preflight.ZoneLabel] = zone
	}
	return n
}

// The node checks judge every node and name those that fall short.
func TestNodeChecks(t *testing.T) {
	for _, tc := range []struct {
		name             string
		nodes            []corev1.Node
		kernel, zone     preflight.Status
		kernelSays, zSay string
	}{
		{"three zones, new kernels", []corev1.Node{node("a", "6.8.0-49-generic", "z1"), node("b", "6.18.4", "z2"), node("c", "6.5.0", "z3")},
			preflight.OK, preflight.OK, "all 3 nodes", "3 zones: z1, z2, z3"},
		{"one old kernel fails the cluster", []corev1.Node{node("a", "6.8.0", "z1"), node("old", "5.10.0-33-amd64", "z1")},
			preflight.Fail, preflight.OK, "old (Linux 5.10.0-33-amd64: the eBPF redirect needs 5.15", "1 zone: z1"},
		{"5.15 works, keeping root", []corev1.Node{node("lts", "5.15.0-1071-aws", "z1")},
			preflight.Warn, preflight.OK, "lts (Linux 5.15.0-1071-aws: the sidecar keeps root", "1 zone: z1"},
		{"a node without a zone", []corev1.Node{node("a", "6.8.0", "z1"), node("bare", "6.8.0", "")},
			preflight.OK, preflight.Warn, "all 2 nodes", "1 of 2 Linux nodes have no zone (zone-aware routing treats their pods as zoneless): bare"},
		{"no nodes", nil, preflight.Fail, preflight.Skip, "no nodes", "no nodes"},
	} {
		got := NodeChecks(tc.nodes)
		if len(got) != 2 {
			t.Fatalf("%s: %d results, want 2", tc.name, len(got))
		}
		if got[0].Status != tc.kernel || !strings.Contains(got[0].Detail, tc.kernelSays) {
			t.Errorf("%s: kernel %v %q, want %v containing %q", tc.name, got[0].Status, got[0].Detail, tc.kernel, tc.kernelSays)
		}
		if got[1].Status != tc.zone || !strings.Contains(got[1].Detail, tc.zSay) {
			t.Errorf("%s: zone %v %q, want %v containing %q", tc.name, got[1].Status, got[1].Detail, tc.zone, tc.zSay)
		}
	}
	w := node("win", "10.0.20348.2849", "z1")
	w.Status.NodeInfo.OperatingSystem = "windows"
	if got := NodeChecks([]corev1.Node{node("a", "6.8.0", "z1"), w}); got[0].Status != preflight.Warn || !strings.Contains(got[0].Detail, "win (windows: pods there are not meshed)") || got[1].Detail != "1 zone: z1" {
		t.Errorf("a Windows node: %v %q, zones %q: want a warning naming it, and the Linux node's zone", got[0].Status, got[0].Detail, got[1].Detail)
	}
	if got := NodeChecks([]corev1.Node{w}); got[0].Status != preflight.Fail || got[1].Status != preflight.Skip {
		t.Errorf("Windows nodes only: %v %q, %v: want a failure (nothing can be meshed)", got[0].Status, got[0].Detail, got[1].Status)
	}
}

// rightsClient is a fake API server answering SelfSubjectAccessReviews
// with allow, recording every question as verb resource[/subresource],
// and serving the Gateway API kinds named in served.
func rightsClient(t *testing.T, allow func(a authorizationv1.ResourceAttributes) bool, served ...string) (*k8sfake.Clientset, *[]string) {
	t.Helper()
	c := k8sfake.NewClientset()
	var asked []string
	c.PrependReactor("create", "selfsubjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		r := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		a := *r.Spec.ResourceAttributes
		res := a.Resource
		if a.Subresource != "" {
			res += "/" + a.Subresource
		}
		asked = append(asked, a.Verb+" "+res)
		r.Status.Allowed = allow(a)
		return true, r, nil
	})
	if len(served) > 0 {
		gw := &metav1.APIResourceList{GroupVersion: "gateway.networking.k8s.io/v1"}
		sec := &metav1.APIResourceList{GroupVersion: "security.istio.io/v1"}
		for _, s := range served {
			list := gw
			if strings.HasSuffix(s, "policies") || strings.HasSuffix(s, "authentications") {
				list = sec
			}
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: s})
		}
		c.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{gw, sec}
	}
	return c, &asked
}

// The install-rights check asks for the chart's kinds, its CRDs (only
// when they are not installed yet) and the rights its ClusterRole grants
// on Gateway API routes, which the caller must hold unless it may
// escalate and bind cluster roles.
func TestInstallRights(t *testing.T) {
	all := func(authorizationv1.ResourceAttributes) bool { return true }
	deny := func(match func(a authorizationv1.ResourceAttributes) bool) func(authorizationv1.ResourceAttributes) bool {
		return func(a authorizationv1.ResourceAttributes) bool { return !match(a) }
	}
	noCRDs := deny(func(a authorizationv1.ResourceAttributes) bool { return a.Resource == "customresourcedefinitions" })
	noGRPCList := deny(func(a authorizationv1.ResourceAttributes) bool { return a.Resource == "grpcroutes" && a.Verb == "list" })
	noGRPCListNoEscalate := deny(func(a authorizationv1.ResourceAttributes) bool {
		return (a.Resource == "grpcroutes" && a.Verb == "list") || a.Verb == "escalate"
	})
	// May escalate but not bind: not enough to grant what it lacks.
	noStatusNoBind := deny(func(a authorizationv1.ResourceAttributes) bool {
		return (a.Subresource == "status" && a.Verb == "patch") || a.Verb == "bind"
	})
	installed := []string{"httproutes", "grpcroutes", "referencegrants", "peerauthentications", "authorizationpolicies"}
	for _, tc := range []struct {
		name    string
		allow   func(authorizationv1.ResourceAttributes) bool
		served  []string
		status  preflight.Status
		detail  string
		askCRDs bool
	}{
		{"everything allowed", all, nil, preflight.OK, "create the Gateway API and Istio security CRDs, hold the 20 rights the ClusterRole grants", true},
		{"no CRDs may be created", noCRDs, nil, preflight.Fail, "not allowed to create customresourcedefinitions cluster-wide", true},
		{"CRDs installed already", noCRDs, installed, preflight.OK, "the Gateway API and Istio security CRDs are installed already", false},
		{"Istio's missing", noCRDs, installed[:3], preflight.Fail, "create customresourcedefinitions cluster-wide", true},
		{"one of them missing", noCRDs, installed[:2], preflight.Fail, "create customresourcedefinitions cluster-wide", true},
		{"a route right lacking", noGRPCList, nil, preflight.OK, "escalate and bind cluster roles", true},
		{"a route right lacking, no escalate", noGRPCListNoEscalate, nil, preflight.Fail,
			"not allowed to list grpcroutes cluster-wide (the ClusterRole grants them", true},
		{"status rights lacking, no bind", noStatusNoBind, nil, preflight.Fail,
			"patch httproutes/status cluster-wide, patch grpcroutes/status cluster-wide, patch peerauthentications/status cluster-wide, patch authorizationpolicies/status cluster-wide (the ClusterRole", true},
	} {
		c, asked := rightsClient(t, tc.allow, tc.served...)
		got := checkInstallRights(context.Background(), c, "meshlet-system", "")
		if got.Status != tc.status || !strings.Contains(got.Detail, tc.detail) {
			t.Errorf("%s: %v %q, want %v containing %q", tc.name, got.Status, got.Detail, tc.status, tc.detail)
		}
		if slices.Contains(*asked, "create customresourcedefinitions") != tc.askCRDs {
			t.Errorf("%s: asked %v: CRD creation asked %v, want %v", tc.name, *asked, !tc.askCRDs, tc.askCRDs)
		}
		for _, want := range []string{"create clusterroles", "patch deployments", "create secrets", "watch httproutes", "get grpcroutes",
			"update grpcroutes/status", "patch httproutes/status"} {
			if !slices.Contains(*asked, want) {
				t.Errorf("%s: never asked %q (asked %v)", tc.name, want, *asked)
			}
		}
	}

	c := k8sfake.NewClientset()
	c.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	got := checkInstallRights(context.Background(), c, "meshlet-system", "")
	if got.Status != preflight.Fail || !strings.Contains(got.Detail, "ask whether the caller may create namespaces cluster-wide: connection refused") {
		t.Errorf("an API server that does not answer: %v %q", got.Status, got.Detail)
	}
}
