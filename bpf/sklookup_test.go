package bpf

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestSkLookupSteering: a pod namespace (10.211.0.2, fd00:211::2) and a
// client namespace (10.211.0.1, fd00:211::1) joined by a veth. The app
// listens on :8080 and :9090, the sidecar's inbound listener on :15006
// (dual-stack) and its admin on :15000. With sk_lookup attached to the pod
// namespace, connections from the client for the pod's address land on
// :15006, whose getsockname shows the port dialled; loopback, the pod's own
// connections to itself, excluded ports and the sidecar's ports do not.
func TestSkLookupSteering(t *testing.T) {
	requireRoot(t)
	pod, podPath := newNetns(t, "pod")
	cli, cliPath := newNetns(t, "cli")
	vethPair(t, pod, "eth0", []string{"10.211.0.2/24", "fd00:211::2/64"}, cli, "eth0", []string{"10.211.0.1/24", "fd00:211::1/64"})

	pc := newPodCgroups(t) // for the sidecar's cgroup id only: nothing is attached to it
	o := mustLoad(t, Options{ProxyCgroup: pc.proxy})

	inbound := listenTCP(t, podPath, "tcp", ":15006")
	serveTagged(inbound, "INBOUND")
	serveTagged(listenTCP(t, podPath, "tcp", ":8080"), "APP")
	serveTagged(listenTCP(t, podPath, "tcp", ":9090"), "APP")
	serveTagged(listenTCP(t, podPath, "tcp", ":15000"), "ADMIN")

	call := func(t *testing.T, netns, addr string) string {
		t.Helper()
		c, err := dialTCP(netns, "tcp", addr)
		if err != nil {
			return "error: " + err.Error()
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "hello")
		c.CloseWrite()
		reply, _ := io.ReadAll(c)
		t.Logf("dial %s -> %s", addr, reply)
		return string(reply)
	}
	expect := func(t *testing.T, netns, addr, want string) {
		t.Helper()
		if got := call(t, netns, addr); !strings.HasPrefix(got, want) {
			t.Errorf("dial %s: %q, want %q...", addr, got, want)
		}
	}

	att, err := o.Attach(Pod{Netns: podPath})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()

	t.Run("no inbound listener registered: left alone", func(t *testing.T) {
		expect(t, cliPath, "10.211.0.2:8080", "APP local=10.211.0.2:8080")
		if c := mustCounters(t, o); c.LookupNoListener == 0 {
			t.Errorf("counters: %+v", c)
		}
	})
	if err := o.SetInboundListener(inbound); err != nil {
		t.Fatal(err)
	}
	t.Run("pod address to the inbound listener", func(t *testing.T) {
		before := mustCounters(t, o)
		// getsockname on the accepted socket keeps the port dialled.
		expect(t, cliPath, "10.211.0.2:8080", "INBOUND local=10.211.0.2:8080 peer=10.211.0.1:")
		expect(t, cliPath, "[fd00:211::2]:8080", "INBOUND local=[fd00:211::2]:8080 peer=[fd00:211::1]:")
		expect(t, cliPath, "10.211.0.2:9090", "INBOUND local=10.211.0.2:9090")
		// A port nobody listens on is steered too.
		expect(t, cliPath, "10.211.0.2:7777", "INBOUND local=10.211.0.2:7777")
		if c := diffCounters(mustCounters(t, o), before); c.LookupSteered != 4 || c.LookupAssignErrors != 0 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("excluded inbound port", func(t *testing.T) {
		if err := o.SetExclusions(Exclusions{InboundPorts: []uint16{9090}}); err != nil {
			t.Fatal(err)
		}
		expect(t, cliPath, "10.211.0.2:9090", "APP local=10.211.0.2:9090")
		expect(t, cliPath, "10.211.0.2:8080", "INBOUND")
		if err := o.SetExclusions(Exclusions{}); err != nil {
			t.Fatal(err)
		}
		expect(t, cliPath, "10.211.0.2:9090", "INBOUND")
	})
	t.Run("sidecar's own ports", func(t *testing.T) {
		expect(t, cliPath, "10.211.0.2:15000", "ADMIN")
		expect(t, cliPath, "10.211.0.2:15006", "INBOUND local=10.211.0.2:15006")
	})
	t.Run("loopback and the pod's own address", func(t *testing.T) {
		before := mustCounters(t, o)
		expect(t, podPath, "127.0.0.1:8080", "APP local=127.0.0.1:8080")
		expect(t, podPath, "[::1]:8080", "APP local=[::1]:8080")
		// The sidecar reaching the app on the pod IP must not loop.
		expect(t, podPath, "10.211.0.2:8080", "APP local=10.211.0.2:8080 peer=10.211.0.2:")
		if c := diffCounters(mustCounters(t, o), before); c.LookupBypassed != 3 || c.LookupSteered != 0 {
			t.Errorf("counters: %+v", c)
		}
	})
	t.Run("detached: left alone", func(t *testing.T) {
		if err := att.Close(); err != nil {
			t.Fatal(err)
		}
		expect(t, cliPath, "10.211.0.2:8080", "APP")
	})
	t.Run("MPTCP listener is refused with the fix named", func(t *testing.T) {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var ln net.Listener
		if err := inNetns(podPath, func() (err error) {
			ln, err = lc.Listen(t.Context(), "tcp", ":15007")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		err := o.SetInboundListener(ln.(*net.TCPListener))
		if err == nil || !strings.Contains(err.Error(), "SetMultipathTCP(false)") {
			t.Errorf("SetInboundListener(MPTCP) = %v, want an error naming SetMultipathTCP(false)", err)
		}
	})
}
