// Command meshletctl is meshlet's operator CLI, istioctl's counterpart:
// proxy-status (every sidecar's xDS sync state from the control plane),
// proxy-config (a sidecar's clusters, endpoints, routes, listeners,
// certificates and log level through the API server's port-forward),
// check (a cluster's preflight) and inject (a manifest's dry run). Its
// flags are listed in docs/reference/cli.md (TestCLIReference).
package main

import (
	"fmt"
	"os"

	"github.com/meshlet-dev/meshlet/cmd/meshletctl/internal/cli"
)

func main() {
	if err := cli.Run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "meshletctl:", err)
		os.Exit(2)
	}
}
