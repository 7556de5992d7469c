package dataplane

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"syscall"
)

// Workers is the number of workers the data plane runs: the usable CPUs.
// The Go runtime's GOMAXPROCS already follows the CPU affinity mask and the
// cgroup CPU limit (Go 1.25+), so it is the cgroup-aware CPU count.
func Workers() int { return max(1, runtime.GOMAXPROCS(0)) }

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
