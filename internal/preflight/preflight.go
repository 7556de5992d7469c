// Package preflight is what the binaries' check commands share (`sidecar
// check` on a node, `meshletctl check` against a cluster): a check's result,
// the report an operator reads, and the requirements both test, so that
// the two commands and the docs state one set of numbers.
package preflight

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The requirements, as docs/install.md states them.
const (
	// MinKernel is the oldest Linux the eBPF redirect loads on (cgroup
	// sock_addr hooks with bpf_link, sk_lookup, sk_reuseport, BTF-less
	// CO-RE-free programs).
	MinKernel = "5.15"
	// DropRootKernel is the Linux from which the sidecar can drop root
	// after attaching: its maps stay usable without CAP_BPF (before, only
	// with kernel.unprivileged_bpf_disabled=0).
	DropRootKernel = "6.5"
	// NativeSidecarKubernetes is the Kubernetes release from which the
	// sidecar is injected as a native sidecar (an init container with
	// restartPolicy Always); older clusters get a classic one.
	NativeSidecarKubernetes = "1.29"
	// ZoneLabel is the node label zone-aware routing reads.
	ZoneLabel = "topology.kubernetes.io/zone"
)

// Status is a check's outcome.
type Status int

// The outcomes, from best to worst.
const (
	// OK: the requirement holds.
	OK Status = iota
	// Skip: the check could not run here (it says why); not a failure.
	Skip
	// Warn: meshlet works, with less than it could (say classic sidecars).
	Warn
	// Fail: meshlet will not work until this is fixed.
	Fail
)

// String is the status as the report prints it.
func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Skip:
		return "skip"
	case Warn:
		return "warn"
	case Fail:
		return "FAIL"
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Result is one check's outcome.
type Result struct {
	// Check names what was checked: "this node: Linux >= 5.15".
	Check string
	// Status is the outcome.
	Status Status
	// Detail says what was found, and on a warning or failure what to do.
	Detail string
}

// Report writes one line per result and a count of each outcome, and
// returns an error naming the failed checks, if any (warnings and skips
// are not errors).
func Report(out io.Writer, results []Result) error {
	var failed []string
	var n [Fail + 1]int
	for _, r := range results {
		fmt.Fprintf(out, "%-4s  %s: %s\n", r.Status, r.Check, r.Detail)
		if r.Status >= OK && r.Status <= Fail {
			n[r.Status]++
		}
		if r.Status == Fail {
			failed = append(failed, r.Check)
		}
	}
	fmt.Fprintf(out, "%d ok, %d warn, %d skipped, %d failed\n", n[OK], n[Warn], n[Skip], n[Fail])
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d checks failed: %s", len(failed), len(results), strings.Join(failed, "; "))
	}
	return nil
}

// Version is a major.minor release number.
type Version struct{ Major, Minor int }

// String is "major.minor".
func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// AtLeast reports whether v is w or later.
func (v Version) AtLeast(w Version) bool {
	return v.Major > w.Major || v.Major == w.Major && v.Minor >= w.Minor
}

// ParseVersion reads the major.minor at the start of a release string,
// ignoring a leading "v" and what follows the minor number: a kernel's
// "6.1.0-28-cloud-amd64", Kubernetes' "v1.37.2" or "1.29+".
func ParseVersion(s string) (Version, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	major, rest, ok := strings.Cut(t, ".")
	if !ok {
		return Version{}, fmt.Errorf("preflight: release %q: want major.minor", s)
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(rest[:n])
	if err1 != nil || err2 != nil || strings.TrimLeft(major, "0123456789") != "" {
		return Version{}, fmt.Errorf("preflight: release %q: want major.minor", s)
	}
	return Version{ma, mi}, nil
}

// MustVersion is ParseVersion of a constant of this package.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// Kernel checks a node's Linux release (uname -r) against MinKernel and
// DropRootKernel; where names the node ("this node", "node worker-a").
func Kernel(where, release string) Result {
	r := Result{Check: fmt.Sprintf("%s: Linux >= %s", where, MinKernel)}
	v, err := ParseVersion(release)
	switch {
	case err != nil:
		r.Status, r.Detail = Fail, err.Error()
	case !v.AtLeast(MustVersion(MinKernel)):
		r.Status, r.Detail = Fail, fmt.Sprintf("Linux %s: the eBPF redirect needs %s or later", release, MinKernel)
	case !v.AtLeast(MustVersion(DropRootKernel)):
		r.Status, r.Detail = Warn, fmt.Sprintf("Linux %s: the sidecar keeps root after attaching unless kernel.unprivileged_bpf_disabled=0 (from %s on it drops it)", release, DropRootKernel)
	default:
		r.Status, r.Detail = OK, "Linux "+release
	}
	return r
}
