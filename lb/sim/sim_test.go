package sim

import (
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/examples"
)

func runExample(t *testing.T, name string) *Result {
	t.Helper()
	data, err := examples.Files.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Parse(data)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	res, err := Run(sc)
	if err != nil {
		t.Fatalf("run %s: %v", name, err)
	}
	return res
}

func TestResidualExample(t *testing.T) {
	res := runExample(t, "zone-residual.yaml")
	if res.ZoneRouting.State != "LocalityResidual" || res.ZoneRouting.LocalPercentToRoute != 6250 {
		t.Fatalf("zone routing %+v, want LocalityResidual with 6250", res.ZoneRouting)
	}
	want := map[string]float64{"eu-west-1/eu-west-1a": 0.625, "eu-west-1/eu-west-1b": 0.25, "eu-west-1/eu-west-1c": 0.125, "eu-central-1/eu-central-1a": 0}
	for _, z := range res.Zones {
		if w, ok := want[z.Locality]; !ok || z.Share < w-0.02 || z.Share > w+0.02 {
			t.Errorf("zone %s share %.4f, want %v ± 0.02", z.Locality, z.Share, w)
		}
	}
	c := res.Counters
	if c["lb_zone_routing_sampled"]+c["lb_zone_routing_cross_zone"] != uint64(res.Requests) || c["lb_recalculate_zone_structures"] != 1 {
		t.Errorf("counters %v do not account for %d requests", c, res.Requests)
	}
	table := res.Table()
	for _, s := range []string{"LocalityResidual", "local_percent_to_route 6250/10000", "lb_zone_routing_sampled", "eu-west-1/eu-west-1b"} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q:\n%s", s, table)
		}
	}
}

func TestFailoverExample(t *testing.T) {
	res := runExample(t, "failover.yaml")
	if len(res.Priorities) != 3 {
		t.Fatalf("%d priorities, want 3 (zone, region, rest)", len(res.Priorities))
	}
	for i, w := range []float64{0.70, 0.30, 0} {
		if p := res.Priorities[i]; p.Share < w-0.02 || p.Share > w+0.02 {
			t.Errorf("P%d share %.4f, want %v ± 0.02", i, p.Share, w)
		}
	}
	for _, h := range res.Hosts {
		if h.Health == "unhealthy" && h.Picks != 0 {
			t.Errorf("unhealthy host %s got %d picks", h.Address, h.Picks)
		}
	}
}

func TestParseRejectsBadScenarios(t *testing.T) {
	cases := map[string]string{
		"unknown field":         "polcy: RANDOM\n",
		"negative":              "priorities: [{priority: 0, localities: [{zone: a, healthy: -1}]}]\n",
		"endpoints no failover": "endpoints: [{zone: a, healthy: 1}]\n",
		"requests":              "requests: 1000000000000\n",
		"bad yaml":              "priorities: [\n",
	}
	wantIn := map[string]string{
		"unknown field": "polcy", "negative": "priorities[0].localities[0].healthy", "endpoints no failover": "failover",
		"requests": "requests", "bad yaml": "parse scenario",
	}
	for name, in := range cases {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), wantIn[name]) {
			t.Errorf("%s: err %v, want it to name %q", name, err, wantIn[name])
		}
	}
	sc, err := Parse([]byte("policy: WEIGHTED\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(sc); err == nil || !strings.Contains(err.Error(), "policy") {
		t.Errorf("unknown policy: err %v", err)
	}
}
