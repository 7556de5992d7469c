// Package cmdline is the command-line frame of meshlet's binaries: a
// program of subcommands, each with a flag.FlagSet; -h, -help and --help
// (and "help [COMMAND]") print a usage built from those FlagSets to
// stdout; a bad command line returns a *UsageError carrying the usage;
// and Markdown renders the same FlagSets as the reference tables of
// docs/reference/cli.md, so help and reference cannot drift apart.
package cmdline

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Program is one of meshlet's binaries.
type Program struct {
	// Name is the binary's name, as typed: "sidecar".
	Name string
	// Doc says what the binary is, one sentence.
	Doc string
	// Commands are its subcommands, in the order the usage lists them.
	Commands []*Command
}

// Command is one subcommand of a Program.
type Command struct {
	// Name is the command's words after the binary's name: "run",
	// "lb simulate".
	Name string
	// Args names the positional arguments after the flags, for the
	// synopsis ("[scenario.yaml]"). Empty: the command takes none, and
	// one given is a usage error.
	Args string
	// Summary is the command's line in the program's command list.
	Summary string
	// Doc is what the command does, printed above its flags.
	Doc string
	// Flags defines the command's flags on fs, with the defaults that
	// come from environment variables read through getenv, and returns
	// the function that runs the command once fs is parsed (fs.Args()
	// are its positional arguments). A bad environment variable is that
	// function's error, so that -help still works. Nil: no flags.
	Flags func(fs *flag.FlagSet, getenv func(string) string) func(out io.Writer) error
	// Run runs a command that has no flags (Flags nil).
	Run func(args []string, out io.Writer) error
}

// UsageError is a command line the program cannot run: no command, an
// unknown one, a bad flag or argument count. main prints it to stderr
// and exits 2.
type UsageError struct {
	// Err says what is wrong, prefixed with the command's name.
	Err error
	// Usage is the usage of the command (or of the program) the command
	// line was meant for.
	Usage string
}

// Error is the problem followed by the usage.
func (e *UsageError) Error() string { return e.Err.Error() + "\n\n" + e.Usage }

// Unwrap returns Err.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns the error a command returns for a bad command line
// that only it can tell (a flag's value, the arguments): Main returns it
// as a *UsageError, prefixed with the command's name and carrying its
// usage.
func Usagef(format string, a ...any) error { return &badUsage{fmt.Errorf(format, a...)} }

// badUsage is Usagef's error, until Main turns it into a *UsageError.
type badUsage struct{ err error }

// Error is the problem alone.
func (e *badUsage) Error() string { return e.err.Error() }

// Unwrap returns the problem.
func (e *badUsage) Unwrap() error { return e.err }

// EmptyEnv is a getenv with no variable set: the defaults that
// FlagSet and Markdown show.
func EmptyEnv(string) string { return "" }

// isHelp reports whether arg asks for help as the flag package does.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

// Main runs the command line args (without the binary's name), the
// environment read through os.Getenv. A request for help — -h, -help or
// --help alone, after a command group's name or among a command's flags,
// or "help [COMMAND]" — prints that usage to out and returns nil. A
// command line naming no command, an unknown one or a bad flag returns a
// *UsageError. Anything else returns what the command returns.
func (p *Program) Main(args []string, out io.Writer) error {
	if c, rest := p.find(args); c != nil {
		return p.exec(c, rest, out, os.Getenv)
	}
	if len(args) > 0 && args[0] == "help" {
		topic := strings.Join(args[1:], " ")
		if c, rest := p.find(args[1:]); c != nil && len(rest) == 0 {
			_, err := io.WriteString(out, p.commandUsage(c, c.FlagSet()))
			return err
		}
		if topic == "" || p.isGroup(topic) {
			_, err := io.WriteString(out, p.usage(topic))
			return err
		}
		return &UsageError{fmt.Errorf("help: no command %q", topic), p.usage("")}
	}
	// A group's words ("lb"), then help, nothing or something unknown.
	group := ""
	for i := range args {
		if g := strings.Join(args[:i+1], " "); p.isGroup(g) {
			group = g
		}
	}
	rest := args[len(strings.Fields(group)):]
	switch {
	case len(rest) > 0 && isHelp(rest[0]):
		_, err := io.WriteString(out, p.usage(group))
		return err
	case len(args) == 0:
		return &UsageError{errors.New("no command"), p.usage("")}
	case len(rest) == 0:
		return &UsageError{fmt.Errorf("%s: no command", group), p.usage(group)}
	case group != "":
		return &UsageError{fmt.Errorf("%s: unknown command %q", group, rest[0]), p.usage(group)}
	}
	return &UsageError{fmt.Errorf("unknown command %q", args[0]), p.usage("")}
}

// find returns the command whose name is the longest prefix of args, and
// the arguments after it.
func (p *Program) find(args []string) (*Command, []string) {
	var best *Command
	n := 0
	for _, c := range p.Commands {
		w := strings.Fields(c.Name)
		if len(w) > n && len(args) >= len(w) && slices.Equal(args[:len(w)], w) {
			best, n = c, len(w)
		}
	}
	return best, args[n:]
}

// isGroup reports whether some command's name starts with the words g.
func (p *Program) isGroup(g string) bool {
	for _, c := range p.Commands {
		if g != "" && strings.HasPrefix(c.Name, g+" ") {
			return true
		}
	}
	return false
}

// FlagSet returns the command's flags as a FlagSet named after the
// command, with the defaults of an empty environment, without running
// anything: what Markdown and the tests read.
func (c *Command) FlagSet() *flag.FlagSet {
	fs, _ := c.flagSet(EmptyEnv)
	return fs
}

// flagSet builds the command's FlagSet, its output discarded (Main
// prints usage itself), and the function that runs the command.
func (c *Command) flagSet(getenv func(string) string) (*flag.FlagSet, func(io.Writer) error) {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if c.Flags != nil {
		return fs, c.Flags(fs, getenv)
	}
	return fs, func(out io.Writer) error { return c.Run(fs.Args(), out) }
}

// exec parses args for c and runs it.
func (p *Program) exec(c *Command, args []string, out io.Writer, getenv func(string) string) error {
	fs, run := c.flagSet(getenv)
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		_, err := io.WriteString(out, p.commandUsage(c, fs))
		return err
	case err != nil:
		return &UsageError{fmt.Errorf("%s: %w", c.Name, err), p.commandUsage(c, fs)}
	case c.Args == "" && fs.NArg() > 0:
		hint := ""
		if hasFlags(fs) {
			hint = " (a bool flag takes -flag=false, not -flag false)"
		}
		return &UsageError{fmt.Errorf("%s: unexpected argument %q%s", c.Name, fs.Arg(0), hint), p.commandUsage(c, fs)}
	}
	err := run(out)
	if errors.Is(err, flag.ErrHelp) {
		// A command that parses flags after its arguments met -h there.
		_, err := io.WriteString(out, p.commandUsage(c, fs))
		return err
	}
	if bu := (*badUsage)(nil); errors.As(err, &bu) {
		return &UsageError{fmt.Errorf("%s: %w", c.Name, bu.err), p.commandUsage(c, fs)}
	}
	return err
}

// synopsis is the command's usage line after "usage: ".
func (p *Program) synopsis(c *Command, fs *flag.FlagSet) string {
	s := p.Name + " " + c.Name
	if hasFlags(fs) {
		s += " [flags]"
	}
	if c.Args != "" {
		s += " " + c.Args
	}
	return s
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// commandUsage is c's help: synopsis, doc and every flag with its default
// as flag.PrintDefaults writes them.
func (p *Program) commandUsage(c *Command, fs *flag.FlagSet) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "usage: %s\n\n%s\n", p.synopsis(c, fs), c.Doc)
	if hasFlags(fs) {
		b.WriteString("\nflags:\n")
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return b.String()
}

// usage is the program's help, or a group's ("lb"): its commands.
func (p *Program) usage(group string) string {
	var b bytes.Buffer
	name := strings.TrimSpace(p.Name + " " + group)
	fmt.Fprintf(&b, "%s: %s\n\nusage: %s COMMAND [flags] [args]\n\ncommands:\n", p.Name, p.Doc, name)
	var rows [][2]string
	for _, c := range p.Commands {
		if group == "" || strings.HasPrefix(c.Name, group+" ") {
			rows = append(rows, [2]string{c.Name, c.Summary})
		}
	}
	if group == "" {
		rows = append(rows, [2]string{"help [COMMAND]", "print this, or COMMAND's usage with all its flags"})
	}
	w := 0
	for _, r := range rows {
		w = max(w, len(r[0]))
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-*s  %s\n", w, r[0], r[1])
	}
	fmt.Fprintf(&b, "\n\"%s COMMAND -help\" prints a command's flags with their defaults; docs/reference/cli.md lists them all.\n", p.Name)
	return b.String()
}
