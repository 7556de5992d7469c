//go:build e2e

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/deploy"
)

// noTrafficPanels are the dashboard panels whose traffic this test does
// not make, with why: they are queried (a query error still fails) but
// may return no series.
var noTrafficPanels = map[string]string{
	"Outlier ejections": "no Service of the test turns outlier detection on (meshlet.io/outlier-* annotations), so no cluster has the statistic",
}

// dashboardQuery is a panel's query as Grafana sends it, its variables
// given the value "All" has (.*) and the rate interval a range that
// holds several of the test's 1 s scrapes.
func dashboardQuery(expr string) string {
	r := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "5m",
		"${service}", ".*", "$service", ".*", "${workload}", ".*", "$workload", ".*")
	return r.Replace(expr)
}

// checkDashboards runs every query of every panel of deploy/grafana's
// dashboards against the real Prometheus at addr, which scraped this
// test's sidecars and control plane: a query error fails, and so does a
// panel that returns no series though its traffic was generated.
func checkDashboards(t *testing.T, addr string) {
	t.Helper()
	ds, err := deploy.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ds))
	for n := range ds {
		names = append(names, n)
	}
	sort.Strings(names)
	queries, empty := 0, 0
	for _, name := range names {
		for _, p := range ds[name].Panels {
			for _, tg := range p.Targets {
				q := dashboardQuery(tg.Expr)
				if strings.Contains(q, "$") {
					t.Errorf("%s panel %q: a variable the test does not know in %s", name, p.Title, q)
					continue
				}
				queries++
				n, err := promQuery(addr, q)
				switch {
				case err != nil:
					t.Errorf("%s panel %q query %s: %v", name, p.Title, tg.RefID, err)
				case n == 0 && noTrafficPanels[p.Title] != "":
					empty++
					t.Logf("%s panel %q: no series, as expected: %s", name, p.Title, noTrafficPanels[p.Title])
				case n == 0:
					t.Errorf("%s panel %q query %s returned no series though the test made its traffic: %s", name, p.Title, tg.RefID, q)
				}
			}
		}
	}
	t.Logf("dashboards: %d queries of %d dashboards answered by the real Prometheus, %d empty by design", queries, len(ds), empty)
}

// promQuery is an instant query; it returns the number of series.
func promQuery(addr, q string) (int, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, &promError{r.Error}
	}
	return len(r.Data.Result), nil
}

type promError struct{ msg string }

func (e *promError) Error() string { return "prometheus: " + e.msg }
