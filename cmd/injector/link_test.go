package main

import (
	"testing"

	"github.com/meshlet-dev/meshlet/internal/linktest"
)

// TestLinksNoSidecarSide: the control plane serves xDS; the sidecar's xDS
// client, its translation and its data plane stay out of this binary.
func TestLinksNoSidecarSide(t *testing.T) {
	linktest.Check(t, "github.com/meshlet-dev/meshlet/cmd/injector",
		"github.com/meshlet-dev/meshlet/discovery/adsclient",
		"github.com/meshlet-dev/meshlet/discovery",
		"github.com/meshlet-dev/meshlet/dataplane",
	)
}
