package dataplane

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestProcScalerStep(t *testing.T) {
	p := &procScaler{max: 4}
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

// The scaler against the real runtime and the process's real CPU time:
// idle, GOMAXPROCS goes to 1; a CPU-bound goroutine brings it back; at the
// end the runtime has all its processors again.
func TestProcScalerRuntime(t *testing.T) {
	max := runtime.GOMAXPROCS(0)
	if max < 2 {
		t.Fatalf("this test needs 2 or more CPUs, GOMAXPROCS is %d", max)
	}
	t.Cleanup(func() { runtime.GOMAXPROCS(max) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { newProcScaler(max, slog.Default()).run(ctx); close(done) }()
	waitProcs := func(want int, why string) {
		t.Helper()
		deadline := time.Now().Add(procWindow*procLowWindows + 5*time.Second)
		for runtime.GOMAXPROCS(0) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOMAXPROCS %d, want %d", why, runtime.GOMAXPROCS(0), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitProcs(1, "idle")
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
	cancel()
	<-done
	if n := runtime.GOMAXPROCS(0); n != max {
		t.Errorf("after the scaler stopped: GOMAXPROCS %d, want %d", n, max)
	}
}
