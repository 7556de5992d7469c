package lb

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
)

// vector is one conformance vector of envoy-lb-vectors.json (schema
// "envoy-lb-vectors/1", described at the top of envoy-lb-spec.md).
type vector struct {
	ID          string          `json:"id"`
	Category    string          `json:"category"`
	Kind        string          `json:"kind"`
	Source      string          `json:"source"`
	Description string          `json:"description"`
	Input       json.RawMessage `json:"input"`
	Expected    json.RawMessage `json:"expected"`
	Notes       string          `json:"notes"`
}

type vectorFile struct {
	Schema      string   `json:"schema"`
	VectorCount int      `json:"vector_count"`
	Vectors     []vector `json:"vectors"`
}

// vectorRunners maps a vector category to the function that checks it. Each
// area registers its runners from an init function in its own _test file.
var vectorRunners = map[string]func(t *testing.T, v vector){}

// decodeVector unmarshals the input and expected parts of v, failing the test
// with the vector id when they do not match the shapes the runner expects.
func decodeVector(t *testing.T, v vector, in, exp any) {
	t.Helper()
	if in != nil {
		if err := json.Unmarshal(v.Input, in); err != nil {
			t.Fatalf("vector %s: decode input: %v", v.ID, err)
		}
	}
	if exp != nil {
		if err := json.Unmarshal(v.Expected, exp); err != nil {
			t.Fatalf("vector %s: decode expected: %v", v.ID, err)
		}
	}
}

// TestEnvoyVectors runs every conformance vector of lb/testdata (or of the
// file named by MESHLET_LB_VECTORS), one subtest per vector.
func TestEnvoyVectors(t *testing.T) {
	path := "testdata/envoy-lb-vectors.json"
	if p := os.Getenv("MESHLET_LB_VECTORS"); p != "" {
		path = p
		// go test runs in lb/; accept paths relative to the module root too.
		if _, err := os.Stat(p); err != nil && !filepath.IsAbs(p) {
			if _, err := os.Stat(filepath.Join("..", p)); err == nil {
				path = filepath.Join("..", p)
			}
		}
	}
	runVectorFile(t, path)
}

// TestMeshletVectors runs meshlet's own vectors, in the same schema, for
// cases the public file does not cover (buckets with no healthy host).
func TestMeshletVectors(t *testing.T) {
	runVectorFile(t, "testdata/meshlet-extra-vectors.json")
}

func runVectorFile(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read vectors %q: %v", path, err)
	}
	var f vectorFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("parse vectors %q: %v", path, err)
	}
	if f.Schema != "envoy-lb-vectors/1" {
		t.Fatalf("vectors %q: schema %q, want envoy-lb-vectors/1", path, f.Schema)
	}
	if f.VectorCount != 0 && f.VectorCount != len(f.Vectors) {
		t.Errorf("vectors %q: vector_count %d but %d vectors", path, f.VectorCount, len(f.Vectors))
	}
	if len(f.Vectors) == 0 {
		t.Fatalf("vectors %q: the file holds no vectors", path)
	}
	var passed, failed atomic.Int64
	failedByKind := map[string][]string{}
	for _, v := range f.Vectors {
		ok := t.Run(v.ID, func(t *testing.T) {
			run, found := vectorRunners[v.Category]
			if !found {
				t.Fatalf("vector %s: no runner for category %q", v.ID, v.Category)
			}
			run(t, v)
		})
		if ok {
			passed.Add(1)
		} else {
			failed.Add(1)
			failedByKind[v.Kind] = append(failedByKind[v.Kind], v.ID)
		}
	}
	kinds := make([]string, 0, len(failedByKind))
	for k := range failedByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.Logf("failed %s vectors: %v", k, failedByKind[k])
	}
	t.Logf("%d passed, %d failed", passed.Load(), failed.Load())
}
