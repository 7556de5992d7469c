// Package cli holds the sidecar's command line, so main stays thin and the
// commands can be tested.
package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/meshlet-dev/meshlet/examples"
	"github.com/meshlet-dev/meshlet/lb/sim"
)

const usage = `usage:
  sidecar drain [-admin 127.0.0.1:15000] [-wait 5s]
      ask the running sidecar to drain (the injected preStop hook)
  sidecar wait [-health 127.0.0.1:15021] [-timeout 60s]
      return once the sidecar is ready (the classic-mode postStart hook)
  sidecar demo [-phase 4s] [-rps 200]
      live failover demo: upstreams in three zones on loopback, the sidecar, a load generator
  sidecar run [-config file.yaml | -pod] [-redirect none|ebpf [-pod-cgroup PATH] [-proxy-uid 1337] [-accelerate]]
              [-xds HOST:PORT [-xds-ca FILE] [-xds-token FILE] [-node-id ID]] [-sds HOST:PORT|unix:///PATH]
              [-log-level info] [-watch 2s]
      run the data plane from a static config (default: the embedded examples/sidecar/sidecar.yaml),
      or from the pod's environment (-pod), with clusters from an ADS control plane (-xds) and the
      workload certificate over SDS (-sds); with -redirect=ebpf it attaches the redirect as root, then
      runs as -proxy-uid with no capabilities
  sidecar lb simulate [-o table|json] [-example NAME] [scenario.yaml]
      run a load-balancing scenario (default: the embedded examples/zone-residual.yaml)
  sidecar lb examples
      list the embedded example scenarios (run one with -example NAME)`

// Main runs the command line args and writes results to out.
func Main(args []string, out io.Writer) error {
	if len(args) >= 1 && args[0] == "run" {
		return run(args[1:], out)
	}
	if len(args) >= 1 {
		switch args[0] {
		case "demo":
			return demo(args[1:], out)
		case "drain":
			return drain(args[1:], out)
		case "wait":
			return wait(args[1:], out)
		}
	}
	if len(args) < 2 || args[0] != "lb" {
		return errors.New(usage)
	}
	switch args[1] {
	case "simulate":
		return simulate(args[2:], out)
	case "examples":
		entries, err := examples.Files.ReadDir(".")
		if err != nil {
			return err
		}
		for _, e := range entries {
			fmt.Fprintln(out, e.Name())
		}
		return nil
	}
	return errors.New(usage)
}

func simulate(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("lb simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("o", "table", "output format: table or json")
	example := fs.String("example", "", "run an embedded example scenario by name")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("lb simulate: %w\n%s", err, usage)
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("lb simulate: -o %q: want table or json", *format)
	}
	var data []byte
	var err error
	switch {
	case fs.NArg() > 1:
		return fmt.Errorf("lb simulate: one scenario file at most\n%s", usage)
	case fs.NArg() == 1:
		data, err = os.ReadFile(fs.Arg(0))
	case *example != "":
		data, err = examples.Files.ReadFile(*example)
	default:
		data, err = examples.Files.ReadFile(examples.Default)
	}
	if err != nil {
		return fmt.Errorf("lb simulate: read scenario: %w", err)
	}
	sc, err := sim.Parse(data)
	if err != nil {
		return err
	}
	res, err := sim.Run(sc)
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	_, err = io.WriteString(out, res.Table())
	return err
}
