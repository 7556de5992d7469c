package cli

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Bits of a /proc/PID/pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent   = 1 << 63
	pmSwapped   = 1 << 62
	pmFileShare = 1 << 61 // a page of the file (or shared anonymous), not a private copy
)

// releaseImagePages drops this process's mappings of the pages of its own
// executable that are still the file's pages, in the read-only mappings
// (code, read-only data, the function tables). Package initialisation and
// configuration loading touch code and data all over the binary, and the
// kernel maps up to 64 KiB around each touched page; most of it is never
// used again. The pages stay in the page cache (shared with every other
// process running the binary); a page used again is mapped again by a
// minor fault. Returns the number of bytes that were mapped and released.
//
// A page that is a private copy (a debugger's breakpoint, a uprobe, a
// relocated read-only page of a position-independent binary) is kept:
// releasing it would bring back the file's contents. A breakpoint or uprobe
// set in the microseconds between the pagemap read and the madvise would be
// lost: nothing makes the two one step. Under mlockall madvise fails with
// EINVAL (the caller then stops trying).
func releaseImagePages() (int64, error) {
	ranges, err := imageRanges()
	if err != nil {
		return 0, fmt.Errorf("release image pages: %w", err)
	}
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, fmt.Errorf("release image pages: %w", err)
	}
	defer pm.Close()
	var total int64
	for _, r := range ranges {
		n, err := releaseFilePages(pm, r[0], r[1])
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// imageRanges lists the address ranges of this process's private read-only
// mappings of its own executable (imageMapping).
func imageRanges() ([][2]uintptr, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &st); err != nil {
		return nil, fmt.Errorf("stat /proc/self/exe: %w", err)
	}
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer maps.Close()
	var ranges [][2]uintptr
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		if r, ok := imageMapping(sc.Text(), exe, &st); ok {
			ranges = append(ranges, r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/self/maps: %w", err)
	}
	return ranges, nil
}

// imageMapping parses a line of /proc/self/maps,
//
//	00400000-00ee0000 r-xp 00000000 fe:00 9986481     /usr/local/bin/sidecar
//
// and returns its address range if it is a private read-only mapping of the
// executable: its path is exe's, or its device and inode are st's (the path
// can differ under overlayfs, the inode under some file systems' views).
func imageMapping(line, exe string, st *syscall.Stat_t) ([2]uintptr, bool) {
	f := strings.Fields(line)
	if len(f) < 6 || strings.ContainsRune(f[1], 'w') || !strings.HasSuffix(f[1], "p") {
		return [2]uintptr{}, false
	}
	// The path is the rest of the line after the inode (it may hold spaces).
	rest := line
	for range 5 {
		rest = strings.TrimLeft(rest, " ")
		if i := strings.IndexByte(rest, ' '); i >= 0 {
			rest = rest[i:]
		}
	}
	path := strings.TrimLeft(rest, " ")
	ino, err := strconv.ParseUint(f[4], 10, 64)
	maj, min, _ := strings.Cut(f[3], ":")
	if path != exe && (err != nil || ino != st.Ino || !sameDev(maj, min, uint64(st.Dev))) {
		return [2]uintptr{}, false
	}
	lo, hi, _ := strings.Cut(f[0], "-")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return [2]uintptr{}, false
	}
	return [2]uintptr{uintptr(start), uintptr(end)}, true
}

// sameDev reports whether the hexadecimal major:minor of /proc/PID/maps is
// the device dev of a stat.
func sameDev(maj, min string, dev uint64) bool {
	a, err1 := strconv.ParseUint(maj, 16, 32)
	b, err2 := strconv.ParseUint(min, 16, 32)
	return err1 == nil && err2 == nil && uint64(unix.Major(dev)) == a && uint64(unix.Minor(dev)) == b
}

// releaseFilePages releases the pages of [start, end), a private file
// mapping, that are the file's own pages or not mapped at all; a private
// copy, mapped or swapped out, is kept with its contents. pagemap is the
// process's /proc/self/pagemap. Returns the bytes of mapped pages released.
func releaseFilePages(pagemap io.ReaderAt, start, end uintptr) (int64, error) {
	page := uintptr(os.Getpagesize())
	const batch = 512 // pagemap entries read at a time
	buf := make([]byte, 8*batch)
	var released int64
	runStart, inRun := uintptr(0), false
	flush := func(to uintptr) error {
		if !inRun {
			return nil
		}
		inRun = false
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, runStart, to-runStart, unix.MADV_DONTNEED); e != 0 {
			return fmt.Errorf("release image pages: madvise %#x-%#x: %w", runStart, to, e)
		}
		return nil
	}
	for a := start; a < end; {
		n := min(uintptr(batch), (end-a)/page)
		if n == 0 {
			break // an unaligned tail: not a whole page
		}
		b := buf[:8*n]
		if _, err := pagemap.ReadAt(b, int64(a/page)*8); err != nil {
			return released, fmt.Errorf("release image pages: read pagemap at %#x: %w", a, err)
		}
		for i := range n {
			e := binary.LittleEndian.Uint64(b[8*i:])
			keep := e&pmSwapped != 0 || (e&pmPresent != 0 && e&pmFileShare == 0)
			p := a + i*page
			if keep {
				if err := flush(p); err != nil {
					return released, err
				}
				continue
			}
			if e&pmPresent != 0 {
				released += int64(page)
			}
			if !inRun {
				runStart, inRun = p, true
			}
		}
		a += n * page
	}
	return released, flush(end)
}
