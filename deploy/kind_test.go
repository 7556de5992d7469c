package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/meshlet-dev/meshlet/internal/privileged"
)

// deploy/kind/cluster.yaml is a valid kind cluster config, decoded as kind
// decodes it (its own v1alpha4 types, YAML with unknown fields refused),
// and has what the quickstart's demo relies on: one control plane and
// three workers, one in each of zone-a, zone-b and zone-c of one region.
// Creating the cluster needs Docker, which CI here does not have: that
// part (hack/kind-up.sh) is not exercised.
func TestKindClusterConfig(t *testing.T) {
	data, err := os.ReadFile("kind/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg kindv1alpha4.Cluster
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("kind/cluster.yaml: %v", err)
	}
	if cfg.Kind != "Cluster" || cfg.APIVersion != "kind.x-k8s.io/v1alpha4" {
		t.Errorf("kind %q apiVersion %q, want Cluster kind.x-k8s.io/v1alpha4", cfg.Kind, cfg.APIVersion)
	}
	// The name hack/kind-up.sh passes to kind load and kubectl's context.
	if cfg.Name != "meshlet" {
		t.Errorf("cluster name %q, want meshlet", cfg.Name)
	}
	var zones, regions []string
	controlPlanes := 0
	for i, n := range cfg.Nodes {
		switch n.Role {
		case kindv1alpha4.ControlPlaneRole:
			controlPlanes++
		case kindv1alpha4.WorkerRole:
			zone, region := n.Labels["topology.kubernetes.io/zone"], n.Labels["topology.kubernetes.io/region"]
			if zone == "" || region == "" {
				t.Errorf("worker %d: labels %v, want topology.kubernetes.io/zone and /region", i, n.Labels)
			}
			zones = append(zones, zone)
			if !slices.Contains(regions, region) {
				regions = append(regions, region)
			}
		default:
			t.Errorf("node %d: role %q", i, n.Role)
		}
	}
	if controlPlanes != 1 {
		t.Errorf("%d control-plane nodes, want 1", controlPlanes)
	}
	if want := []string{"zone-a", "zone-b", "zone-c"}; !slices.Equal(zones, want) {
		t.Errorf("worker zones %v, want %v (one worker each)", zones, want)
	}
	if len(regions) != 1 {
		t.Errorf("worker regions %v, want one region", regions)
	}

	// The strict decoding is what catches a misspelt field: a config with
	// one is refused.
	bad := bytes.Replace(data, []byte("    labels:"), []byte("    lables:"), 1)
	dec = yamlv3.NewDecoder(bytes.NewReader(bad))
	dec.KnownFields(true)
	if err := dec.Decode(&kindv1alpha4.Cluster{}); err == nil {
		t.Errorf("a config with a misspelt field (lables) decoded without error")
	}
}

// hack/kind-up.sh passes shellcheck (Debian's; make test installs it), and
// names the cluster that deploy/kind/cluster.yaml creates. Running it
// needs a container engine, which CI here lacks.
func TestKindUpScript(t *testing.T) {
	const script = "../hack/kind-up.sh"
	sc, err := exec.LookPath("shellcheck")
	privileged.Need(t, err == nil, "shellcheck is not installed (apt-get install shellcheck; make test installs it)")
	if out, err := exec.Command(sc, "--severity=style", script).CombinedOutput(); err != nil {
		t.Errorf("shellcheck %s: %v\n%s", script, err, out)
	}
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "\ncluster=meshlet\n") || !strings.Contains(string(data), "--config deploy/kind/cluster.yaml") {
		t.Errorf("%s does not create deploy/kind/cluster.yaml's cluster by its name (meshlet)", script)
	}
}
