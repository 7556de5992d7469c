//go:build linux && !386

package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitPeerClosed waits until c's socket has its peer's FIN: its TCP state
// is CLOSE_WAIT.
func waitPeerClosed(t *testing.T, c *net.TCPConn) {
	t.Helper()
	const tcpCloseWait = 8 // TCP_CLOSE_WAIT, include/net/tcp_states.h
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; runtime.Gosched() {
		var state uint8
		var ierr error
		if err := rc.Control(func(fd uintptr) {
			var info *unix.TCPInfo
			if info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); ierr == nil {
				state = info.State
			}
		}); err != nil || ierr != nil {
			t.Fatalf("TCP_INFO: %v %v", err, ierr)
		}
		if state == tcpCloseWait {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the peer's FIN never arrived (TCP state %d)", state)
		}
	}
}

// tcpPair is a connected loopback pair.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func TestRawSocket(t *testing.T) {
	a, b := tcpPair(t)
	ra, rb := newSocket(a), newSocket(b)
	if ra == nil || rb == nil {
		t.Fatal("no raw socket")
	}
	// 8 MiB one way: more than the socket buffers, so the writer waits
	// for the reader (EAGAIN, then the poller) and writes in parts.
	want := bytes.Repeat([]byte("0123456789abcdef"), 512<<10)
	done := make(chan error, 1)
	go func() {
		n, err := ra.Write(want)
		if err == nil && n != len(want) {
			err = errors.New("short write")
		}
		done <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(rb, got); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes differ")
	}
	// A read deadline ends a waiting read with a timeout.
	_ = b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := rb.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	_ = b.SetReadDeadline(time.Time{})
	// The peer's close is io.EOF for the reader.
	a.Close()
	if n, err := rb.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d %v, want EOF", n, err)
	}
	// Writing to a closed peer fails with EPIPE or ECONNRESET (and no
	// SIGPIPE kills the process).
	var werr error
	for range 100 {
		if _, werr = rb.Write([]byte("x")); werr != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(werr, syscall.EPIPE) && !errors.Is(werr, syscall.ECONNRESET) {
		t.Fatalf("write to a closed peer: %v", werr)
	}
	// Our own close ends reads and writes with net.ErrClosed.
	b.Close()
	if _, err := rb.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if _, err := rb.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// TestRawSocketQueuedWrites: writes queued for the next read go out at its
// start; with WaitAfterQueued that read waits for the answer without a read
// that finds nothing first (none of the exchanges makes an empty read); a
// queue larger than the socket's buffers goes out in parts; a peer that
// closed fails the read with the write's error; a deadline drops the queue.
func TestRawSocketQueuedWrites(t *testing.T) {
	a, b := tcpPair(t)
	ra := newSocket(a)
	// The peer answers every 4-byte request with one write of 64 bytes,
	// a few microseconds after it arrived: the case the wait is for.
	answer := bytes.Repeat([]byte("r"), 64)
	go func() {
		q := make([]byte, 4)
		for {
			if _, err := io.ReadFull(b, q); err != nil {
				return
			}
			if _, err := b.Write(answer); err != nil {
				return
			}
		}
	}()
	const exchanges = 200
	buf := make([]byte, 4096)
	for i := range exchanges {
		ra.QueueForRead([]byte("ping"))
		ra.WaitAfterQueued()
		got := 0
		for got < len(answer) {
			n, err := ra.Read(buf)
			if err != nil {
				t.Fatalf("exchange %d: read: %v", i, err)
			}
			got += n
		}
		if got != len(answer) {
			t.Fatalf("exchange %d: %d bytes, want %d", i, got, len(answer))
		}
	}
	// One answer may arrive in two segments; a read that finds nothing
	// would be the wasted system call the queue is for.
	if ra.empty != 0 {
		t.Errorf("%d of %d reads over %d exchanges found nothing, want 0", ra.empty, ra.reads, exchanges)
	}
	if ra.reads < exchanges || ra.reads > exchanges+exchanges/10 {
		t.Errorf("%d reads for %d exchanges", ra.reads, exchanges)
	}

	// Without WaitAfterQueued the read tries first (and may find nothing),
	// and still gets the answer.
	ra.QueueForRead([]byte("ping"))
	if _, err := io.ReadFull(ra, buf[:len(answer)]); err != nil {
		t.Fatalf("queued without wait: %v", err)
	}

	// A queue larger than the socket buffers: the peer reads it all
	// before answering; the read sends what fits, waits for room, sends
	// the rest, then reads the answer.
	c, d := tcpPair(t)
	rc := newSocket(c)
	big := bytes.Repeat([]byte("0123456789abcdef"), 512<<10)
	go func() {
		got := make([]byte, len(big))
		if _, err := io.ReadFull(d, got); err != nil || !bytes.Equal(got, big) {
			d.Close()
			return
		}
		_, _ = d.Write([]byte("done"))
	}()
	rc.QueueForRead(big)
	rc.WaitAfterQueued()
	if _, err := io.ReadFull(rc, buf[:4]); err != nil || string(buf[:4]) != "done" {
		t.Fatalf("8 MiB queued: %q %v, want the peer's done", buf[:4], err)
	}

	// A peer that has closed: the queued write fails, and the read
	// reports it (EPIPE or ECONNRESET), or the end of stream.
	e, f := tcpPair(t)
	re := newSocket(e)
	f.Close()
	waitPeerClosed(t, e)
	var err error
	for range 10 {
		re.QueueForRead([]byte("ping"))
		re.WaitAfterQueued()
		if _, err = re.Read(buf); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) && err != io.EOF {
		t.Fatalf("queued to a closed peer: %v", err)
	}

	// A deadline in the past fails the read before anything is sent; the
	// queue stays for FlushQueued, and a read after it sends nothing
	// twice.
	g, h := tcpPair(t)
	rg := newSocket(g)
	_ = g.SetReadDeadline(time.Unix(1, 0))
	rg.QueueForRead([]byte("kept"))
	rg.WaitAfterQueued()
	if _, err := rg.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	if !rg.Queued() {
		t.Fatal("the queue was dropped with the failed read")
	}
	_ = g.SetReadDeadline(time.Time{})
	if err := rg.FlushQueued(); err != nil || rg.Queued() {
		t.Fatalf("FlushQueued: %v, queued %v", err, rg.Queued())
	}
	go func() { _, _ = h.Write([]byte("x")) }()
	if _, err := rg.Read(buf); err != nil {
		t.Fatal(err)
	}
	_ = h.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	got, _ := io.ReadAll(h)
	if string(got) != "kept" {
		t.Fatalf("the peer got %q, want \"kept\" once", got)
	}
}
