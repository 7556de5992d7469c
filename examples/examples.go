// Package examples embeds the example scenarios of `sidecar lb simulate`,
// so the binary runs one with no file at hand.
package examples

import "embed"

// Files holds the *.yaml scenarios of this directory.
//
//go:embed *.yaml
var Files embed.FS

// Default is the scenario `sidecar lb simulate` runs without arguments.
const Default = "zone-residual.yaml"
