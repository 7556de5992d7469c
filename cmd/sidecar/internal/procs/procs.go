// Package procs runs the sidecar's Go runtime on one processor while one
// is enough (Start). GOMAXPROCS is process-wide, so this lives with the
// sidecar's main and not in the data plane, whose worker count is fixed
// at start and never follows it.
package procs

import (
	"context"
	"log/slog"
	"runtime"
	"syscall"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane"
)

// scaler runs the Go runtime on one processor until that one is nearly
// full, and on max from then on, until the sidecar is quiet again.
//
// The data plane's workers stay (one SO_REUSEPORT listener each); what
// changes is how many threads run Go code. With two processors and little
// traffic, the runtime wakes the idle one to look for work on nearly every
// network event (it spins, finds nothing and sleeps again), which a
// thread-per-core proxy's idle worker, asleep in epoll, does not pay.
// Raising takes one window, so a burst runs on one processor for at most
// procWindow.
type scaler struct {
	max     int
	restore int                  // the count given back at the end
	cpu     func() time.Duration // the process's CPU time so far
	set     func(n int)          // runtime.GOMAXPROCS
	log     *slog.Logger
	low     int // consecutive windows under procLower
}

const (
	// procWindow is how often the process's CPU use is measured: a
	// multiple of the data plane's clock tick, so that both wake at once.
	procWindow = 100 * time.Millisecond
	// procRaise: using more than this many CPUs per running processor
	// in one window runs all of them (one processor 80 % busy: requests
	// start to queue behind each other).
	procRaise = 0.8
	// procLower: using less than this many CPUs for procLowWindows in a
	// row runs one (which then uses less than the same work did on
	// more: well under procRaise).
	procLower      = 0.5
	procLowWindows = 20
)

// Start runs the Go runtime on one processor at once, then on max while
// the process uses more than one can carry (see scaler), until ctx ends;
// then it gives the runtime the processor count it had back and closes
// the returned channel. max is the count at most: the data plane's
// workers. With max under 2 it changes nothing.
func Start(ctx context.Context, max int, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	if max < 2 {
		close(done)
		return done
	}
	p := &scaler{max: max, restore: runtime.GOMAXPROCS(0), cpu: processCPUTime, set: func(n int) { runtime.GOMAXPROCS(n) }, log: log}
	// One processor from the start (the configuration is loaded): a
	// sidecar started under load that one carries would otherwise stay
	// on all of them, using more than procLower there.
	p.set(1)
	go func() {
		defer close(done)
		p.run(ctx)
	}()
	return done
}

// run measures every procWindow until ctx ends, then gives the runtime
// the processor count it had back.
func (p *scaler) run(ctx context.Context) {
	// Windows end on the data plane clocks' ticks: one wake-up for both.
	t := time.NewTimer(dataplane.UntilClockTick(time.Now(), procWindow))
	defer t.Stop()
	cur := 1
	last, lastAt := p.cpu(), time.Now()
	for {
		select {
		case <-ctx.Done():
			p.set(p.restore)
			return
		case now := <-t.C:
			// The next window's end, counted from the time now (past the
			// end of this one) rather than the channel's value.
			t.Reset(dataplane.UntilClockTick(time.Now(), procWindow))
			c := p.cpu()
			used := float64(c-last) / float64(now.Sub(lastAt))
			last, lastAt = c, now
			if next := p.step(cur, used); next != cur {
				p.set(next)
				p.log.Debug("go processors", "from", cur, "to", next, "cpus_used", used)
				cur = next
			}
		}
	}
}

// step decides the processor count for the next window from the CPUs
// used in the last one.
func (p *scaler) step(cur int, used float64) int {
	switch {
	case cur < p.max && used > procRaise*float64(cur):
		p.low = 0
		return p.max
	case cur > 1 && used < procLower:
		if p.low++; p.low >= procLowWindows {
			p.low = 0
			return 1
		}
	default:
		p.low = 0
	}
	return cur
}

// processCPUTime is the process's user and system CPU time so far.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
