package dataplane

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// clock is a worker's coarse timer for the deadlines every request would
// otherwise give the Go runtime: the route timeout and the start of the
// client-gone watch. A runtime timer that becomes the earliest one wakes
// the thread sleeping in the network poller (or starts another), which at
// a steady low rate was a large part of the sidecar's CPU per request;
// the clock arms one runtime timer per clockTick instead, and only while
// alarms are set or were set within the last clockLinger; with only far
// alarms left after that, it sleeps until the earliest one's tick.
//
// An alarm fires between its deadline and one tick later (ticks fall on
// the same instants for every clock: clockEpoch). Its function
// runs on the clock's goroutine (it must not block); stop does not wait
// for one that is running.
type clock struct {
	mu      sync.Mutex
	due     []*alarm
	timer   *time.Timer
	running bool
	next    time.Time // when the timer is due (while running)
	last    time.Time // when the last alarm was set
}

// alarm is one deadline on a clock. It runs fn, or else target's
// alarmFired (an alarm embedded in a per-request object that is its own
// target costs no allocation).
//
// An alarm may be set again once it was stopped or has fired, even while
// the clock still lists it (a stopped alarm stays in the list until the
// next tick): each set starts a new generation, and only the generation
// the clock found due fires, so a reused object's alarm never fires for
// an earlier use. The generation goes to alarmFired, for a target that
// must tell its uses apart (one whose function may already be running
// when it is stopped and set again).
type alarm struct {
	when   time.Time // guarded by the clock's mu
	listed bool      // in the clock's due list; guarded by its mu
	fn     func()
	target alarmTarget
	// state is the generation (state >> 1) and whether it is on (bit 0).
	state atomic.Uint64
}

// alarmTarget is what an alarm without a fn calls, with the generation
// that fired (clock.set returned it).
type alarmTarget interface{ alarmFired(gen uint64) }

const (
	// clockTick is the clock's resolution. Each tick is a wake-up (a
	// finer tick costs CPU per request: bench/RESULTS.md); the
	// client-gone watch starts up to a tick late, which only delays
	// noticing a client that left (its end of stream is still there).
	clockTick = 25 * time.Millisecond
	// clockLinger keeps the clock ticking after the last alarm was set,
	// so that a steady request stream does not arm a runtime timer per
	// request.
	clockLinger = time.Second
	// preciseBelow: shorter timeouts get a runtime timer of their own
	// (the clock's resolution would be more than 5 % of them).
	preciseBelow = 500 * time.Millisecond
)

// clockEpoch is where the ticks of every clock of the process (one per
// worker) and of the process's other periodic tasks (UntilClockTick)
// start: they all fall on the same instants, multiples of clockTick from it, so that the runtime wakes
// once for all of them instead of once for each (two workers' clocks
// started at different moments made 80 wake-ups a second instead of 40).
var clockEpoch = time.Now()

// untilTick is how long after now the next instant that is a multiple of
// every from clockEpoch comes: more than 0, at most every.
func untilTick(now time.Time, every time.Duration) time.Duration {
	return every - now.Sub(clockEpoch)%every
}

// ClockTick is the resolution of the workers' clocks, which run route
// timeouts and other alarms of the request path.
const ClockTick = clockTick

// UntilClockTick is how long after now the next instant comes that is a
// multiple of every from the instant the workers' clocks count their
// ticks from: more than 0, at most every. A periodic task of the process
// whose period is a multiple of ClockTick wakes then, with the clocks,
// instead of on its own.
func UntilClockTick(now time.Time, every time.Duration) time.Duration {
	return untilTick(now, every)
}

// after sets fn to run once d has passed.
func (c *clock) after(d time.Duration, fn func()) *alarm {
	a := &alarm{fn: fn}
	c.set(a, d)
	return a
}

// set arms a (its fn or target set, stopped or fired if set before) to
// fire once d has passed; it returns the generation it started.
func (c *clock) set(a *alarm, d time.Duration) (gen uint64) {
	now := time.Now()
	c.mu.Lock()
	gen = a.state.Load()>>1 + 1
	a.state.Store(gen<<1 | 1)
	a.when = now.Add(d)
	if !a.listed {
		a.listed = true
		c.due = append(c.due, a)
	}
	c.last = now
	switch {
	case !c.running:
		c.running = true
		wait := untilTick(now, clockTick)
		c.next = now.Add(wait)
		if c.timer == nil {
			c.timer = time.AfterFunc(wait, c.tick)
		} else {
			c.timer.Reset(wait)
		}
	case c.next.Sub(now) > clockTick && a.when.Before(c.next):
		// The clock sleeps until a far alarm (tick): this one is sooner.
		wait := untilTick(now, clockTick)
		c.next = now.Add(wait)
		c.timer.Reset(wait)
	}
	c.mu.Unlock()
	return gen
}

// stop keeps the alarm's generation from firing if it has not yet (it
// does not wait for a function already running).
func (a *alarm) stop() { a.state.And(^uint64(1)) }

// dueAlarm is an alarm the tick found due, with the state it had then.
type dueAlarm struct {
	a     *alarm
	state uint64
}

func (c *clock) tick() {
	now := time.Now()
	var fire []dueAlarm
	c.mu.Lock()
	keep := c.due[:0]
	for _, a := range c.due {
		st := a.state.Load()
		switch {
		case st&1 == 0:
			a.listed = false
		case !now.Before(a.when):
			a.listed = false
			fire = append(fire, dueAlarm{a, st})
		default:
			keep = append(keep, a)
		}
	}
	clear(c.due[len(keep):])
	c.due = keep
	switch {
	case len(keep) == 0 && now.Sub(c.last) >= clockLinger:
		c.running = false
	case now.Sub(c.last) >= clockLinger:
		// Only far alarms (a long stream's idle check): sleep until the
		// tick of the earliest rather than wake every tick for it.
		earliest := keep[0].when
		for _, a := range keep[1:] {
			if a.when.Before(earliest) {
				earliest = a.when
			}
		}
		wait := untilTick(now, clockTick)
		if d := earliest.Sub(now); d > wait {
			wait = d + untilTick(earliest, clockTick)
		}
		c.next = now.Add(wait)
		c.timer.Reset(wait)
	default:
		wait := untilTick(now, clockTick)
		c.next = now.Add(wait)
		c.timer.Reset(wait)
	}
	c.mu.Unlock()
	for _, f := range fire {
		// Only the generation found due, if nothing stopped it since.
		if f.a.state.CompareAndSwap(f.state, f.state&^1) {
			if f.a.fn != nil {
				f.a.fn()
			} else {
				f.a.target.alarmFired(f.state >> 1)
			}
		}
	}
}

// withTimeout is context.WithTimeoutCause on the clock: ctx ends with
// cause once d has passed (within a tick), or when cancel is called.
// Timeouts under preciseBelow get a runtime timer.
func (c *clock) withTimeout(ctx context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	if d < preciseBelow {
		return context.WithTimeoutCause(ctx, d, cause)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	a := c.after(d, func() { cancel(cause) })
	return ctx, func() {
		a.stop()
		cancel(context.Canceled)
	}
}

// timeoutError is a deadline that passed: it is a context.DeadlineExceeded
// and a net.Error timeout, as the deadline of a runtime timer would be.
type timeoutError struct{ what string }

func (e *timeoutError) Error() string   { return e.what }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

// Is makes errors.Is(err, context.DeadlineExceeded) hold.
func (e *timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }
