// Package clock is a data-plane worker's coarse timer: alarms for the
// deadlines every request would otherwise give the Go runtime (route
// timeouts, idle checks, the client-gone watch), fired on shared ticks.
package clock

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is a worker's coarse timer for the deadlines every request would
// otherwise give the Go runtime: the route timeout and the start of the
// client-gone watch. A runtime timer that becomes the earliest one wakes
// the thread sleeping in the network poller (or starts another), which at
// a steady low rate was a large part of the sidecar's CPU per request;
// the clock arms one runtime timer per Tick instead, and only while
// alarms are set or were set within the last Linger; with only far
// alarms left after that, it sleeps until the earliest one's tick.
//
// An alarm fires between its deadline and one tick later (ticks fall on
// the same instants for every clock: epoch). Its function
// runs on the clock's goroutine (it must not block); stop does not wait
// for one that is running.
type Clock struct {
	mu      sync.Mutex
	due     []*Alarm
	timer   *time.Timer
	running bool
	// next is when the timer is due (while running), last when the last
	// alarm was set, both as Elapsed: plain integers to add and compare.
	next, last time.Duration
}

// Alarm is one deadline on a clock. It runs Fn, or else Target's
// AlarmFired (an alarm embedded in a per-request object that is its own
// target costs no allocation).
//
// An alarm may be set again once it was stopped or has fired, even while
// the clock still lists it (a stopped alarm stays in the list until the
// next tick): each set starts a new generation, and only the generation
// the clock found due fires, so a reused object's alarm never fires for
// an earlier use. The generation goes to AlarmFired, for a target that
// must tell its uses apart (one whose function may already be running
// when it is stopped and set again).
type Alarm struct {
	when   time.Duration // as Elapsed; guarded by the clock's mu
	listed bool          // in the clock's due list; guarded by its mu
	Fn     func()        // what it runs, if set
	Target Target        // else what it calls
	// state is the generation (state >> 1) and whether it is on (bit 0).
	state atomic.Uint64
}

// Target is what an alarm without a Fn calls, with the generation that
// fired (Set returned it).
type Target interface{ AlarmFired(gen uint64) }

const (
	// Tick is the clock's resolution. Each tick is a wake-up (a
	// finer tick costs CPU per request: bench/RESULTS.md); the
	// client-gone watch starts up to a tick late, which only delays
	// noticing a client that left (its end of stream is still there).
	Tick = 25 * time.Millisecond
	// Linger keeps the clock ticking after the last alarm was set,
	// so that a steady request stream does not arm a runtime timer per
	// request.
	Linger = time.Second
	// PreciseBelow: shorter timeouts get a runtime timer of their own
	// (the clock's resolution would be more than 5 % of them).
	PreciseBelow = 500 * time.Millisecond
)

// epoch is where the ticks of every clock of the process (one per
// worker) and of the process's other periodic tasks (Until)
// start: they all fall on the same instants, multiples of Tick from it, so that the runtime wakes
// once for all of them instead of once for each (two workers' clocks
// started at different moments made 80 wake-ups a second instead of 40).
var epoch = time.Now()

// Until is how long after now the next instant comes that is a multiple
// of every from the instant every clock of the process counts its ticks
// from: more than 0, at most every. A periodic task whose period is a
// multiple of Tick wakes then, with the clocks, instead of on its own.
func Until(now time.Time, every time.Duration) time.Duration {
	return untilAt(now.Sub(epoch), every)
}

// later is t+d, saturated at the largest Duration: an alarm a route sets
// for hundreds of years (protobuf's largest duration) must not wrap into
// the past, as time.Time's Add would not.
func later(t, d time.Duration) time.Duration {
	if d > math.MaxInt64-t {
		return math.MaxInt64
	}
	return t + d
}

// untilAt is Until for an instant given as Elapsed.
func untilAt(elapsed, every time.Duration) time.Duration {
	return every - elapsed%every
}

// Elapsed is the time since the process's clocks started counting: a
// cheap monotonic instant that fits an atomic int64.
func Elapsed() time.Duration { return time.Since(epoch) }

// After sets fn to run once d has passed.
func (c *Clock) After(d time.Duration, fn func()) *Alarm {
	a := &Alarm{Fn: fn}
	c.Set(a, d)
	return a
}

// Set arms a (its Fn or Target set, stopped or fired if set before) to
// fire once d has passed; it returns the generation it started.
func (c *Clock) Set(a *Alarm, d time.Duration) (gen uint64) {
	now := Elapsed()
	c.mu.Lock()
	gen = a.state.Load()>>1 + 1
	a.state.Store(gen<<1 | 1)
	a.when = later(now, d)
	if !a.listed {
		a.listed = true
		c.due = append(c.due, a)
	}
	c.last = now
	switch {
	case !c.running:
		c.running = true
		wait := untilAt(now, Tick)
		c.next = now + wait
		if c.timer == nil {
			c.timer = time.AfterFunc(wait, c.tick)
		} else {
			c.timer.Reset(wait)
		}
	case c.next-now > Tick && a.when < c.next:
		// The clock sleeps until a far alarm (tick): this one is sooner.
		wait := untilAt(now, Tick)
		c.next = now + wait
		c.timer.Reset(wait)
	}
	c.mu.Unlock()
	return gen
}

// Stop keeps the alarm's generation from firing if it has not yet (it
// does not wait for a function already running).
func (a *Alarm) Stop() { a.state.And(^uint64(1)) }

// dueAlarm is an alarm the tick found due, with the state it had then.
type dueAlarm struct {
	a     *Alarm
	state uint64
}

func (c *Clock) tick() {
	now := Elapsed()
	var fire []dueAlarm
	c.mu.Lock()
	keep := c.due[:0]
	for _, a := range c.due {
		st := a.state.Load()
		switch {
		case st&1 == 0:
			a.listed = false
		case now >= a.when:
			a.listed = false
			fire = append(fire, dueAlarm{a, st})
		default:
			keep = append(keep, a)
		}
	}
	clear(c.due[len(keep):])
	c.due = keep
	switch {
	case len(keep) == 0 && now-c.last >= Linger:
		c.running = false
	case now-c.last >= Linger:
		// Only far alarms (a long stream's idle check): sleep until the
		// tick of the earliest rather than wake every tick for it.
		earliest := keep[0].when
		for _, a := range keep[1:] {
			earliest = min(earliest, a.when)
		}
		wait := untilAt(now, Tick)
		if d := earliest - now; d > wait {
			wait = later(d, untilAt(earliest, Tick))
		}
		c.next = later(now, wait)
		c.timer.Reset(wait)
	default:
		wait := untilAt(now, Tick)
		c.next = now + wait
		c.timer.Reset(wait)
	}
	c.mu.Unlock()
	for _, f := range fire {
		// Only the generation found due, if nothing stopped it since.
		if f.a.state.CompareAndSwap(f.state, f.state&^1) {
			if f.a.Fn != nil {
				f.a.Fn()
			} else {
				f.a.Target.AlarmFired(f.state >> 1)
			}
		}
	}
}

// WithTimeout is context.WithTimeoutCause on the clock: ctx ends with
// cause once d has passed (within a tick), or when cancel is called.
// Timeouts under PreciseBelow get a runtime timer.
func (c *Clock) WithTimeout(ctx context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	if d < PreciseBelow {
		return context.WithTimeoutCause(ctx, d, cause)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	a := c.After(d, func() { cancel(cause) })
	return ctx, func() {
		a.Stop()
		cancel(context.Canceled)
	}
}

// NextWake is when the clock's runtime timer is due and whether it is
// running (for tests and diagnostics).
func (c *Clock) NextWake() (next time.Time, running bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return epoch.Add(c.next), c.running
}

// Timeout is a deadline error named what: it is a
// context.DeadlineExceeded and a net.Error timeout, as the deadline of a
// runtime timer would be.
func Timeout(what string) error { return &timeoutError{what} }

// timeoutError is Timeout's error.
type timeoutError struct{ what string }

func (e *timeoutError) Error() string   { return e.what }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

// Is makes errors.Is(err, context.DeadlineExceeded) hold.
func (e *timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }
