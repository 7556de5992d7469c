// Package sidecarexample embeds meshlet's example static sidecar config, so
// the binary can run it with no file at hand.
package sidecarexample

import _ "embed"

// Config is sidecar.yaml: a sidecar in zone a of three loopback zones, with
// an HTTP listener routed to the cluster echo and a TCP listener routed to
// echo-tcp (see the file's comments).
//
//go:embed sidecar.yaml
var Config []byte
