//go:build !linux || 386

package rawio

import (
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// IO is c itself where raw socket I/O (rawio_linux.go) is not built.
func IO(c *net.TCPConn) io.ReadWriter { return c }

// Peek peeks at what socket fd holds without blocking
// (MSG_PEEK | MSG_DONTWAIT) into b: n bytes, 0 at its end, or errno
// (EAGAIN: nothing there).
func Peek(fd uintptr, b []byte) (n int, errno syscall.Errno) {
	n, _, err := unix.Recvfrom(int(fd), b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if err != nil {
		e, _ := err.(syscall.Errno)
		return -1, e
	}
	return n, 0
}
