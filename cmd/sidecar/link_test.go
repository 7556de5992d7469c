package main

import (
	"testing"

	"github.com/meshlet-dev/meshlet/internal/linktest"
)

// TestLinksNoControlPlaneSide: the sidecar receives xDS; the control
// plane's xDS server, its webhook and the injector stay out of this binary.
func TestLinksNoControlPlaneSide(t *testing.T) {
	linktest.Check(t, "github.com/meshlet-dev/meshlet/cmd/sidecar",
		"github.com/meshlet-dev/meshlet/discovery/xds",
		"github.com/meshlet-dev/meshlet/injector",
		"github.com/meshlet-dev/meshlet/webhook",
	)
}
