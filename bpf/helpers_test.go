package bpf

// The roles of the re-executed test binary (TestMain dispatches on
// MESHLET_TEST_HELPER). Each prints its results as prefixed lines on stdout.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func runHelper(role string) int {
	var err error
	switch role {
	case "dial":
		err = helperDial()
	case "serve":
		err = helperServe()
	case "sidecar":
		err = helperSidecar()
	case "fixture":
		err = helperFixture()
	default:
		err = fmt.Errorf("unknown helper role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", role, err)
		return 1
	}
	return 0
}

func helperArgs(v any) error {
	if err := json.Unmarshal([]byte(os.Getenv(argsEnv)), v); err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	return nil
}

func emit(prefix string, v any) {
	js, _ := json.Marshal(v)
	fmt.Printf("%s %s\n", prefix, js)
}

// helperDial is the app: one connection, one request, the reply.
func helperDial() error {
	var a dialArgs
	if err := helperArgs(&a); err != nil {
		return err
	}
	if a.UID != 0 {
		// All threads; the connect hook reads the real uid.
		if err := syscall.Setuid(a.UID); err != nil {
			return fmt.Errorf("setuid %d: %w", a.UID, err)
		}
	}
	var r dialResult
	c, err := appConnect(a)
	if err != nil {
		r.Err = err.Error()
		emit("RESULT", r)
		return nil
	}
	defer c.Close()
	r.Local, r.Remote = c.LocalAddr().String(), c.RemoteAddr().String()
	r.Peername = peername(c)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, a.Send); err != nil {
		r.Err = err.Error()
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	if a.Network == "udp4" {
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		r.Reply = string(buf[:n])
		if err != nil && r.Err == "" {
			r.Err = err.Error()
		}
	} else {
		reply, err := io.ReadAll(c)
		r.Reply = string(reply)
		if err != nil && r.Err == "" {
			r.Err = err.Error()
		}
	}
	emit("RESULT", r)
	return nil
}

func appConnect(a dialArgs) (net.Conn, error) {
	if a.Network != "dualstack" {
		d := net.Dialer{Timeout: 5 * time.Second}
		d.SetMultipathTCP(a.MPTCP)
		return d.Dial(a.Network, a.Addr)
	}
	// What a Java app does: an AF_INET6 socket dialling a v4-mapped address.
	ap, err := netip.ParseAddrPort(a.Addr)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return nil, err
	}
	sa := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: netip.AddrFrom16(ap.Addr().As16()).As16()}
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("connect [::ffff:%s]:%d: %w", ap.Addr(), ap.Port(), err)
	}
	f := os.NewFile(uintptr(fd), "dualstack")
	defer f.Close()
	return net.FileConn(f)
}

// peername is getpeername(2) on c.
func peername(c net.Conn) string {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return ""
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err.Error()
	}
	var out string
	raw.Control(func(fd uintptr) {
		sa, err := unix.Getpeername(int(fd))
		if err != nil {
			out = err.Error()
			return
		}
		out = sockaddrString(sa)
	})
	return out
}

func sockaddrString(sa unix.Sockaddr) string {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)).String()
	}
	return fmt.Sprintf("%T", sa)
}

type serveArgs struct {
	Addrs []string // TCP listen addresses
}

// helperServe is the app's server: answers every connection with
// "APP local=... peer=..." after reading the request.
func helperServe() error {
	var a serveArgs
	if err := helperArgs(&a); err != nil {
		return err
	}
	for _, addr := range a.Addrs {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			return err
		}
		serveTagged(ln, "APP")
	}
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin) // until the test closes stdin
	return nil
}

type sidecarArgs struct {
	PodCgroup string
	// Services maps a dialled address to the upstream the sidecar forwards
	// it to (a stand-in for service discovery); others go where dialled.
	Services map[string]string
}

// accessEntry is the sidecar's access log line.
type accessEntry struct {
	Direction   string // outbound or inbound
	Peer        string // the downstream address
	OrigDst     string // outbound: SO_ORIGINAL_DST
	MapDst      string // outbound: LookupOriginalDst(peer)
	LocalPort   uint16 // inbound: the port from getsockname
	Upstream    string
	UpstreamErr string
}

type sidecarReady struct {
	LinkIDs []uint32
	Pid     int
}

// helperSidecar is a minimal sidecar: Load, Attach to its pod (its own
// network namespace), an outbound listener that forwards to the original
// destination and an inbound listener that forwards to the app on loopback.
// Stdin commands: "counters".
func helperSidecar() error {
	var a sidecarArgs
	if err := helperArgs(&a); err != nil {
		return err
	}
	objs, err := Load(Options{})
	if err != nil {
		return err
	}
	defer objs.Close()
	att, err := objs.Attach(Pod{Cgroup: a.PodCgroup, Netns: "/proc/self/ns/net"})
	if err != nil {
		return err
	}
	defer att.Close()

	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	out, err := lc.Listen(context.Background(), "tcp4", DefaultOutboundIPv4.String())
	if err != nil {
		return err
	}
	in, err := lc.Listen(context.Background(), "tcp", ":15006")
	if err != nil {
		return err
	}
	if err := objs.SetInboundListener(in.(*net.TCPListener)); err != nil {
		return err
	}
	logs := make(chan accessEntry, 100)
	go func() {
		for e := range logs {
			emit("ACCESS", e)
		}
	}()
	go acceptLoop(out, func(c net.Conn) {
		e := accessEntry{Direction: "outbound", Peer: c.RemoteAddr().String()}
		dst, err := OriginalDst(c.(*net.TCPConn))
		if err != nil {
			e.OrigDst = "error: " + err.Error()
		} else {
			e.OrigDst = dst.String()
		}
		if md, err := objs.LookupOriginalDst(netip.MustParseAddrPort(e.Peer)); err != nil {
			e.MapDst = "error: " + err.Error()
		} else {
			e.MapDst = md.String()
		}
		e.Upstream = e.OrigDst
		if svc, ok := a.Services[e.OrigDst]; ok {
			e.Upstream = svc
		}
		forward(c, e, logs)
	})
	go acceptLoop(in, func(c net.Conn) {
		e := accessEntry{Direction: "inbound", Peer: c.RemoteAddr().String()}
		local := netip.MustParseAddrPort(c.LocalAddr().String())
		e.LocalPort = local.Port()
		e.Upstream = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), local.Port()).String()
		forward(c, e, logs)
	})

	var ids []uint32
	for _, id := range att.LinkIDs() {
		ids = append(ids, uint32(id))
	}
	emit("READY", sidecarReady{LinkIDs: ids, Pid: os.Getpid()})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "counters":
			c, err := objs.Counters()
			if err != nil {
				return err
			}
			emit("COUNTERS", c)
		}
	}
	return nil
}

func acceptLoop(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c)
	}
}

// forward connects to e.Upstream (a connect the hooks must leave alone: the
// sidecar's own) and copies both ways.
func forward(c net.Conn, e accessEntry, logs chan<- accessEntry) {
	defer c.Close()
	d := net.Dialer{Timeout: 5 * time.Second}
	d.SetMultipathTCP(false)
	up, err := d.Dial("tcp", e.Upstream)
	if err != nil {
		e.UpstreamErr = err.Error()
		logs <- e
		return
	}
	defer up.Close()
	logs <- e
	done := make(chan struct{})
	go func() {
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(c, up)
	c.(*net.TCPConn).CloseWrite()
	<-done
}

type fixtureArgs struct{}

type fixtureReady struct {
	Cgroups []string
	Netns   []string
	LinkIDs []uint32
}

// helperFixture builds a pod fixture the way the tests do (cgroups, two
// namespaces with a veth), attaches to it and waits to be killed: what it
// leaves is what sweep.sh must find.
func helperFixture() error {
	t := &helperT{}
	pc := newPodCgroups(t)
	nsPod, podPath := newNetns(t, "pod")
	nsPeer, _ := newNetns(t, "peer")
	vethPair(t, nsPod, "eth0", []string{"10.211.9.2/24"}, nsPeer, "eth0", []string{"10.211.9.1/24"})
	if t.failed != nil {
		return t.failed
	}
	objs, err := Load(Options{ProxyCgroup: pc.proxy})
	if err != nil {
		return err
	}
	att, err := objs.Attach(Pod{Cgroup: pc.pod, Netns: podPath})
	if err != nil {
		return err
	}
	var ids []uint32
	for _, id := range att.LinkIDs() {
		ids = append(ids, uint32(id))
	}
	emit("READY", fixtureReady{Cgroups: []string{pc.pod, pc.app, pc.proxy}, Netns: []string{nsPod, nsPeer}, LinkIDs: ids})
	select {} // until SIGKILL
}

// helperT lets the fixture functions run outside a test: failures are
// recorded, cleanups never run (the process is killed).
type helperT struct {
	testing.TB
	failed error
}

func (h *helperT) Helper()                   {}
func (h *helperT) Cleanup(func())            {}
func (h *helperT) Log(args ...any)           { fmt.Fprintln(os.Stderr, args...) }
func (h *helperT) Errorf(f string, a ...any) { h.record(fmt.Errorf(f, a...)) }
func (h *helperT) Fatalf(f string, a ...any) { h.record(fmt.Errorf(f, a...)); panic(h.failed) }
func (h *helperT) Fatal(a ...any)            { h.record(fmt.Errorf("%s", fmt.Sprint(a...))); panic(h.failed) }
func (h *helperT) record(err error) {
	if h.failed == nil {
		h.failed = err
	}
}
