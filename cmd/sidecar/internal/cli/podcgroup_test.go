package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/meshlet-dev/meshlet/internal/privileged"
)

// mkdirs makes the directories under root: the kubelet's cgroup layouts
// reproduced in a temporary directory (the real hierarchy here has no
// kubelet pods).
func mkdirs(t *testing.T, root string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindPodCgroup(t *testing.T) {
	const uid = "0b6f3c2e-8d1a-4b7e-9c55-1f2e3d4c5b6a"
	systemd := t.TempDir()
	mkdirs(t, systemd,
		"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b6f3c2e_8d1a_4b7e_9c55_1f2e3d4c5b6a.slice/cri-containerd-abc.scope",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod11111111_2222_3333_4444_555555555555.slice",
		"system.slice/containerd.service")
	got, err := findPodCgroup(systemd, uid)
	if want := filepath.Join(systemd, "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b6f3c2e_8d1a_4b7e_9c55_1f2e3d4c5b6a.slice"); err != nil || got != want {
		t.Errorf("systemd layout: %q, %v; want %q", got, err, want)
	}

	cgroupfs := t.TempDir()
	mkdirs(t, cgroupfs, "kubepods/burstable/pod"+uid+"/abc", "kubepods/pod99999999-2222-3333-4444-555555555555")
	got, err = findPodCgroup(cgroupfs, uid)
	if want := filepath.Join(cgroupfs, "kubepods/burstable/pod"+uid); err != nil || got != want {
		t.Errorf("cgroupfs layout: %q, %v; want %q", got, err, want)
	}

	if _, err := findPodCgroup(cgroupfs, "12345678-0000-0000-0000-000000000000"); err == nil || !strings.Contains(err.Error(), "no cgroup for pod") {
		t.Errorf("unknown uid: err = %v", err)
	}
	if _, err := findPodCgroup(cgroupfs, ""); err == nil || !strings.Contains(err.Error(), "POD_UID") {
		t.Errorf("empty uid: err = %v", err)
	}
	// A kubelet cgroupRoot (here /e2e-node-a) puts pods one level deeper.
	rooted := t.TempDir()
	mkdirs(t, rooted, "e2e-node-a/kubepods/besteffort/pod"+uid+"/abc")
	got, err = findPodCgroup(rooted, uid)
	if want := filepath.Join(rooted, "e2e-node-a/kubepods/besteffort/pod"+uid); err != nil || got != want {
		t.Errorf("cgroupRoot layout: %q, %v; want %q", got, err, want)
	}
	deep := t.TempDir()
	mkdirs(t, deep, "a/b/c/d/e/pod"+uid)
	if _, err := findPodCgroup(deep, uid); err == nil {
		t.Error("a pod cgroup below the kubelet's depth was accepted")
	}
	dup := t.TempDir()
	mkdirs(t, dup, "kubepods/pod"+uid, "kubepods/besteffort/pod"+uid)
	if _, err := findPodCgroup(dup, uid); err == nil || !strings.Contains(err.Error(), "several") {
		t.Errorf("two matches: err = %v", err)
	}
	if _, err := findPodCgroup(filepath.Join(dup, "missing"), uid); err == nil {
		t.Error("a missing root was accepted")
	}
}

func TestPodCgroupFromEnv(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "kubepods/podabc")
	env := map[string]string{"MESHLET_HOST_CGROUP": root, "POD_UID": "abc"}
	get := func(k string) string { return env[k] }
	if got, err := podCgroupFromEnv(get); err != nil || got != filepath.Join(root, "kubepods/podabc") {
		t.Errorf("by POD_UID: %q, %v", got, err)
	}
	env["MESHLET_POD_CGROUP"] = "/explicit"
	if got, err := podCgroupFromEnv(get); err != nil || got != "/explicit" {
		t.Errorf("MESHLET_POD_CGROUP wins: %q, %v", got, err)
	}
	delete(env, "MESHLET_POD_CGROUP")
	env["MESHLET_HOST_CGROUP"] = filepath.Join(root, "not-mounted")
	if _, err := podCgroupFromEnv(get); err == nil || !strings.Contains(err.Error(), "MESHLET_HOST_CGROUP") {
		t.Errorf("missing host mount: err = %v", err)
	}
	if got, err := podCgroupFromEnv(func(string) string { return "" }); err != nil || got != "" {
		t.Errorf("outside a pod: %q, %v (want fallback)", got, err)
	}
}

// The node's real /sys/fs/cgroup: on a v2 host the pod directory is
// right there; on a hybrid host (this machine) the v1 controller trees
// repeat every pod directory and the v2 hierarchy is at unified/, and the
// search must return the v2 one. A pod directory is made in the real
// hierarchy (and, on a hybrid host, in a v1 controller too).
func TestFindPodCgroupOnThisHost(t *testing.T) {
	privileged.Root(t, "this test makes cgroups")
	isV2 := func(p string) bool {
		var fs unix.Statfs_t
		return unix.Statfs(p, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC
	}
	uid := fmt.Sprintf("meshlet-test-%d", os.Getpid())
	var want string
	dirs := []string{}
	switch {
	case isV2("/sys/fs/cgroup"):
		want = filepath.Join("/sys/fs/cgroup", "pod"+uid)
		dirs = append(dirs, want)
	case isV2("/sys/fs/cgroup/unified"):
		want = filepath.Join("/sys/fs/cgroup/unified", "pod"+uid)
		dirs = append(dirs, want, filepath.Join("/sys/fs/cgroup/pids", "pod"+uid))
	default:
		t.Fatal("no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(d)
	}
	got, err := findPodCgroup("/sys/fs/cgroup", uid)
	if err != nil || got != want {
		t.Errorf("%q, %v; want %q", got, err, want)
	}
}
