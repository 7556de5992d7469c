// Package re2 compiles the regular expressions a control plane sends
// (RE2 syntax, which Go's regexp implements) within Envoy's program-size
// budget, for every package that matches them: routes and RBAC policies.
package re2

import (
	"fmt"
	"regexp"
	"regexp/syntax"
)

// MaxProgramSize bounds a regular expression's compiled size, as Envoy's
// re2.max_program_size.error_level (default 100) does: matching costs the
// program's size times the value's length, and whoever writes a policy
// need not be trusted with the proxy's CPU.
const MaxProgramSize = 100

// Compile compiles expr, refusing one whose program is larger than
// MaxProgramSize instructions.
func Compile(expr string) (*regexp.Regexp, error) {
	if err := check(expr); err != nil {
		return nil, err
	}
	return regexp.Compile(expr)
}

// CompileFull is Compile for a matcher that must match the whole value,
// as Envoy's safe_regex does.
func CompileFull(expr string) (*regexp.Regexp, error) {
	if err := check(expr); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}

func check(expr string) error {
	parsed, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return err
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return err
	}
	if n := len(prog.Inst); n > MaxProgramSize {
		return fmt.Errorf("program size %d over the limit of %d", n, MaxProgramSize)
	}
	return nil
}
