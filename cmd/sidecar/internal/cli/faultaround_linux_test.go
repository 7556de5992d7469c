package cli

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// presentPages counts the pages of [addr, addr+n) that are mapped.
func presentPages(t *testing.T, pm *os.File, addr, n uintptr) int {
	t.Helper()
	page := uintptr(os.Getpagesize())
	c := 0
	for a := addr; a < addr+n; a += page {
		if pagemapEntry(t, pm, a)&pmPresent != 0 {
			c++
		}
	}
	return c
}

// TestNoFaultAround maps a file whose pages are all in the page cache and
// reads one byte of it: the kernel maps the pages around it too
// (fault-around); after noFaultAround it maps that one page only, and once
// the userfaultfd is closed it maps around faults again. Needs Linux 6.7
// with userfaultfd (CI's kernel has both).
func TestNoFaultAround(t *testing.T) {
	page := os.Getpagesize()
	const size = 1 << 20
	path := filepath.Join(t.TempDir(), "data")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i / page)
	}
	// Written a page at a time (one large write can leave the page cache
	// holding large folios, around which this kernel was seen not to map)
	// and written back before it is mapped (the kernel maps around a fault
	// only pages it can take without waiting; writeback holds page locks).
	f0, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < size; i += page {
		if _, err := f0.Write(data[i : i+page]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f0.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f0.Close(); err != nil {
		t.Fatal(err)
	}
	pm := openPagemap(t)
	window := uintptr(64 << 10)
	// touch reads a byte in the middle of an aligned 64 KiB window of m and
	// returns how many pages of that window are mapped.
	touch := func(m []byte) int {
		base := uintptr(unsafe.Pointer(&m[0]))
		off := (base+window-1)&^(window-1) - base + window // a whole window inside m
		if got, want := m[off+window/2], byte((off+window/2)/uintptr(page)); got != want {
			t.Fatalf("read %d at offset %d, want %d", got, off+window/2, want)
		}
		return presentPages(t, pm, base+off, window)
	}

	plain := mapFile(t, path, size, unix.PROT_READ)
	if n := touch(plain); n <= 1 {
		t.Fatalf("a read mapped %d pages of its 64 KiB window without registration: this kernel does not map around faults, so the test shows nothing", n)
	}

	m := mapFile(t, path, size, unix.PROT_READ)
	base := uintptr(unsafe.Pointer(&m[0]))
	f, err := noFaultAround([][2]uintptr{{base, base + size}})
	if err != nil {
		t.Fatalf("noFaultAround (needs Linux 6.7 with userfaultfd): %v", err)
	}
	if n := touch(m); n != 1 {
		t.Errorf("a read mapped %d pages of its 64 KiB window after registration, want 1", n)
	}
	// Every byte reads as written.
	for i := 0; i < size; i += page {
		if m[i] != byte(i/page) {
			t.Fatalf("byte %d reads %d, want %d", i, m[i], byte(i/page))
		}
	}

	f.Close()
	if err := unix.Madvise(m, unix.MADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if n := touch(m); n <= 1 {
		t.Errorf("a read mapped %d pages of its window after the userfaultfd was closed: the registration outlived it", n)
	}
}

// sink keeps the tests' reads from being optimised away.
var sink byte

// TestSinglePageImageFaults registers the test binary's own mappings,
// releases their pages and reads one byte in the middle of a 64 KiB window
// of the last one (read-only data and function tables): fewer than the
// window's 16 pages come back (fault-around would map them all). The
// registration lasts for the rest of the package's tests (as for the
// in-process runs, which register too); none of them depends on
// fault-around.
func TestSinglePageImageFaults(t *testing.T) {
	n, err := singlePageImageFaults()
	if err != nil {
		t.Fatalf("singlePageImageFaults (needs Linux 6.7 with userfaultfd): %v", err)
	}
	if n <= 0 {
		t.Fatalf("registered %d bytes of the test binary", n)
	}
	ranges, err := imageRanges()
	if err != nil {
		t.Fatal(err)
	}
	r := ranges[len(ranges)-1]
	window := uintptr(64 << 10)
	w := (r[0]+(r[1]-r[0])/2)&^(window-1) - window
	if w < r[0] {
		t.Fatalf("image mapping %#x-%#x is too small for the test", r[0], r[1])
	}
	if _, err := releaseImagePages(); err != nil {
		t.Fatal(err)
	}
	sink = *(*byte)(unsafe.Add(unsafe.Pointer(nil), w+window/2))
	pm := openPagemap(t)
	if got := presentPages(t, pm, w, window); got >= int(window)/os.Getpagesize() {
		t.Errorf("%d of the 16 pages of the window at %#x are mapped after reading one: the kernel mapped around the fault", got, w)
	}
}
