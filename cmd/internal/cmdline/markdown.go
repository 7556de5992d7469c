package cmdline

import (
	"bytes"
	"flag"
	"fmt"
	"strings"
)

// Markdown renders the program's reference: its commands, and per
// command its synopsis, what it does and a table flag | default | meaning
// read from its FlagSet (flag.VisitAll, flag.UnquoteUsage) with no
// environment variable set.
func (p *Program) Markdown() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "## `%s`\n\n%s\n\n| command | what it does |\n|---|---|\n", p.Name, p.Doc)
	for _, c := range p.Commands {
		fmt.Fprintf(&b, "| [`%s %s`](#%s) | %s |\n", p.Name, c.Name, anchor(p.Name+" "+c.Name), cell(c.Summary))
	}
	for _, c := range p.Commands {
		fs := c.FlagSet()
		fmt.Fprintf(&b, "\n### `%s %s`\n\n`%s`\n\n%s\n", p.Name, c.Name, p.synopsis(c, fs), c.Doc)
		if !hasFlags(fs) {
			b.WriteString("\nNo flags.\n")
			continue
		}
		b.WriteString("\n| flag | default | meaning |\n|---|---|---|\n")
		fs.VisitAll(func(f *flag.Flag) {
			arg, usage := flag.UnquoteUsage(f)
			name := "-" + f.Name
			if arg != "" {
				name += " " + arg
			}
			def := f.DefValue
			if def == "" {
				def = `""`
			}
			fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", name, def, cell(usage))
		})
	}
	return b.Bytes()
}

// cell makes s one Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", `\|`)
}

// anchor is GitHub's heading anchor for the heading `s`.
func anchor(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}
