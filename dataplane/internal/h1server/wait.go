package h1server

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
)

// connOut is the writer under a connection's bufio.Writer. A response's
// last flush (finish) queues its bytes on the socket instead of sending
// them (queue): the next request's read sends them from its poller
// callback and may then wait without a read that would find nothing
// (rawio.Socket.QueueForRead), which saves a system call per request. Any
// other write sends what is queued first, so the order on the wire is the
// order written.
type connOut struct {
	c     *Conn
	queue bool
}

func (o *connOut) Write(p []byte) (int, error) {
	q := o.c.q
	if q != nil {
		if o.queue {
			q.QueueForRead(p)
			return len(p), nil
		}
		if err := q.FlushQueued(); err != nil {
			return 0, err
		}
	}
	return o.c.raw.Write(p)
}

// idleCheckDelay is how long a connection waits for its next request
// without trying a read before it is checked (idleCheck): bytes that came
// in before the wait began (a pipelined request, the client's end of
// stream) raised no edge the wait could see.
const idleCheckDelay = clock.Tick

// idleCheck is a connection's check of its waits, run on the worker's
// clock; the alarm's generation tells the waits apart.
type idleCheck struct {
	alarm clock.Alarm
	c     *Conn
}

func (ic *idleCheck) AlarmFired(gen uint64) { ic.c.checkWait(gen) }

// waitForRequest arms the next request's read to wait without trying a
// read first, after it has sent the queued response: only where the
// socket is the next thing read (nothing buffered) and its last read was
// short (it had nothing more then), so that only what a client sends
// before it has its response could be missed, and ic's check finds that.
// Otherwise what is queued goes out now. It returns the armed wait's
// check (the connection's), or nil.
func (c *Conn) waitForRequest() *idleCheck {
	q := c.q
	if q == nil || !q.Queued() {
		return nil
	}
	if c.pipelined || c.br.Buffered() > 0 || len(c.src.pending) > 0 || (c.src.first != nil && c.src.first.Buffered() > 0) ||
		!q.Drained() || c.srv.o.Draining.Load() {
		_ = q.FlushQueued()
		return nil
	}
	q.WaitAfterQueued()
	ic := &c.check
	c.waitMu.Lock()
	c.waiting = true
	c.waitGen = c.srv.o.Clock.Set(&ic.alarm, idleCheckDelay)
	c.waitMu.Unlock()
	return ic
}

// endWait ends a wait armed by waitForRequest once the read has returned;
// it reports whether its check cut it short (the read then failed with a
// deadline, or got what the check saw: the read deadline is the idle one
// again either way).
func (c *Conn) endWait(ic *idleCheck) (kicked bool) {
	ic.alarm.Stop()
	c.waitMu.Lock()
	c.waiting = false
	kicked, c.kicked = c.kicked, false
	if kicked {
		_ = c.tcp.SetReadDeadline(c.readDL)
	}
	c.waitMu.Unlock()
	return kicked
}

// checkWait runs on the clock: if the wait whose check's alarm had
// generation gen is still on, it peeks at the
// socket (MSG_PEEK, not blocking, without the read lock the wait holds).
// Nothing there: whatever comes later raises an edge the wait sees. Bytes,
// an end of stream or an error: they came before the wait began; a read
// deadline in the past wakes the wait to read them.
func (c *Conn) checkWait(gen uint64) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	if !c.waiting || gen != c.waitGen {
		return
	}
	rc, err := c.tcp.SyscallConn()
	if err != nil {
		return
	}
	var n int
	var perr error
	if rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, perr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}) != nil || perr == unix.EAGAIN {
		return
	}
	if n > 0 {
		c.pipelined = true
	}
	c.kicked = true
	_ = c.tcp.SetReadDeadline(rawio.ALongTimeAgo)
}

// setReadDeadline sets the connection's read deadline and records it.
func (c *Conn) setReadDeadline(t time.Time) {
	c.readDL = t
	_ = c.tcp.SetReadDeadline(t)
}

// armIdle makes the next request's read time out after
// Options.IdleTimeout of idleness, give or take idleSlack: the deadline
// (a runtime timer, whose every change may wake the network poller) is
// moved only once it is idleSlack old, not for every request.
func (c *Conn) armIdle() {
	now := time.Now()
	if t := c.srv.o.IdleTimeout; c.readDL.IsZero() || c.readDL.Sub(now) < t-idleSlack {
		c.setReadDeadline(now.Add(t))
	}
}
