package injector

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
