package dataplane

import (
	"context"
	"fmt"
	"net"
	"syscall"
)

// listenReusePort opens one member of a SO_REUSEPORT group on addr, with
// MPTCP off (an MPTCP socket would not match the eBPF socket programs).
func listenReusePort(ctx context.Context, addr string) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dataplane: listen %s: %w", addr, err)
	}
	return l.(*net.TCPListener), nil
}

// soReusePort is SO_REUSEPORT on Linux (not exported by package syscall).
const soReusePort = 0xf
