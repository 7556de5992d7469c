// Package deploy holds the manifests a user applies (meshlet.yaml), embedded
// so tests and tools can read them.
package deploy

import _ "embed"

// Manifest is deploy/meshlet.yaml.
//
//go:embed meshlet.yaml
var Manifest []byte
