package cmdline_test

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline"
	"github.com/meshlet-dev/meshlet/cmd/internal/cmdline/cmdlinetest"
)

// toy is a program with a command group, a command without flags and
// one whose default comes from the environment.
func toy(ran *[]string) *cmdline.Program {
	return &cmdline.Program{Name: "toy", Doc: "a test program.", Commands: []*cmdline.Command{
		{Name: "go", Summary: "go somewhere", Doc: "Goes.", Flags: func(fs *flag.FlagSet, getenv func(string) string) func(io.Writer) error {
			speed := fs.Int("speed", len(getenv("TOY_SPEED")), "`N` steps a second.")
			loud := fs.Bool("loud", false, "shout.")
			return func(out io.Writer) error {
				if *speed > 9 {
					return cmdline.Usagef("-speed %d: too fast", *speed)
				}
				*ran = append(*ran, "go", strings.Join(fs.Args(), ","))
				_ = loud
				return nil
			}
		}},
		{Name: "box open", Args: "[LID]", Summary: "open a box", Doc: "Opens.", Run: func(args []string, _ io.Writer) error {
			*ran = append(*ran, "box open", strings.Join(args, ","))
			return nil
		}},
		{Name: "box shut", Summary: "shut a box", Doc: "Shuts.", Run: func([]string, io.Writer) error { return errors.New("stuck") }},
	}}
}

func TestMain_Dispatch(t *testing.T) {
	var ran []string
	p := toy(&ran)
	var out bytes.Buffer
	for _, args := range [][]string{{"go", "-speed", "3"}, {"box", "open", "red"}} {
		if err := p.Main(args, &out); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
	if got := strings.Join(ran, "|"); got != "go||box open|red" {
		t.Errorf("ran %q", got)
	}
	if err := p.Main([]string{"box", "shut"}, &out); err == nil || err.Error() != "stuck" {
		t.Errorf("box shut: %v, want the command's own error", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"fly"}, `unknown command "fly"`},
		{[]string{"box"}, "box: no command"},
		{[]string{"box", "fly"}, `box: unknown command "fly"`},
		{[]string{"help", "fly"}, `help: no command "fly"`},
		{[]string{"go", "-fast"}, "go: flag provided but not defined: -fast"},
		{[]string{"go", "-loud", "false"}, `go: unexpected argument "false" (a bool flag takes -flag=false`},
		{[]string{"go", "-speed", "10"}, "go: -speed 10: too fast"},
		{[]string{"box", "shut", "now"}, `box shut: unexpected argument "now"`},
	} {
		out.Reset()
		err := p.Main(c.args, &out)
		var ue *cmdline.UsageError
		if !errors.As(err, &ue) || !strings.HasPrefix(ue.Err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error starting %q", c.args, err, c.want)
			continue
		}
		if !strings.Contains(err.Error(), "\n\n"+ue.Usage) || !strings.Contains(ue.Usage, "usage: toy") {
			t.Errorf("%q: the error does not end with the usage: %v", c.args, err)
		}
		if out.Len() > 0 {
			t.Errorf("%q wrote to out: %q", c.args, out.String())
		}
	}
}

func TestMain_Help(t *testing.T) {
	var ran []string
	p := toy(&ran)
	t.Setenv("TOY_SPEED", "fast")
	for _, c := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"--help"}, "  box open        open a box\n", "-speed"},
		{[]string{"help"}, "  help [COMMAND]", "-speed"},
		{[]string{"box", "-h"}, "usage: toy box COMMAND", "  go "},
		{[]string{"help", "box"}, "  box shut", "  go "},
		{[]string{"go", "-help"}, "usage: toy go [flags]\n\nGoes.\n\nflags:\n  -loud\n", ""},
		{[]string{"go", "-speed", "1", "--help"}, "-speed N\n    \tN steps a second. (default 4)\n", ""},
		{[]string{"help", "box", "open"}, "usage: toy box open [LID]\n\nOpens.\n", "flags:"},
	} {
		var out bytes.Buffer
		if err := p.Main(c.args, &out); err != nil {
			t.Errorf("%q: %v", c.args, err)
		}
		if !strings.Contains(out.String(), c.want) || c.not != "" && strings.Contains(out.String(), c.not) {
			t.Errorf("%q: want %q and not %q in\n%s", c.args, c.want, c.not, out.String())
		}
	}
	if len(ran) > 0 {
		t.Errorf("help ran %q", ran)
	}
	cmdlinetest.Help(t, p)
}

// Markdown takes the defaults of an empty environment.
func TestMarkdown(t *testing.T) {
	t.Setenv("TOY_SPEED", "fast")
	md := string(toy(new([]string)).Markdown())
	for _, want := range []string{
		"| [`toy box open`](#toy-box-open) | open a box |",
		"### `toy go`\n\n`toy go [flags]`\n\nGoes.\n\n| flag | default | meaning |\n|---|---|---|\n| `-loud` | `false` | shout. |\n| `-speed N` | `0` | N steps a second. |\n",
		"### `toy box shut`\n\n`toy box shut`\n\nShuts.\n\nNo flags.\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
