package bpf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// podFixture is a pod as Kubernetes would make it, minus Kubernetes: a pod
// cgroup with the app's and the sidecar's cgroups below it, a pod network
// namespace (10.211.1.2) with a veth to a peer namespace (10.211.1.1) that
// holds a real upstream on :8080 and plays the rest of the cluster. Neither
// namespace has a route off the machine.
type podFixture struct {
	cg                 podCgroups
	podNs, podPath     string
	peerNs, peerPath   string
	podIP, upstream    string
	serviceVIP         string
	appServer, sidecar *helperProc
}

func newPodFixture(t *testing.T) *podFixture {
	t.Helper()
	requireRoot(t)
	f := &podFixture{cg: newPodCgroups(t), podIP: "10.211.1.2", upstream: "10.211.1.1:8080", serviceVIP: "10.96.0.10:80"}
	f.podNs, f.podPath = newNetns(t, "pod")
	f.peerNs, f.peerPath = newNetns(t, "peer")
	vethPair(t, f.podNs, "eth0", []string{"10.211.1.2/24"}, f.peerNs, "eth0", []string{"10.211.1.1/24"})
	serveTagged(listenTCP(t, f.peerPath, "tcp4", f.upstream), "UPSTREAM")
	f.appServer = startHelper(t, helperOpts{role: "serve", args: serveArgs{Addrs: []string{":8080"}}, cgroup: f.cg.app, netns: f.podPath})
	f.appServer.next(t, "READY")
	return f
}

// startSidecar starts the sidecar process in its cgroup and the pod's
// namespace; it attaches to the pod before printing READY.
func (f *podFixture) startSidecar(t *testing.T) sidecarReady {
	t.Helper()
	f.sidecar = startHelper(t, helperOpts{
		role:   "sidecar",
		args:   sidecarArgs{PodCgroup: f.cg.pod, Services: map[string]string{f.serviceVIP: f.upstream}},
		cgroup: f.cg.proxy,
		netns:  f.podPath,
	})
	var r sidecarReady
	f.sidecar.nextJSON(t, "READY", &r)
	return r
}

func (f *podFixture) access(t *testing.T) accessEntry {
	t.Helper()
	var e accessEntry
	f.sidecar.nextJSON(t, "ACCESS", &e)
	t.Logf("sidecar access log: %+v", e)
	return e
}

func (f *podFixture) sidecarCounters(t *testing.T) Counters {
	t.Helper()
	fmt.Fprintln(f.sidecar.stdin, "counters")
	var c Counters
	f.sidecar.nextJSON(t, "COUNTERS", &c)
	return c
}

// app dials from a new app process in the pod.
func (f *podFixture) app(t *testing.T, addr string) dialResult {
	t.Helper()
	r := appDial(t, f.cg.app, f.podPath, dialArgs{Network: "tcp4", Addr: addr})
	t.Logf("app dial %s: local=%s peername=%s reply=%q err=%s", addr, r.Local, r.Peername, r.Reply, r.Err)
	return r
}

// client dials the pod from the peer namespace and returns its own address
// and the reply.
func (f *podFixture) client(t *testing.T, addr string) (local, reply string) {
	t.Helper()
	c, err := dialTCP(f.peerPath, "tcp4", addr)
	if err != nil {
		t.Fatalf("client dial %s: %v", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "hello")
	c.CloseWrite()
	b, _ := io.ReadAll(c)
	t.Logf("client dial %s from %s: reply=%q", addr, c.LocalAddr(), b)
	return c.LocalAddr().String(), string(b)
}

func wantPrefix(t *testing.T, what, got, prefix string) {
	t.Helper()
	if !strings.HasPrefix(got, prefix) {
		t.Errorf("%s = %q, want %q...", what, got, prefix)
	}
}

// TestPodFixture is the end-to-end picture: the app dials a
// Service address and reaches the real upstream in another namespace
// through the sidecar, whose access log shows the original destination; the
// sidecar's own upstream connection is not redirected; a client in another
// namespace dials podIP:8080 and reaches the app through the sidecar's
// inbound listener, which saw port 8080.
func TestPodFixture(t *testing.T) {
	f := newPodFixture(t)
	f.startSidecar(t)

	t.Run("outbound through the sidecar", func(t *testing.T) {
		r := f.app(t, f.serviceVIP)
		// The upstream saw the sidecar's connection from the pod's address.
		wantPrefix(t, "reply", r.Reply, "UPSTREAM local=10.211.1.1:8080 peer=10.211.1.2:")
		if !strings.HasSuffix(r.Reply, "req=hello") {
			t.Errorf("reply %q lost the request", r.Reply)
		}
		if r.Peername != f.serviceVIP {
			t.Errorf("app's getpeername = %s, want %s", r.Peername, f.serviceVIP)
		}
		e := f.access(t)
		if e.Direction != "outbound" || e.OrigDst != f.serviceVIP || e.MapDst != f.serviceVIP || e.Upstream != f.upstream || e.UpstreamErr != "" || e.Peer != r.Local {
			t.Errorf("access entry %+v, want outbound from %s with original destination %s to %s", e, r.Local, f.serviceVIP, f.upstream)
		}
		c := f.sidecarCounters(t)
		// One redirect (the app's); the sidecar's own dial was exempt, or
		// it would have come back to the sidecar as a second entry.
		if c.Redirected != 1 || c.BypassProxyCgroup != 1 || c.OrigDstHits != 1 {
			t.Errorf("sidecar counters: %+v", c)
		}
	})
	t.Run("inbound through the sidecar", func(t *testing.T) {
		local, reply := f.client(t, f.podIP+":8080")
		// The app saw the sidecar's loopback connection, not the client.
		wantPrefix(t, "reply", reply, "APP local=127.0.0.1:8080 peer=127.0.0.1:")
		e := f.access(t)
		if e.Direction != "inbound" || e.LocalPort != 8080 || e.Peer != local || e.Upstream != "127.0.0.1:8080" || e.UpstreamErr != "" {
			t.Errorf("access entry %+v, want inbound on port 8080 from %s to 127.0.0.1:8080", e, local)
		}
		if c := f.sidecarCounters(t); c.LookupSteered != 1 {
			t.Errorf("sidecar counters: %+v", c)
		}
	})
}

// cgroupAttachTypes are the hooks Attach uses on a cgroup.
var cgroupAttachTypes = []ebpf.AttachType{
	ebpf.AttachCGroupInet4Connect, ebpf.AttachCGroupInet6Connect, ebpf.AttachCGroupSockOps,
	ebpf.AttachCGroupGetsockopt, ebpf.AttachCgroupInet4GetPeername, ebpf.AttachCgroupInet6GetPeername,
	ebpf.AttachCgroupInetSockRelease,
}

// attachedPrograms counts the programs attached to the pod's cgroup and
// network namespace, per hook.
func attachedPrograms(t *testing.T, f *podFixture) map[string]int {
	t.Helper()
	out := map[string]int{}
	query := func(path string, typ ebpf.AttachType) {
		fd, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fd.Close()
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(fd.Fd()), Attach: typ})
		if err != nil {
			t.Fatalf("query %s on %s: %v", typ, path, err)
		}
		out[typ.String()] = len(res.Programs)
	}
	for _, typ := range cgroupAttachTypes {
		query(f.cg.pod, typ)
	}
	query(f.podPath, ebpf.AttachSkLookup)
	return out
}

// TestSidecarDeath proves the choice made in doc.go: the attachments are
// bpf_links that die with the sidecar process. After a SIGKILL nothing is
// attached to the pod's cgroup or namespace, the app's connections go where
// they were dialled (not to a dead listener), inbound connections reach the
// app directly, and a restarted sidecar takes over again.
func TestSidecarDeath(t *testing.T) {
	f := newPodFixture(t)
	ready := f.startSidecar(t)

	r := f.app(t, f.upstream)
	wantPrefix(t, "app's own address while the sidecar runs", r.Local, "127.0.0.1:") // redirected
	f.access(t)
	for hook, n := range attachedPrograms(t, f) {
		if n != 1 {
			t.Errorf("%s: %d programs attached while the sidecar runs, want 1", hook, n)
		}
	}
	if len(ready.LinkIDs) != len(cgroupAttachTypes)+1 {
		t.Fatalf("sidecar reported links %v, want %d", ready.LinkIDs, len(cgroupAttachTypes)+1)
	}

	if err := f.sidecar.cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	f.sidecar.cmd.Wait()

	waitFor(t, "attachments after SIGKILL", func() (bool, string) {
		var left []string
		for hook, n := range attachedPrograms(t, f) {
			if n != 0 {
				left = append(left, fmt.Sprintf("%s=%d", hook, n))
			}
		}
		for _, id := range ready.LinkIDs {
			l, err := link.NewFromID(link.ID(id))
			if err == nil {
				l.Close()
				left = append(left, fmt.Sprintf("link %d", id))
			} else if !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("link %d: %v", id, err)
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	})

	t.Run("outbound goes where it was dialled", func(t *testing.T) {
		r := f.app(t, f.upstream)
		// The upstream saw the app's own socket: no sidecar in between.
		wantPrefix(t, "reply", r.Reply, "UPSTREAM local=10.211.1.1:8080 peer="+r.Local+" ")
		// The service address is not redirected either and meets the
		// pod's routing: here a blackhole, so nothing leaves.
		if r := f.app(t, f.serviceVIP); r.Err == "" {
			t.Errorf("app dial %s with no sidecar: %q, want an error", f.serviceVIP, r.Reply)
		}
	})
	t.Run("inbound reaches the app directly", func(t *testing.T) {
		local, reply := f.client(t, f.podIP+":8080")
		wantPrefix(t, "reply", reply, "APP local=10.211.1.2:8080 peer="+local+" ")
	})
	t.Run("a restarted sidecar takes over", func(t *testing.T) {
		f.startSidecar(t)
		r := f.app(t, f.serviceVIP)
		wantPrefix(t, "reply", r.Reply, "UPSTREAM local=10.211.1.1:8080 peer=10.211.1.2:")
		if e := f.access(t); e.OrigDst != f.serviceVIP {
			t.Errorf("access entry %+v, want original destination %s", e, f.serviceVIP)
		}
	})
}
