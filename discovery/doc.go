// Package discovery turns Envoy v3 configuration into the data plane's
// config.Config, for the sidecar: its static config file (ParseStatic,
// LoadStaticFile) and the clusters and load assignments it receives over
// xDS. The sidecar's xDS client, which translates with this package, is
// package discovery/adsclient; the control plane's side, Kubernetes objects
// to Envoy resources served over ADS, is package discovery/xds, which links
// neither (the names both sides agree on are in discovery/meshmeta).
//
// The Envoy v3 translations (TranslateCluster,
// TranslateClusterLoadAssignment, TranslateRetryPolicy) are written once
// here and serve the static file and xDS alike. They are strict: a field
// meshlet does not implement is an error naming it, never silently
// ignored, and every error names the offending field by its Envoy JSON path,
// for example
//
//	discovery: cluster "echo": load_assignment.endpoints[1].lb_endpoints[0].endpoint.address.socket_address.port_value: 70000 out of range
//
// Besides meshlet's own checks, each message gets the protoc-gen-validate
// rules Envoy itself enforces (the Validate methods of go-control-plane).
package discovery
