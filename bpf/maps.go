package bpf

import "net/netip"

// Go mirrors of the map keys and values in include/meshlet.h. Addresses are
// 16 bytes, IPv4 as ::ffff:a.b.c.d (netip.Addr.As16); ports host order.

type addrKey struct {
	Addr [16]byte
	Port uint16
	Pad  uint16
}

type origDst struct {
	Addr   [16]byte
	Port   uint16
	Family uint16 // unix.AF_INET or unix.AF_INET6: the family dialled
}

type pairKey struct {
	Local, Remote [16]byte
	LPort, RPort  uint16
}

type cidrKey struct {
	PrefixLen uint32 // over the 128-bit form
	Addr      [16]byte
}

type groupKey struct {
	Port   uint16
	Family uint16
}

type workerGroup struct {
	Base, N uint32
}

type settingsValue struct {
	Accelerate uint32
}

func newAddrKey(ap netip.AddrPort) addrKey {
	return addrKey{Addr: ap.Addr().Unmap().As16(), Port: ap.Port()}
}

func (d origDst) addrPort() netip.AddrPort {
	a := netip.AddrFrom16(d.Addr)
	if d.Family != afInet6 {
		a = a.Unmap()
	}
	return netip.AddrPortFrom(a, d.Port)
}

func newCIDRKey(p netip.Prefix) cidrKey {
	p = p.Masked()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return cidrKey{PrefixLen: uint32(bits), Addr: p.Addr().As16()}
}

const (
	afInet  = 2
	afInet6 = 10
)
