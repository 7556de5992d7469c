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
// whole image, so a few hundred touched pages become 5-7 MiB of RSS. The
// kernel skips fault-around on a mapping registered with userfaultfd for
// write-protection (mm/memory.c, should_fault_around); with the
// asynchronous mode (UFFD_FEATURE_WP_ASYNC, Linux 6.7) such a
// registration needs no thread to answer faults, and on read-only mappings
// that are never write-protected it changes nothing else. The pages stay
// in the page cache either way: this changes what the process maps, not
// what the kernel caches. Returns the bytes of mappings registered. A
// second call (a second run in one process) keeps the first registration.
//
// It needs userfaultfd (CONFIG_USERFAULTFD, and a seccomp profile that
// allows it: Docker's and containerd's defaults allow it only with
// CAP_SYS_PTRACE) and Linux 6.7; without them it returns an error and the
// kernel goes on mapping around faults.
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
	fd, _, e := syscall.Syscall(unix.SYS_USERFAULTFD, uffdUserModeOnly|unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if e != 0 {
		return nil, fmt.Errorf("userfaultfd: %w", e)
	}
	f := os.NewFile(fd, "userfaultfd")
	api := uffdioAPIArg{api: uffdAPI, features: uffdFeatureWPAsync}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, uffdioAPI, uintptr(unsafe.Pointer(&api))); e != 0 {
		f.Close()
		if errors.Is(e, syscall.EINVAL) {
			return nil, fmt.Errorf("UFFDIO_API: the kernel lacks UFFD_FEATURE_WP_ASYNC (Linux 6.7): %w", e)
		}
		return nil, fmt.Errorf("UFFDIO_API: %w", e)
	}
	for _, r := range ranges {
		reg := uffdioRegisterArg{start: uint64(r[0]), len: uint64(r[1] - r[0]), mode: uffdRegisterModeWP}
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, uffdioRegister, uintptr(unsafe.Pointer(&reg))); e != 0 {
			f.Close() // unregisters what was registered
			return nil, fmt.Errorf("UFFDIO_REGISTER %#x-%#x: %w", r[0], r[1], e)
		}
	}
	return f, nil
}
