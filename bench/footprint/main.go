// Command footprint counts the distinct cache lines of code and of data a
// program touches per request, from valgrind's lackey memory trace
// (`valgrind --tool=lackey --trace-mem=yes`) on its standard input.
//
// At low load every wake-up of a proxy finds its caches cold, so what one
// request costs follows how much code and data it touches; this machine
// has no performance counters to count the misses, but the trace lists
// every instruction fetch and every load and store. The trace is cut into
// windows at each fetch of the marker function's first instruction (a
// function the program runs once per request); the first -skip windows
// (start-up, warm-up) are dropped. A line counts for the request when it
// is touched in at least -quorum of the remaining windows, so that what
// runs now and then (a timer, the runtime's monitor) is left out; so are
// the functions -exclude matches (garbage collection and preemption,
// which a program run a hundred times slower under valgrind does in
// every window and at full speed seldom).
//
// Prints one JSON object: the lines (64 bytes) and pages (4 KiB) of code
// and of data per request, the code lines by package and by function,
// and the data lines by region (the binary's sections by name, anything
// else as anonymous memory: heap, stacks, the runtime's own) and by the
// function that touches each first.
package main

import (
	"bufio"
	"cmp"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const lineShift = 6 // 64-byte cache lines

// defaultExclude names the runtime functions that run in every window
// only because the program runs slowly: garbage collection (the
// benchmark runs with GOGC=off; a collection still running from start-up
// marks), and the monitor thread and the preemption it asks for once a
// goroutine has run for 10 ms.
const defaultExclude = `^runtime\.(gc|\(\*gc|wbBuf|bulkBarrier|typePointers|findObject|tryDeferToSpanScan|\(\*mspan\)\.heapBits|greyobject|scanobject|markBits|newstack|morestack|goschedImpl|gopreempt|retake|preemptone|sysmon|usleep|checkdead|incidlelocked)`

func main() {
	bin := flag.String("bin", "", "the traced `binary` (its symbols name the code)")
	marker := flag.String("marker", "", "the `function` whose first instruction starts each window")
	markerAddr := flag.String("marker-addr", "", "the marker's `address` (hex), for a function outside -bin's symbols (a shared library's)")
	per := flag.Int("per", 1, "marker fetches per window: `N` for a marker run N times per request")
	skip := flag.Int("skip", 10, "windows to drop at the start")
	quorum := flag.Float64("quorum", 0.8, "share of the windows a line must be touched in")
	exclude := flag.String("exclude", defaultExclude, "`regexp` of functions left out")
	top := flag.Int("top", 30, "functions to list (0: all)")
	flag.Parse()
	syms, secs, err := readBinary(*bin)
	if err != nil {
		log.Fatalf("footprint: %v", err)
	}
	m, ok := syms.addr(*marker)
	if *markerAddr != "" {
		m, err = strconv.ParseUint(strings.TrimPrefix(*markerAddr, "0x"), 16, 64)
		ok = err == nil
	}
	if !ok {
		log.Fatalf("footprint: no function %q in %s (-marker-addr %q)", *marker, *bin, *markerAddr)
	}
	if *per < 1 {
		log.Fatalf("footprint: -per %d: want 1 or more", *per)
	}
	ex, err := regexp.Compile(*exclude)
	if err != nil {
		log.Fatalf("footprint: -exclude: %v", err)
	}
	w, err := readWindows(bufio.NewReaderSize(os.Stdin, 1<<20), m, *per, *skip, syms.matching(ex))
	if err != nil {
		log.Fatalf("footprint: reading the trace: %v", err)
	}
	if w.n == 0 {
		log.Fatalf("footprint: no window after the first %d (is %s run once per request?)", *skip, *marker)
	}
	r := summarize(w, syms, secs, *quorum, ex, *top)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(r); err != nil {
		log.Fatalf("footprint: %v", err)
	}
}

// windows holds, for every line touched in a counted window, how many
// windows touched it; for a data line also, by the code line of the
// instruction that touched it first in a window, in how many windows
// that instruction was the first.
type windows struct {
	n          int
	code, data map[uint64]int
	firstBy    map[uint64]map[uint64]int
	// jumps counts, for every transfer (a fetch that does not follow the
	// one before it: a taken branch, call or return), the windows it is
	// made in.
	jumps map[jump]int
	// insns is each counted window's instruction count (fetches outside
	// the excluded functions), fetches the fetches of each instruction
	// address over all counted windows (by address, not line: a function
	// may start within a line that another ends).
	insns   []int
	fetches map[uint64]int
}

// jump is a transfer of control from the instruction at from to the one
// at to.
type jump struct{ from, to uint64 }

// readWindows reads a lackey trace: "I  addr,size" for an instruction
// fetch, " L|S|M addr,size" for a load, store or modify; other lines
// (valgrind's own) are skipped, and so are the loads and stores of an
// instruction dropped reports (one of an excluded function: the write
// barrier of a collection still marking touches heap objects the
// request does not).
func readWindows(r *bufio.Reader, marker uint64, per, skip int, dropped func(ins uint64) bool) (*windows, error) {
	w := &windows{code: map[uint64]int{}, data: map[uint64]int{}, firstBy: map[uint64]map[uint64]int{}, jumps: map[jump]int{}, fetches: map[uint64]int{}}
	fetches := map[uint64]int{} // this window's, by instruction address
	code := map[uint64]struct{}{}
	jumps := map[jump]struct{}{}
	var last, next uint64       // the last instruction fetched and the address after it
	data := map[uint64]uint64{} // data line: the code line that touched it first
	var ins uint64              // the code line of the last instruction fetched
	drop := false               // its loads and stores are not counted
	seen := -1                  // windows started so far, less one
	hits := 0                   // marker fetches so far
	insns := 0                  // instructions fetched in this window
	end := func() {
		if seen >= skip {
			w.n++
			w.insns = append(w.insns, insns)
			for l, n := range fetches {
				w.fetches[l] += n
			}
			for l := range code {
				w.code[l]++
			}
			for j := range jumps {
				w.jumps[j]++
			}
			for l, by := range data {
				w.data[l]++
				m := w.firstBy[l]
				if m == nil {
					m = map[uint64]int{}
					w.firstBy[l] = m
				}
				m[by]++
			}
		}
		clear(code)
		clear(data)
		clear(jumps)
		clear(fetches)
		insns = 0
	}
	for {
		line, err := r.ReadSlice('\n')
		if err == io.EOF {
			break // a window cut short by the program's end is not counted
		}
		if err != nil && err != bufio.ErrBufferFull {
			return nil, err
		}
		kind, addr, size, ok := parseAccess(line)
		if !ok {
			continue
		}
		if kind == 'I' {
			if addr == marker {
				if hits%per == 0 {
					if seen >= 0 {
						end()
					}
					seen++
				}
				hits++
			}
			ins, drop = addr>>lineShift, dropped(addr)
			if seen >= skip && !drop {
				insns++
				fetches[addr]++
				if addr != next && last != 0 {
					jumps[jump{last, addr}] = struct{}{}
				}
			}
			last, next = addr, addr+size
		}
		if seen < skip || kind != 'I' && drop {
			continue
		}
		for l := addr >> lineShift; l <= (addr+size-1)>>lineShift; l++ {
			if kind == 'I' {
				code[l] = struct{}{}
			} else if _, ok := data[l]; !ok {
				data[l] = ins
			}
		}
	}
	return w, nil
}

// parseAccess reads one trace line; ok is false for anything else.
func parseAccess(line []byte) (kind byte, addr, size uint64, ok bool) {
	switch {
	case len(line) > 3 && line[0] == 'I' && line[1] == ' ' && line[2] == ' ':
		kind = 'I'
	case len(line) > 3 && line[0] == ' ' && strings.IndexByte("LSM", line[1]) >= 0 && line[2] == ' ':
		kind = 'D'
	default:
		return 0, 0, 0, false
	}
	s := line[3:]
	i := 0
	for ; i < len(s) && s[i] != ','; i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			addr = addr<<4 | uint64(c-'0')
		case 'a' <= c && c <= 'f':
			addr = addr<<4 | uint64(c-'a'+10)
		default:
			return 0, 0, 0, false
		}
	}
	if i == 0 || i == len(s) {
		return 0, 0, 0, false
	}
	for i++; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		size = size*10 + uint64(s[i]-'0')
	}
	if size == 0 || i < len(s) && s[i] != '\n' {
		return 0, 0, 0, false
	}
	return kind, addr, size, true
}

// symbol is one ELF symbol of the binary.
type symbol struct {
	name       string
	addr, size uint64
}

// symbols are the binary's symbols by address.
type symbols []symbol

// readBinary reads the symbols and the allocated sections of bin.
func readBinary(bin string) (symbols, []*elf.Section, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	all, err := f.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		// A stripped binary (a distribution's nginx): its dynamic
		// symbols, if any, name what they can; the counts stand.
		all, err = f.DynamicSymbols()
		if errors.Is(err, elf.ErrNoSymbols) {
			all, err = nil, nil
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", bin, err)
	}
	var s symbols
	for _, y := range all {
		if y.Value != 0 && y.Section != elf.SHN_UNDEF {
			s = append(s, symbol{y.Name, y.Value, y.Size})
		}
	}
	// Of the symbols at one address the linker's section markers
	// (runtime.rodata, runtime.types) come first: at names an address by
	// the last, the most specific (type:*).
	marker := func(y symbol) int {
		if strings.HasPrefix(y.name, "runtime.") {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(s, func(a, b symbol) int { return cmp.Or(cmp.Compare(a.addr, b.addr), cmp.Compare(marker(a), marker(b))) })
	var secs []*elf.Section
	for _, sec := range f.Sections {
		if sec.Flags&elf.SHF_ALLOC != 0 && sec.Addr != 0 {
			secs = append(secs, sec)
		}
	}
	return s, secs, nil
}

// matching reports, with a cache, whether the function holding an
// instruction's address matches ex.
func (s symbols) matching(ex *regexp.Regexp) func(uint64) bool {
	cache := map[uint64]bool{}
	return func(a uint64) bool {
		m, ok := cache[a]
		if !ok {
			m = ex.MatchString(s.at(a))
			cache[a] = m
		}
		return m
	}
}

// addr is the address of the function name.
func (s symbols) addr(name string) (uint64, bool) {
	for _, y := range s {
		if y.name == name {
			return y.addr, true
		}
	}
	return 0, false
}

// at is the symbol at or before a (the linker's markers, such as
// runtime.types, have no size: what follows them up to the next symbol is
// theirs).
func (s symbols) at(a uint64) string {
	i, _ := slices.BinarySearchFunc(s, a+1, func(y symbol, a uint64) int { return cmp.Compare(y.addr, a) })
	i-- // the last symbol at or before a
	if i < 0 {
		return "?"
	}
	return s[i].name
}

// pkgOf is the package path of a symbol name: up to the first dot after
// its last slash, type arguments left out.
func pkgOf(name string) string {
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	name = strings.TrimPrefix(name, "type:.eq.")
	slash := strings.LastIndexByte(name, '/')
	if dot := strings.IndexByte(name[slash+1:], '.'); dot >= 0 {
		return name[:slash+1+dot]
	}
	return name
}

// count is one row of a breakdown.
type count struct {
	Name  string `json:"name"`
	Lines int    `json:"lines"`
}

// result is what footprint prints.
type result struct {
	Windows   int `json:"windows"`
	CodeLines int `json:"code_lines"`
	CodePages int `json:"code_pages"`
	// Jumps are the distinct transfers of control (taken branches, calls,
	// returns) into code not excluded: each a branch predictor entry,
	// cold at a wake-up.
	Jumps int `json:"jumps"`
	// Instructions is the median window's count of instructions executed
	// outside the excluded functions: the work a request takes, at any
	// load, where the lines count what a cold wake-up must fetch.
	Instructions int `json:"instructions"`
	// InsnsByPkg and InsnsByFunc share the instructions out (the mean
	// window's, in Lines) by package and function.
	InsnsByPkg   []count `json:"instructions_by_package"`
	InsnsByFunc  []count `json:"instructions_by_function"`
	DataLines    int     `json:"data_lines"`
	DataPages    int     `json:"data_pages"`
	CodeByPkg    []count `json:"code_by_package"`
	CodeByFunc   []count `json:"code_by_function"`
	DataByRegion []count `json:"data_by_region"`
	// DataByFunc names each data line by the function whose instruction
	// touched it first in most windows (a stack frame's lines by the
	// function that first writes them, often its caller's call).
	DataByFunc []count `json:"data_by_function"`
}

// summarize keeps the lines touched in at least quorum of the windows.
func summarize(w *windows, syms symbols, secs []*elf.Section, quorum float64, ex *regexp.Regexp, top int) result {
	r := result{Windows: w.n}
	if len(w.insns) > 0 {
		r.Instructions = slices.Sorted(slices.Values(w.insns))[len(w.insns)/2]
	}
	need := int(quorum*float64(w.n) + 0.999)
	pkgs, funcs, regions, dfuncs := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	pages := map[uint64]bool{}
	for l, n := range w.code {
		if n < need {
			continue
		}
		fn := syms.at(l << lineShift)
		if ex.MatchString(fn) {
			continue
		}
		r.CodeLines++
		pages[l>>(12-lineShift)] = true
		pkgs[pkgOf(fn)]++
		funcs[fn]++
	}
	r.CodePages = len(pages)
	clear(pages)
	for j, n := range w.jumps {
		if n >= need && !ex.MatchString(syms.at(j.to)) {
			r.Jumps++
		}
	}
	for l, n := range w.data {
		if n < need {
			continue
		}
		r.DataLines++
		pages[l>>(12-lineShift)] = true
		regions[region(l<<lineShift, syms, secs)]++
		dfuncs[syms.at(firstOf(w.firstBy[l])<<lineShift)]++
	}
	r.DataPages = len(pages)
	ipkgs, ifuncs := map[string]int{}, map[string]int{}
	for a, n := range w.fetches {
		fn := syms.at(a)
		ipkgs[pkgOf(fn)] += n
		ifuncs[fn] += n
	}
	for _, m := range []map[string]int{ipkgs, ifuncs} {
		for k, n := range m {
			m[k] = (n + w.n/2) / w.n
		}
	}
	r.InsnsByPkg = rank(ipkgs, 0)
	r.InsnsByFunc = rank(ifuncs, top)
	r.CodeByPkg = rank(pkgs, 0)
	r.CodeByFunc = rank(funcs, top)
	r.DataByRegion = rank(regions, 0)
	r.DataByFunc = rank(dfuncs, top)
	return r
}

// firstOf is the code line that was first in the most windows (the lowest
// of equals, so that a run prints the same).
func firstOf(m map[uint64]int) uint64 {
	var best uint64
	n := 0
	for l, c := range m {
		if c > n || c == n && l < best {
			best, n = l, c
		}
	}
	return best
}

// region names where a data address lies: read-only data by the linker's
// kind of symbol (type descriptors, string constants, itabs...), other
// sections by name, anything outside the binary as anonymous memory.
func region(a uint64, syms symbols, secs []*elf.Section) string {
	for _, s := range secs {
		if s.Addr <= a && a < s.Addr+s.Size {
			if s.Name != ".rodata" {
				return s.Name
			}
			switch name := syms.at(a); {
			case name == "type:*":
				return ".rodata: type descriptors"
			case name == "go:funcdesc":
				return ".rodata: function values"
			case strings.HasPrefix(name, "go:string."):
				return ".rodata: string constants"
			case strings.HasPrefix(name, "go:itab."):
				return ".rodata: itabs"
			case strings.HasPrefix(name, "runtime.gcbits."):
				return ".rodata: GC bitmaps"
			default:
				return ".rodata: other"
			}
		}
	}
	return "anonymous (heap, stacks, runtime)"
}

// rank sorts m by lines, most first, keeping top rows (all if 0).
func rank(m map[string]int, top int) []count {
	out := make([]count, 0, len(m))
	for k, v := range m {
		out = append(out, count{k, v})
	}
	slices.SortFunc(out, func(a, b count) int {
		return cmp.Or(cmp.Compare(b.Lines, a.Lines), cmp.Compare(a.Name, b.Name))
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}
