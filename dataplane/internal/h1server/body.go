package h1server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/meshlet-dev/meshlet/dataplane/internal/clock"
	"github.com/meshlet-dev/meshlet/dataplane/internal/rawio"
)

// reqBody is a request body: at its end the disconnect watch is armed (the
// connection may then be read). Close does not drain (net/http's would
// read all of an abandoned upload); serve skips a bounded rest. A body
// whose framing breaks (a malformed chunk) is recorded in its writer
// (Writer.bodyErr): the client's protocol error, not the upstream's.
type reqBody struct {
	io.ReadCloser
	onEOF  func()
	w      *Writer // the request's
	eof    bool
	closed bool
}

// Close marks the body closed.
func (b *reqBody) Close() error {
	b.closed = true
	return nil
}

func (b *reqBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.eof {
		b.eof = true
		if b.w != nil {
			b.w.bodyPending.Store(false)
		}
		b.onEOF()
	} else if err != nil && err != io.EOF && b.w != nil && framingError(err) {
		b.w.bodyErr.CompareAndSwap(nil, &bodyError{err})
	}
	return n, err
}

// framingError reports whether a request body's read error is the
// body's framing (net/http's chunked reader refusing a chunk size, a
// missing CRLF, a malformed trailer), not the connection's: the end of
// stream before the body's end (io.ErrUnexpectedEOF), a socket error or a
// deadline.
func framingError(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return false // (checked first: the rest allocates)
	}
	var oe *net.OpError
	return !errors.As(err, &oe) && !errors.Is(err, net.ErrClosed) && !rawio.IsDeadline(err) && !errors.Is(err, http.ErrBodyReadAfterClose)
}

// bodyError is the framing error of a request body.
type bodyError struct{ err error }

// dcWatch notices a client that goes away during a slow request: armed
// (once the request is read whole), it starts after dcWatchDelay (on the
// worker's clock: up to a clock.Tick later) a goroutine that reads the
// connection; end of stream or an error cancels the request (the handler
// then flags DC); a byte (the next pipelined request) is kept for the
// reader.
type dcWatch struct {
	c     *Conn
	rw    *Writer
	alarm clock.Alarm // its target is the watch
	// mu guards what follows: the watch of the request in flight.
	mu   sync.Mutex
	on   bool   // armed
	gen  uint64 // the alarm's generation when armed
	done chan struct{}
	off  bool
	gone bool
}

// reset readies the watch for the writer's next request (after stop).
func (d *dcWatch) reset() {
	d.mu.Lock()
	d.on, d.done, d.off, d.gone = false, nil, false, false
	d.mu.Unlock()
}

func (d *dcWatch) arm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off || d.on {
		return
	}
	d.on = true
	d.gen = d.c.srv.o.Clock.Set(&d.alarm, dcWatchDelay)
}

func (d *dcWatch) AlarmFired(gen uint64) { d.start(gen) }

// start starts the watch armed with the alarm's generation gen.
func (d *dcWatch) start(gen uint64) {
	d.mu.Lock()
	if d.off || !d.on || gen != d.gen || d.c.br.Buffered() > 0 || len(d.c.src.pending) > 0 {
		d.mu.Unlock()
		return // stopped, a firing for an earlier request, or the client has already sent more
	}
	d.done = make(chan struct{})
	d.mu.Unlock()
	go func() {
		defer close(d.done)
		var b [1]byte
		for {
			n, err := d.c.tcp.Read(b[:])
			if n > 0 {
				d.c.src.pending = append(d.c.src.pending, b[:n]...)
				return
			}
			if err != nil && !rawio.IsDeadline(err) {
				d.gone = true
				d.rw.cancelRequest(context.Canceled)
				return
			}
			// A deadline: stop's, or the connection's idle deadline
			// reached by a request that long: watch on without it.
			d.mu.Lock()
			if d.off {
				d.mu.Unlock()
				return
			}
			d.c.setReadDeadline(time.Time{})
			d.mu.Unlock()
		}
	}()
}

// stop ends the watch before the connection is used again.
func (d *dcWatch) stop() {
	d.mu.Lock()
	d.off = true
	if d.on {
		d.alarm.Stop()
	}
	done := d.done
	d.mu.Unlock()
	if done != nil {
		_ = d.c.tcp.SetReadDeadline(rawio.ALongTimeAgo)
		<-done
		d.c.setReadDeadline(time.Time{})
	}
}
