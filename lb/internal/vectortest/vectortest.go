// Package vectortest runs the conformance vectors of lb/testdata (schema
// "envoy-lb-vectors/1", described at the top of envoy-lb-spec.md) for the
// tests of lb and of the packages under it. Each vector category belongs to
// one package, whose tests register a runner for it; the other packages skip
// it, and a category no package owns fails everywhere.
package vectortest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
)

// Vector is one conformance vector.
type Vector struct {
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
	Vectors     []Vector `json:"vectors"`
}

// Runners maps a vector category to the function that checks it.
type Runners map[string]func(t *testing.T, v Vector)

// owners names the package (relative to the module root) whose tests run a
// category; every category not listed belongs to lb.
var owners = map[string]string{
	"retry_backoff":   "lb/retry",
	"retry_policy":    "lb/retry",
	"retry_budget":    "lb/circuitbreaker",
	"circuit_breaker": "lb/circuitbreaker",
	"access_log":      "lb/accesslog",
}

func owner(category string) string {
	if o, ok := owners[category]; ok {
		return o
	}
	return "lb"
}

// EnvoyFile returns the path of the public vector file as seen from a
// package directory whose testdata directory is testdata, or the file named
// by MESHLET_LB_VECTORS (absolute, or relative to the package or to the
// module root).
func EnvoyFile(testdata string) string {
	p := os.Getenv("MESHLET_LB_VECTORS")
	if p == "" {
		return filepath.Join(testdata, "envoy-lb-vectors.json")
	}
	if _, err := os.Stat(p); err == nil || filepath.IsAbs(p) {
		return p
	}
	// go test runs in the package directory; walk up to the module root.
	for dir := "."; ; dir = filepath.Join(dir, "..") {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, p)
		}
		if abs, _ := filepath.Abs(dir); abs == filepath.Dir(abs) {
			return p
		}
	}
}

// MeshletFiles returns meshlet's own vector files, in the same schema, for
// cases the public file does not cover.
func MeshletFiles(testdata string) []string {
	return []string{
		filepath.Join(testdata, "meshlet-extra-vectors.json"),
		filepath.Join(testdata, "meshlet-schema-vectors.json"),
	}
}

// RunMeshletFiles runs RunFile on each of meshlet's own files under
// testdata (MeshletFiles), one subtest per file.
func RunMeshletFiles(t *testing.T, testdata, pkg string, runners Runners) {
	for _, f := range MeshletFiles(testdata) {
		t.Run(filepath.Base(f), func(t *testing.T) { RunFile(t, f, pkg, runners) })
	}
}

// RunFile runs, one subtest per vector, every vector of the file at path
// whose category belongs to pkg ("lb", "lb/retry", ...), with the runner
// registered for it. A runner for a category pkg does not own, or an owned
// category without a runner, is an error. The file itself is decoded
// strictly: a misspelt field fails.
func RunFile(t *testing.T, path, pkg string, runners Runners) {
	for c := range runners {
		if owner(c) != pkg {
			t.Errorf("runner for category %q registered in %s, but %s owns it", c, pkg, owner(c))
		}
	}
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
	elsewhere := map[string]int{}
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
		if o := owner(v.Category); o != pkg {
			elsewhere[o]++
			continue
		}
		ok := t.Run(v.ID, func(t *testing.T) {
			run, found := runners[v.Category]
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
	for o, n := range elsewhere {
		t.Logf("%d vectors left to the tests of %s", n, o)
	}
	t.Logf("%d passed, %d failed", passed.Load(), failed.Load())
}

// Decode unmarshals the input and expected parts of v into in and exp (nil
// skips a part), failing the test with the vector id when they do not match
// the shapes the runner expects. A field the runner's struct does not
// declare, at any depth, is an error: an input it would ignore or an
// expectation it would skip must not pass.
func Decode(t *testing.T, v Vector, in, exp any) {
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

// Fields splits a JSON object of v (what names it in errors) into its
// fields, for runners that read a vector field by field.
func Fields(t *testing.T, v Vector, raw json.RawMessage, what string) map[string]json.RawMessage {
	t.Helper()
	m := map[string]json.RawMessage{}
	if len(raw) == 0 || string(raw) == "null" {
		return m
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("vector %s: %s is not an object: %v", v.ID, what, err)
	}
	return m
}

// Take decodes field key of m into dst and removes it, reporting whether it
// was present.
func Take(t *testing.T, v Vector, m map[string]json.RawMessage, key string, dst any) bool {
	t.Helper()
	raw, ok := m[key]
	if !ok {
		return false
	}
	delete(m, key)
	if err := json.Unmarshal(raw, dst); err != nil {
		t.Fatalf("vector %s: field %s: %v", v.ID, key, err)
	}
	return true
}

// RejectRest fails on the fields of m no one took.
func RejectRest(t *testing.T, v Vector, m map[string]json.RawMessage, what string) {
	t.Helper()
	for k := range m {
		t.Errorf("vector %s: unsupported %s field %q", v.ID, what, k)
	}
}
