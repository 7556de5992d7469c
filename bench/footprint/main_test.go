package main

import (
	"bufio"
	"regexp"
	"strings"
	"testing"
)

// trace is a lackey trace of three requests after one warm-up: each
// window starts at the marker's fetch (0x1000); 0x2000 (a 4-byte
// instruction crossing into the next line at 0x203e) and its store run in
// every request, 0x3000 in one of three only, 0x9000 (an excluded
// function) and its store (not counted either) in all.
const trace = `==1== Lackey, an example Valgrind tool
I  00001000,4
I  00005000,2
I  00001000,4
I  0000203e,4
 S 7ff000010,8
I  00003000,1
I  00009000,3
I  00001000,4
I  0000203e,4
 S 7ff000010,8
 L 7ff000040,8
I  00009000,3
 S 7ff000080,8
I  00001000,4
I  0000203e,4
 M 7ff000010,8
I  00009000,3
 S 7ff000080,8
I  00001000,4
I  00002000,4
`

func TestWindows(t *testing.T) {
	syms := symbols{{"main.marker", 0x1000, 4}, {"main.hot", 0x2000, 0x100}, {"main.rare", 0x3000, 1}, {"runtime.gcDrain", 0x9000, 3}}
	w, err := readWindows(bufio.NewReader(strings.NewReader(trace)), 0x1000, 1, 1, syms.matching(regexp.MustCompile(defaultExclude)))
	if err != nil {
		t.Fatal(err)
	}
	if w.n != 3 { // the last window is cut short by the end, not counted
		t.Fatalf("windows %d, want 3", w.n)
	}
	r := summarize(w, syms, nil, 0.8, regexp.MustCompile(defaultExclude), 10)
	// The marker's line, main.hot's two lines; main.rare (1 of 3) and
	// runtime.gcDrain (excluded) are left out.
	if r.CodeLines != 3 || r.CodePages != 2 {
		t.Errorf("code %d lines, %d pages; want 3, 2: %+v", r.CodeLines, r.CodePages, r)
	}
	if len(r.CodeByFunc) != 2 || r.CodeByFunc[0] != (count{"main.hot", 2}) {
		t.Errorf("by function %+v", r.CodeByFunc)
	}
	// The store's line in all three, the load's in one only.
	if r.DataLines != 1 || r.DataByRegion[0].Name != "anonymous (heap, stacks, runtime)" {
		t.Errorf("data %+v", r)
	}
	// The store's line is first touched by main.hot's instruction.
	if len(r.DataByFunc) != 1 || r.DataByFunc[0] != (count{"main.hot", 1}) {
		t.Errorf("data by function %+v", r.DataByFunc)
	}
	// Instructions outside runtime.gcDrain: 3 in the first window (with
	// main.rare), 2 in the others.
	if r.Instructions != 2 || len(w.insns) != 3 || w.insns[0] != 3 {
		t.Errorf("instructions %d (windows %v), want a median of 2 of [3 2 2]", r.Instructions, w.insns)
	}
	// By function, the mean window's: main.hot's and the marker's one
	// each, main.rare's a third (rounded to 0), none of the excluded one.
	if len(r.InsnsByFunc) != 3 || r.InsnsByFunc[0] != (count{"main.hot", 1}) || r.InsnsByFunc[1] != (count{"main.marker", 1}) || r.InsnsByFunc[2] != (count{"main.rare", 0}) {
		t.Errorf("instructions by function %+v", r.InsnsByFunc)
	}
	// The one transfer in every window: the marker to main.hot.
	if r.Jumps != 1 {
		t.Errorf("jumps %d, want 1", r.Jumps)
	}
	// At a third: also into the marker (from the warm-up's last fetch and
	// from the excluded function) and to main.rare; none into the excluded
	// function counts.
	if all := summarize(w, syms, nil, 0.3, regexp.MustCompile(defaultExclude), 10); all.CodeLines != 4 || all.DataLines != 2 || all.Jumps != 4 {
		t.Errorf("at a third of the windows: code %d, data %d, jumps %d; want 4, 2, 4", all.CodeLines, all.DataLines, all.Jumps)
	}
}

// TestWindowsPer counts two marker fetches as one window, as for a
// marker run twice per request.
func TestWindowsPer(t *testing.T) {
	w, err := readWindows(bufio.NewReader(strings.NewReader(trace)), 0x1000, 2, 0, func(uint64) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	// Five fetches: windows of fetches 1-2 and 3-4; the fifth's is cut
	// short. Nothing is dropped: the store after 0x9000 counts, in the
	// second window.
	if w.n != 2 || w.code[0x3000>>lineShift] != 1 || w.code[0x5000>>lineShift] != 1 || w.code[0x9000>>lineShift] != 2 || w.data[0x7ff000080>>lineShift] != 1 {
		t.Fatalf("windows %d, code lines %v, data lines %v", w.n, w.code, w.data)
	}
}

func TestParseAccess(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		kind byte
		addr uint64
		size uint64
	}{
		{"I  0040a2b0,3\n", true, 'I', 0x40a2b0, 3},
		{" L 7ff000398,8\n", true, 'D', 0x7ff000398, 8},
		{" M 0421d2e8,4\n", true, 'D', 0x421d2e8, 4},
		{"==12== Command: ./sidecar\n", false, 0, 0, 0},
		{"I  0040a2b0\n", false, 0, 0, 0},   // no size
		{"I  0040a2b0,0\n", false, 0, 0, 0}, // empty access
		{"I  00zz,3\n", false, 0, 0, 0},
		{" X 0040a2b0,3\n", false, 0, 0, 0},
		{"I  ,3\n", false, 0, 0, 0},
		{"I  0040a2b0,3x\n", false, 0, 0, 0},
		{"", false, 0, 0, 0},
	} {
		kind, addr, size, ok := parseAccess([]byte(c.in))
		if ok != c.ok || kind != c.kind || addr != c.addr || size != c.size {
			t.Errorf("parseAccess(%q) = %c %#x %d %v, want %c %#x %d %v", c.in, kind, addr, size, ok, c.kind, c.addr, c.size, c.ok)
		}
	}
}

func TestPkgOf(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/meshlet-dev/meshlet/dataplane.(*worker).serveRequest": "github.com/meshlet-dev/meshlet/dataplane",
		"runtime.mallocgc":                         "runtime",
		"internal/runtime/maps.(*Map).Delete":      "internal/runtime/maps",
		"type:.eq.github.com/x/y/stats.Key":        "github.com/x/y/stats",
		"github.com/x/y/h1.valid[go.shape.string]": "github.com/x/y/h1",
		"indexbytebody":                            "indexbytebody",
	} {
		if got := pkgOf(in); got != want {
			t.Errorf("pkgOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAt(t *testing.T) {
	s := symbols{{"runtime.rodata", 0x100, 0}, {"type:*", 0x100, 0}, {"go:string.*", 0x200, 0}}
	for a, want := range map[uint64]string{0x50: "?", 0x100: "type:*", 0x1ff: "type:*", 0x200: "go:string.*", 0x900: "go:string.*"} {
		if got := s.at(a); got != want {
			t.Errorf("at(%#x) = %q, want %q", a, got, want)
		}
	}
}

// TestFirstOf names a data line by the instruction first in most
// windows, the lower line of two as often first.
func TestFirstOf(t *testing.T) {
	for _, c := range []struct {
		in   map[uint64]int
		want uint64
	}{
		{map[uint64]int{7: 1, 3: 5, 9: 2}, 3},
		{map[uint64]int{8: 2, 4: 2}, 4},
		{map[uint64]int{5: 1}, 5},
	} {
		if got := firstOf(c.in); got != c.want {
			t.Errorf("firstOf(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestInstructionsByAddress: a function that starts inside a line another
// ends in (the linker aligns functions to 32 bytes) is credited its own
// instructions, not its neighbour.
func TestInstructionsByAddress(t *testing.T) {
	syms := symbols{{"main.marker", 0x1000, 4}, {"main.a", 0x2000, 0x20}, {"main.b", 0x2020, 0x20}}
	tr := "I  00001000,4\nI  00002020,4\nI  00001000,4\nI  00002020,4\nI  00001000,4\n"
	w, err := readWindows(bufio.NewReader(strings.NewReader(tr)), 0x1000, 1, 0, func(uint64) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	r := summarize(w, syms, nil, 0.8, regexp.MustCompile(defaultExclude), 10)
	for _, c := range r.InsnsByFunc {
		if c.Name == "main.a" {
			t.Errorf("main.a credited %d instructions of main.b's: %+v", c.Lines, r.InsnsByFunc)
		}
	}
	if len(r.InsnsByFunc) != 2 || r.InsnsByFunc[0] != (count{"main.b", 1}) {
		t.Errorf("instructions by function %+v, want main.b 1 and main.marker 1", r.InsnsByFunc)
	}
}
