//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// meshletctl builds the operator CLI and returns a runner of it against
// the suite's cluster (its admin kubeconfig).
func meshletctl(t *testing.T, c *Cluster) func(args ...string) (string, error) {
	t.Helper()
	root, _ := filepath.Abs("..")
	bin := filepath.Join(t.TempDir(), "meshletctl")
	build := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-o", bin, "./cmd/meshletctl")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/meshletctl: %v\n%s", err, out)
	}
	return func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(cmd.Environ(), "KUBECONFIG="+c.Kubeconfig)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// tableRows are the rows of a meshletctl table, each split into cells,
// keyed by the first cell.
func tableRows(out string) map[string][]string {
	rows := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	return rows
}

// checkMeshletctl runs meshletctl against the real nodes while the
// client's echo endpoints are split by zone (failover-labels): its
// proxy-status shows every sidecar in sync with the injector; its
// proxy-config endpoints, through the API server's port-forward to the
// client sidecar's admin port, shows the zone-a endpoint at priority 0
// and the others at 1; its secrets the client's SPIFFE certificate; and
// check -installed -probe passes, the webhook injecting a dry-run pod and
// a probe pod on each node loading the sidecar's eBPF programs there.
func checkMeshletctl(t *testing.T, c *Cluster, client corev1.Pod, inj corev1.Pod, pods []corev1.Pod, zoneOf map[string]string) {
	t.Helper()
	run := meshletctl(t, c)

	// proxy-status: every meshed pod, every type it asked for SYNCED.
	var rows map[string][]string
	var status string
	waitFor(t, "meshletctl proxy-status to show every sidecar SYNCED", 30*time.Second, time.Second, func() (bool, string) {
		out, err := run("proxy-status")
		if err != nil {
			return false, out + err.Error()
		}
		rows, status = tableRows(out), out
		for _, p := range pods {
			r := rows[p.Name+".shop"]
			if len(r) < 7 || strings.Join(r, " ") == "" {
				return false, out
			}
			// NAME CDS LDS EDS RDS ECDS CONTROL-PLANE VERSION ...
			if r[1] != "SYNCED" || r[3] != "SYNCED" || r[6] != inj.Name+"."+inj.Namespace {
				return false, out
			}
		}
		return true, out
	})
	t.Logf("meshletctl proxy-status: %d sidecars, CDS and EDS SYNCED with %s:\n%s", len(pods), inj.Name, status)

	// proxy-config endpoints: the zones and priorities the control plane gave.
	out, err := run("proxy-config", "endpoints", client.Name+".shop", "-o", "json")
	if err != nil {
		t.Fatalf("meshletctl proxy-config endpoints -o json: %v\n%s", err, out)
	}
	var st struct {
		Clusters []struct {
			Name  string `json:"name"`
			Hosts []struct {
				Address  string            `json:"address"`
				Priority uint32            `json:"priority"`
				Locality map[string]string `json:"locality"`
			} `json:"hosts"`
		} `json:"cluster_statuses"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("proxy-config endpoints -o json: %v\n%s", err, out)
	}
	echoZone := map[string]string{}
	for _, p := range pods {
		if p.Labels["app"] == "echo" {
			echoZone[p.Status.PodIP+":8080"] = zoneOf[p.Spec.NodeName]
		}
	}
	echoCluster := ""
	for _, cl := range st.Clusters {
		if strings.HasPrefix(cl.Name, "outbound|80||echo.shop") {
			echoCluster = cl.Name
			for _, h := range cl.Hosts {
				zone, want := h.Locality["zone"], uint32(1)
				if zone == "zone-a" {
					want = 0
				}
				if echoZone[h.Address] != "" && (zone != echoZone[h.Address] || h.Priority != want) {
					t.Errorf("endpoint %s: zone %q priority %d, want %q at %d", h.Address, zone, h.Priority, echoZone[h.Address], want)
				}
			}
		}
	}
	if echoCluster == "" {
		t.Fatalf("proxy-config endpoints: no echo cluster:\n%s", out)
	}
	table, err := run("proxy-config", "endpoints", client.Name, "-n", "shop", "-cluster", echoCluster)
	if err != nil {
		t.Fatalf("meshletctl proxy-config endpoints: %v\n%s", err, table)
	}
	t.Logf("meshletctl proxy-config endpoints %s.shop -cluster %s:\n%s", client.Name, echoCluster, table)
	if n := len(tableRows(table)); n != len(echoZone) {
		t.Errorf("proxy-config endpoints: %d rows, want the %d echo endpoints", n, len(echoZone))
	}

	// proxy-config secrets: the workload certificate from the mesh CA.
	out, err = run("proxy-config", "secrets", client.Name+".shop")
	if err != nil || !strings.Contains(strings.Join(tableRows(out)["sds:default"], " "), "Cert Chain") ||
		!strings.Contains(strings.Join(tableRows(out)["sds:default"], " "), "spiffe://cluster.local/ns/shop/sa/default") {
		t.Errorf("meshletctl proxy-config secrets: %v\n%s", err, out)
	}
	// A pod outside the mesh (the injector's) is refused, saying so.
	if out, err := run("proxy-config", "clusters", inj.Name+"."+inj.Namespace); err == nil || !strings.Contains(out, "not in the mesh") {
		t.Errorf("meshletctl proxy-config clusters on the injector's pod: %v\n%s", err, out)
	}
	for _, view := range []string{"clusters", "routes", "listeners", "log"} {
		if out, err := run("proxy-config", view, client.Name+".shop"); err != nil {
			t.Errorf("meshletctl proxy-config %s: %v\n%s", view, err, out)
		}
	}

	// check: installed, the webhook reached through a dry run, each node probed.
	// The probe pods run the image the webhook injects (the suite's
	// registry's sidecar), found through the dry run.
	out, err = run("check", "-installed", "-webhook-namespace", "shop", "-probe", "-probe-timeout", "90s")
	t.Logf("meshletctl check -installed -probe:\n%s", out)
	if err != nil {
		t.Errorf("meshletctl check -installed -probe: %v", err)
	}
	if !strings.Contains(out, "ok    webhook: a dry-run pod in shop is injected: injected meshlet-proxy ("+c.Images.Sidecar+")") {
		t.Errorf("check: the webhook's dry run did not pass")
	}
	// Each node's probe passed (warn on a hybrid cgroup v1/v2 host such
	// as this machine, ok on a unified one), its eBPF programs loaded.
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		if !strings.Contains(out, "ok    node "+n+": sidecar check in a probe pod") && !strings.Contains(out, "warn  node "+n+": sidecar check in a probe pod") {
			t.Errorf("check: no passing probe on %s", n)
		}
	}
	if n := strings.Count(out, "ok    eBPF programs load"); n != 3 {
		t.Errorf("check: the eBPF programs loaded on %d nodes, want 3", n)
	}
	// The probe pods are gone with the check.
	waitFor(t, "the probe pods deleted", 60*time.Second, 500*time.Millisecond, func() (bool, string) {
		list, err := c.Client.CoreV1().Pods("meshlet-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshlet-check"})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d probe pods left", len(list.Items))
	})
}
