//go:build linux && !386

package dataplane

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

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
	ra, rb := newRawSocket(a), newRawSocket(b)
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
	if _, err := rb.Read(make([]byte, 1)); !isDeadline(err) {
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
