//go:build !linux || 386

package dataplane

import (
	"io"
	"net"
)

// socketIO is c itself where raw socket I/O (rawio.go) is not built.
func socketIO(c *net.TCPConn) io.ReadWriter { return c }
