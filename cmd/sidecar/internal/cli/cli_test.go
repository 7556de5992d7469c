package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimulateDefaultTableAndJSON(t *testing.T) {
	var out bytes.Buffer
	if err := Main([]string{"lb", "simulate"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "LocalityResidual") {
		t.Errorf("default run does not show the routing state:\n%s", out.String())
	}
	out.Reset()
	if err := Main([]string{"lb", "simulate", "-o", "json", "-example", "failover.yaml"}, &out); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Requests   int `json:"requests"`
		Priorities []struct {
			Share float64 `json:"share"`
		} `json:"priorities"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Requests != 100000 || len(res.Priorities) != 3 {
		t.Fatalf("json output %q: %v", out.String(), err)
	}
}

func TestSimulateFileAndErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.yaml")
	os.WriteFile(path, []byte("policy: RANDOM\nrequests: 1000\npriorities: [{priority: 0, localities: [{zone: a, healthy: 2}]}]\n"), 0o644)
	var out bytes.Buffer
	if err := Main([]string{"lb", "simulate", path}, &out); err != nil || !strings.Contains(out.String(), "RANDOM, 1000 requests") {
		t.Errorf("file run: %v\n%s", err, out.String())
	}
	for _, args := range [][]string{{}, {"lb"}, {"lb", "simulate", "-o", "xml"}, {"lb", "simulate", "/nonexistent.yaml"}, {"lb", "simulate", "a", "b"}} {
		if err := Main(args, &out); err == nil {
			t.Errorf("Main(%q) succeeded", args)
		}
	}
}

// The live demo tells the failover story: local routing, an upstream
// killed without a failed request, zone a drained, everything back.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := Main([]string{"demo", "-phase", "1500ms", "-rps", "100"}, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	last := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		for _, p := range []string{"steady", "killed", "drained", "restored"} {
			if strings.Contains(line, p) {
				last[p] = line
			}
		}
	}
	if len(last) != 4 {
		t.Fatalf("not all phases shown:\n%s", text)
	}
	for p, line := range last {
		if !strings.Contains(line, " none ") {
			t.Errorf("phase %s had failures: %s", p, line)
		}
	}
	if f := strings.Fields(last["drained"]); !strings.Contains(last["drained"], " 0.0% ") || !strings.Contains(last["drained"], "2 of 4") {
		t.Errorf("drained phase should send nothing to zone a with 2 healthy hosts: %v", f)
	}
	if !strings.Contains(last["steady"], "LocalityResidual") || !strings.Contains(last["restored"], "LocalityResidual") || !strings.Contains(last["killed"], "NoLocalityRouting") {
		t.Errorf("routing states:\n%s\n%s\n%s", last["steady"], last["killed"], last["restored"])
	}
}
