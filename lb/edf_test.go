package lb

import (
	"fmt"
	"testing"
)

// Class mode must give exactly the heap's sequence, including after a
// fallback (too many weights, a weight change, or a large seed whose
// rounding breaks the FIFO order of a class).
func TestEDFClassModeMatchesHeap(t *testing.T) {
	cases := []struct {
		n, distinct int
		seed        uint64
	}{{1, 1, 0}, {2, 2, 0}, {7, 3, 5}, {50, 4, 99}, {300, 8, 12345}, {300, 9, 7}, {64, 2, 4000000000}, {1000, 5, 429496728}}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("n%d_w%d_seed%d", tc.n, tc.distinct, tc.seed), func(t *testing.T) {
			ws := make([]float64, tc.n)
			for i := range ws {
				ws[i] = float64(1 + (i*7)%tc.distinct)
			}
			weight := func(i int) float64 { return ws[i] }
			heap := NewEDF(tc.n, weight, tc.seed)
			classed := heap.CloneInto(nil)
			classed.useClasses(weight)
			if tc.distinct <= maxEDFClasses && classed.classes == nil {
				t.Fatalf("class mode not used with %d weights", tc.distinct)
			}
			if classed.Len() != heap.Len() {
				t.Fatalf("Len %d, want %d", classed.Len(), heap.Len())
			}
			for i := range 20 * tc.n {
				if i == 10*tc.n {
					ws[0] *= 3 // a weight change takes the heap path from now on
				}
				if p, q := classed.Peek(), heap.Peek(); p != q {
					t.Fatalf("pick %d: Peek %d, heap %d", i, p, q)
				}
				if a, b := classed.Pick(weight), heap.Pick(weight); a != b {
					t.Fatalf("pick %d: class mode chose %d, heap %d", i, a, b)
				}
			}
		})
	}
}

// A class whose entries are not in re-insertion order (a state
// createWithPicks cannot produce, but the fallback must handle) leaves class
// mode instead of reordering picks.
func TestEDFClassModeFallsBackOnDisorder(t *testing.T) {
	ws := []float64{1, 1}
	weight := func(i int) float64 { return ws[i] }
	heap := &EDF{heap: []edfEntry{{deadline: 1, order: 1, item: 1}, {deadline: 100, order: 0, item: 0}}, order: 2}
	classed := heap.CloneInto(nil)
	classed.useClasses(weight)
	if classed.classes == nil {
		t.Fatal("class mode not used")
	}
	for i := range 200 {
		if a, b := classed.Pick(weight), heap.Pick(weight); a != b {
			t.Fatalf("pick %d: class mode chose %d, heap %d", i, a, b)
		}
	}
	if classed.classes != nil {
		t.Error("still in class mode after the FIFO order broke")
	}
}

// Weights that change between picks (least request: weight/(active+1))
// move items between classes; the sequence must still be the heap's,
// including when more distinct weights appear than class mode holds.
func TestEDFClassModeDynamicWeights(t *testing.T) {
	for _, tc := range []struct {
		n, maxActive int
		seed         uint64
	}{{2, 1, 0}, {10, 2, 3}, {300, 3, 77}, {300, 9, 5}, {1000, 2, 429496728}} {
		t.Run(fmt.Sprintf("n%d_active%d", tc.n, tc.maxActive), func(t *testing.T) {
			rnd := newPCG(tc.seed + 1)
			base := make([]float64, tc.n)
			active := make([]uint64, tc.n)
			for i := range base {
				base[i] = float64(1 + i%4)
			}
			weight := func(i int) float64 { return LeastRequestWeight(base[i], active[i], 1) }
			heap := NewEDF(tc.n, weight, tc.seed)
			classed := heap.CloneInto(nil)
			classed.useClasses(weight)
			if classed.classes == nil {
				t.Fatal("class mode not used")
			}
			for i := range 20 * tc.n {
				if i%3 == 0 {
					active[rnd.Uint64()%uint64(tc.n)] = rnd.Uint64() % uint64(tc.maxActive+1)
				}
				if a, b := classed.Pick(weight), heap.Pick(weight); a != b {
					t.Fatalf("pick %d: class mode chose %d, heap %d", i, a, b)
				}
			}
			if tc.maxActive >= 9 && classed.classes != nil {
				t.Error("more distinct weights than classes, yet still in class mode")
			}
		})
	}
}
