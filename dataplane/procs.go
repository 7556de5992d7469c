package dataplane

import (
	"context"
	"log/slog"
	"runtime"
	"syscall"
	"time"
)

// procScaler runs the Go runtime on one processor until that one is
// nearly full, and on one per worker from then on, until the sidecar is
// quiet again.
//
// The workers stay (one SO_REUSEPORT listener each); what changes is how
// many threads run Go code. With two processors and little traffic, the
// runtime wakes the idle one to look for work on nearly every network
// event (it spins, finds nothing and sleeps again): in the proxy
// benchmark, that made a request at 1000 req/s cost 10-20 % more CPU than
// with one, and 12-20 % more at 12,000 req/s and at max throughput (the
// sidecar using 0.6-0.75 CPUs), with the same latency. A thread-per-core
// proxy (Envoy, haproxy) has no such cost: an idle worker thread sleeps in
// epoll. Raising takes one procWindow, so a burst runs on one processor
// for at most 100 ms.
type procScaler struct {
	max     int
	restore int                  // the count given back at the end
	cpu     func() time.Duration // the process's CPU time so far
	set     func(n int)          // runtime.GOMAXPROCS
	log     *slog.Logger
	low     int // consecutive windows under procLower
}

const (
	// procWindow is how often the process's CPU use is measured (a
	// multiple of clockTick).
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

func newProcScaler(max int, log *slog.Logger) *procScaler {
	return &procScaler{max: max, restore: runtime.GOMAXPROCS(0), cpu: processCPUTime, set: func(n int) { runtime.GOMAXPROCS(n) }, log: log}
}

// run measures every procWindow until ctx ends, then gives the runtime
// the processor count it had back.
func (p *procScaler) run(ctx context.Context) {
	// Windows end on the clocks' ticks (clockEpoch): one wake-up for both.
	t := time.NewTimer(untilTick(time.Now(), procWindow))
	defer t.Stop()
	// One processor from the start (the configuration is loaded): a
	// sidecar started under load that one carries would otherwise stay
	// on all of them, using more than procLower there.
	cur, changed := 1, true
	p.set(1)
	last, lastAt := p.cpu(), time.Now()
	for {
		select {
		case <-ctx.Done():
			if changed {
				p.set(p.restore)
			}
			return
		case now := <-t.C:
			// The next window's end, counted from the time now (past the
			// end of this one) rather than the channel's value.
			t.Reset(untilTick(time.Now(), procWindow))
			c := p.cpu()
			used := float64(c-last) / float64(now.Sub(lastAt))
			last, lastAt = c, now
			if next := p.step(cur, used); next != cur {
				p.set(next)
				changed = true
				p.log.Debug("go processors", "from", cur, "to", next, "cpus_used", used)
				cur = next
			}
		}
	}
}

// step decides the processor count for the next window from the CPUs
// used in the last one.
func (p *procScaler) step(cur int, used float64) int {
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

func processCPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
