package cli

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxPodCgroupDepth bounds the search below the host cgroup v2 root: the
// kubelet puts pods three levels down (kubepods.slice /
// kubepods-<qos>.slice / kubepods-<qos>-pod<uid>.slice with the systemd
// driver, kubepods/<qos>/pod<uid> with cgroupfs; Guaranteed pods sit one
// level higher), below its cgroupRoot if it has one (one or two levels).
const maxPodCgroupDepth = 5

// findPodCgroup returns the cgroup v2 directory of the pod with uid under
// hostRoot, the node's cgroup hierarchy as mounted into the sidecar. The
// kubelet names it pod<uid> (cgroupfs driver) or ...-pod<uid with _ for
// ->.slice (systemd driver). Exactly one match is required.
func findPodCgroup(hostRoot, uid string) (string, error) {
	if uid == "" {
		return "", fmt.Errorf("pod cgroup: POD_UID is empty")
	}
	hostRoot = cgroup2Root(hostRoot)
	want := map[string]bool{"pod" + uid: true, "pod" + strings.ReplaceAll(uid, "-", "_"): true}
	var found []string
	err := filepath.WalkDir(hostRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == hostRoot {
				return err
			}
			return fs.SkipDir // a cgroup that vanished or that we may not read
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(hostRoot, path)
		if rel != "." && strings.Count(rel, string(filepath.Separator))+1 > maxPodCgroupDepth {
			return fs.SkipDir
		}
		name := strings.TrimSuffix(d.Name(), ".slice")
		if i := strings.LastIndex(name, "-pod"); i >= 0 {
			name = name[i+1:]
		}
		if want[name] {
			found = append(found, path)
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("pod cgroup: walk %s: %w", hostRoot, err)
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("pod cgroup: no cgroup for pod %s under %s (searched %d levels for pod<uid>)", uid, hostRoot, maxPodCgroupDepth)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("pod cgroup: pod %s matches several cgroups under %s: %s", uid, hostRoot, strings.Join(found, ", "))
}

// cgroup2Root is where the cgroup v2 hierarchy is in the node's cgroup
// mount: the mount itself on a v2 host, its unified/ submount on a hybrid
// one (v1 controllers beside a v2 mount, whose v1 trees repeat the pod
// directories but cannot take the programs). A directory that is neither
// (a test layout) is searched as it is.
func cgroup2Root(hostRoot string) string {
	isV2 := func(p string) bool {
		var fs unix.Statfs_t
		return unix.Statfs(p, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC
	}
	if !isV2(hostRoot) && isV2(filepath.Join(hostRoot, "unified")) {
		return filepath.Join(hostRoot, "unified")
	}
	return hostRoot
}

// podCgroupFromEnv resolves the pod cgroup as the injected sidecar sees
// it: MESHLET_POD_CGROUP if set, else the search by POD_UID under
// MESHLET_HOST_CGROUP if that directory is mounted, else "" (the caller
// falls back to the parent of its own cgroup).
func podCgroupFromEnv(getenv func(string) string) (string, error) {
	if p := getenv("MESHLET_POD_CGROUP"); p != "" {
		return p, nil
	}
	root := getenv("MESHLET_HOST_CGROUP")
	if root == "" {
		return "", nil
	}
	if _, err := os.Stat(root); err != nil {
		return "", fmt.Errorf("pod cgroup: MESHLET_HOST_CGROUP: %w", err)
	}
	return findPodCgroup(root, getenv("POD_UID"))
}
