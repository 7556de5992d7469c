package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline/cmdlinetest"
)

// docs/reference/cli.md's sidecar section is what the FlagSets say
// (`go generate ./cmd/...` rewrites it).
func TestCLIReference(t *testing.T) {
	cmdlinetest.Reference(t, Program(), "../../../../docs/reference/cli.md")
}

// Every command answers -h, -help, --help and "help COMMAND" with all its
// flags, and an unknown flag with a usage error.
func TestHelp(t *testing.T) {
	cmdlinetest.Help(t, Program())
	for _, args := range [][]string{{}, {"lb"}, {"nope"}, {"lb", "nope"}, {"help", "nope"}, {"run", "-pod", "false"}, {"lb", "examples", "x"},
		{"run", "-log-level", "loud"}, {"run", "-redirect", "iptables"}, {"run", "-http1-server", "fasthttp"}, {"run", "-pod", "-config", "x.yaml"}, {"run", "-watch", "soon"}} {
		var out bytes.Buffer
		err := Main(args, &out)
		if ue := (*cmdline.UsageError)(nil); !errors.As(err, &ue) || !strings.Contains(ue.Usage, "usage: sidecar") {
			t.Errorf("Main(%q): %v, want a usage error with the usage", args, err)
		}
		if out.Len() != 0 {
			t.Errorf("Main(%q) wrote to stdout: %q", args, out.String())
		}
	}
	var out bytes.Buffer
	if err := Main([]string{"run", "-http1-server", "fasthttp"}, &out); err == nil || !strings.Contains(err.Error(), `-http1-server "fasthttp": want meshlet or net/http`) {
		t.Errorf("run -http1-server fasthttp: %v, want the flag, the value and the choices named", err)
	}
	if err := Main([]string{"lb", "--help"}, &out); err != nil || !strings.Contains(out.String(), "lb simulate") || strings.Contains(out.String(), "\n  run ") {
		t.Errorf("lb --help: %v, want the lb commands only:\n%s", err, out.String())
	}
}

// A default that comes from the environment shows in -help, and a bad
// value there is an error that names the variable, after -help.
func TestRunEnvDefaults(t *testing.T) {
	t.Setenv("MESHLET_CONCURRENCY", "3")
	var out bytes.Buffer
	if err := Main([]string{"run", "-help"}, &out); err != nil || !strings.Contains(out.String(), "MESHLET_CONCURRENCY when set. (default 3)") {
		t.Errorf("run -help: %v, want the default 3 from the environment:\n%s", err, out.String())
	}
	t.Setenv("MESHLET_ADAPTIVE_PROCS", "maybe")
	if err := Main([]string{"run", "-help"}, &out); err != nil {
		t.Errorf("run -help with a bad MESHLET_ADAPTIVE_PROCS: %v", err)
	}
	if err := Main([]string{"run"}, &out); err == nil || !strings.Contains(err.Error(), "MESHLET_ADAPTIVE_PROCS") {
		t.Errorf("run with MESHLET_ADAPTIVE_PROCS=maybe: %v", err)
	}
}

// The built binary exits 0 on help (usage on stdout) and 2 on bad usage
// (the error and the usage on stderr).
func TestExitCodes(t *testing.T) {
	cmdlinetest.ExitCodes(t, "../..", []cmdlinetest.ExitCode{
		{Args: []string{"--help"}, Code: 0, Stdout: "lb simulate"},
		{Args: []string{"-h"}, Code: 0, Stdout: "commands:"},
		{Args: []string{"help"}, Code: 0, Stdout: "commands:"},
		{Args: []string{"help", "run"}, Code: 0, Stdout: "-xds-sotw"},
		{Args: []string{"run", "--help"}, Code: 0, Stdout: "-concurrency N"},
		{Args: []string{"run", "-h"}, Code: 0, Stdout: "MESHLET_CONCURRENCY"},
		{Args: []string{"demo", "-h"}, Code: 0, Stdout: "-rps N"},
		{Args: []string{"drain", "-help"}, Code: 0, Stdout: "-admin HOST:PORT"},
		{Args: []string{"wait", "--help"}, Code: 0, Stdout: "-timeout DURATION"},
		{Args: []string{"lb", "--help"}, Code: 0, Stdout: "lb examples"},
		{Args: []string{"lb", "simulate", "--help"}, Code: 0, Stdout: "-example NAME"},
		{Args: []string{"lb", "examples", "-h"}, Code: 0, Stdout: "usage: sidecar lb examples"},
		{Args: []string{"lb", "examples"}, Code: 0, Stdout: "zone-residual.yaml"},
		{Args: nil, Code: 2, Stderr: "sidecar: no command"},
		{Args: []string{"lb"}, Code: 2, Stderr: "commands:"},
		{Args: []string{"frobnicate"}, Code: 2, Stderr: `unknown command "frobnicate"`},
		{Args: []string{"run", "-no-such-flag"}, Code: 2, Stderr: "flags:\n  -accelerate"},
		{Args: []string{"lb", "simulate", "-o", "xml"}, Code: 2, Stderr: "usage: sidecar lb simulate"},
	})
}
