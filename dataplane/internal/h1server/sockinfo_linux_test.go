//go:build linux

package h1server

import (
	"net"

	"golang.org/x/sys/unix"
)

// serverTCPInfo returns the kernel's TCP_INFO of the server's end of the
// client connection c: how many bytes reached that socket, read or not,
// and its TCP state tell a test what arrived without a sleep. ok is false
// when there is no such connection.
func serverTCPInfo(s *Server, c net.Conn) (info *unix.TCPInfo, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for hc := range s.conns {
		if hc.tcp.RemoteAddr().String() != c.LocalAddr().String() {
			continue
		}
		if rc, err := hc.tcp.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { info, _ = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
		}
	}
	return info, info != nil
}

// serverReceived returns the bytes the server's end of c has received.
func serverReceived(s *Server, c net.Conn) (uint64, bool) {
	info, ok := serverTCPInfo(s, c)
	if !ok {
		return 0, false
	}
	return info.Bytes_received, true
}

// serverGotFIN reports that the server's end of c has received the
// client's FIN (its state left ESTABLISHED).
func serverGotFIN(s *Server, c net.Conn) (bool, bool) {
	info, ok := serverTCPInfo(s, c)
	if !ok {
		return false, false
	}
	const tcpEstablished = 1 // TCP_ESTABLISHED, include/net/tcp_states.h
	return info.State != tcpEstablished, true
}
