package bpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// listenerInfo is what the maps need to know about a listener.
type listenerInfo struct {
	fd       int
	family   uint16
	port     uint16
	v6only   bool
	addr     string
	reusable bool
}

// inspect checks that ln can go into a socket map: a plain TCP listener
// (Go 1.24+ listens with MPTCP by default, which socket maps reject).
func inspect(ln *net.TCPListener, fn func(listenerInfo) error) error {
	raw, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	err = raw.Control(func(fd uintptr) {
		info := listenerInfo{fd: int(fd), addr: ln.Addr().String()}
		proto, err := unix.GetsockoptInt(info.fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
		if err != nil {
			ferr = fmt.Errorf("SO_PROTOCOL: %w", err)
			return
		}
		if proto != unix.IPPROTO_TCP {
			ferr = fmt.Errorf("socket protocol is %d, not TCP (an MPTCP listener? use net.ListenConfig.SetMultipathTCP(false))", proto)
			return
		}
		sa, err := unix.Getsockname(info.fd)
		if err != nil {
			ferr = fmt.Errorf("getsockname: %w", err)
			return
		}
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			info.family, info.port = afInet, uint16(sa.Port)
		case *unix.SockaddrInet6:
			info.family, info.port = afInet6, uint16(sa.Port)
			v6only, err := unix.GetsockoptInt(info.fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
			if err != nil {
				ferr = fmt.Errorf("IPV6_V6ONLY: %w", err)
				return
			}
			info.v6only = v6only == 1
		default:
			ferr = fmt.Errorf("not an IP socket")
			return
		}
		rp, err := unix.GetsockoptInt(info.fd, unix.SOL_SOCKET, unix.SO_REUSEPORT)
		info.reusable = err == nil && rp == 1
		ferr = fn(info)
	})
	if err != nil {
		return err
	}
	return ferr
}

// SetInboundListener makes ln the socket inbound steering hands connections
// to: for IPv4 if it is an IPv4 socket, for IPv6 if IPv6, for both if it is a
// dual-stack IPv6 socket (the usual ":15006"). A later call for the same
// family replaces it. The entry goes away when ln is closed.
func (o *Objects) SetInboundListener(ln *net.TCPListener) error {
	err := inspect(ln, func(li listenerInfo) error {
		slots := []uint32{0}
		switch {
		case li.family == afInet6 && li.v6only:
			slots = []uint32{1}
		case li.family == afInet6:
			slots = []uint32{0, 1}
		}
		for _, s := range slots {
			if err := o.maps.inboundSockets.Put(s, uint64(li.fd)); err != nil {
				return fmt.Errorf("put into inbound_sockets[%d]: %w", s, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("bpf: set inbound listener %s: %w", ln.Addr(), err)
	}
	return nil
}

// WorkerGroup is a SO_REUSEPORT group whose connections are spread by CPU;
// Close gives the choice back to the kernel's hash.
type WorkerGroup struct {
	o     *Objects
	first *net.TCPListener // carries the program for the group
	key   groupKey
	base  uint32
	n     int
	once  sync.Once
	err   error
}

// RegisterWorkers makes listeners, the members of one SO_REUSEPORT group
// (same address and port, SO_REUSEPORT set, plain TCP), a group whose new
// connections go to listeners[cpu % len(listeners)], cpu being the CPU that
// handles the connection's SYN (on loopback, the client's CPU; from a NIC,
// the one its RSS/RPS setup picks). Workers usually come one per CPU.
func (o *Objects) RegisterWorkers(listeners []*net.TCPListener) (*WorkerGroup, error) {
	if len(listeners) == 0 {
		return nil, errors.New("bpf: register workers: no listeners")
	}
	g := &WorkerGroup{o: o, first: listeners[0], n: len(listeners)}
	where := listeners[0].Addr().String()
	var infos []listenerInfo
	for _, ln := range listeners {
		err := inspect(ln, func(li listenerInfo) error {
			if !li.reusable {
				return errors.New("SO_REUSEPORT is not set")
			}
			if len(infos) > 0 && (li.family != infos[0].family || li.addr != infos[0].addr) {
				return fmt.Errorf("not in the group of %s", infos[0].addr)
			}
			infos = append(infos, li)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("bpf: register workers on %s: listener %s: %w", where, ln.Addr(), err)
		}
	}
	g.key = groupKey{Port: infos[0].port, Family: infos[0].family}

	base, err := o.allocSlots(len(listeners))
	if err != nil {
		return nil, fmt.Errorf("bpf: register workers on %s: %w", where, err)
	}
	g.base = uint32(base)
	if err := o.own(g); err != nil {
		o.freeSlots(base, len(listeners))
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			g.Close()
		}
	}()
	for i, ln := range listeners {
		err := inspect(ln, func(li listenerInfo) error {
			return o.maps.workers.Put(g.base+uint32(i), uint64(li.fd))
		})
		if err != nil {
			return nil, fmt.Errorf("bpf: register workers on %s: put worker %d: %w", where, i, err)
		}
	}
	if err := o.maps.workerGroups.Update(g.key, workerGroup{Base: g.base, N: uint32(g.n)}, ebpf.UpdateNoExist); err != nil {
		if errors.Is(err, ebpf.ErrKeyExist) {
			err = errors.New("another group is registered for this port")
			g.key = groupKey{} // not ours to delete
		}
		return nil, fmt.Errorf("bpf: register workers on %s: %w", where, err)
	}
	err = inspect(g.first, func(li listenerInfo) error {
		return unix.SetsockoptInt(li.fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, o.reuseport.MeshReuseport.FD())
	})
	if err != nil {
		return nil, fmt.Errorf("bpf: register workers on %s: attach sk_reuseport: %w", where, err)
	}
	ok = true
	return g, nil
}

// Close detaches the program from the group and forgets its workers. The
// listeners stay open.
func (g *WorkerGroup) Close() error {
	g.once.Do(func() {
		var errs []error
		// A closed listener has left the group already: nothing to detach.
		_ = inspect(g.first, func(li listenerInfo) error {
			if err := unix.SetsockoptInt(li.fd, unix.SOL_SOCKET, unix.SO_DETACH_REUSEPORT_BPF, 0); err != nil && err != unix.ENOENT {
				errs = append(errs, fmt.Errorf("detach sk_reuseport: %w", err))
			}
			return nil
		})
		if err := g.o.maps.workerGroups.Delete(g.key); err != nil && !isNotExist(err) {
			errs = append(errs, err)
		}
		for i := range g.n {
			if err := g.o.maps.workers.Delete(g.base + uint32(i)); err != nil && !isNotExist(err) {
				errs = append(errs, err)
			}
		}
		g.o.freeSlots(int(g.base), g.n)
		g.o.disown(g)
		if err := errors.Join(errs...); err != nil {
			g.err = fmt.Errorf("bpf: close worker group on port %d: %w", g.key.Port, err)
		}
	})
	return g.err
}

// allocSlots reserves n consecutive slots in the workers map.
func (o *Objects) allocSlots(n int) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	run := 0
	for i := range o.slots {
		if o.slots[i] {
			run = 0
			continue
		}
		run++
		if run == n {
			base := i - n + 1
			for j := base; j <= i; j++ {
				o.slots[j] = true
			}
			return base, nil
		}
	}
	return 0, fmt.Errorf("no room for %d workers (%d slots in all)", n, maxWorkerSlots)
}

func (o *Objects) freeSlots(base, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := base; i < base+n; i++ {
		o.slots[i] = false
	}
}

// Accelerated reports whether c, a TCP connection of the pod, is in the
// acceleration sockhash: its peer's writes may then reach it through the
// sk_msg redirect, which splice(2) does not see. Copy such a connection with
// Read and Write, not io.Copy between two *net.TCPConn (which splices).
func (o *Objects) Accelerated(c net.Conn) bool {
	local, err1 := netip.ParseAddrPort(c.LocalAddr().String())
	remote, err2 := netip.ParseAddrPort(c.RemoteAddr().String())
	if err1 != nil || err2 != nil {
		return false
	}
	k := pairKey{
		Local: local.Addr().Unmap().As16(), Remote: remote.Addr().Unmap().As16(),
		LPort: local.Port(), RPort: remote.Port(),
	}
	var cookie uint64
	return o.maps.sockPairs.Lookup(k, &cookie) == nil
}
