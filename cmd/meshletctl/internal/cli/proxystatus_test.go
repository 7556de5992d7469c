package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet-dev/meshlet/discovery/syncz"
	"github.com/meshlet-dev/meshlet/webhook"
)

// The table istioctl proxy-status users read: a type per column, "-" for
// a type never asked for, the last NACK with its age; meshed pods without
// a stream in their own state; pods without the sidecar left out.
func TestProxyStatusTable(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	rows := []proxyStatus{{ControlPlane: "meshlet-injector-1.meshlet-system", ProxySync: syncz.ProxySync{Proxy: "web-0.shop", State: syncz.Connected,
		ControlPlaneVersion: "v0.1.0",
		Types:               []syncz.TypeSync{{Type: "cds", Status: syncz.Synced}, {Type: "eds", Status: syncz.Stale}, {Type: "rds", Status: syncz.NACKed}},
		LastNACK:            &syncz.NACK{Type: "rds", Message: "routes[0]: bad", At: now.Add(-90 * time.Second)}}}}
	meshed := func(name string, phase corev1.PodPhase, sidecar bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}, Status: corev1.PodStatus{Phase: phase}}
		p.Spec.Containers = []corev1.Container{{Name: "app"}}
		if sidecar {
			p.Spec.InitContainers = []corev1.Container{{Name: webhook.ProxyContainer}}
		}
		return p
	}
	pods := []corev1.Pod{meshed("web-0", corev1.PodRunning, true), meshed("web-1", corev1.PodRunning, true),
		meshed("plain", corev1.PodRunning, false), meshed("done", corev1.PodSucceeded, true)}
	rows = append(rows, unconnected(pods, rows, syncz.NotConnected)...)
	var out bytes.Buffer
	if err := proxyStatusTable(&out, rows, now); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want a header and web-0, web-1", len(lines))
	}
	if got := strings.Fields(lines[0]); strings.Join(got[:6], " ") != "NAME CDS LDS EDS RDS ECDS" {
		t.Errorf("header %q", lines[0])
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "web-0.shop SYNCED - STALE NACKED - meshlet-injector-1.meshlet-system v0.1.0 rds 1m30s ago: routes[0]: bad" {
		t.Errorf("web-0 row %q", got)
	}
	if got := strings.Join(strings.Fields(lines[2]), " "); got != "web-1.shop - - - - - NOT CONNECTED - -" {
		t.Errorf("web-1 row %q", got)
	}
}
