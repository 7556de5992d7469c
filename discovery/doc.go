// Package discovery turns configuration sources into the data plane's
// config.Config: the sidecar's static config file (ParseStatic,
// LoadStaticFile) and, on the sidecar, the control plane's xDS (ADSClient:
// clusters, endpoints and the routes they carry, ACK / NACK, back-off, last
// good configuration kept). The control plane's side, Kubernetes objects
// to Envoy resources served over ADS, is package discovery/xds.
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
