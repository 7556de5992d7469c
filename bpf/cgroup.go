package bpf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// CurrentCgroup returns the cgroup v2 directory of the calling process, for
// example /sys/fs/cgroup/kubepods.slice/.../cri-containerd-<id>.scope. In a
// Kubernetes pod the pod's cgroup is its parent directory.
func CurrentCgroup() (string, error) {
	mnt, err := Cgroup2Mount()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("bpf: read own cgroup: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mnt, rel), nil
		}
	}
	return "", errors.New("bpf: read own cgroup: no cgroup v2 entry in /proc/self/cgroup")
}

// Cgroup2Mount returns where the cgroup v2 hierarchy is mounted: on a hybrid
// host (v1 controllers plus a separate v2 mount) it is not /sys/fs/cgroup.
func Cgroup2Mount() (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("bpf: find the cgroup2 mount: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && fs[0] == "cgroup2" {
			if f := strings.Fields(pre); len(f) >= 5 {
				return unescapeMountPath(f[4]), nil
			}
		}
	}
	return "", errors.New("bpf: find the cgroup2 mount: no cgroup2 file system is mounted")
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupID is the id bpf_get_current_cgroup_id returns for tasks in the
// cgroup at path: the inode number of its directory.
func cgroupID(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("bpf: cgroup %q: %w", path, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return 0, fmt.Errorf("bpf: cgroup %q: %w", path, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, fmt.Errorf("bpf: cgroup %q: not a cgroup v2 directory", path)
	}
	return st.Ino, nil
}
