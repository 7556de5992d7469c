package cli

import (
	"testing"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline/cmdlinetest"
)

// docs/reference/cli.md's meshletctl section is what the FlagSets say
// (`go generate ./cmd/...` rewrites it).
func TestCLIReference(t *testing.T) {
	cmdlinetest.Reference(t, Program(nil), "../../../../docs/reference/cli.md")
}

// Every command answers -h, -help, --help and "help COMMAND" with all its
// flags, and an unknown flag with a usage error.
func TestHelp(t *testing.T) {
	cmdlinetest.Help(t, Program(nil))
}

// The built binary exits 0 on help (usage on stdout) and 2 on bad usage
// (the error and the usage on stderr).
func TestExitCodes(t *testing.T) {
	cmdlinetest.ExitCodes(t, "../..", []cmdlinetest.ExitCode{
		{Args: []string{"--help"}, Code: 0, Stdout: "proxy-status"},
		{Args: []string{"help", "proxy-config"}, Code: 0, Stdout: "proxy-config endpoints"},
		{Args: []string{"proxy-config", "endpoints", "-help"}, Code: 0, Stdout: "-cluster NAME"},
		{Args: []string{"proxy-config", "endpoints"}, Code: 2, Stderr: "need POD[.NAMESPACE]"},
		{Args: []string{"proxy-config", "endpoints", "web-0.shop", "-h"}, Code: 0, Stdout: "-cluster NAME"},
		{Args: []string{"proxy-config", "routes", "a", "b"}, Code: 2, Stderr: `unexpected argument "b"`},
		{Args: []string{"proxy-config", "nothing"}, Code: 2, Stderr: `unknown command "nothing"`},
		{Args: []string{"inject"}, Code: 2, Stderr: "need -f FILE"},
		{Args: nil, Code: 2, Stderr: "meshletctl: no command"},
	})
}
