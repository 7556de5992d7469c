package main

import (
	"testing"

	"github.com/meshlet-dev/meshlet/internal/linktest"
)

// TestLinksNoMeshSide: the CLI reads the sidecar's admin JSON and the
// control plane's /debug/syncz; neither the data plane nor the control
// plane is linked into it.
func TestLinksNoMeshSide(t *testing.T) {
	linktest.Check(t, "github.com/meshlet-dev/meshlet/cmd/meshletctl",
		"github.com/meshlet-dev/meshlet/dataplane",
		"github.com/meshlet-dev/meshlet/discovery/xds",
		"github.com/meshlet-dev/meshlet/injector",
		"github.com/meshlet-dev/meshlet/bpf",
	)
}
