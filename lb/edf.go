package lb

import (
	"math"
	"slices"
)

// edfEntry is one scheduled item: the index of what it schedules, its
// deadline, and an insertion counter that breaks deadline ties FIFO.
type edfEntry struct {
	deadline float64
	order    uint64
	item     int32
}

// edfSched is Envoy's earliest-deadline-first scheduler: an item of weight w is
// due every 1/w. It is the core of weighted round robin, locality choice and
// weighted least request. Not safe for concurrent use; copy with Clone.
type edfSched struct {
	now   float64
	order uint64
	heap  []edfEntry
	// classes, when set, replace the heap: see useClasses.
	classes []edfClass
}

// edfClass holds the live entries q[head:] that were last scheduled with
// weight w, in deadline order. An item re-inserted at time t gets t+1/w, and
// t only grows, so within a class deadlines arrive in order: a class is a
// FIFO, and a pick only compares the class heads. Items whose weight changes
// (least request) simply move to the class of their new weight.
type edfClass struct {
	w    float64
	q    []edfEntry
	head int
}

func (c *edfClass) live() int { return len(c.q) - c.head }

// maxEDFClasses bounds the heads a class-mode pick compares; more distinct
// weights than this fall back to the heap.
const maxEDFClasses = 16

// newEDF builds a scheduler over items 0..n-1 in the state it would have
// after `picks` picks (Envoy's createWithPicks), so that schedulers built
// at different times do not all start on the same item. weight(i) must be
// > 0 for every item that should be scheduled; items of weight <= 0 are
// left out. The seed is reduced as Envoy does: uint32(seed) % 429496729.
func newEDF(n int, weight func(int) float64, seed uint64) *edfSched {
	e := &edfSched{}
	e.init(n, weight, seed)
	return e
}

func (e *edfSched) init(n int, weight func(int) float64, seed uint64) {
	picks := uint64(uint32(seed)) % 429496729
	e.heap = e.heap[:0]
	const eps = 1e-13
	var total float64
	for i := 0; i < n; i++ {
		if w := weight(i); w > 0 {
			total += w + eps
		}
	}
	var picked uint64
	maxPick := 0.0
	P := float64(picks)
	for i := 0; i < n; i++ {
		w := weight(i)
		if w <= 0 {
			continue
		}
		aw := w + eps
		f := 0.0
		if total > 0 {
			f = math.Floor(aw * P / total)
			f = float64(uint32(f))
		}
		if f > 0 && f/aw >= P/total {
			f--
		}
		e.heap = append(e.heap, edfEntry{deadline: (f + 1) / aw, order: uint64(i), item: int32(i)})
		picked += uint64(f)
		maxPick = max(maxPick, f/aw)
	}
	e.now = maxPick
	e.order = uint64(n)
	for i := len(e.heap)/2 - 1; i >= 0; i-- {
		e.down(i)
	}
	for picked < picks && len(e.heap) > 0 {
		e.Pick(weight)
		picked++
	}
}

// Pick returns the item with the earliest deadline and re-schedules it with
// its weight as weight(item) returns it now; -1 when empty. A weight <= 0
// drops the item from the schedule.
func (e *edfSched) Pick(weight func(int) float64) int {
	if e.classes != nil {
		if item, ok := e.pickClass(weight); ok {
			return item
		}
		e.toHeap()
	}
	if len(e.heap) == 0 {
		return -1
	}
	top := e.heap[0]
	e.now = top.deadline
	if w := weight(int(top.item)); w > 0 {
		e.heap[0] = edfEntry{deadline: e.now + 1/w, order: e.order, item: top.item}
		e.order++
		e.down(0)
	} else {
		last := len(e.heap) - 1
		e.heap[0] = e.heap[last]
		e.heap = e.heap[:last]
		if last > 0 {
			e.down(0)
		}
	}
	return int(top.item)
}

// pickClass is Pick in class mode; ok is false (and nothing changed) when
// class mode cannot continue (too many weights, or a deadline that would
// break a class's order), and the caller falls back to the heap.
func (e *edfSched) pickClass(weight func(int) float64) (int, bool) {
	best := -1
	for k := range e.classes {
		c := &e.classes[k]
		if c.live() == 0 {
			continue
		}
		if best < 0 || c.q[c.head].less(e.classes[best].q[e.classes[best].head]) {
			best = k
		}
	}
	if best < 0 {
		return -1, true // empty
	}
	src := &e.classes[best]
	top := src.q[src.head]
	w := weight(int(top.item))
	if w <= 0 {
		return 0, false // dropping an item: let the heap path do it
	}
	next := edfEntry{deadline: top.deadline + 1/w, order: e.order, item: top.item}
	dst := -1
	free := -1
	for k := range e.classes {
		if e.classes[k].w == w {
			dst = k
			break
		}
		if free < 0 && e.classes[k].live() == 0 && k != best {
			free = k
		}
	}
	if dst >= 0 {
		if c := &e.classes[dst]; c.live() > 0 && next.less(c.q[len(c.q)-1]) {
			return 0, false // rounding broke the order: the heap is exact
		}
	} else if free < 0 && len(e.classes) == maxEDFClasses {
		return 0, false
	}
	// Commit: pop from src, push to dst.
	src.head++
	if src.live() == 0 {
		src.q, src.head = src.q[:0], 0
	} else if src.head >= 64 && src.head*2 >= len(src.q) {
		n := copy(src.q, src.q[src.head:])
		src.q, src.head = src.q[:n], 0
	}
	switch {
	case dst >= 0:
	case free >= 0:
		dst = free
		e.classes[dst].w = w
	default:
		e.classes = append(e.classes, edfClass{w: w})
		dst = len(e.classes) - 1
	}
	e.classes[dst].q = append(e.classes[dst].q, next)
	e.now = top.deadline
	e.order++
	return int(top.item), true
}

// useClasses switches to class mode when the items take at most
// maxEDFClasses distinct weights: a pick becomes O(classes) instead of
// O(log n), with exactly the heap's sequence (any anomaly falls back).
func (e *edfSched) useClasses(weight func(int) float64) {
	var classes []edfClass
	for _, x := range e.heap {
		w := weight(int(x.item))
		k := 0
		for k < len(classes) && classes[k].w != w {
			k++
		}
		if k == len(classes) {
			if k == maxEDFClasses || w <= 0 {
				return
			}
			classes = append(classes, edfClass{w: w})
		}
		classes[k].q = append(classes[k].q, x)
	}
	for k := range classes {
		slices.SortFunc(classes[k].q, func(a, b edfEntry) int {
			if a.less(b) {
				return -1
			}
			return 1
		})
	}
	e.classes = classes
	e.heap = e.heap[:0]
}

// toHeap leaves class mode.
func (e *edfSched) toHeap() {
	for _, c := range e.classes {
		e.heap = append(e.heap, c.q[c.head:]...)
	}
	e.classes = nil
	for i := len(e.heap)/2 - 1; i >= 0; i-- {
		e.down(i)
	}
}

// Peek returns the next item Pick would return without changing state.
func (e *edfSched) Peek() int {
	if e.classes != nil {
		var best *edfClass
		for k := range e.classes {
			if c := &e.classes[k]; c.live() > 0 && (best == nil || c.q[c.head].less(best.q[best.head])) {
				best = c
			}
		}
		if best == nil {
			return -1
		}
		return int(best.q[best.head].item)
	}
	if len(e.heap) == 0 {
		return -1
	}
	return int(e.heap[0].item)
}

// Len is the number of scheduled items.
func (e *edfSched) Len() int {
	n := len(e.heap)
	for _, c := range e.classes {
		n += c.live()
	}
	return n
}

// CloneInto copies e into dst, reusing dst's storage, and returns dst.
func (e *edfSched) CloneInto(dst *edfSched) *edfSched {
	if dst == nil {
		dst = &edfSched{}
	}
	dst.now, dst.order = e.now, e.order
	dst.heap = append(dst.heap[:0], e.heap...)
	dst.classes = nil
	for _, c := range e.classes {
		dst.classes = append(dst.classes, edfClass{w: c.w, q: slices.Clone(c.q[c.head:])})
	}
	return dst
}

func (a edfEntry) less(b edfEntry) bool {
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	return a.order < b.order
}

// down restores the heap below i, moving a hole instead of swapping.
func (e *edfSched) down(i int) {
	h := e.heap
	n := len(h)
	x := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].less(h[c]) {
			c = r
		}
		if !h[c].less(x) {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = x
}
