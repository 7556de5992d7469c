package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline/cmdlinetest"
)

// docs/reference/cli.md's injector section is what the FlagSets say
// (`go generate ./cmd/...` rewrites it).
func TestCLIReference(t *testing.T) {
	cmdlinetest.Reference(t, program(nil), "../../docs/reference/cli.md")
}

// Every command answers -h, -help, --help and "help COMMAND" with all its
// flags, and an unknown flag with a usage error.
func TestHelp(t *testing.T) {
	cmdlinetest.Help(t, program(nil))
	var out bytes.Buffer
	if err := run([]string{"serve", "--help"}, nil, &out); err != nil || !strings.Contains(out.String(), "-workload-cert-ttl TTL") {
		t.Errorf("serve --help: %v\n%s", err, out.String())
	}
}

// The built binary exits 0 on help (usage on stdout) and 2 on bad usage
// (the error and the usage on stderr).
func TestExitCodes(t *testing.T) {
	cmdlinetest.ExitCodes(t, ".", []cmdlinetest.ExitCode{
		{Args: []string{"--help"}, Code: 0, Stdout: "serve"},
		{Args: []string{"-h"}, Code: 0, Stdout: "commands:"},
		{Args: []string{"help"}, Code: 0, Stdout: "serve"},
		{Args: []string{"help", "serve"}, Code: 0, Stdout: "-workload-cert-ttl"},
		{Args: []string{"serve", "--help"}, Code: 0, Stdout: "-image-pull-policy POLICY"},
		{Args: nil, Code: 2, Stderr: "injector: no command"},
		{Args: []string{"serve", "-no-such-flag"}, Code: 2, Stderr: "usage: injector serve"},
		{Args: []string{"inject"}, Code: 2, Stderr: "unknown command \"inject\""},
	})
}
