package bpf

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Pod names where to attach: the pod's cgroup for the socket programs and
// its network namespace for inbound steering. Either may be empty.
type Pod struct {
	// Cgroup is the pod's cgroup v2 directory. The programs act on sockets
	// created in it and in all its descendants, the sidecar's included
	// (which is how the sidecar's accepted sockets get SO_ORIGINAL_DST).
	Cgroup string
	// Netns is a file naming the pod's network namespace: /proc/self/ns/net
	// for the sidecar's own, /proc/<pid>/ns/net or an `ip netns` bind mount.
	Netns string
}

// Attachment is what Attach attached; Close detaches it.
type Attachment struct {
	o     *Objects
	mu    sync.Mutex
	links []link.Link
}

// Attach attaches the programs to a pod. The cgroup programs go in so that
// the redirect is the last to start: release, getsockopt, getpeername,
// sockops, then connect. Everything is a bpf_link owned by this process (see
// the package documentation for what that means when the process dies).
func (o *Objects) Attach(p Pod) (*Attachment, error) {
	if p.Cgroup == "" && p.Netns == "" {
		return nil, errors.New("bpf: attach: Pod names neither a cgroup nor a network namespace")
	}
	a := &Attachment{o: o}
	if err := o.own(a); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			a.Close()
		}
	}()
	if p.Cgroup != "" {
		if _, err := cgroupID(p.Cgroup); err != nil {
			return nil, fmt.Errorf("bpf: attach: %w", err)
		}
		for _, h := range []struct {
			name string
			prog *ebpf.Program
			typ  ebpf.AttachType
		}{
			{"sock_release", o.release.MeshRelease, ebpf.AttachCgroupInetSockRelease},
			{"getsockopt", o.getsockopt.MeshGetsockopt, ebpf.AttachCGroupGetsockopt},
			{"getpeername4", o.getpeername.MeshGetpeer4, ebpf.AttachCgroupInet4GetPeername},
			{"getpeername6", o.getpeername.MeshGetpeer6, ebpf.AttachCgroupInet6GetPeername},
			{"sockops", o.sockops.MeshSockops, ebpf.AttachCGroupSockOps},
			{"connect4", o.connect.MeshConnect4, ebpf.AttachCGroupInet4Connect},
			{"connect6", o.connect.MeshConnect6, ebpf.AttachCGroupInet6Connect},
		} {
			l, err := attachCgroupLink(p.Cgroup, h.prog, h.typ)
			if err != nil {
				return nil, fmt.Errorf("bpf: attach %s to cgroup %q: %w", h.name, p.Cgroup, err)
			}
			a.links = append(a.links, l)
		}
	}
	if p.Netns != "" {
		ns, err := os.Open(p.Netns)
		if err != nil {
			return nil, fmt.Errorf("bpf: attach sk_lookup to netns %q: %w", p.Netns, err)
		}
		l, err := link.AttachNetNs(int(ns.Fd()), o.sklookup.MeshSkLookup)
		ns.Close()
		if err != nil {
			return nil, fmt.Errorf("bpf: attach sk_lookup to netns %q: %w", p.Netns, err)
		}
		a.links = append(a.links, l)
	}
	ok = true
	return a, nil
}

// attachCgroupLink makes a bpf_link and nothing else: link.AttachCgroup would
// fall back to the legacy attach, which outlives the process.
func attachCgroupLink(path string, prog *ebpf.Program, typ ebpf.AttachType) (link.Link, error) {
	cg, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer cg.Close()
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: int(cg.Fd()), Program: prog, Attach: typ})
	if err != nil {
		return nil, fmt.Errorf("bpf_link (Linux 5.7+): %w", err)
	}
	return l, nil
}

// Close detaches in the reverse order of Attach: the redirect stops first.
func (a *Attachment) Close() error {
	a.mu.Lock()
	links := a.links
	a.links = nil
	a.mu.Unlock()
	var errs []error
	for i := len(links) - 1; i >= 0; i-- {
		errs = append(errs, links[i].Close())
	}
	a.o.disown(a)
	return errors.Join(errs...)
}

// LinkIDs returns the kernel ids of the attachment's bpf_links, for
// diagnostics (bpftool link show id N).
func (a *Attachment) LinkIDs() []link.ID {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ids []link.ID
	for _, l := range a.links {
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	return ids
}
