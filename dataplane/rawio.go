//go:build linux && !386

package dataplane

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawSocket reads and writes a TCP socket with raw system calls, going
// through Go's network poller only to wait for readiness (and for the
// socket's deadlines and closing, which RawConn honours).
//
// Why: net.TCPConn's Read and Write enter the system call through the
// scheduler (entersyscall), which wakes the runtime's monitor thread
// (sysmon) when the process was idle; it then polls every 20 µs while the
// request runs, and takes the processor away from a write that lasts
// longer than that (a write on loopback runs the receiver's TCP stack).
// At 1000 req/s that was several wake-ups per request. A read or write on
// a non-blocking socket never blocks, so holding the processor through it
// is safe. Writes use send(2) with MSG_NOSIGNAL (a peer that closed gives
// EPIPE, no signal).
//
// One Read and one Write may run at a time (bufio readers and writers of
// one connection do so).
type rawSocket struct {
	rc syscall.RawConn

	rp      []byte
	rn      int
	rerr    error
	readFn  func(fd uintptr) bool
	wp      []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// socketIO is c's raw socket, or c where it has none.
func socketIO(c *net.TCPConn) io.ReadWriter {
	if s := newRawSocket(c); s != nil {
		return s
	}
	return c
}

func newRawSocket(c *net.TCPConn) *rawSocket {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	s := &rawSocket{rc: rc}
	s.readFn = func(fd uintptr) bool {
		for {
			n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(s.rp))), uintptr(len(s.rp)))
			switch e {
			case 0:
				s.rn, s.rerr = int(n), nil
				if n == 0 {
					s.rerr = io.EOF
				}
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait in the poller
			default:
				s.rn, s.rerr = 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", e)}
				return true
			}
		}
	}
	s.writeFn = func(fd uintptr) bool {
		for {
			n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(unsafe.SliceData(s.wp))), uintptr(len(s.wp)),
				syscall.MSG_NOSIGNAL, 0, 0)
			switch e {
			case 0:
				s.wn += int(n)
				s.wp = s.wp[n:]
				if len(s.wp) == 0 {
					return true
				}
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait until writable
			default:
				s.werr = &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", e)}
				return true
			}
		}
	}
	return s
}

func (s *rawSocket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rp = p
	err := s.rc.Read(s.readFn)
	s.rp = nil
	if err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: err}
	}
	return s.rn, s.rerr
}

func (s *rawSocket) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.wp, s.wn, s.werr = p, 0, nil
	err := s.rc.Write(s.writeFn)
	n, werr := s.wn, s.werr
	s.wp = nil
	if err != nil {
		return n, &net.OpError{Op: "write", Net: "tcp", Err: err}
	}
	return n, werr
}
