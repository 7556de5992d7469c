//go:build linux

package dataplane

import (
	"net"

	"golang.org/x/sys/unix"
)

// proxyTCPInfo returns the kernel's TCP_INFO of the proxy's end of the
// client connection c (a plaintext HTTP/1 connection a worker serves): how
// many bytes reached that socket, read or not, and its TCP state tell a
// test what arrived without a sleep. ok is false when there is no such
// connection.
func proxyTCPInfo(s *Server, c net.Conn) (info *unix.TCPInfo, ok bool) {
	for _, w := range s.workers {
		w.h1mu.Lock()
		for hc := range w.h1conns {
			if hc.sc.RemoteAddr().String() != c.LocalAddr().String() {
				continue
			}
			if rc, err := hc.sc.TCPConn.SyscallConn(); err == nil {
				_ = rc.Control(func(fd uintptr) { info, _ = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
			}
		}
		w.h1mu.Unlock()
	}
	return info, info != nil
}

// proxyReceived returns the bytes the proxy's end of c has received.
func proxyReceived(s *Server, c net.Conn) (uint64, bool) {
	info, ok := proxyTCPInfo(s, c)
	if !ok {
		return 0, false
	}
	return info.Bytes_received, true
}

// proxyGotFIN reports that the proxy's end of c has received the client's
// FIN (its state left ESTABLISHED).
func proxyGotFIN(s *Server, c net.Conn) (bool, bool) {
	info, ok := proxyTCPInfo(s, c)
	if !ok {
		return false, false
	}
	const tcpEstablished = 1 // TCP_ESTABLISHED, include/net/tcp_states.h
	return info.State != tcpEstablished, true
}
