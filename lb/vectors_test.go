package lb

import (
	"bytes"
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
	Note        string   `json:"note"`
	Vectors     []vector `json:"vectors"`
}

// vectorRunners maps a vector category to the function that checks it. Each
// area registers its runners from an init function in its own _test file.
var vectorRunners = map[string]func(t *testing.T, v vector){}

// decodeVector unmarshals the input and expected parts of v, failing the test
// with the vector id when they do not match the shapes the runner expects. A
// field the runner's struct does not declare, at any depth, is an error: an
// input it would ignore or an expectation it would skip must not pass.
func decodeVector(t *testing.T, v vector, in, exp any) {
	t.Helper()
	strict := func(part string, raw json.RawMessage, dst any) {
		if dst == nil {
			return
		}
		if len(raw) == 0 {
			raw = json.RawMessage("{}")
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(dst); err != nil {
			t.Fatalf("vector %s: decode %s: %v", v.ID, part, err)
		}
	}
	strict("input", v.Input, in)
	strict("expected", v.Expected, exp)
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
// cases the public file does not cover: buckets with no healthy host, and
// every schema field the public vectors leave unused.
func TestMeshletVectors(t *testing.T) {
	for _, f := range []string{"meshlet-extra-vectors.json", "meshlet-schema-vectors.json"} {
		t.Run(f, func(t *testing.T) { runVectorFile(t, filepath.Join("testdata", f)) })
	}
}

func runVectorFile(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read vectors %q: %v", path, err)
	}
	var f vectorFile
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields() // a misspelt field (say "expect") would be ignored
	if err := d.Decode(&f); err != nil {
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
	ids := map[string]bool{}
	for _, v := range f.Vectors {
		switch {
		case v.ID == "" || ids[v.ID]:
			t.Errorf("vectors %q: id %q is empty or not unique", path, v.ID)
		case v.Kind != "asserted" && v.Kind != "derived":
			t.Errorf("vectors %q: vector %s: kind %q, want asserted or derived", path, v.ID, v.Kind)
		}
		ids[v.ID] = true
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
