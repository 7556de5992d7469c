package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/meshlet-dev/meshlet/bpf"
	"github.com/meshlet-dev/meshlet/internal/preflight"
)

func check(_ []string, out io.Writer) error {
	return preflight.Report(out, nodeChecks())
}

// nodeChecks are `sidecar check`'s: what a node must give the sidecar,
// tested the way the sidecar uses it (the programs are loaded, not
// looked up in a feature list).
func nodeChecks() []preflight.Result {
	release := "unknown"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		release = strings.TrimSpace(string(b))
	}
	return []preflight.Result{
		preflight.Kernel("this node", release),
		checkCgroup2(),
		checkLoad(),
	}
}

// checkCgroup2 reports whether the unified (v2) cgroup hierarchy is
// mounted, where the redirect attaches to the pod's cgroup, and whether
// it is the host's only one.
func checkCgroup2() preflight.Result {
	r := preflight.Result{Check: "cgroup v2 (the unified hierarchy)"}
	dir, err := bpf.Cgroup2Mount()
	if err != nil {
		r.Status, r.Detail = preflight.Fail, err.Error()
		return r
	}
	var st unix.Statfs_t
	switch err := unix.Statfs(dir, &st); {
	case err != nil:
		r.Status, r.Detail = preflight.Fail, fmt.Sprintf("statfs %s: %v", dir, err)
	case dir != "/sys/fs/cgroup":
		r.Status = preflight.Warn
		r.Detail = fmt.Sprintf("mounted at %s beside cgroup v1 controllers (a hybrid host): the redirect works, but the kubelet treats the node as cgroup v1, which it refuses unless failCgroupV1 is false; the unified hierarchy alone (systemd.unified_cgroup_hierarchy=1) is what Kubernetes supports", dir)
	default:
		r.Status, r.Detail = preflight.OK, "mounted at "+dir
	}
	return r
}

// checkLoad loads every eBPF program the sidecar attaches (through the
// kernel's verifier) and unloads them; it needs CAP_BPF and CAP_NET_ADMIN,
// as the sidecar's start does.
func checkLoad() preflight.Result {
	r := preflight.Result{Check: "eBPF programs load (cgroup connect/sockops/getsockopt/getpeername/release, sk_msg, sk_lookup, sk_reuseport)"}
	if os.Geteuid() != 0 {
		r.Status, r.Detail = preflight.Skip, fmt.Sprintf("running as uid %d: run as root (the sidecar's start runs so) to load them", os.Geteuid())
		return r
	}
	objs, err := bpf.Load(bpf.Options{})
	if err != nil {
		r.Status, r.Detail = preflight.Fail, err.Error()
		if errors.Is(err, unix.EPERM) {
			r.Detail += " (CAP_BPF, CAP_NET_ADMIN and CAP_SYS_RESOURCE are needed)"
		}
		return r
	}
	objs.Close()
	r.Status, r.Detail = preflight.OK, "loaded and verified by this kernel"
	return r
}
