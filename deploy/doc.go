// Package deploy holds what a user installs: the Helm chart
// (helm/meshlet) and the manifest rendered from it with its default
// values (meshlet.yaml), embedded so tests and tools can read it, and the
// Grafana dashboards (grafana/*.json; the chart carries a copy).
// `go generate ./deploy/` renders meshlet.yaml, the golden renderings in
// testdata/helm and the values table of docs/reference/helm.md with the
// real helm (installed from the Go module proxy on first use); the tests
// fail when any of them is stale.
package deploy

//go:generate go test -trimpath -tags grpcnotrace -run "^(TestManifestRendered|TestChartGolden|TestHelmValuesReference|TestDashboardsInChart)$" . -update

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
)

// Manifest is deploy/meshlet.yaml: the chart rendered with its default
// values.
//
//go:embed meshlet.yaml
var Manifest []byte

//go:embed grafana/*.json
var grafana embed.FS

// Dashboard is the part of a Grafana dashboard that tests read: its
// panels' queries (the e2e suite runs each against a real Prometheus).
type Dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
	// Templating lists the dashboard's variables.
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
}

// Panel is one panel of a Dashboard.
type Panel struct {
	ID         int    `json:"id"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

// Dashboards returns deploy/grafana's dashboards by file name.
func Dashboards() (map[string]*Dashboard, error) {
	files, err := fs.Glob(grafana, "grafana/*.json")
	if err != nil {
		return nil, err
	}
	out := map[string]*Dashboard{}
	for _, f := range files {
		b, err := grafana.ReadFile(f)
		if err != nil {
			return nil, err
		}
		d := &Dashboard{}
		if err := json.Unmarshal(b, d); err != nil {
			return nil, fmt.Errorf("deploy: %s: %w", f, err)
		}
		out[path.Base(f)] = d
	}
	return out, nil
}
