package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ErrNotRedirected reports that a connection has no original destination:
// it was not redirected (or its entry is gone).
var ErrNotRedirected = errors.New("connection was not redirected")

// OriginalDst returns the address the app dialled for a connection the
// sidecar accepted on its outbound listener, with getsockopt(SO_ORIGINAL_DST)
// (IP6T_SO_ORIGINAL_DST on IPv6 sockets). The cgroup/getsockopt program
// answers it; the same call works with iptables REDIRECT. IPv4 destinations
// come back unmapped, whatever the socket's family.
func OriginalDst(c syscall.Conn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bpf: original destination: %w", err)
	}
	var ap netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) { ap, serr = originalDst(int(fd)) })
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bpf: original destination of socket: %w", err)
	}
	return ap, nil
}

func originalDst(fd int) (netip.AddrPort, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockname: %w", err)
	}
	if _, ok := sa.(*unix.SockaddrInet6); ok {
		return getOriginalDst(fd, unix.SOL_IPV6, 28)
	}
	return getOriginalDst(fd, unix.SOL_IP, 16)
}

func getOriginalDst(fd, level, size int) (netip.AddrPort, error) {
	var buf [28]byte // sockaddr_in6, the larger
	n := uint32(size)
	const soOriginalDst = 80 // SO_ORIGINAL_DST and IP6T_SO_ORIGINAL_DST
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soOriginalDst,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	if errno == unix.ENOENT {
		return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w (%w)", ErrNotRedirected, errno)
	}
	if errno != 0 {
		return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", errno)
	}
	family := binary.NativeEndian.Uint16(buf[0:2])
	port := binary.BigEndian.Uint16(buf[2:4])
	switch {
	case family == unix.AF_INET && n >= 8:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[4:8])), port), nil
	case family == unix.AF_INET6 && n >= 24:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(buf[8:24])).Unmap(), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: unexpected address family %d, length %d", family, n)
}

// LookupOriginalDst returns the address the app dialled for the connection
// whose app end is peer, the remote address of the socket the sidecar
// accepted. It reads the map directly; the entry is dropped when the
// sidecar's socket is closed.
func (o *Objects) LookupOriginalDst(peer netip.AddrPort) (netip.AddrPort, error) {
	var d origDst
	if err := o.maps.origByPeer.Lookup(newAddrKey(peer), &d); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return netip.AddrPort{}, fmt.Errorf("bpf: original destination of peer %s: %w", peer, ErrNotRedirected)
		}
		return netip.AddrPort{}, fmt.Errorf("bpf: original destination of peer %s: %w", peer, err)
	}
	return d.addrPort(), nil
}
