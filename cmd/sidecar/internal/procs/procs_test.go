package procs

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane"
)

func TestScalerStep(t *testing.T) {
	p := &scaler{max: 4}
	cur := 4
	// Busy: stays at 4.
	for range 50 {
		cur = p.step(cur, 1.5)
	}
	if cur != 4 {
		t.Fatalf("busy: %d processors", cur)
	}
	// Quiet, but not for procLowWindows in a row: stays.
	for range procLowWindows - 1 {
		cur = p.step(cur, 0.1)
	}
	cur = p.step(cur, 0.6) // in the band between lower and raise: resets the count
	for range procLowWindows - 1 {
		cur = p.step(cur, 0.1)
	}
	if cur != 4 {
		t.Fatalf("quiet for fewer than %d windows in a row: %d processors", procLowWindows, cur)
	}
	cur = p.step(cur, 0.1)
	if cur != 1 {
		t.Fatalf("quiet for %d windows: %d processors, want 1", procLowWindows, cur)
	}
	// On one processor, up to 0.8 CPUs stays; more raises to all.
	if cur = p.step(cur, 0.75); cur != 1 {
		t.Fatalf("0.75 CPUs on one processor: %d", cur)
	}
	if cur = p.step(cur, 0.85); cur != 4 {
		t.Fatalf("0.85 CPUs on one processor: %d, want 4", cur)
	}
}

// The scaler's windows end on the data plane clocks' ticks, so that the
// process wakes once for both.
func TestWindowOnClockTicks(t *testing.T) {
	if procWindow%dataplane.ClockTick != 0 {
		t.Fatalf("procWindow %v is not a multiple of the data plane's clock tick %v: the scaler would wake on its own", procWindow, dataplane.ClockTick)
	}
	now := time.Now()
	d := dataplane.UntilClockTick(now, procWindow)
	if d <= 0 || d > procWindow || dataplane.UntilClockTick(now.Add(d), dataplane.ClockTick) != dataplane.ClockTick {
		t.Errorf("the window ends %v after now, not on a clock tick", d)
	}
}

// The scaler against the real runtime and the process's real CPU time:
// Start runs one processor before it returns; a CPU-bound goroutine
// brings them all back; at the end the runtime has its processors again.
func TestScalerRuntime(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	const max = 2
	runtime.GOMAXPROCS(max)
	ctx, cancel := context.WithCancel(context.Background())
	done := Start(ctx, max, slog.Default())
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Fatalf("after Start: GOMAXPROCS %d, want 1", n)
	}
	// The raise needs one window in which the spinner got more than
	// procRaise of a CPU; with other test binaries and compilers sharing
	// the machine's cores that can take many windows, so the wait is long
	// and a failure says what share the process got.
	waitProcs := func(want int, why string) {
		t.Helper()
		start, cpu0 := time.Now(), processCPUTime()
		deadline := start.Add(procWindow*procLowWindows + 30*time.Second)
		for runtime.GOMAXPROCS(0) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOMAXPROCS %d, want %d (the process used %.2f CPUs over %v)", why, runtime.GOMAXPROCS(0), want,
					float64(processCPUTime()-cpu0)/float64(time.Since(start)), time.Since(start).Round(time.Millisecond))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var stop atomic.Bool
	spun := make(chan struct{})
	go func() {
		defer close(spun)
		for !stop.Load() {
		}
	}()
	waitProcs(max, "one goroutine spinning")
	stop.Store(true)
	<-spun
	waitProcs(1, "idle again")
	cancel()
	<-done
	if n := runtime.GOMAXPROCS(0); n != max {
		t.Errorf("after the scaler stopped: GOMAXPROCS %d, want %d", n, max)
	}
}

// With fewer than two workers there is nothing to scale.
func TestStartOneWorker(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	runtime.GOMAXPROCS(1)
	<-Start(context.Background(), 1, slog.Default())
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("GOMAXPROCS %d, want 1 kept", n)
	}
}
