package bpf

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sidecarSeen is what the in-process sidecar saw on one accepted connection.
type sidecarSeen struct {
	Peer, Local     string
	OrigDst, MapDst string
}

// serveSidecar plays the sidecar's outbound listener: it recovers the
// original destination both ways, reports it, and answers "SIDECAR ...".
func serveSidecar(o *Objects, ln *net.TCPListener, seen chan<- sidecarSeen) {
	go acceptLoop(ln, func(c net.Conn) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		s := sidecarSeen{Peer: c.RemoteAddr().String(), Local: c.LocalAddr().String()}
		if d, err := OriginalDst(c.(*net.TCPConn)); err != nil {
			s.OrigDst = "error: " + err.Error()
		} else {
			s.OrigDst = d.String()
		}
		if d, err := o.LookupOriginalDst(netip.MustParseAddrPort(s.Peer)); err != nil {
			s.MapDst = "error: " + err.Error()
		} else {
			s.MapDst = d.String()
		}
		req, _ := io.ReadAll(c)
		fmt.Fprintf(c, "SIDECAR orig=%s req=%s", s.OrigDst, req)
		seen <- s
	})
}

// TestConnectRedirect: a pod (cgroup with app/ and proxy/ children) in a
// network namespace with no route out. The test process is the sidecar, in
// proxy/, with its outbound listeners on 127.0.0.1:15001 and [::1]:15001;
// "real" destinations are local addresses of the namespace (10.97.0.10,
// fd00:97::10), so a connect that is not redirected reaches one of them
// (answer UPSTREAM; they are on lo but not loopback addresses) instead of the sidecar (answer SIDECAR). App processes
// start inside app/ (CLONE_INTO_CGROUP).
func TestConnectRedirect(t *testing.T) {
	requireRoot(t)
	pc := newPodCgroups(t)
	ns, nsPath := newNetns(t, "pod")
	localAddrs(t, ns, "10.97.0.10/32", "fd00:97::10/128")
	joinCgroup(t, pc.proxy)
	o := mustLoad(t, Options{ProxyCgroup: pc.proxy})
	att, err := o.Attach(Pod{Cgroup: pc.pod})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()

	seen := make(chan sidecarSeen, 16)
	serveSidecar(o, listenTCP(t, nsPath, "tcp4", "127.0.0.1:15001"), seen)
	serveSidecar(o, listenTCP(t, nsPath, "tcp6", "[::1]:15001"), seen)
	serveTagged(listenTCP(t, nsPath, "tcp4", "10.97.0.10:80"), "UPSTREAM")
	serveTagged(listenTCP(t, nsPath, "tcp6", "[fd00:97::10]:80"), "UPSTREAM")
	serveTagged(listenTCP(t, nsPath, "tcp4", "127.0.0.1:8080"), "LOOPBACK")
	serveTagged(listenTCP(t, nsPath, "tcp6", "[::1]:8080"), "LOOPBACK")
	var udp net.PacketConn
	if err := inNetns(nsPath, func() (err error) {
		udp, err = net.ListenPacket("udp4", "10.97.0.10:53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			udp.WriteTo(append([]byte("UDP-UPSTREAM req="), buf[:n]...), from)
		}
	}()

	app := func(t *testing.T, a dialArgs) dialResult {
		t.Helper()
		r := appDial(t, pc.app, nsPath, a)
		t.Logf("app %s %s: local=%s remote=%s peername=%s reply=%q err=%s", a.Network, a.Addr, r.Local, r.Remote, r.Peername, r.Reply, r.Err)
		return r
	}
	// redirected checks that r went through the sidecar, which recovered
	// orig both ways, and that the app sees orig as its peer.
	redirected := func(t *testing.T, r dialResult, orig, peername string) {
		t.Helper()
		if !strings.HasPrefix(r.Reply, "SIDECAR orig="+orig+" ") {
			t.Fatalf("reply %q (err %q), want the sidecar's with orig=%s", r.Reply, r.Err, orig)
		}
		if r.Peername != peername {
			t.Errorf("app's getpeername = %s, want %s (the dialled address)", r.Peername, peername)
		}
		select {
		case s := <-seen:
			if s.OrigDst != orig || s.MapDst != orig {
				t.Errorf("sidecar recovered SO_ORIGINAL_DST=%s, map=%s; want %s both", s.OrigDst, s.MapDst, orig)
			}
			if s.Peer != r.Local && "[::ffff:"+strings.Replace(s.Peer, ":", "]:", 1) != r.Local {
				t.Errorf("sidecar's peer %s is not the app's socket %s", s.Peer, r.Local)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the sidecar saw no connection")
		}
	}
	direct := func(t *testing.T, r dialResult, tag string) {
		t.Helper()
		if !strings.HasPrefix(r.Reply, tag+" ") {
			t.Fatalf("reply %q (err %q), want %s: not redirected", r.Reply, r.Err, tag)
		}
	}
	step := func(t *testing.T) func() Counters {
		before := mustCounters(t, o)
		return func() Counters {
			after := mustCounters(t, o)
			return diffCounters(after, before)
		}
	}

	t.Run("v4 service address to the sidecar", func(t *testing.T) {
		d := step(t)
		r := app(t, dialArgs{Network: "tcp4", Addr: "10.96.0.10:80"})
		redirected(t, r, "10.96.0.10:80", "10.96.0.10:80")
		if r.Remote != "10.96.0.10:80" {
			t.Errorf("app's RemoteAddr = %s, want 10.96.0.10:80", r.Remote)
		}
		if c := d(); c.Redirected != 1 || c.Rekeyed != 1 || c.OrigDstHits != 1 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("v6 address to the sidecar", func(t *testing.T) {
		r := app(t, dialArgs{Network: "tcp6", Addr: "[fd00:96::10]:80"})
		redirected(t, r, "[fd00:96::10]:80", "[fd00:96::10]:80")
	})
	t.Run("v4 on a dual-stack socket to the IPv4 sidecar", func(t *testing.T) {
		r := app(t, dialArgs{Network: "dualstack", Addr: "10.96.0.10:80"})
		redirected(t, r, "10.96.0.10:80", "[::ffff:10.96.0.10]:80")
	})
	t.Run("MPTCP app to the sidecar", func(t *testing.T) {
		r := app(t, dialArgs{Network: "tcp4", Addr: "10.96.0.10:80", MPTCP: true})
		redirected(t, r, "10.96.0.10:80", "10.96.0.10:80")
	})
	t.Run("sidecar's own connects are not redirected", func(t *testing.T) {
		d := step(t)
		c, err := dialTCP(nsPath, "tcp4", "10.97.0.10:80")
		if err != nil {
			t.Fatal(err)
		}
		c.CloseWrite()
		reply, _ := io.ReadAll(c)
		c.Close()
		direct(t, dialResult{Reply: string(reply)}, "UPSTREAM")
		// A service address is not redirected either: it meets the
		// blackhole route rather than looping back to the sidecar.
		if c, err := dialTCP(nsPath, "tcp4", "10.96.0.10:80"); err == nil {
			c.Close()
			t.Fatal("the sidecar's dial of 10.96.0.10:80 connected; want the blackhole's error")
		} else {
			t.Logf("sidecar dial 10.96.0.10:80: %v (expected: not redirected)", err)
		}
		if c := d(); c.BypassProxyCgroup != 2 || c.Redirected != 0 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("uid 1337 is not redirected", func(t *testing.T) {
		d := step(t)
		direct(t, app(t, dialArgs{Network: "tcp4", Addr: "10.97.0.10:80", UID: DefaultProxyUID}), "UPSTREAM")
		if c := d(); c.BypassProxyUID != 1 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("loopback is not redirected", func(t *testing.T) {
		d := step(t)
		direct(t, app(t, dialArgs{Network: "tcp4", Addr: "127.0.0.1:8080"}), "LOOPBACK")
		direct(t, app(t, dialArgs{Network: "tcp6", Addr: "[::1]:8080"}), "LOOPBACK")
		if c := d(); c.BypassLoopback != 2 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("excluded port", func(t *testing.T) {
		d := step(t)
		if err := o.SetExclusions(Exclusions{OutboundPorts: []uint16{80}}); err != nil {
			t.Fatal(err)
		}
		direct(t, app(t, dialArgs{Network: "tcp4", Addr: "10.97.0.10:80"}), "UPSTREAM")
		direct(t, app(t, dialArgs{Network: "tcp6", Addr: "[fd00:97::10]:80"}), "UPSTREAM")
		if err := o.SetExclusions(Exclusions{}); err != nil {
			t.Fatal(err)
		}
		r := app(t, dialArgs{Network: "tcp4", Addr: "10.97.0.10:80"})
		redirected(t, r, "10.97.0.10:80", "10.97.0.10:80")
		if c := d(); c.BypassPort != 2 || c.Redirected != 1 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("excluded CIDRs", func(t *testing.T) {
		d := step(t)
		excl := Exclusions{OutboundCIDRs: []netip.Prefix{netip.MustParsePrefix("10.97.0.0/16"), netip.MustParsePrefix("fd00:97::/32")}}
		if err := o.SetExclusions(excl); err != nil {
			t.Fatal(err)
		}
		direct(t, app(t, dialArgs{Network: "tcp4", Addr: "10.97.0.10:80"}), "UPSTREAM")
		direct(t, app(t, dialArgs{Network: "tcp6", Addr: "[fd00:97::10]:80"}), "UPSTREAM")
		direct(t, app(t, dialArgs{Network: "dualstack", Addr: "10.97.0.10:80"}), "UPSTREAM")
		// Outside the ranges: still redirected.
		redirected(t, app(t, dialArgs{Network: "tcp4", Addr: "10.96.0.10:80"}), "10.96.0.10:80", "10.96.0.10:80")
		if err := o.SetExclusions(Exclusions{}); err != nil {
			t.Fatal(err)
		}
		if c := d(); c.BypassCIDR != 3 || c.Redirected != 1 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("UDP is not redirected", func(t *testing.T) {
		d := step(t)
		r := app(t, dialArgs{Network: "udp4", Addr: "10.97.0.10:53"})
		if r.Reply != "UDP-UPSTREAM req=hello" {
			t.Fatalf("reply %q (err %q), want the UDP upstream's", r.Reply, r.Err)
		}
		if c := d(); c.Connects != 0 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("maps are empty once the connections are closed", func(t *testing.T) {
		waitFor(t, "map fill", func() (bool, string) {
			f, err := o.MapFill()
			if err != nil {
				t.Fatal(err)
			}
			return f.OrigByCookie == 0 && f.OrigByPeer == 0, fmt.Sprintf("%+v", f)
		})
		c := mustCounters(t, o)
		if c.ReleasedCookie != c.Redirected || c.ReleasedPeer != c.Redirected {
			t.Errorf("released %d by cookie and %d by peer, want %d (redirected) each", c.ReleasedCookie, c.ReleasedPeer, c.Redirected)
		}
		t.Logf("counters: %+v", c)
	})
}

// diffCounters is a - b, field by field.
func diffCounters(a, b Counters) Counters {
	var d Counters
	av, bv, dv := reflect.ValueOf(a), reflect.ValueOf(b), reflect.ValueOf(&d).Elem()
	for i := range dv.NumField() {
		dv.Field(i).SetUint(av.Field(i).Uint() - bv.Field(i).Uint())
	}
	return d
}

// TestOriginalDstWithoutRedirect: on a socket that was not redirected,
// SO_ORIGINAL_DST fails with ErrNotRedirected, and getsockopt calls the
// program does not answer are untouched.
func TestOriginalDstWithoutRedirect(t *testing.T) {
	requireRoot(t)
	pc := newPodCgroups(t)
	joinCgroup(t, pc.proxy)
	o := mustLoad(t, Options{ProxyCgroup: pc.proxy})
	att, err := o.Attach(Pod{Cgroup: pc.pod})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	ln := listenTCP(t, "", "tcp4", "127.0.0.1:0")
	c, err := dialTCP("", "tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if d, err := OriginalDst(s); err == nil || !errors.Is(err, ErrNotRedirected) {
		t.Errorf("OriginalDst = %v, %v; want ErrNotRedirected", d, err)
	}
	if d, err := o.LookupOriginalDst(netip.MustParseAddrPort(s.RemoteAddr().String())); err == nil || !errors.Is(err, ErrNotRedirected) {
		t.Errorf("LookupOriginalDst = %v, %v; want ErrNotRedirected", d, err)
	}
	// Other options pass through the hook untouched.
	if err := s.SetKeepAlive(true); err != nil {
		t.Fatal(err)
	}
	raw, err := s.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ka int
	raw.Control(func(fd uintptr) { ka, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE) })
	if err != nil || ka != 1 {
		t.Errorf("getsockopt SO_KEEPALIVE = %d, %v; want 1", ka, err)
	}
	if c := mustCounters(t, o); c.OrigDstMisses != 1 || c.OrigDstHits != 0 {
		t.Errorf("counters: %+v", c)
	}
}
