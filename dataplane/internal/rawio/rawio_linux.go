//go:build linux && !386

package rawio

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Socket reads and writes a TCP socket with raw system calls, going
// through Go's network poller only to wait for readiness (and for the
// socket's deadlines and closing, which RawConn honours).
//
// Why: net.TCPConn's Read and Write enter the system call through the
// scheduler (entersyscall), which wakes the runtime's monitor thread
// (sysmon) when the process was idle; it then polls while the request
// runs, and takes the processor away from a write that lasts longer than
// its poll (a write on loopback runs the receiver's TCP stack): several
// wake-ups per request at low load (bench/RESULTS.md). A read or write on
// a non-blocking socket never blocks, so holding the processor through it
// is safe. Writes use send(2) with MSG_NOSIGNAL (a peer that closed gives
// EPIPE, no signal).
//
// One Read and one Write may run at a time (bufio readers and writers of
// one connection do so).
//
// Queued writes (QueueForRead) go out at the start of the next Read, in
// its poller callback, and that Read may then wait for readiness without
// first trying a read that would find nothing: see QueueForRead.
type Socket struct {
	rc syscall.RawConn

	// pre is what the next Read sends before reading; preWait lets it
	// wait without a read attempt once pre is out.
	pre     []byte
	preSent int
	preWait bool
	// reads counts read system calls, empty those that found nothing
	// (EAGAIN): what QueueForRead saves shows there (tests).
	reads, empty int
	// short: the last read returned less than asked, so the socket had
	// nothing more then (epoll(7): a short read of a stream socket
	// drains it).
	short bool

	rp      []byte
	rn      int
	rerr    error
	readFn  func(fd uintptr) bool
	wp      []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// IO is c's raw socket, or c where it has none.
func IO(c *net.TCPConn) io.ReadWriter {
	if s := newSocket(c); s != nil {
		return s
	}
	return c
}

func newSocket(c *net.TCPConn) *Socket {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	s := &Socket{rc: rc}
	s.readFn = func(fd uintptr) bool {
		if s.preSent < len(s.pre) {
			if !s.sendQueued(fd) {
				return true // an error, or a full socket: Read finishes outside
			}
			if s.preWait {
				s.preWait = false
				return false // what answers arrives after the poller was reset
			}
		}
		for {
			s.reads++
			n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(s.rp))), uintptr(len(s.rp)))
			switch e {
			case 0:
				s.rn, s.rerr, s.short = int(n), nil, int(n) < len(s.rp)
				if n == 0 {
					s.rerr = io.EOF
				}
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				s.empty++
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

// QueueForRead queues p (copied) to be sent by the next Read, in its
// poller callback.
//
// Why: Go's poller is edge-triggered, and a Read first resets the
// socket's recorded readiness, then tries the read system call, and waits
// only if that finds nothing. A request sent before the Read and answered
// a few microseconds later makes that first read find nothing nearly
// always: one wasted system call per exchange. Sent inside the Read's
// callback, after the reset, the request's answer is sure to be announced
// by an edge the Read waits for (data that arrives after the reset is
// one), so the Read can wait without trying first (WaitAfterQueued).
func (s *Socket) QueueForRead(p []byte) {
	if s.preSent == len(s.pre) {
		s.pre, s.preSent, s.preWait = s.pre[:0], 0, false
	}
	s.pre = append(s.pre, p...)
}

// WaitAfterQueued lets the next Read, once the queue is out, wait for the
// socket to become readable without a read attempt first. It is for a
// caller that knows nothing arrived before the queue was sent that the
// reset could forget: an idle upstream connection of an HTTP/1.1 pool has
// nothing to say, and an upstream that closed it meanwhile answers the
// request with a reset, itself an edge.
func (s *Socket) WaitAfterQueued() {
	if s.preSent < len(s.pre) {
		s.preWait = true
	}
}

// sendQueued sends pre from the poller callback; it reports whether all
// of it went out (false: an error, in rerr, or a full socket).
func (s *Socket) sendQueued(fd uintptr) bool {
	for s.preSent < len(s.pre) {
		b := s.pre[s.preSent:]
		n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
			syscall.MSG_NOSIGNAL, 0, 0)
		switch e {
		case 0:
			s.preSent += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			s.rn, s.rerr = 0, nil
			return false
		default:
			s.rn, s.rerr = 0, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", e)}
			s.preSent = len(s.pre)
			return false
		}
	}
	return true
}

// Read reads into p, sending what is queued first.
func (s *Socket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rp = p
	err := s.rc.Read(s.readFn)
	if err == nil && s.rerr == nil && s.rn == 0 && s.preSent < len(s.pre) {
		// The socket was full: the rest waits for room, then the read
		// as ever.
		if werr := s.FlushQueued(); werr != nil {
			s.rp = nil
			return 0, werr
		}
		err = s.rc.Read(s.readFn)
	}
	s.rp = nil
	if err != nil {
		// A deadline or a close before the callback ran: what is queued
		// is still there for FlushQueued.
		s.preWait = false
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: err}
	}
	return s.rn, s.rerr
}

// FlushQueued sends what is queued and not sent yet, now.
func (s *Socket) FlushQueued() error {
	if s.preSent == len(s.pre) {
		return nil
	}
	rest := s.pre[s.preSent:]
	s.preSent, s.preWait = len(s.pre), false
	_, err := s.Write(rest)
	return err
}

// Queued reports whether writes wait for the next Read.
func (s *Socket) Queued() bool { return s.preSent < len(s.pre) }

// Drained reports whether the last read was short: the socket had nothing
// more to read then.
func (s *Socket) Drained() bool { return s.short }

// Write writes p with send(2), waiting for room while the socket is full.
func (s *Socket) Write(p []byte) (int, error) {
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

// Peek peeks at what socket fd holds without blocking
// (MSG_PEEK | MSG_DONTWAIT) into b: n bytes, 0 at its end, or errno
// (EAGAIN: nothing there). A raw recvfrom with no address: x/sys/unix's
// Recvfrom allocates its address buffers on every call.
func Peek(fd uintptr, b []byte) (n int, errno syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}
