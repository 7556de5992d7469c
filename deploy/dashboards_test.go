package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The dashboards are well formed: unique uids and panel ids, a title,
// every panel on the ${datasource} variable with at least one query.
func TestDashboards(t *testing.T) {
	ds, err := Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"meshlet-mesh.json", "meshlet-workload.json", "meshlet-zones.json", "meshlet-control-plane.json"} {
		if ds[want] == nil {
			t.Errorf("deploy/grafana/%s is missing", want)
		}
	}
	uids := map[string]string{}
	for name, d := range ds {
		if d.UID == "" || d.Title == "" || uids[d.UID] != "" {
			t.Errorf("%s: uid %q (also %s), title %q", name, d.UID, uids[d.UID], d.Title)
		}
		uids[d.UID] = name
		if len(d.Templating.List) == 0 || d.Templating.List[0].Name != "datasource" || d.Templating.List[0].Type != "datasource" {
			t.Errorf("%s: the first variable is not the data source: %+v", name, d.Templating.List)
		}
		ids := map[int]bool{}
		for _, p := range d.Panels {
			if ids[p.ID] || p.Title == "" || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
				t.Errorf("%s panel %d %q: duplicate id, no title, data source %q or no query", name, p.ID, p.Title, p.Datasource.UID)
			}
			ids[p.ID] = true
			for _, q := range p.Targets {
				if strings.TrimSpace(q.Expr) == "" {
					t.Errorf("%s panel %q: an empty query", name, p.Title)
				}
			}
		}
	}
}

// The chart ships deploy/grafana's files as they are (its copy in
// helm/meshlet/dashboards is rewritten by -update: Helm reads files inside
// the chart only), and its ConfigMap carries each of them whole.
func TestDashboardsInChart(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("grafana", "*.json"))
	if *update {
		old, _ := filepath.Glob(filepath.Join(chartDir, "dashboards", "*.json"))
		for _, f := range old {
			os.Remove(f)
		}
		_ = os.MkdirAll(filepath.Join(chartDir, "dashboards"), 0o755)
	}
	copies, _ := filepath.Glob(filepath.Join(chartDir, "dashboards", "*.json"))
	if !*update && len(copies) != len(files) {
		t.Errorf("the chart has %d dashboards, deploy/grafana %d; regenerate with `go test ./deploy/ -update`", len(copies), len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkGenerated(t, filepath.Join(chartDir, "dashboards", filepath.Base(f)), string(b))
	}
	out := render(t, filepath.Join("testdata", "helm", "monitoring.values.yaml"))
	objs := decodeManifest(t, []byte(out))
	var cm *corev1.ConfigMap
	for _, o := range objs {
		if c, ok := o.(*corev1.ConfigMap); ok && c.Name == "meshlet-dashboards" {
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("monitoring.dashboards.enabled: no ConfigMap meshlet-dashboards")
	}
	if cm.Namespace != "monitoring" || cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "meshlet" {
		t.Errorf("ConfigMap %s/%s labels %v annotations %v", cm.Namespace, cm.Name, cm.Labels, cm.Annotations)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if got := cm.Data[filepath.Base(f)]; got != strings.TrimSpace(string(b)) {
			t.Errorf("the ConfigMap's %s is not deploy/grafana's (%d bytes, want %d)", filepath.Base(f), len(got), len(strings.TrimSpace(string(b))))
		}
	}
	if strings.Contains(render(t), "meshlet-dashboards") {
		t.Error("the default values render the dashboards' ConfigMap; it is off by default")
	}
}
