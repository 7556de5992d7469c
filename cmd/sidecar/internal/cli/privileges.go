package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// errMapsNeedPrivilege is dropPrivileges' answer when the kernel would not
// let the unprivileged process use its eBPF maps: the process stays root.
var errMapsNeedPrivilege = errors.New("the eBPF maps are not usable")

// errNoSetuid is dropPrivileges' answer when the process may not change
// its uid (no CAP_SETUID, e.g. a container that did not add it): the
// process stays root.
var errNoSetuid = errors.New("cannot change uid (CAP_SETUID and CAP_SETGID are needed)")

// dropPrivileges switches every thread of the process to uid and gid
// (Istio's proxy is 1337:1337) with no supplementary groups. Changing all
// of a root thread's uids to non-zero values clears its permitted,
// effective and ambient capabilities, and the container's no_new_privs
// (allowPrivilegeEscalation: false) keeps an exec from getting any back.
// What the sidecar keeps are its file descriptors: the bpf_links that hold
// the redirect, the maps, the listening sockets.
//
// probe is run first, by probeUnprivileged: the maps must stay usable
// without CAP_BPF, which Linux allows from 6.5 on, and before that only when
// kernel.unprivileged_bpf_disabled is 0. When probe fails the process is
// left as it was and the error says why.
//
// After the switch every thread's /proc status is checked; a thread that
// still holds a permitted, effective or ambient capability, or a uid or gid
// other than the wanted ones, is an error, and the caller must not go on.
func dropPrivileges(uid, gid int, probe func() error) error {
	if uid <= 0 || gid <= 0 {
		return fmt.Errorf("privileges: uid %d and gid %d must be > 0", uid, gid)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("privileges: running as uid %d, not root: nothing to drop", os.Geteuid())
	}
	if probe != nil {
		if err := probeUnprivileged(uid, probe); errors.Is(err, errNoSetuid) {
			return fmt.Errorf("privileges: %w", err)
		} else if err != nil {
			return fmt.Errorf("privileges: %w as uid %d (Linux before 6.5 needs CAP_BPF for them unless kernel.unprivileged_bpf_disabled=0; this is %s, unprivileged_bpf_disabled=%s): %w",
				errMapsNeedPrivilege, uid, kernelRelease(), unprivilegedBPF(), err)
		}
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("privileges: setgroups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("privileges: setresgid(%d): %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("privileges: setresuid(%d): %w", uid, err)
	}
	return checkCredentials(uid, gid)
}

// probeUnprivileged runs probe on one thread whose effective uid alone is
// uid: the kernel empties the thread's effective capabilities (the ones
// every check uses) and keeps the permitted ones while the saved uid is 0,
// so the thread then takes its root effective uid and capabilities back.
// Raw syscalls change this thread only (syscall.Setresuid changes them all).
func probeUnprivileged(uid int, probe func() error) error {
	runtime.LockOSThread()
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		runtime.UnlockOSThread()
		return fmt.Errorf("%w: seteuid(%d) on the probe thread: %w", errNoSetuid, uid, e)
	}
	err := func() error {
		// The probe means something only without capabilities.
		b, err := os.ReadFile("/proc/thread-self/status")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "CapEff:"); ok && strings.Trim(strings.TrimSpace(v), "0") != "" {
				return fmt.Errorf("the probe thread still has capabilities (CapEff %s)", strings.TrimSpace(v))
			}
		}
		return probe()
	}()
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0)); e != 0 {
		// Cannot happen (the saved uid is 0); should it, the thread stays
		// locked to the caller's goroutine rather than serve another.
		return fmt.Errorf("seteuid(0) after the probe: %w", e)
	}
	runtime.UnlockOSThread()
	return err
}

// checkCredentials reads every thread's status: all uids and gids must be
// the wanted ones and no capability may be left.
func checkCredentials(uid, gid int) error {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("privileges: list threads: %v (%d found)", err, len(tasks))
	}
	var errs []error
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // the thread has exited
			}
			errs = append(errs, err)
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			f := strings.Fields(v)
			switch k {
			case "Uid", "Gid":
				want := fmt.Sprint(uid)
				if k == "Gid" {
					want = fmt.Sprint(gid)
				}
				for _, id := range f {
					if id != want {
						errs = append(errs, fmt.Errorf("%s: %s %v, want %s", path, k, f, want))
						break
					}
				}
			case "CapPrm", "CapEff", "CapAmb":
				if len(f) != 1 || strings.Trim(f[0], "0") != "" {
					errs = append(errs, fmt.Errorf("%s: %s %v, want none", path, k, f))
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("privileges: after switching to %d:%d: %w", uid, gid, errors.Join(errs...))
	}
	return nil
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "Linux (release unknown)"
	}
	return "Linux " + strings.TrimSpace(string(b))
}

func unprivilegedBPF() string {
	b, err := os.ReadFile("/proc/sys/kernel/unprivileged_bpf_disabled")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
