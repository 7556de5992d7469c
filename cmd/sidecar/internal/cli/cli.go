// Package cli holds the sidecar's command line, so main stays thin and the
// commands can be tested. Its commands and their flags are also the
// reference docs/reference/cli.md (TestCLIReference).
package cli

//go:generate go test -trimpath -tags grpcnotrace -run ^TestCLIReference$ . -update

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
	"github.com/meshlet-dev/meshlet/examples"
	"github.com/meshlet-dev/meshlet/lb/sim"
)

// Program is the sidecar binary's command line.
func Program() *cmdline.Program {
	return &cmdline.Program{
		Name: "sidecar",
		Doc:  "meshlet's per-pod proxy (the data plane), its Kubernetes hooks, a live demo and the load-balancer simulator.",
		Commands: []*cmdline.Command{
			{Name: "run", Flags: runFlags,
				Summary: "run the data plane from a static config or the pod's environment",
				Doc: `Runs the data plane from a static config file (-config; default: the
embedded examples/sidecar/sidecar.yaml) or, in a Kubernetes pod, from the
pod's environment (-pod); optionally with clusters and routes from an ADS
control plane (-xds), the workload certificate over SDS (-sds, turns on
mTLS) and the eBPF traffic capture (-redirect=ebpf, as root; the sidecar
then runs as -proxy-uid with no capabilities). SIGHUP or a change of the
config file reloads it (an invalid file is refused and the running config
kept); SIGTERM drains and stops it.`},
			{Name: "demo", Flags: demoFlags,
				Summary: "live failover demo: upstreams in three zones on loopback, the sidecar, a load generator",
				Doc: `Starts the embedded example's upstreams on loopback in three zones, the
sidecar with that config and a load generator, then kills an upstream,
drains zone a and brings everything back, printing each second where
traffic went per zone and with which response flags. It binds the
example's fixed ports (15000-15090, 127.0.0.x:8080): stop other sidecars
first.`},
			{Name: "drain", Flags: drainFlags,
				Summary: "ask the running sidecar to drain, then wait (the injected preStop hook)",
				Doc: `Asks the running sidecar to drain (stop accepting, finish in-flight
work) through its admin address, then waits -wait so the app's last
requests still go through. The injector makes it the sidecar's preStop
hook.`},
			{Name: "wait", Flags: waitFlags,
				Summary: "return once the sidecar is ready (the classic-mode postStart hook)",
				Doc: `Polls the sidecar's readiness (/healthz/ready on its health address)
and returns once it is ready, or fails after -timeout. The injector makes
it the postStart hook of a classic (pre-1.29) sidecar, so the kubelet
starts the app only then.`},
			{Name: "check", Run: check,
				Summary: "check that this node can run the sidecar (kernel, cgroup v2, eBPF)",
				Doc: `Checks what a node must give the sidecar, the way the sidecar uses it:
the Linux release (5.15 or later; 6.5 or later for the sidecar to drop
root after attaching), the unified cgroup hierarchy, and that every eBPF
program it attaches loads through this kernel's verifier (as root, as the
sidecar's start runs; skipped otherwise). In a pod, MESHLET_HOST_CGROUP
names where the node's /sys/fs/cgroup is mounted, as the injector mounts
it. Prints one line per check and fails if one failed. The cluster-wide
counterpart, which runs this on every node in a probe pod, is meshletctl
check -probe.`},
			{Name: "lb simulate", Args: "[scenario.yaml]", Flags: simulateFlags,
				Summary: "run a load-balancing scenario through the real engine",
				Doc: `Reads a scenario (hosts per zone and priority with their health, the
clients per zone, the policy and its knobs, a number of requests) from the
file argument, else the embedded example -example, else the embedded
examples/zone-residual.yaml; makes that many picks through the real
load-balancing engine and prints where traffic went per priority, zone and
host, the zone routing state and Envoy's lb counters.`},
			{Name: "lb examples", Run: listExamples,
				Summary: "list the embedded example scenarios (run one with lb simulate -example NAME)",
				Doc:     `Lists the example scenarios embedded in the binary, one name a line.`},
		},
	}
}

// Main runs the command line args (without the binary's name) and writes
// results, and the usage asked for with -help, to out. A bad command line
// is a *cmdline.UsageError, which carries the usage.
func Main(args []string, out io.Writer) error {
	return Program().Main(args, out)
}

// command runs one of the sidecar's commands by name (tests call run
// this way).
func command(name string, args []string, out io.Writer) error {
	return Program().Main(append([]string{name}, args...), out)
}

func listExamples(_ []string, out io.Writer) error {
	entries, err := examples.Files.ReadDir(".")
	if err != nil {
		return err
	}
	for _, e := range entries {
		fmt.Fprintln(out, e.Name())
	}
	return nil
}

func simulateFlags(fs *flag.FlagSet, _ func(string) string) func(io.Writer) error {
	format := fs.String("o", "table", "output `FORMAT`: table, or json for scripts.")
	example := fs.String("example", "", "run the embedded example scenario `NAME` (sidecar lb examples lists them) instead of the default; a file argument wins over it.")
	return func(out io.Writer) error { return simulate(fs, *format, *example, out) }
}

func simulate(fs *flag.FlagSet, format, example string, out io.Writer) error {
	if format != "table" && format != "json" {
		return cmdline.Usagef("-o %q: want table or json", format)
	}
	var data []byte
	var err error
	switch {
	case fs.NArg() > 1:
		return cmdline.Usagef("one scenario file at most")
	case fs.NArg() == 1:
		data, err = os.ReadFile(fs.Arg(0))
	case example != "":
		data, err = examples.Files.ReadFile(example)
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
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	_, err = io.WriteString(out, res.Table())
	return err
}
