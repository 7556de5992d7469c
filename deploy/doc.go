// Package deploy holds what a user installs: the Helm chart
// (helm/meshlet) and the manifest rendered from it with its default
// values (meshlet.yaml), embedded so tests and tools can read it.
// `go generate ./deploy/` renders meshlet.yaml, the golden renderings in
// testdata/helm and the values table of docs/reference/helm.md with the
// real helm (installed from the Go module proxy on first use); the tests
// fail when any of them is stale.
package deploy

//go:generate go test -trimpath -tags grpcnotrace -run "^(TestManifestRendered|TestChartGolden|TestHelmValuesReference)$" . -update

import _ "embed"

// Manifest is deploy/meshlet.yaml: the chart rendered with its default
// values.
//
//go:embed meshlet.yaml
var Manifest []byte
