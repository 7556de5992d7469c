// Package adsclient is the sidecar's xDS client: cmd/sidecar runs a Client
// against the control plane (package discovery/xds, in cmd/injector) over
// ADS, state of the world or delta. It subscribes to the clusters and their
// load assignments, translates them with package discovery (the same
// translation as the static config file), ACKs or NACKs each response and
// hands every complete configuration to the sidecar. The control plane does
// not link this package, nor the sidecar the server.
package adsclient
