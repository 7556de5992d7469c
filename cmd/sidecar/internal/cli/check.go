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

// checkCgroup2 reports whether the node runs the unified (v2) cgroup
// hierarchy, decided as the kubelet and runc decide it (the file system
// type of /sys/fs/cgroup, or in a pod of the node's, mounted at
// MESHLET_HOST_CGROUP), and, on a hybrid host, where its v2 mount is:
// the redirect attaches to the pod's cgroup there.
func checkCgroup2() preflight.Result {
	r := preflight.Result{Check: "cgroup v2 (the unified hierarchy)"}
	root, what := "/sys/fs/cgroup", "/sys/fs/cgroup"
	if host := os.Getenv("MESHLET_HOST_CGROUP"); host != "" {
		// In a pod (an injected sidecar, or meshletctl check -probe): the
		// node's /sys/fs/cgroup, mounted there, is what the redirect uses.
		root, what = host, "the node's /sys/fs/cgroup (at "+host+")"
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		r.Status, r.Detail = preflight.OK, what+" is the unified hierarchy"
		return r
	}
	dir, err := bpf.Cgroup2Mount()
	if err != nil {
		r.Status, r.Detail = preflight.Fail, err.Error()+": the redirect attaches to the pod's cgroup v2"
		return r
	}
	r.Status = preflight.Warn
	r.Detail = fmt.Sprintf("a hybrid host: cgroup v1 at %s, v2 at %s. The redirect works there, but the kubelet runs the node as cgroup v1, which from Kubernetes 1.35 it refuses unless failCgroupV1 is false (v1 is in maintenance mode)", what, dir)
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
			r.Detail += " (CAP_BPF and CAP_NET_ADMIN are needed)"
		}
		return r
	}
	objs.Close()
	r.Status, r.Detail = preflight.OK, "loaded and verified by this kernel"
	return r
}
