package cli

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pagemapEntry reads the pagemap entry of the page at addr.
func pagemapEntry(t *testing.T, pm *os.File, addr uintptr) uint64 {
	t.Helper()
	var b [8]byte
	if _, err := pm.ReadAt(b[:], int64(addr/uintptr(os.Getpagesize()))*8); err != nil {
		t.Fatalf("read pagemap: %v", err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// openPagemap opens /proc/self/pagemap for the test's length.
func openPagemap(t *testing.T) *os.File {
	t.Helper()
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatalf("this test reads /proc/self/pagemap: %v", err)
	}
	t.Cleanup(func() { pm.Close() })
	return pm
}

// mapFile maps size bytes of the file at path privately with protection
// prot, and unmaps them when the test ends.
func mapFile(t *testing.T, path string, size, prot int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, size, prot, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap %s: %v", path, err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

// TestReleaseFilePagesKeepsPrivateCopies maps a real file privately, reads
// some pages and writes others (the kernel then holds private copies, as for
// a breakpoint or a relocated page), and checks that releaseFilePages
// unmaps the file's pages and keeps every written byte.
func TestReleaseFilePagesKeepsPrivateCopies(t *testing.T) {
	page := os.Getpagesize()
	const pages = 64
	content := bytes.Repeat([]byte{'f'}, pages*page)
	path := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	m := mapFile(t, path, pages*page, unix.PROT_READ|unix.PROT_WRITE)
	for i := 0; i < pages; i++ {
		if m[i*page] != 'f' { // every page mapped from the file
			t.Fatalf("page %d of the mapping reads %q", i, m[i*page])
		}
	}
	written := []int{3, 4, 40, 63}
	for _, i := range written {
		m[i*page+1] = 'w' // a private copy
	}
	// Read-only as the binary's mappings are.
	if err := syscall.Mprotect(m, syscall.PROT_READ); err != nil {
		t.Fatal(err)
	}
	pm := openPagemap(t)
	base := uintptr(unsafe.Pointer(&m[0]))
	for i := 0; i < pages; i++ {
		if e := pagemapEntry(t, pm, base+uintptr(i*page)); e&pmPresent == 0 {
			t.Fatalf("page %d not mapped after a read (pagemap %#x)", i, e)
		}
	}
	released, err := releaseFilePages(pm, base, base+uintptr(pages*page))
	if err != nil {
		t.Fatalf("releaseFilePages: %v", err)
	}
	if want := int64((pages - len(written)) * page); released != want {
		t.Errorf("released %d bytes, want %d (every page but the %d written)", released, want, len(written))
	}
	isWritten := map[int]bool{}
	for _, i := range written {
		isWritten[i] = true
	}
	for i := 0; i < pages; i++ {
		e := pagemapEntry(t, pm, base+uintptr(i*page))
		switch present := e&pmPresent != 0; {
		case isWritten[i] && !present:
			t.Errorf("written page %d was released", i)
		case !isWritten[i] && present:
			t.Errorf("read-only page %d is still mapped", i)
		}
	}
	// Contents: the written bytes survive, the released pages read back
	// from the file.
	for i := 0; i < pages; i++ {
		want := byte('f')
		if isWritten[i] {
			want = 'w'
		}
		if got := m[i*page+1]; got != want {
			t.Errorf("page %d byte 1 = %q, want %q", i, got, want)
		}
	}
}

// TestReleaseImagePages releases the test binary's own pages and checks
// that some were mapped and that the process still runs its code.
func TestReleaseImagePages(t *testing.T) {
	n, err := releaseImagePages()
	if err != nil {
		t.Fatalf("releaseImagePages: %v", err)
	}
	if n <= 0 {
		t.Fatalf("released %d bytes of the test binary; its code was certainly mapped", n)
	}
	// The code runs on, mapped again on use.
	var b bytes.Buffer
	b.WriteString("still running")
	if b.String() != "still running" {
		t.Fatal("the process misbehaves after the release")
	}
}

func TestImageMapping(t *testing.T) {
	st := &syscall.Stat_t{Ino: 9986481, Dev: uint64(unix.Mkdev(0xfe, 0))}
	const exe = "/usr/local/bin/my sidecar"
	for _, c := range []struct {
		line string
		ok   bool
	}{
		{"00400000-00ee0000 r-xp 00000000 fe:00 9986481                            /usr/local/bin/my sidecar", true},
		{"00ee0000-01cb6000 r--p 00ae0000 fe:00 9986481                            /usr/local/bin/my sidecar", true},
		// overlayfs: another device and inode in maps, the same path
		{"00ee0000-01cb6000 r--p 00ae0000 00:2a 77                                 /usr/local/bin/my sidecar", true},
		// the same file under another path (device and inode match)
		{"00400000-00ee0000 r-xp 00000000 fe:00 9986481                            /proc/1/root/sidecar", true},
		{"01cb6000-01d7a000 rw-p 018b6000 fe:00 9986481                            /usr/local/bin/my sidecar", false}, // data: private copies
		{"00400000-00ee0000 r-xs 00000000 fe:00 9986481                            /usr/local/bin/my sidecar", false}, // shared
		{"7f7172998000-7f71729be000 r--p 00000000 fe:00 326269                     /usr/lib/x86_64-linux-gnu/libc.so.6", false},
		{"01d7a000-03dc4000 rw-p 00000000 00:00 0 ", false},
		{"00400000-00ee0000 r-xp 00000000 fe:00 123                                /usr/local/bin/my", false}, // another file
	} {
		r, ok := imageMapping(c.line, exe, st)
		if ok != c.ok {
			t.Errorf("imageMapping(%q) = %v, want %v", c.line, ok, c.ok)
		}
		if ok && (r[0] == 0 || r[1] <= r[0]) {
			t.Errorf("imageMapping(%q) range %#x", c.line, r)
		}
	}
}
