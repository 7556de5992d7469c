// Command sidecar is meshlet's per-pod proxy. Until the data plane lands it
// offers the load-balancer simulator: `sidecar lb simulate [scenario.yaml]`.
package main

import (
	"fmt"
	"os"

	"github.com/meshlet-dev/meshlet/cmd/sidecar/internal/cli"
)

func main() {
	if err := cli.Main(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sidecar:", err)
		os.Exit(2)
	}
}
