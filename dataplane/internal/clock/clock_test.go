package clock

import (
	"context"
	"errors"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

func TestClockAlarms(t *testing.T) {
	var c Clock
	start := time.Now()
	fired := make(chan time.Duration, 1)
	c.After(20*time.Millisecond, func() { fired <- time.Since(start) })
	var stopped atomic.Bool
	a := c.After(20*time.Millisecond, func() { stopped.Store(true) })
	a.Stop()
	// A marker due with them, listed after them: a tick runs the due
	// alarms in list order, so once the marker ran the stopped alarm's
	// turn has passed.
	marker := make(chan struct{})
	c.After(20*time.Millisecond, func() { close(marker) })
	select {
	case d := <-fired:
		if d < 20*time.Millisecond {
			t.Errorf("alarm fired after %v, before its 20 ms", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("alarm did not fire")
	}
	select {
	case <-marker:
	case <-time.After(2 * time.Second):
		t.Fatal("the marker alarm did not fire")
	}
	if stopped.Load() {
		t.Error("a stopped alarm fired")
	}
	// With nothing due, the clock stops ticking after Linger.
	deadline := time.Now().Add(Linger + 2*time.Second)
	for {
		c.mu.Lock()
		running := c.running
		c.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the clock still ticks with no alarm set for longer than Linger")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// And starts again for a new alarm.
	c.After(time.Millisecond, func() { fired <- 0 })
	select {
	case <-fired:
	case <-time.After(2 * time.Second):
		t.Fatal("alarm set on a stopped clock did not fire")
	}
}

func TestClockWithTimeout(t *testing.T) {
	var c Clock
	cause := &timeoutError{"test timeout"}
	for _, d := range []time.Duration{10 * time.Millisecond, PreciseBelow + 50*time.Millisecond} { // runtime timer, clock
		start := time.Now() // before: a preemption between the two must not shorten d
		ctx, cancel := c.WithTimeout(context.Background(), d, cause)
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
			t.Fatalf("%v: context did not end", d)
		}
		if el := time.Since(start); el < d-time.Millisecond {
			t.Errorf("%v: context ended after %v", d, el)
		}
		if got := context.Cause(ctx); got != cause {
			t.Errorf("%v: cause %v", d, got)
		}
		if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) || !isNetTimeout(context.Cause(ctx)) {
			t.Errorf("%v: the cause is not a deadline error", d)
		}
		cancel()
	}
	// Cancelled before the deadline: the cause is not the timeout.
	ctx, cancel := c.WithTimeout(context.Background(), time.Second, cause)
	cancel()
	if got := context.Cause(ctx); got == cause || ctx.Err() == nil {
		t.Errorf("cancelled early: err %v, cause %v", ctx.Err(), got)
	}
}

func TestClockTicksAligned(t *testing.T) {
	for _, off := range []time.Duration{0, time.Nanosecond, 7 * time.Millisecond, Tick - time.Nanosecond} {
		now := epoch.Add(41*Tick + off)
		want := Tick - off
		if got := Until(now, Tick); got != want {
			t.Errorf("Until(epoch+41 ticks+%v) = %v, want %v", off, got, want)
		}
		const window = 4 * Tick // a periodic task's (Until)
		if got := Until(now, window); (now.Add(got).Sub(epoch))%window != 0 || got <= 0 || got > window {
			t.Errorf("Until(epoch+41 ticks+%v, %v) = %v: not the next window's end", off, window, got)
		}
	}
	// Two workers' clocks started at different moments tick at the same
	// instants.
	var a, b Clock
	a.After(time.Hour, func() {})
	time.Sleep(Tick / 3)
	b.After(time.Hour, func() {})
	a.mu.Lock()
	na := a.next
	a.mu.Unlock()
	b.mu.Lock()
	nb := b.next
	b.mu.Unlock()
	for name, n := range map[string]time.Duration{"first": na, "second": nb} {
		if ph := n % Tick; ph != 0 {
			t.Errorf("the %s clock's next tick is %v past a tick instant", name, ph)
		}
	}
	if d := nb - na; d%Tick != 0 {
		t.Errorf("the clocks' next ticks are %v apart", d)
	}
}

// genTarget records the generations an alarm fires with.
type genTarget chan uint64

func (g genTarget) AlarmFired(gen uint64) { g <- gen }

// An alarm stopped and set again (a reused writer's) is listed once and
// fires once, with the generation of its last set, at that set's time.
func TestClockAlarmSetAgain(t *testing.T) {
	var c Clock
	fired := make(genTarget, 4)
	a := &Alarm{Target: fired}
	g1 := c.Set(a, time.Hour)
	a.Stop()
	g2 := c.Set(a, time.Hour)
	a.Stop()
	start := time.Now()
	g3 := c.Set(a, 20*time.Millisecond)
	if g1 == g2 || g2 == g3 || g1 == g3 {
		t.Fatalf("generations %d, %d, %d: not one per set", g1, g2, g3)
	}
	c.mu.Lock()
	listed := len(c.due)
	c.mu.Unlock()
	if listed != 1 {
		t.Errorf("the alarm is listed %d times, want once", listed)
	}
	select {
	case g := <-fired:
		if g != g3 {
			t.Errorf("fired with generation %d, want the last set's %d", g, g3)
		}
		if d := time.Since(start); d < 20*time.Millisecond {
			t.Errorf("fired after %v, before the last set's 20 ms", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the alarm set again did not fire")
	}
	// A marker set now fires at a later tick, after anything the clock
	// still held for a: once it ran, a had its chance to fire again.
	marker := make(chan struct{})
	c.After(time.Millisecond, func() { close(marker) })
	select {
	case <-marker:
	case <-time.After(2 * time.Second):
		t.Fatal("the marker alarm did not fire")
	}
	if len(fired) != 0 {
		t.Errorf("the alarm fired %d more times", len(fired))
	}
	// Set again after it fired: it fires again.
	g4 := c.Set(a, time.Millisecond)
	select {
	case g := <-fired:
		if g != g4 {
			t.Errorf("fired with generation %d, want %d", g, g4)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the alarm set after firing did not fire")
	}
}

// isNetTimeout: the error is a net.Error timeout, as the router's
// failure classification reads a deadline.
func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestClockFarAlarm sets alarms at the largest durations (a route
// timeout of protobuf's largest duration saturates to it): they must not
// wrap into the past and fire, on a tick or once only far alarms are
// left and the clock sleeps until the earliest.
func TestClockFarAlarm(t *testing.T) {
	for _, ds := range [][]time.Duration{
		{math.MaxInt64, math.MaxInt64 - Tick, math.MaxInt64 / 2},
		{math.MaxInt64}, // the sleep until it saturates too
	} {
		var c Clock
		var fired atomic.Int32
		for _, d := range ds {
			c.After(d, func() { fired.Add(1) })
		}
		c.tick()
		c.mu.Lock()
		c.last -= 2 * Linger // long since an alarm was set: the far-alarm sleep
		c.mu.Unlock()
		c.tick()
		c.mu.Lock()
		next, now := c.next, Elapsed()
		c.mu.Unlock()
		if n := fired.Load(); n != 0 {
			t.Fatalf("alarms %v: %d fired", ds, n)
		}
		if next <= now {
			t.Errorf("alarms %v: the clock's next wake %v is not after now %v", ds, next, now)
		}
		c.mu.Lock()
		c.timer.Stop()
		c.mu.Unlock()
	}
}
