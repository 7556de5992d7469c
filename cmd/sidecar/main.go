// Command sidecar is meshlet's per-pod proxy: `sidecar run` runs the data
// plane from a static config; `sidecar lb simulate` runs the load-balancer
// simulator. `sidecar help` lists every command, `sidecar COMMAND -help`
// its flags; docs/reference/cli.md has them all.
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
