package dataplane

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1server"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
)

// errStreamIdleTimeout ends a request's context when no byte of it moved
// for the listener's stream_idle_timeout.
var errStreamIdleTimeout error = clock.Timeout("stream idle timeout")

// timeoutGrace is how long a request whose timeout fired (route or stream
// idle) may still write downstream: its local reply, or the end of what it
// was writing. A client that reads nothing longer (a zero window) has its
// connection (HTTP/1) or stream (HTTP/2) reset, which frees the request
// and its upstream.
const timeoutGrace = time.Second

// idleChecks is how many checks of a request's progress make one stream
// idle timeout: a request is found idle between the timeout and a quarter
// more after its last byte moved, at four wake-ups per timeout.
const idleChecks = 4

// streamIdle is Envoy's stream_idle_timeout for one request: the request
// ends once none of its bytes moved (request body read, response written,
// upgraded stream copied) for the timeout. It samples the request's byte
// counters on the worker's clock rather than rearming a timer on every
// read and write.
type streamIdle struct {
	alarm clock.Alarm // target: the streamIdle
	mu    sync.Mutex
	on    bool   // guarded by mu
	gen   uint64 // the armed alarm's generation; guarded by mu
	w     *worker
	every time.Duration
	quiet int    // checks in a row without progress (under mu)
	last  uint64 // progress at the last check (under mu)
	s     *httpScratch
	// What ends the request: its writer of the fast HTTP/1 server, or a
	// serveStream request's state.
	h1 *h1server.Writer
	hs *streamScratch
}

// progress is the count of the request's bytes that moved so far.
func (si *streamIdle) progress() uint64 {
	return si.s.cb.n.Load() + si.s.sw.bytes.Load() + si.s.ex.upgraded.Load()
}

// arm starts watching the request (timeout > 0).
func (si *streamIdle) arm(timeout time.Duration) {
	if si.alarm.Target == nil {
		// Once: a clock's tick may still read it for the writer's last
		// request.
		si.alarm.Target = si
	}
	si.mu.Lock()
	si.every = timeout / idleChecks
	si.quiet, si.last = 0, si.progress()
	si.on = true
	si.gen = si.w.clock.Set(&si.alarm, si.every)
	si.mu.Unlock()
}

// stop ends the watch; a check already running finds it off.
func (si *streamIdle) stop() {
	si.mu.Lock()
	si.on = false
	si.mu.Unlock()
	si.alarm.Stop()
}

// AlarmFired is one check, on the clock's goroutine.
func (si *streamIdle) AlarmFired(gen uint64) {
	si.mu.Lock()
	defer si.mu.Unlock()
	if !si.on || gen != si.gen {
		return
	}
	if p := si.progress(); p != si.last {
		si.last, si.quiet = p, 0
	} else if si.quiet++; si.quiet >= idleChecks {
		si.on = false
		if si.h1 != nil {
			si.h1.StreamIdleExpired(errStreamIdleTimeout)
		} else {
			si.hs.expire(errStreamIdleTimeout)
		}
		return
	}
	si.gen = si.w.clock.Set(&si.alarm, si.every)
}

// streamEnd ends a serveStream request's stream from outside its handler,
// once a timeout fired: x/net resets a stream whose write deadline passes,
// and net/http's HTTP/1 connection fails its writes past it, which
// unblocks a handler writing to a client that reads nothing.
type streamEnd struct {
	mu   sync.Mutex
	done bool // the handler returned: the stream's writer is gone
	rw   http.ResponseWriter
}

// timedOut gives the stream timeoutGrace to write what it still writes;
// stallRead also ends a request body read now (the request is over). It returns at once (the
// clock's goroutine must not block; deadlines go through the connection's
// serving goroutine).
func (h *streamEnd) timedOut(stallRead bool) {
	go func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.done {
			return
		}
		rc := http.NewResponseController(h.rw)
		if stallRead {
			_ = rc.SetReadDeadline(rawio.ALongTimeAgo)
		}
		_ = rc.SetWriteDeadline(time.Now().Add(timeoutGrace))
	}()
}

// end marks the handler returned.
func (h *streamEnd) end() {
	h.mu.Lock()
	h.done = true
	h.mu.Unlock()
}

// countingReader counts the bytes read through it into n (an upgraded
// stream's, for the stream idle timeout).
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}
