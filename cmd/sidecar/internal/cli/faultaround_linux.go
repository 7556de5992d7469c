package cli

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The userfaultfd interface (include/uapi/linux/userfaultfd.h), which
// golang.org/x/sys/unix does not carry.
const (
	uffdUserModeOnly   = 1    // UFFD_USER_MODE_ONLY: no kernel-mode faults, so no privilege needed
	uffdAPI            = 0xAA // UFFD_API
	uffdFeatureWPAsync = 1 << 15
	uffdRegisterModeWP = 1 << 1
	// _IOWR(0xAA, 0x3F, struct uffdio_api) and _IOWR(0xAA, 0x00, struct uffdio_register).
	uffdioAPI      = 0xC018AA3F
	uffdioRegister = 0xC020AA00
)

type uffdioAPIArg struct{ api, features, ioctls uint64 }

type uffdioRegisterArg struct{ start, len, mode, ioctls uint64 }

// faultAround holds the userfaultfd that keeps the executable's mappings
// registered (closing it would unregister them) and the bytes registered.
var faultAround struct {
	mu sync.Mutex
	f  *os.File
	n  int64
}

// singlePageImageFaults makes each fault on this process's executable map
// the one page it needs. By default the kernel maps up to 64 KiB around a
// faulting page of a file (fault-around) from the page cache; Go binaries
// spread the code, types and function tables a request touches over the
// whole image, so a few hundred touched pages become 4-7 MiB of RSS. The
// kernel skips fault-around on a mapping registered with userfaultfd for
// write-protection (mm/memory.c, should_fault_around). It accepts such a
// registration of a regular file's mapping only in the asynchronous mode
// (UFFD_FEATURE_WP_ASYNC, Linux 6.7, where the architecture has userfaultfd
// write-protection, as x86-64 has). Nothing is ever
// write-protected, so no fault ever reaches the userfaultfd and no thread
// answers it. The pages stay in the page cache either way (and in the
// memory cgroup's charge): this changes what the process maps, VmRSS, not
// what the kernel caches. Returns the bytes of mappings registered. A
// second call (a second run in one process) keeps the first registration.
//
// What else changes: each page costs its own minor fault once (after start
// and after each release, about 16 times as many faults as with
// fault-around); khugepaged does not collapse the registered text into huge
// pages; the releases' MADV_DONTNEED takes the mmap lock rather than the
// VMA's; no other userfaultfd user can register these ranges (EBUSY).
//
// It needs userfaultfd allowed: seccomp's RuntimeDefault profiles
// (containerd's and Docker's) refuse it whatever the capabilities, as may
// an LSM; then it returns an error and the kernel goes on mapping around
// faults.
func singlePageImageFaults() (int64, error) {
	faultAround.mu.Lock()
	defer faultAround.mu.Unlock()
	if faultAround.f != nil {
		return faultAround.n, nil
	}
	ranges, err := imageRanges()
	if err != nil {
		return 0, fmt.Errorf("single-page binary faults: %w", err)
	}
	if len(ranges) == 0 {
		return 0, errors.New("single-page binary faults: no read-only mapping of the executable in /proc/self/maps")
	}
	f, err := noFaultAround(ranges)
	if err != nil {
		return 0, fmt.Errorf("single-page binary faults: %w", err)
	}
	var n int64
	for _, r := range ranges {
		n += int64(r[1] - r[0])
	}
	faultAround.f, faultAround.n = f, n
	return n, nil
}

// noFaultAround registers the page-aligned address ranges with a new
// userfaultfd in asynchronous write-protect mode, which turns the kernel's
// fault-around off for them, and returns the userfaultfd: the
// registrations last until it is closed.
func noFaultAround(ranges [][2]uintptr) (*os.File, error) {
	r0, _, e := syscall.Syscall(unix.SYS_USERFAULTFD, uffdUserModeOnly|unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if e != 0 {
		return nil, fmt.Errorf("userfaultfd: %w", e)
	}
	fd := int(r0)
	api := uffdioAPIArg{api: uffdAPI, features: uffdFeatureWPAsync}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uffdioAPI, uintptr(unsafe.Pointer(&api))); e != 0 {
		unix.Close(fd)
		if errors.Is(e, syscall.EINVAL) {
			return nil, fmt.Errorf("UFFDIO_API: no UFFD_FEATURE_WP_ASYNC here (Linux 6.7+ with userfaultfd write-protection for this architecture): %w", e)
		}
		return nil, fmt.Errorf("UFFDIO_API: %w", e)
	}
	for _, r := range ranges {
		reg := uffdioRegisterArg{start: uint64(r[0]), len: uint64(r[1] - r[0]), mode: uffdRegisterModeWP}
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uffdioRegister, uintptr(unsafe.Pointer(&reg))); e != 0 {
			unix.Close(fd) // unregisters what was registered
			return nil, fmt.Errorf("UFFDIO_REGISTER %#x-%#x: %w", r[0], r[1], e)
		}
	}
	// Wrapped only now: the descriptor polls as an error until UFFDIO_API.
	return os.NewFile(uintptr(fd), "userfaultfd"), nil
}
