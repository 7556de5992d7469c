// Package cmdlinetest holds the tests every meshlet binary runs on its
// cmdline.Program: help and bad usage in process, the real exit codes of
// the built binary, and the generated reference docs/reference/cli.md.
package cmdlinetest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
)

// Help checks that p's help lists every command, and that each command
// asked for help with -h, -help, --help or "help COMMAND" returns nil
// with a usage naming every flag of its FlagSet (VisitAll) and its
// non-zero defaults, while an unknown flag returns a *cmdline.UsageError
// with that usage.
func Help(t *testing.T, p *cmdline.Program) {
	t.Helper()
	for _, args := range [][]string{{"-h"}, {"-help"}, {"--help"}, {"help"}} {
		var out bytes.Buffer
		if err := p.Main(args, &out); err != nil {
			t.Errorf("%s %s: %v", p.Name, strings.Join(args, " "), err)
		}
		for _, c := range p.Commands {
			if !strings.Contains(out.String(), "  "+c.Name+" ") {
				t.Errorf("%s %s does not list %q:\n%s", p.Name, strings.Join(args, " "), c.Name, out.String())
			}
		}
	}
	for _, c := range p.Commands {
		name := strings.Fields(c.Name)
		for _, args := range [][]string{
			append(name[:len(name):len(name)], "-h"),
			append(name[:len(name):len(name)], "-help"),
			append(name[:len(name):len(name)], "--help"),
			append([]string{"help"}, name...),
		} {
			var out bytes.Buffer
			if err := p.Main(args, &out); err != nil {
				t.Errorf("%s %s: %v", p.Name, strings.Join(args, " "), err)
				continue
			}
			checkUsage(t, p, c, strings.Join(args, " "), out.String())
		}
		var out bytes.Buffer
		args := append(name[:len(name):len(name)], "-no-such-flag")
		err := p.Main(args, &out)
		var ue *cmdline.UsageError
		if !errors.As(err, &ue) || !strings.Contains(ue.Err.Error(), "no-such-flag") {
			t.Errorf("%s %s: %v, want a usage error naming the flag", p.Name, strings.Join(args, " "), err)
			continue
		}
		if out.Len() != 0 {
			t.Errorf("%s %s wrote to stdout: %q", p.Name, strings.Join(args, " "), out.String())
		}
		checkUsage(t, p, c, strings.Join(args, " "), ue.Usage)
	}
}

// checkUsage checks that usage is c's, with every flag and its default.
func checkUsage(t *testing.T, p *cmdline.Program, c *cmdline.Command, what, usage string) {
	t.Helper()
	if !strings.HasPrefix(usage, "usage: "+p.Name+" "+c.Name) {
		t.Errorf("%s %s: usage does not start with the synopsis:\n%s", p.Name, what, usage)
	}
	c.FlagSet().VisitAll(func(f *flag.Flag) {
		if !strings.Contains(usage, "\n  -"+f.Name+" ") && !strings.Contains(usage, "\n  -"+f.Name+"\n") {
			t.Errorf("%s %s: flag -%s missing:\n%s", p.Name, what, f.Name, usage)
		}
		if f.Usage == "" {
			t.Errorf("%s %s: flag -%s has no usage text", p.Name, c.Name, f.Name)
		}
	})
}

// update is the test flag -update: every test binary that imports this
// package has it, so `go test ./cmd/... -run TestCLIReference -update`
// reaches both binaries' reference tests.
var update = flag.Bool("update", false, "rewrite the generated sections of docs/reference/cli.md (TestCLIReference)")

// Reference checks the generated part of the reference file (path, from
// the test's package directory) that belongs to p — between the lines
// <!-- BEGIN GENERATED p.Name --> and <!-- END GENERATED p.Name --> — against
// p.Markdown, and fails with a line diff if they differ. With the test
// flag -update it rewrites that part instead.
func Reference(t *testing.T, p *cmdline.Program, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- BEGIN GENERATED "+p.Name+" -->\n", "<!-- END GENERATED "+p.Name+" -->\n"
	i, j := bytes.Index(data, []byte(begin)), bytes.Index(data, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q section", path, strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	have, want := data[i+len(begin):j], p.Markdown()
	if bytes.Equal(have, want) {
		return
	}
	if *update {
		next := append(append(append([]byte{}, data[:i+len(begin)]...), want...), data[j:]...)
		if err := os.WriteFile(path, next, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the %s section of %s", p.Name, path)
		return
	}
	t.Errorf("%s: the %s section differs from the FlagSets (- file, + generated); regenerate it with `go generate ./cmd/...` (or `go test ./cmd/... -run TestCLIReference -update`):\n%s",
		path, p.Name, Diff(string(have), string(want)))
}

// Diff is a line diff of a and b: common lines with two spaces, a's only
// with "- ", b's only with "+ ", and runs of more than three common lines
// cut to the three around each change.
func Diff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	// lcs[i][j]: the longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var lines []line
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			lines = append(lines, line{' ', x[i]})
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			lines = append(lines, line{'-', x[i]})
			i++
		default:
			lines = append(lines, line{'+', y[j]})
			j++
		}
	}
	var out strings.Builder
	skipped := false
	for k, l := range lines {
		near := false
		for d := max(0, k-3); d <= min(len(lines)-1, k+3); d++ {
			near = near || lines[d].op != ' '
		}
		if !near {
			if !skipped {
				out.WriteString("  ...\n")
			}
			skipped = true
			continue
		}
		skipped = false
		fmt.Fprintf(&out, "%c %s\n", l.op, l.text)
	}
	return out.String()
}

// ExitCode is one command line run by ExitCodes and what it must do.
type ExitCode struct {
	// Args is the command line after the binary's name.
	Args []string
	// Code is the exit status it must end with.
	Code int
	// Stdout and Stderr must each contain their string when it is not empty.
	Stdout, Stderr string
}

// ExitCodes builds the main package pkg (a path relative to the test's
// package directory) as the Makefile's test build does (CGO_ENABLED=0,
// -trimpath, -tags grpcnotrace, without PGO, so that it reuses the test
// build's compiled packages) and runs each case, checking its exit
// status and output.
func ExitCodes(t *testing.T, pkg string, cases []ExitCode) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	abs, err := filepath.Abs(pkg)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(abs)
	bin := filepath.Join(t.TempDir(), name)
	build := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-pgo=off", "-buildvcs=false", "-o", bin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, c.Args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			t.Fatalf("%s %q: %v", bin, c.Args, err)
		}
		what := name + " " + strings.Join(c.Args, " ")
		if code != c.Code {
			t.Errorf("%s: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", what, code, c.Code, stdout.String(), stderr.String())
		}
		if c.Stdout != "" && !strings.Contains(stdout.String(), c.Stdout) {
			t.Errorf("%s: stdout does not contain %q:\n%s", what, c.Stdout, stdout.String())
		}
		if c.Stderr != "" && !strings.Contains(stderr.String(), c.Stderr) {
			t.Errorf("%s: stderr does not contain %q:\n%s", what, c.Stderr, stderr.String())
		}
		if c.Code == 0 && stderr.Len() != 0 {
			t.Errorf("%s: wrote to stderr: %q", what, stderr.String())
		}
		if c.Code != 0 && stdout.Len() != 0 {
			t.Errorf("%s: wrote to stdout: %q", what, stdout.String())
		}
	}
}
